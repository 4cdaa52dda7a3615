//! The database's bad days (docs/deploy.md, "Bad days"): a SQLite file at `database.max_size`
//! refuses writes with 503 `storage_full` and takes them again once space is freed; a
//! PostgreSQL cut (a proxy between the server and the database) answers 503
//! `database_unavailable` within a bound, keeps phones connected through a 20 s outage (past
//! the leases' time to live) and loses nothing acknowledged, and work resumes once the
//! database is back.

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;
use smsgw::domain::protocol::{PhoneFrame, ServerFrame};

use crate::helpers::db_proxy::{DbProxy, host_port};
use crate::helpers::{
    Backend, SENDER, eventually, fresh_database, run, run_on_postgres, send_body, spawn_app_with,
    spawn_on_existing,
};

const CUSTOMER: &str = "+14155550177";

/// Pages of the SQLite file at `url`.
async fn page_count(url: &str) -> u64 {
    let db = smsgw::store::connect(url, 1).await.unwrap();
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "PRAGMA page_count".to_string(),
        ))
        .await
        .unwrap()
        .unwrap();
    let pages: i64 = row.try_get_by_index(0).unwrap();
    db.close().await.unwrap();
    pages as u64
}

#[test]
fn a_full_sqlite_file_refuses_writes_and_takes_them_again_once_space_is_freed() {
    run(async {
        let first = spawn_app_with(Backend::Sqlite, |s| {
            s.limits.new_workspace_messages = 1_000_000;
        })
        .await;
        let key = first.live_key.clone();
        let (phone_id, token) = first.pair_phone(SENDER).await;
        // Space to free later: a draft campaign with many recipients.
        let recipients: Vec<_> = (0..2_000)
            .map(
                |n| json!({ "to": format!("+1415555{n:04}"), "vars": { "note": "x".repeat(100) } }),
            )
            .collect();
        let campaign = first
            .post(
                "/v1/campaigns",
                &key,
                json!({ "name": "space", "from_number": SENDER, "body": "hi {{note}}", "recipients": recipients }),
            )
            .await
            .expect(201)
            .data()["id"]
            .as_str()
            .unwrap()
            .to_string();
        first.stop_gracefully().await;

        // Room for a few dozen long messages past today's size.
        let pages = page_count(&first.database_url).await;
        let mut settings = first.settings.clone();
        settings.database.max_size = Some((pages + 40) * 4096);
        let app = spawn_on_existing(settings, &key, &first.test_key, first.workspace_id).await;
        let _phone = app.connect_phone(&token).await;
        app.wait_online(&phone_id, true).await;

        let long = "a".repeat(1_000);
        let mut accepted = 0;
        let mut refused = None;
        for round in 0..60 {
            let to: Vec<String> = (0..20)
                .map(|n| format!("+1415666{:04}", round * 20 + n))
                .collect();
            let reply = app
                .bulk_send(
                    &key,
                    json!({ "from_number": SENDER, "content": long, "to_numbers": to }),
                )
                .await;
            if reply.status == 202 {
                accepted += to.len();
            } else {
                refused = Some(reply);
                break;
            }
        }
        let refused = refused.expect("the file fills up within 60 bulk sends");
        let refused = refused.expect_error(503, "storage_full");
        assert!(
            refused.body["message"]
                .as_str()
                .unwrap()
                .contains("nothing was changed"),
            "{:?}",
            refused.body
        );
        assert!(accepted > 0, "some sends fit before the cap");
        // Single sends fill what room the bulk's pages left, then are refused too.
        let mut single_refused = false;
        for _ in 0..100 {
            let reply = app.send(&key, send_body(SENDER, CUSTOMER, &long)).await;
            if reply.status == 202 {
                accepted += 1;
            } else {
                reply.expect_error(503, "storage_full");
                single_refused = true;
                break;
            }
        }
        assert!(
            single_refused,
            "a single send is refused once the file is full"
        );
        // Reads still work, and everything acknowledged is there.
        let stored = app
            .all_pages(&key, "/v1/messages?direction=outbound", "messages")
            .await;
        assert_eq!(stored.len(), accepted, "the refused sends stored nothing");
        assert_eq!(app.fetch("/health", &[]).await.status, 200);

        // Space comes back (a delete frees pages): writes succeed again, no restart.
        app.delete(&format!("/v1/campaigns/{campaign}"), &key)
            .await
            .expect(200);
        app.send(&key, send_body(SENDER, CUSTOMER, "after"))
            .await
            .expect(202);
        assert_eq!(
            app.all_pages(&key, "/v1/messages?direction=outbound", "messages")
                .await
                .len(),
            accepted + 1
        );
    });
}

