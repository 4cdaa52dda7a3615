//! Several smsgw nodes on one PostgreSQL database (docs/architecture.md, "Cluster"): the lease
//! store, routing across nodes, phone hand-over, exactness across nodes, graceful hand-back;
//! and the single-node lock of SQLite. The PostgreSQL tests skip without
//! `SMSGW_TEST_DATABASE_URL`.

use std::time::Duration;

use sea_orm::Database;
use smsgw::store::cluster::{self, LeaseKind};
use uuid::Uuid;

use crate::helpers::{Backend, fresh_database, postgres_enabled, run};

/// A migrated PostgreSQL database of its own.
async fn migrated_postgres() -> (String, sea_orm::DatabaseConnection) {
    let (url, _) = fresh_database(Backend::Postgres).await;
    let db = Database::connect(&url).await.expect("connect");
    smsgw::store::migrate(&db).await.expect("migrate");
    (url, db)
}

#[test]
fn leases_have_one_holder_and_fence_every_new_ownership() {
    if !postgres_enabled() {
        return;
    }
    run(async {
        let (_url, db) = migrated_postgres().await;
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        cluster::register_node(&db, a, "127.0.0.1:1").await.unwrap();
        cluster::register_node(&db, b, "127.0.0.1:2").await.unwrap();
        let ttl = Duration::from_secs(5);

        let first = cluster::acquire(&db, a, LeaseKind::Phone, "p1", ttl)
            .await
            .unwrap()
            .expect("a free lease is taken");
        assert_eq!(first.fence, 1);
        assert_eq!(
            cluster::acquire(&db, b, LeaseKind::Phone, "p1", ttl)
                .await
                .unwrap(),
            None,
            "a live lease of another node is refused"
        );
        let again = cluster::acquire(&db, a, LeaseKind::Phone, "p1", ttl)
            .await
            .unwrap()
            .expect("the holder renews");
        assert_eq!(again.fence, 1, "renewing by the holder keeps the fence");
        assert!(cluster::holds(&db, &first).await.unwrap());

        let renewed = cluster::heartbeat(&db, a, ttl).await.unwrap();
        assert_eq!(renewed, vec![first.clone()]);

        cluster::release(&db, &first).await.unwrap();
        assert!(!cluster::holds(&db, &first).await.unwrap());
        let taken = cluster::acquire(&db, b, LeaseKind::Phone, "p1", ttl)
            .await
            .unwrap()
            .expect("a released lease is taken at once");
        assert_eq!(taken.fence, 2, "a new ownership raises the fence");
        assert!(
            !cluster::holds(&db, &first).await.unwrap(),
            "the old fence is refused"
        );
        assert!(cluster::holds(&db, &taken).await.unwrap());
        assert!(
            cluster::heartbeat(&db, a, ttl).await.unwrap().is_empty(),
            "the old holder's renewal no longer includes it"
        );

        // A lease that expires is free for anyone.
        let short = cluster::acquire(
            &db,
            a,
            LeaseKind::Sweep,
            "expiry",
            Duration::from_millis(50),
        )
        .await
        .unwrap()
        .expect("free");
        tokio::time::sleep(Duration::from_millis(120)).await;
        let stolen = cluster::acquire(&db, b, LeaseKind::Sweep, "expiry", ttl)
            .await
            .unwrap()
            .expect("an expired lease is taken");
        assert_eq!(stolen.fence, short.fence + 1);

        // A graceful stop hands every lease back at once.
        cluster::acquire(&db, b, LeaseKind::Campaign, "c1", ttl)
            .await
            .unwrap()
            .expect("free");
        assert_eq!(cluster::hand_back(&db, b).await.unwrap(), 3);
        assert!(
            cluster::live(&db, LeaseKind::Phone)
                .await
                .unwrap()
                .is_empty()
        );
        let nodes = cluster::live_nodes(&db, ttl).await.unwrap();
        assert_eq!(nodes.iter().map(|n| n.id).collect::<Vec<_>>(), vec![a]);
    })
}
