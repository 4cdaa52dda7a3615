//! Backups of a SQLite server (docs/deploy.md, "Backups"): `smsgw backup` under load, and
//! `smsgw restore`, refused while a server holds the database.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smsgw::domain::protocol::{PhoneFrame, ServerFrame};

use crate::helpers::{
    Backend, SENDER, WebhookReceiver, run, run_cli, send_body, spawn_app_with, spawn_on_existing,
};

const CUSTOMER: &str = "+14155550177";
const WAIT: Duration = Duration::from_secs(20);

#[test]
fn a_backup_under_load_restores_everything_acknowledged_before_it() {
    run(async {
        let app = spawn_app_with(Backend::Sqlite, |s| {
            s.pace.per_minute = 10_000;
            s.pace.per_30_minutes = 100_000;
            s.webhooks.allow_insecure_targets = true;
            s.webhooks.retry_schedule = vec![Duration::from_millis(500); 200];
            s.limits.new_workspace_messages = 1_000_000;
        })
        .await;
        let key = app.live_key.clone();
        let receiver = WebhookReceiver::start().await;
        receiver.answer(&[500; 10_000]);
        app.subscribe(&key, &receiver, &["message.sent"]).await;
        let (phone_id, token) = app.pair_phone(SENDER).await;
        let mut phone = app.connect_phone(&token).await;
        app.wait_online(&phone_id, true).await;

        // Five messages reported sent: their message.sent deliveries keep failing (pending).
        let mut reported = Vec::new();
        for n in 0..5 {
            let id = app
                .send(&key, send_body(SENDER, CUSTOMER, &format!("reported {n}")))
                .await
                .expect(202)
                .data()["id"]
                .as_str()
                .unwrap()
                .to_string();
            let (message_id, _, _, _) = phone.expect_send().await;
            assert_eq!(message_id.to_string(), id);
            phone
                .report_acked(PhoneFrame::Sent {
                    message_id,
                    reference: Some(format!("s{n}")),
                })
                .await;
            reported.push(id);
        }
        receiver.wait_for(5, WAIT).await;

        // Load: sends accepted one after another while the backup runs; the phone takes
        // them and reports nothing.
        let acked: Arc<Mutex<Vec<(String, std::time::Instant)>>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = {
            let (acked, stop) = (acked.clone(), stop.clone());
            let (client, address, key) = (app.client.clone(), app.address.clone(), key.clone());
            actix_web::rt::spawn(async move {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let mut reply = client
                        .post(format!("{address}/v1/messages/send"))
                        .insert_header(("x-api-key", key.as_str()))
                        .send_json(&send_body(SENDER, CUSTOMER, &format!("load {n}")))
                        .await
                        .expect("send answered");
                    let body: serde_json::Value = reply.json().await.expect("json");
                    assert_eq!(reply.status().as_u16(), 202, "{body}");
                    let id = body["data"]["id"].as_str().unwrap().to_string();
                    acked.lock().unwrap().push((id, std::time::Instant::now()));
                }
            })
        };
        crate::helpers::eventually("sends under way", WAIT, async || {
            acked.lock().unwrap().len() >= 20
        })
        .await;

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("smsgw-backup.db");
        let env = [("SMSGW_DATABASE__URL", app.database_url.as_str())];
        let started = std::time::Instant::now();
        let backup = run_cli(&["backup", "--to", file.to_str().unwrap()], &env).await;
        let stdout = String::from_utf8_lossy(&backup.stdout).to_string();
        assert!(backup.status.success(), "{backup:?}");
        assert!(stdout.contains("backup written to"), "{stdout}");
        assert!(
            stdout.contains("smsgw.db.key") && stdout.contains("not in the backup"),
            "the backup says where the key is: {stdout}"
        );
        let before: Vec<String> = acked
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, at)| *at < started)
            .map(|(id, _)| id.clone())
            .collect();
        crate::helpers::eventually("sends after the backup too", WAIT, async || {
            acked.lock().unwrap().len() > before.len() + 5
        })
        .await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        load.await.unwrap();

        // A second backup never overwrites the first.
        let again = run_cli(&["backup", "--to", file.to_str().unwrap()], &env).await;
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));

        // The running server's database cannot be restored over.
        let refused = run_cli(&["restore", "--from", file.to_str().unwrap()], &env).await;
        let stderr = String::from_utf8_lossy(&refused.stderr).to_string();
        assert!(!refused.status.success(), "{refused:?}");
        assert!(stderr.contains("a running smsgw server holds"), "{stderr}");

        // Stopped, the database is replaced by the backup; the old one is kept.
        drop(phone);
        app.stop_gracefully().await;
        let restored = run_cli(&["restore", "--from", file.to_str().unwrap()], &env).await;
        let stdout = String::from_utf8_lossy(&restored.stdout).to_string();
        assert!(restored.status.success(), "{restored:?}");
        assert!(
            stdout.contains("the database it replaced is kept at"),
            "{stdout}"
        );

        receiver.clear_answers();
        let seen_before_restore = receiver.received().len();
        let mut settings = app.settings.clone();
        settings.database.url = app.database_url.clone();
        let restored = spawn_on_existing(settings, &key, &app.test_key, app.workspace_id).await;

        // Everything acknowledged before the backup began is there.
        for id in reported.iter().chain(&before) {
            restored
                .get(&format!("/v1/messages/{id}"), &key)
                .await
                .expect(200);
        }
        // The pending deliveries resume: each reported message's event arrives with a 200.
        crate::helpers::eventually("the pending deliveries resumed", WAIT, async || {
            let delivered: HashSet<String> = receiver.received()[seen_before_restore..]
                .iter()
                .map(|r| {
                    r.json()["message"]["id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect();
            reported.iter().all(|id| delivered.contains(id))
        })
        .await;
        // The unreported sends go to the phone again once it connects.
        let mut phone = restored.connect_phone(&token).await;
        let mut handed = HashSet::new();
        let wanted: HashSet<String> = before.iter().cloned().collect();
        while !wanted.is_subset(&handed) {
            match phone.next_frame_within(WAIT).await {
                Some(ServerFrame::Send { message_id, .. }) => {
                    handed.insert(message_id.to_string());
                }
                Some(_) => {}
                None => panic!(
                    "not every unreported send came back: {} of {}",
                    wanted.intersection(&handed).count(),
                    wanted.len()
                ),
            }
        }
    });
}