#[test]
fn max_size_is_read_with_units_and_a_bad_one_is_named() {
    run(async {
        let (url, _dir) = fresh_database(Backend::Sqlite).await;
        let out = crate::helpers::run_cli(
            &["migrate"],
            &[
                ("SMSGW_DATABASE__URL", url.as_str()),
                ("SMSGW_DATABASE__MAX_SIZE", "2 parsecs"),
            ],
        )
        .await;
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("max_size") && stderr.contains("unknown unit"),
            "{stderr}"
        );
    });
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn a_postgres_outage_answers_503_keeps_phones_and_resumes() {
    run_on_postgres(async {
        let base = std::env::var("SMSGW_TEST_DATABASE_URL").unwrap();
        let proxy = DbProxy::start(host_port(&base)).await;
        let app = spawn_app_with(Backend::Postgres, |s| {
            s.database.url = proxy.url_through(&s.database.url);
            s.database.acquire_timeout = Duration::from_secs(2);
        })
        .await;
        let key = app.live_key.clone();
        let (phone_id, token) = app.pair_phone(SENDER).await;
        let mut phone = app.connect_phone(&token).await;
        app.wait_online(&phone_id, true).await;

        // Acknowledged before the cut, handed to the phone after it.
        let scheduled_for = (chrono::Utc::now() + chrono::Duration::seconds(8))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let before = app
            .send(
                &key,
                json!({ "from_number": SENDER, "to_number": CUSTOMER, "content": "before the cut",
                        "scheduled_for": scheduled_for }),
            )
            .await
            .expect(202)
            .data()["id"]
            .as_str()
            .unwrap()
            .to_string();

        proxy.cut();
        let started = Instant::now();
        let during = app
            .send(&key, send_body(SENDER, CUSTOMER, "during the cut"))
            .await;
        let took = started.elapsed();
        let during = during.expect_error(503, "database_unavailable");
        assert!(took < Duration::from_secs(10), "answered in {took:?}");
        assert_eq!(
            during.headers.get("retry-after").map(String::as_str),
            Some("5")
        );
        app.get("/v1/messages", &key)
            .await
            .expect_error(503, "database_unavailable");
        assert_eq!(app.fetch("/ready", &[]).await.status, 503);
        assert_eq!(app.fetch("/health", &[]).await.status, 200);
        // An SMS the phone forwards during the outage: stored (and acked) once it is over.
        phone
            .send(&PhoneFrame::Received {
                reference: "during".into(),
                from: CUSTOMER.into(),
                content: "received during the cut".into(),
                received_at: chrono::Utc::now(),
            })
            .await;
        // The outage lasts 20 s, past the leases' time to live: the phone's session stays up
        // all along (the frames after it arrive on this same connection).
        let outage = Duration::from_secs(20);
        assert_eq!(
            phone
                .next_frame_within(outage.saturating_sub(started.elapsed()))
                .await,
            None,
            "nothing reaches the phone while the database is away"
        );
        app.send(&key, send_body(SENDER, CUSTOMER, "during the cut"))
            .await
            .expect_error(503, "database_unavailable");
        assert_eq!(app.fetch("/ready", &[]).await.status, 503);

        proxy.restore();
        let restored = Instant::now();
        eventually(
            "a send accepted again",
            Duration::from_secs(15),
            async || {
                app.send(&key, send_body(SENDER, CUSTOMER, "after the cut"))
                    .await
                    .status
                    == 202
            },
        )
        .await;
        eprintln!(
            "sends accepted {:?} after the database came back",
            restored.elapsed()
        );
        app.wait_online(&phone_id, true).await;
        // The message acknowledged before the cut reaches the phone; the one refused during
        // it was never stored.
        let mut handed = Vec::new();
        let mut acked = false;
        while handed.len() < 2 || !acked {
            match phone.next_frame_within(Duration::from_secs(40)).await {
                Some(ServerFrame::Send {
                    message_id,
                    content,
                    ..
                }) => handed.push((message_id.to_string(), content)),
                Some(ServerFrame::Ack { reference }) if reference == "during" => acked = true,
                Some(_) => {}
                None => panic!("the phone got {handed:?}, then nothing"),
            }
        }
        assert!(handed.iter().any(|(id, _)| *id == before), "{handed:?}");
        let stored = app
            .all_pages(&key, "/v1/messages?direction=outbound", "messages")
            .await;
        assert!(
            stored.iter().all(|m| m["content"] != "during the cut"),
            "the refused send is not stored"
        );
        assert_eq!(stored.len(), 2);
        let received = app
            .all_pages(&key, "/v1/messages?direction=inbound", "messages")
            .await;
        assert_eq!(received.len(), 1, "{received:?}");
        assert_eq!(received[0]["content"], "received during the cut");
    });
}

