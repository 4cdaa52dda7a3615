//! Several smsgw nodes on one PostgreSQL database (docs/architecture.md, "Cluster"): the lease
//! store, routing across nodes, phone hand-over, exactness across nodes, graceful hand-back;
//! and the single-node lock of SQLite. The PostgreSQL tests are ignored unless run
//! with `--include-ignored` and `SMSGW_TEST_DATABASE_URL`.

use std::time::Duration;

use futures_util::future::join_all;
use sea_orm::Database;
use serde_json::json;
use smsgw::domain::protocol::PhoneFrame;
use smsgw::store::cluster::{self, LeaseKey, LeaseKind, Sweep};
use uuid::Uuid;

use crate::helpers::{
    Backend, RECIPIENT, SENDER, TestApp, WebhookReceiver, bearer, eventually, fresh_database, run,
    run_cli, run_on_postgres, send_body, spawn_app_with, the_one_accepted,
};

/// A migrated PostgreSQL database of its own.
async fn migrated_postgres() -> (String, sea_orm::DatabaseConnection) {
    let (url, _) = fresh_database(Backend::Postgres).await;
    let db = Database::connect(&url).await.expect("connect");
    smsgw::store::migrate(&db).await.expect("migrate");
    (url, db)
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn leases_have_one_holder_and_fence_every_new_ownership() {
    run_on_postgres(async {
        let (_url, db) = migrated_postgres().await;
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        cluster::register_node(&db, a, "127.0.0.1:1").await.unwrap();
        cluster::register_node(&db, b, "127.0.0.1:2").await.unwrap();
        let ttl = Duration::from_secs(5);
        let p1 = LeaseKey::Phone(Uuid::new_v4().into());

        let first = cluster::acquire(&db, a, p1, ttl)
            .await
            .unwrap()
            .expect("a free lease is taken");
        assert_eq!(first.fence, 1);
        assert_eq!(
            cluster::acquire(&db, b, p1, ttl).await.unwrap(),
            None,
            "a live lease of another node is refused"
        );
        let again = cluster::acquire(&db, a, p1, ttl)
            .await
            .unwrap()
            .expect("the holder renews");
        assert_eq!(again.fence, 1, "renewing by the holder keeps the fence");
        assert!(cluster::holds(&db, &first).await.unwrap());

        let renewed = cluster::heartbeat(&db, a, ttl).await.unwrap();
        assert_eq!(renewed, vec![first.clone()]);

        cluster::release(&db, &first).await.unwrap();
        assert!(!cluster::holds(&db, &first).await.unwrap());
        let taken = cluster::acquire(&db, b, p1, ttl)
            .await
            .unwrap()
            .expect("a released lease is taken at once");
        assert_eq!(taken.fence, 2, "a new ownership raises the fence");
        assert!(
            !cluster::holds(&db, &first).await.unwrap(),
            "the old fence is refused"
        );
        let batch = cluster::still_held(&db, &[&first, &taken]).await.unwrap();
        assert!(
            !batch.contains(&first) && batch.contains(&taken),
            "a batch of fenced writes keeps only the current fence: {batch:?}"
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
            LeaseKey::Sweep(Sweep::Expiry),
            Duration::from_millis(50),
        )
        .await
        .unwrap()
        .expect("free");
        tokio::time::sleep(Duration::from_millis(120)).await;
        let stolen = cluster::acquire(&db, b, LeaseKey::Sweep(Sweep::Expiry), ttl)
            .await
            .unwrap()
            .expect("an expired lease is taken");
        assert_eq!(stolen.fence, short.fence + 1);

        // A graceful stop hands every lease back at once.
        cluster::acquire(&db, b, LeaseKey::Campaign(Uuid::new_v4().into()), ttl)
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

/// Two nodes on one fresh PostgreSQL database; the first creates the workspace.
pub(crate) async fn two_nodes(
    configure: impl FnOnce(&mut smsgw::config::Settings),
) -> (TestApp, TestApp) {
    let a = spawn_app_with(Backend::Postgres, configure).await;
    let b = a.spawn_peer().await;
    (a, b)
}

/// The phone's lease holder, read from the database.
async fn phone_holder(app: &TestApp, phone_id: &str) -> Option<Uuid> {
    let db = Database::connect(&app.database_url).await.expect("connect");
    let phone_id = phone_id.parse().expect("a phone id");
    cluster::holder(&db, LeaseKey::Phone(phone_id))
        .await
        .unwrap()
        .map(|lease| lease.node)
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn a_send_on_one_node_reaches_a_phone_on_another() {
    run_on_postgres(async {
        let (a, b) = two_nodes(|_| {}).await;
        let (phone_id, token) = a.pair_phone(SENDER).await;
        // A pace that never makes a send wait: the figure is the carrier's.
        a.set_pace(&phone_id, 1000, 10000).await;
        let mut phone = b.connect_phone(&token).await;
        // Online is decided cluster-wide: node A sees the phone connected to B.
        a.wait_online(&phone_id, true).await;

        let mut latencies = Vec::new();
        for i in 0..20 {
            let started = std::time::Instant::now();
            let reply = a
                .send(
                    &a.live_key,
                    send_body(SENDER, RECIPIENT, &format!("cross-node {i}")),
                )
                .await
                .expect(202);
            let (id, _, content, attempt) = phone.expect_send().await;
            latencies.push(started.elapsed());
            assert_eq!(id.to_string(), reply.data()["id"].as_str().unwrap());
            assert_eq!(content, format!("cross-node {i}"));
            assert_eq!(attempt, 1);
            phone
                .report(PhoneFrame::Sent {
                    message_id: id,
                    reference: Some(format!("r{i}")),
                })
                .await;
            a.wait_for_status(&a.live_key, &id.to_string(), "sent")
                .await;
        }
        latencies.sort();
        println!(
            "cross-node accept -> phone: p50 {:?}, max {:?} over {} sends (request start to frame read, pace free)",
            latencies[latencies.len() / 2],
            latencies[latencies.len() - 1],
            latencies.len()
        );
        // The node holding the phone's lease is B.
        let b_node = b.node_id().await;
        assert_eq!(phone_holder(&a, &phone_id).await, Some(b_node));
    })
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn another_node_shows_when_a_phone_it_does_not_hold_was_seen() {
    run_on_postgres(async {
        let (a, b) = two_nodes(|_| {}).await;
        let (phone_id, token) = a.pair_phone(SENDER).await;
        let connecting = chrono::Utc::now().timestamp_millis();
        let _phone = a.connect_phone(&token).await;
        b.wait_online(&phone_id, true).await;
        // Node B reads what node A stored at connect.
        let recent = |value: &serde_json::Value| {
            value
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t.timestamp_millis() >= connecting)
        };
        let phone_path = format!("/v1/phones/{phone_id}");
        eventually(
            "node B shows when the phone on node A was seen",
            Duration::from_secs(10),
            async || recent(&b.get(&phone_path, &b.live_key).await.data()["last_seen_at"]),
        )
        .await;
        let devices = b
            .client_api("GET", "/devices", Some(&bearer(&b.live_key)), None)
            .await;
        assert!(recent(&devices.body[0]["lastSeen"]), "{}", devices.body);
        assert_eq!(phone_holder(&a, &phone_id).await, Some(a.node_id().await));
    })
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn a_phone_moving_between_nodes_keeps_its_queue_and_exact_pace() {
    run_on_postgres(async {
        let (a, b) = two_nodes(|_| {}).await;
        let (phone_id, token) = a.pair_phone(SENDER).await;
        a.set_pace(&phone_id, 2, 10).await;
        let mut on_a = a.connect_phone(&token).await;
        let mut ids = Vec::new();
        for i in 0..3 {
            let reply = a
                .send(
                    &a.live_key,
                    send_body(SENDER, RECIPIENT, &format!("paced {i}")),
                )
                .await
                .expect(202);
            ids.push(reply.data()["id"].as_str().unwrap().to_string());
        }
        // Two sends fill the minute; the first is reported, the second is not.
        let (first, ..) = on_a.expect_send().await;
        let (second, ..) = on_a.expect_send().await;
        on_a.report(PhoneFrame::Sent {
            message_id: first,
            reference: Some("r1".into()),
        })
        .await;
        assert!(
            on_a.next_frame_within(Duration::from_millis(300))
                .await
                .is_none(),
            "a third send within the minute"
        );
        a.wait_for_status(&a.live_key, &first.to_string(), "sent")
            .await;

        // The phone moves to node B (as behind a load balancer after a reconnect).
        on_a.close().await;
        let mut on_b = b.connect_phone(&token).await;
        let b_node = b.node_id().await;
        eventually(
            "node B takes the phone's lease",
            Duration::from_secs(15),
            || async { phone_holder(&a, &phone_id).await == Some(b_node) },
        )
        .await;
        // The unreported message is queued again on B (re-sent once the pace allows), the
        // third still waits: no send in this minute's window on the new node either.
        a.wait_for_status(&a.live_key, &second.to_string(), "queued")
            .await;
        assert!(
            on_b.next_frame_within(Duration::from_secs(2))
                .await
                .is_none(),
            "node B sent within the pace window node A had filled"
        );
        for id in &ids[1..] {
            let message = a.get(&format!("/v1/messages/{id}"), &a.live_key).await;
            assert_eq!(message.data()["status"], "queued", "{}", message.body);
        }
    })
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn one_request_id_on_two_nodes_is_one_message() {
    run_on_postgres(async {
        let (a, b) = two_nodes(|_| {}).await;
        let body = json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "once",
                           "request_id": "cluster-42" });
        let replies = join_all((0..60).map(|i| {
            let node = if i % 2 == 0 { &a } else { &b };
            node.send(&node.test_key, body.clone())
        }))
        .await;
        the_one_accepted(&replies);
        for node in [&a, &b] {
            assert_eq!(node.messages(&node.test_key, "").await.len(), 1);
        }
    })
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn the_new_workspace_limit_is_exact_across_nodes() {
    run_on_postgres(async {
        let (a, b) = two_nodes(|_| {}).await;
        let (phone_id, _phone) = a.online_phone(SENDER).await;
        b.wait_online(&phone_id, true).await;
        let replies = join_all((0..80).map(|i| {
            let node = if i % 2 == 0 { &a } else { &b };
            node.send(
                &node.live_key,
                send_body(SENDER, RECIPIENT, &format!("limit {i}")),
            )
        }))
        .await;
        let accepted = replies.iter().filter(|r| r.status == 202).count();
        for reply in replies.iter().filter(|r| r.status != 202) {
            assert_eq!(reply.status, 429, "{}", reply.body);
            assert_eq!(reply.code(), "new_account_limit");
        }
        assert_eq!(
            accepted, 50,
            "exactly the limit is accepted across both nodes"
        );
        let list = a
            .get("/v1/messages?limit=100", &a.live_key)
            .await
            .expect(200);
        assert_eq!(list.data()["messages"].as_array().unwrap().len(), 50);
    })
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn a_node_stopping_gracefully_hands_its_leases_over_at_once() {
    run_on_postgres(async {
        // Leases that would take a minute to expire: only a hand-back frees them in time.
        let (a, b) = two_nodes(|s| s.cluster.lease_ttl = Duration::from_secs(60)).await;
        let (phone_id, token) = a.pair_phone(SENDER).await;
        let phone = a.connect_phone(&token).await;
        let a_node = a.node_id().await;
        eventually(
            "node A takes the phone's lease",
            Duration::from_secs(10),
            || async { phone_holder(&a, &phone_id).await == Some(a_node) },
        )
        .await;
        let ready = a.get("/ready", "").await.expect(200);
        assert_eq!(ready.data()["leases"], "ok");

        let stopped = std::time::Instant::now();
        a.stop_gracefully().await;
        drop(phone);
        eventually(
            "the lease is handed back",
            Duration::from_secs(3),
            || async { phone_holder(&b, &phone_id).await.is_none() },
        )
        .await;
        println!(
            "lease handed back {:?} after the stop began",
            stopped.elapsed()
        );
        let db = Database::connect(&b.database_url).await.expect("connect");
        let live = cluster::live_nodes(&db, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(
            live.iter().all(|n| n.id != a_node),
            "the stopped node is marked stopping"
        );
        // The phone reconnects to B, which takes it at once.
        let _on_b = b.connect_phone(&token).await;
        b.wait_online(&phone_id, true).await;
        let b_node = b.node_id().await;
        assert_eq!(phone_holder(&b, &phone_id).await, Some(b_node));
    })
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn a_webhook_fires_once_whichever_node_stores_the_event() {
    run_on_postgres(async {
        let (a, b) = two_nodes(|s| {
            s.webhooks.allow_insecure_targets = true;
            s.webhooks.retry_schedule = vec![Duration::from_millis(300); 3];
        })
        .await;
        let receiver = WebhookReceiver::start().await;
        // The endpoint is created on node A; the phone reports on node B, whose writer stores
        // the `sent` event and its delivery.
        let endpoint = a.subscribe(&a.live_key, &receiver, &["message.sent"]).await;
        let (phone_id, token) = a.pair_phone(SENDER).await;
        let mut phone = b.connect_phone(&token).await;
        a.wait_online(&phone_id, true).await;
        let mut ids = Vec::new();
        for i in 0..3 {
            let reply = a
                .send(
                    &a.live_key,
                    send_body(SENDER, RECIPIENT, &format!("hooked {i}")),
                )
                .await
                .expect(202);
            ids.push(reply.data()["id"].as_str().unwrap().to_string());
            let (id, ..) = phone.expect_send().await;
            phone
                .report(PhoneFrame::Sent {
                    message_id: id,
                    reference: Some(format!("h{i}")),
                })
                .await;
        }
        receiver.wait_for(3, Duration::from_secs(15)).await;
        // Nothing more arrives: each event is delivered by one node only. Every delivery is
        // recorded as one succeeded attempt, which ends it: no node has one left to send.
        let path = format!(
            "/v1/webhooks/{}/deliveries",
            endpoint["id"].as_str().unwrap()
        );
        crate::helpers::poll(
            Duration::from_secs(15),
            Duration::from_millis(20),
            async || {
                let rows = a.get(&path, &a.live_key).await.expect(200);
                let rows = rows.data()["deliveries"].as_array().unwrap().clone();
                match rows.len() == 3 && rows.iter().all(|r| r["state"] == "succeeded") {
                    true => Ok(()),
                    false => Err(format!("attempts: {rows:?}")),
                }
            },
        )
        .await;
        let received = receiver.received();
        assert_eq!(received.len(), 3, "one delivery per event");
        let mut delivered: Vec<String> = received
            .iter()
            .map(|r| {
                r.json()["message"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        delivered.sort();
        ids.sort();
        assert_eq!(delivered, ids);
        receiver.stop().await;
    })
}

#[test]
fn a_second_node_on_one_sqlite_file_refuses_to_start() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("one.db").display());
        let env = [
            ("SMSGW_DATABASE__URL", url.as_str()),
            ("SMSGW_SERVER__BIND", "127.0.0.1:0"),
            ("SMSGW_LOG__LEVEL", "warn"),
        ];
        let mut first = std::process::Command::new(env!("CARGO_BIN_EXE_smsgw"))
            .arg("serve")
            .envs(env)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the first node listens (it holds the lock from before it connects).
        let stdout = first.stdout.take().unwrap();
        let listening = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .any(|line| line.starts_with("listening on"))
        });
        assert!(
            tokio::time::timeout(Duration::from_secs(60), listening)
                .await
                .expect("the first node starts in time")
                .unwrap(),
            "the first node listens"
        );
        let second = run_cli(&["serve"], &env).await;
        let _ = first.kill();
        let _ = first.wait();
        assert_eq!(second.status.code(), Some(2), "{second:?}");
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert!(
            stderr.contains("another smsgw node is already serving the SQLite database"),
            "{stderr}"
        );
        assert!(stderr.contains("PostgreSQL"), "{stderr}");
    })
}