#[test]
fn backup_and_restore_refuse_what_they_cannot_do() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("b.db");
        // PostgreSQL has its own tools; nothing is connected to or written.
        let postgres = [("SMSGW_DATABASE__URL", "postgres://127.0.0.1:1/smsgw")];
        for args in [
            ["backup", "--to", target.to_str().unwrap()],
            ["restore", "--from", target.to_str().unwrap()],
        ] {
            let refused = run_cli(&args, &postgres).await;
            let stderr = String::from_utf8_lossy(&refused.stderr).to_string();
            assert!(!refused.status.success(), "{args:?}");
            assert!(stderr.contains("pg_dump"), "{args:?}: {stderr}");
        }
        assert!(!target.exists());
        // No database to back up: nothing is created.
        let missing = dir.path().join("none.db");
        let url = format!("sqlite://{}?mode=rwc", missing.display());
        let env = [("SMSGW_DATABASE__URL", url.as_str())];
        let refused = run_cli(&["backup", "--to", target.to_str().unwrap()], &env).await;
        assert!(String::from_utf8_lossy(&refused.stderr).contains("no database at"));
        assert!(!missing.exists() && !target.exists());
        // A file that is not a backup is not restored.
        let junk = dir.path().join("junk.db");
        std::fs::write(&junk, b"not a database").unwrap();
        let refused = run_cli(&["restore", "--from", junk.to_str().unwrap()], &env).await;
        let stderr = String::from_utf8_lossy(&refused.stderr).to_string();
        assert!(!refused.status.success());
        assert!(
            stderr.contains("is not a backup of an smsgw database"),
            "{stderr}"
        );
        assert!(!missing.exists(), "nothing was put in place");
    });
}
