//! The database under operations: readiness while it does not answer, a runtime ending mid-
//! query, and SQLite's WAL checkpointed beside the writer.

use super::*;

/// A TCP proxy on loopback in front of PostgreSQL whose forwarding can be paused: while paused,
/// the database never answers (connections stay open, bytes go nowhere).
struct StallingProxy {
    address: std::net::SocketAddr,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StallingProxy {
    fn start(upstream: String) -> StallingProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let paused = std::sync::Arc::new(AtomicBool::new(false));
        let flag = paused.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(&upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            let n = match from.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            while flag.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        StallingProxy { address, paused }
    }

    fn pause(&self, paused: bool) {
        self.paused
            .store(paused, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `/ready` is 503 `not_ready` within a bounded wait when the database does not answer, and
/// 200 again once it does; `/health` stays 200. (PostgreSQL only: a network database is the
/// one that can stop answering; the SQLite variant checks the healthy answer.)
async fn ready_is_503_when_the_database_does_not_answer(backend: Backend) {
    if backend == Backend::Sqlite {
        let app = spawn_app(backend).await;
        let ready = app.request("GET", "/ready", None, None).await.expect(200);
        assert_eq!(ready.data()["database"], "ok");
        return;
    }
    let base = std::env::var("SMSGW_TEST_DATABASE_URL").unwrap();
    let authority = base
        .split_once("://")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split('/').next())
        .map(|a| a.rsplit('@').next().unwrap().to_string())
        .unwrap();
    let proxy = StallingProxy::start(authority.clone());
    let proxied = proxy.address.to_string();
    let app = spawn_app_with(backend, |s| {
        s.database.url = s.database.url.replacen(&authority, &proxied, 1);
    })
    .await;
    assert!(app.settings.database.url.contains(&proxied));
    app.request("GET", "/ready", None, None).await.expect(200);

    proxy.pause(true);
    let started = Instant::now();
    let reply = app.request("GET", "/ready", None, None).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 503, "{:?}", reply.body);
    assert_eq!(reply.body["status"], "error");
    assert_eq!(reply.code(), "not_ready");
    assert_eq!(reply.data()["database"], "unavailable");
    assert!(
        waited < Duration::from_secs(5),
        "bounded wait, took {waited:?}"
    );
    app.request("GET", "/health", None, None).await.expect(200);

    proxy.pause(false);
    poll(
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || {
            if app.request("GET", "/ready", None, None).await.status == 200 {
                return Ok(());
            }
            Err("ready again once the database answers".to_string())
        },
    )
    .await;
}

/// Runs two queries that take seconds on `backend` in one spawned task and ends the runtime while
/// they run, as a test (or the server) that ends while an actor is mid-query. Dropping that task
/// drops two pooled connections; without a Tokio context the first panicked ("requires a Tokio
/// context") and the second, panicking during that unwind, aborted the whole process.
fn end_runtime_mid_query(backend: Backend) {
    crate::helpers::run(async move {
        let (url, _dir) = fresh_database(backend).await;
        let db = smsgw::store::connect(&url, 2).await.unwrap();
        let slow = match backend {
            Backend::Sqlite => {
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000000) \
                 SELECT count(*) FROM c"
            }
            Backend::Postgres => "SELECT pg_sleep(5)",
        };
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        actix_web::rt::spawn(async move {
            let _ = started_tx.send(());
            let _ = tokio::join!(db.execute_unprepared(slow), db.execute_unprepared(slow));
        });
        started_rx.await.unwrap();
        // Both queries are now running, each holding a pooled connection.
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
}

#[test]
fn ending_the_runtime_mid_query_does_not_panic_sqlite() {
    end_runtime_mid_query(Backend::Sqlite);
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn ending_the_runtime_mid_query_does_not_panic_postgres() {
    assert!(
        crate::helpers::postgres_enabled(),
        "this test needs PostgreSQL: set SMSGW_TEST_DATABASE_URL"
    );
    end_runtime_mid_query(Backend::Postgres);
}

/// SQLite: the writer never checkpoints inside a commit; a connection of its own copies the
/// WAL back into the database file beside it. Messages accepted through the API reach the
/// database file itself (read here with `immutable=true`, which makes SQLite ignore the WAL)
/// within a second or two, with no other write to trigger a checkpoint.
#[test]
fn wal_is_checkpointed_beside_the_writer() {
    crate::helpers::run(async {
        let app = spawn_app(Backend::Sqlite).await;
        for i in 0..20 {
            app.send_test(RECIPIENT, &format!("checkpointed {i}"))
                .await
                .expect(202);
        }
        let path = app
            .database_url
            .trim_start_matches("sqlite://")
            .split('?')
            .next()
            .unwrap()
            .to_string();
        let file_only = format!("sqlite://{path}?mode=ro&immutable=true");
        poll(Duration::from_secs(10), Duration::from_millis(200), async || {
            // `immutable=true` tells SQLite the file never changes, which is false while a
            // checkpoint writes it: a read torn by one ("database disk image is malformed")
            // counts as not there yet, and the next poll reads again.
            let db = match sea_orm::Database::connect(&file_only).await {
                Ok(db) => db,
                Err(e) => return Err(format!("the database file was not readable: {e}")),
            };
            // Until the first checkpoint the file may not even hold the schema.
            let stored: i64 = match db
                .query_one_raw(sea_orm::Statement::from_string(
                    sea_orm::DbBackend::Sqlite,
                    "SELECT count(*) AS n FROM messages",
                ))
                .await
            {
                Ok(Some(row)) => row.try_get("", "n").unwrap_or(0),
                _ => 0,
            };
            db.close().await.unwrap();
            if stored >= 20 {
                return Ok(());
            }
            Err(format!("the database file holds {stored} of 20 messages after 10 s: the WAL is not checkpointed"))
        })
        .await;
        drop(app);
    });
}

backend_tests!(ready_is_503_when_the_database_does_not_answer,);