#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn a_phone_that_moved_during_an_outage_stays_with_its_new_node() {
    run_on_postgres(async {
        let b = spawn_app_with(Backend::Postgres, |s| {
            s.database.acquire_timeout = Duration::from_secs(2);
        })
        .await;
        let proxy = DbProxy::start(host_port(&b.database_url)).await;
        let a = b
            .spawn_peer_with(|s| s.database.url = proxy.url_through(&s.database.url))
            .await;
        let key = b.live_key.clone();
        let (phone_id, token) = b.pair_phone(SENDER).await;
        let on_a = a.connect_phone(&token).await;
        a.wait_online(&phone_id, true).await;

        // Node A loses its database; the phone gives up on A and lands on B, which takes the
        // lease once A's has expired.
        proxy.cut();
        on_a.close().await;
        let mut on_b = b.connect_phone(&token).await;
        eventually("B holds the phone", Duration::from_secs(20), async || {
            b.send(&key, send_body(SENDER, CUSTOMER, "via B during the outage"))
                .await
                .status
                == 202
        })
        .await;

        // A comes back: the lease it suspended is B's now, so A lets go of the phone, and
        // sends through either node reach the phone on B, each once.
        proxy.restore();
        eventually("A takes sends again", Duration::from_secs(10), async || {
            a.send(&key, send_body(SENDER, CUSTOMER, "via A after the outage"))
                .await
                .status
                == 202
        })
        .await;
        let mut got = std::collections::HashMap::<String, u32>::new();
        while got.len() < 2 {
            match on_b.next_frame_within(Duration::from_secs(20)).await {
                Some(ServerFrame::Send { message_id, .. }) => {
                    *got.entry(message_id.to_string()).or_default() += 1;
                }
                Some(_) => {}
                None => panic!("the phone on B got {got:?}, then nothing"),
            }
        }
        assert_eq!(
            on_b.next_frame_within(Duration::from_secs(2)).await,
            None,
            "nothing handed twice: {got:?}"
        );
        let stored = b
            .all_pages(&key, "/v1/messages?direction=outbound", "messages")
            .await;
        assert_eq!(stored.len(), 2, "{stored:?}");
        for message in &stored {
            assert_eq!(
                got.get(message["id"].as_str().unwrap()),
                Some(&1),
                "each stored send reached the phone on B once"
            );
        }
    });
}
