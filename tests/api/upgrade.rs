//! Upgrades (docs/deploy.md, "Upgrades"): a database written by an earlier build is migrated
//! by this one and reads back whole through the API; `smsgw migrate --dry-run` lists what it
//! would apply and applies nothing; a database a newer build migrated is refused.
//!
//! The fixture `tests/fixtures/upgrade/2026-11-28.db` (with its secrets key file and the
//! manifest of what it holds) was written by `write_upgrade_fixture` below, on the schema of
//! that day: `cargo test --features write-fixtures --test api upgrade::write_upgrade_fixture`.
//! A fixture is never rewritten by a later build: that is what makes it a test of upgrades.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::{Backend, fresh_database, run, run_cli, spawn_on_existing, test_settings};

/// The fixture of the schema of 2026-11-28 (before the fleet's migrations).
const FIXTURE: &str = "2026-11-28";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(fixture_dir().join(format!("{FIXTURE}.json")))
        .expect("the fixture's manifest");
    serde_json::from_str(&text).expect("the manifest is JSON")
}

/// A copy of the fixture database and its secrets key file in a temporary folder, and the URL
/// of the copy.
fn copy_fixture() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("smsgw.db");
    std::fs::copy(fixture_dir().join(format!("{FIXTURE}.db")), &db).expect("fixture copied");
    std::fs::copy(
        fixture_dir().join(format!("{FIXTURE}.db.key")),
        dir.path().join("smsgw.db.key"),
    )
    .expect("fixture key copied");
    let url = format!("sqlite://{}?mode=rwc", db.display());
    (dir, url)
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {value}"))
}

#[test]
fn a_database_of_an_earlier_build_is_migrated_and_reads_back_whole() {
    run(async {
        let manifest = manifest();
        let (_dir, url) = copy_fixture();

        // What this build would apply to it: its migrations after the fixture's, none applied.
        let env = [("SMSGW_DATABASE__URL", url.as_str())];
        let dry = run_cli(&["migrate", "--dry-run"], &env).await;
        let listed = String::from_utf8_lossy(&dry.stdout).to_string();
        assert!(dry.status.success(), "{listed} {:?}", dry.stderr);
        let fixture_has: Vec<&str> = manifest["migrations"]
            .as_array()
            .expect("migrations")
            .iter()
            .map(|m| m.as_str().expect("name"))
            .collect();
        for applied in &fixture_has {
            assert!(
                !listed.contains(applied),
                "{applied} is applied already: {listed}"
            );
        }
        let again = run_cli(&["migrate", "--dry-run"], &env).await;
        assert_eq!(
            again.stdout, dry.stdout,
            "a dry run applies nothing: a second one lists the same"
        );

        let mut settings = test_settings();
        settings.database.url = url.clone();
        // The fixture's rows are as old as the fixture: no retention sweep may remove them.
        let century = std::time::Duration::from_secs(100 * 365 * 24 * 3_600);
        settings.retention.content_after = century;
        settings.retention.record_after = century;
        let app = spawn_on_existing(
            settings,
            str_of(&manifest, "live_key"),
            str_of(&manifest, "test_key"),
            str_of(&manifest, "workspace_id").parse().expect("uuid"),
        )
        .await;
        let key = app.live_key.clone();

        // The phone, with its name and pace override.
        let phone = app
            .get(
                &format!("/v1/phones/{}", str_of(&manifest, "phone_id")),
                &key,
            )
            .await
            .expect(200)
            .data()
            .clone();
        assert_eq!(phone["phone_number"], manifest["phone_number"]);
        assert_eq!(phone["name"], "Front desk");
        assert_eq!(phone["pace"]["per_minute"], 500);
        // Its device token still pairs (stored as a hash).
        let _session = app.connect_phone(str_of(&manifest, "device_token")).await;

        // A message in every status, each with its timeline.
        for (status, id) in manifest["messages"].as_object().expect("messages") {
            let message = app.message(&key, id.as_str().expect("id")).await;
            // A message handed over and unreported goes back to the queue at a restart
            // (docs/api.md, "Messages"), and to the phone again once it connects.
            let expected: &[&str] = match status.as_str() {
                "sending" => &["sending", "queued"],
                // An inbound SMS is stored `delivered`, direction `inbound`.
                "received" => &["delivered"],
                other => &[other],
            };
            assert!(
                expected.contains(&message["status"].as_str().unwrap_or_default()),
                "{status}: {message}"
            );
            assert!(
                !message["events"].as_array().expect("events").is_empty(),
                "{message}"
            );
        }
        let failed = app
            .message(&key, str_of(&manifest["messages"], "failed"))
            .await;
        assert_eq!(failed["failure_reason"], manifest["failure_reason"]);
        let delivered = app
            .message(&key, str_of(&manifest["messages"], "delivered"))
            .await;
        assert_eq!(delivered["content"], "fixture delivered");

        // Test mode's side.
        let test_message = app
            .message(&app.test_key, str_of(&manifest, "test_message_id"))
            .await;
        assert_eq!(test_message["status"], "delivered");

        // The campaigns with their recipients.
        let campaign = app
            .get(
                &format!("/v1/campaigns/{}", str_of(&manifest, "campaign_id")),
                &key,
            )
            .await
            .expect(200)
            .data()
            .clone();
        assert_eq!(campaign["status"], "completed", "{campaign}");
        assert_eq!(campaign["counts"]["delivered"], 2, "{campaign}");
        let draft = app
            .get(
                &format!("/v1/campaigns/{}", str_of(&manifest, "draft_campaign_id")),
                &key,
            )
            .await
            .expect(200)
            .data()
            .clone();
        assert_eq!(draft["status"], "draft", "{draft}");
        assert_eq!(draft["counts"]["total"], 1, "{draft}");

        // Contacts: tags and an opt-out.
        let contacts = app.contacts(&key).await;
        let tagged = contacts
            .iter()
            .find(|c| c["phone_number"] == manifest["contact_number"])
            .expect("the tagged contact");
        assert_eq!(tagged["tags"], json!(["vip"]));
        let opted_out = contacts
            .iter()
            .find(|c| c["phone_number"] == manifest["opted_out_number"])
            .expect("the opted-out contact");
        assert_eq!(opted_out["opted_out"], true);

        // The webhook endpoint, its pending deliveries and their attempts.
        let endpoint_id = str_of(&manifest, "endpoint_id");
        let endpoint = app
            .get(&format!("/v1/webhooks/{endpoint_id}"), &key)
            .await
            .expect(200)
            .data()
            .clone();
        assert_eq!(endpoint["url"], manifest["endpoint_url"]);
        let deliveries = app
            .all_pages(
                &key,
                &format!("/v1/webhooks/{endpoint_id}/deliveries"),
                "deliveries",
            )
            .await;
        assert!(
            deliveries
                .iter()
                .any(|d| d["state"] == "pending" && d["status_code"] == 500),
            "a failed attempt of a delivery still pending: {deliveries:?}"
        );

        // The AI settings and the draft.
        let settings = app
            .get("/v1/ai/settings", &key)
            .await
            .expect(200)
            .data()
            .clone();
        assert_eq!(settings["enabled"], true);
        let draft = app
            .get(
                &format!("/v1/ai/drafts/{}", str_of(&manifest, "ai_draft_id")),
                &key,
            )
            .await
            .expect(200)
            .data()
            .clone();
        assert_eq!(draft["content"], "It is 10 EUR", "{draft}");
        assert_eq!(draft["status"], "pending", "{draft}");

        // The keys: the extra one works, the revoked one still does not.
        app.get("/v1/phones", str_of(&manifest, "extra_key"))
            .await
            .expect(200);
        app.get("/v1/phones", str_of(&manifest, "revoked_key"))
            .await
            .expect_error(401, "invalid_api_key");

        // The workspace's settings.
        let workspace = app.get("/v1/workspace", &key).await.expect(200);
        assert_eq!(workspace.data()["default_country"], "US");
        let client_settings = app
            .client_api(
                "GET",
                "/settings",
                Some(&crate::helpers::bearer(&key)),
                None,
            )
            .await;
        assert_eq!(
            client_settings.body["messages"]["log_lifetime_days"], 30,
            "{}",
            client_settings.body
        );

        // Every migration is applied now.
        app.stop_gracefully().await;
        let after = run_cli(&["migrate", "--dry-run"], &env).await;
        assert!(
            String::from_utf8_lossy(&after.stdout).contains("no pending migrations"),
            "{after:?}"
        );
    });
}

backend_tests!(
    a_database_migrated_by_a_newer_build_is_refused,
    a_dry_run_applies_nothing
);

/// A name no build of smsgw has: a migration of a later version.
const FUTURE_MIGRATION: &str = "m29991231_000001_from_the_future";

async fn a_database_migrated_by_a_newer_build_is_refused(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let env = [
        ("SMSGW_DATABASE__URL", url.as_str()),
        ("SMSGW_SECRETS__KEY", crate::helpers::POSTGRES_SECRETS_KEY),
    ];
    let migrated = run_cli(&["migrate"], &env).await;
    assert!(migrated.status.success(), "{migrated:?}");
    let db = sea_orm::Database::connect(&url).await.expect("connect");
    use sea_orm::ConnectionTrait;
    db.execute_unprepared(&format!(
        "INSERT INTO seaql_migrations (version, applied_at) VALUES ('{FUTURE_MIGRATION}', 0)"
    ))
    .await
    .expect("a newer build's migration recorded");
    for args in [&["migrate"][..], &["migrate", "--dry-run"], &["serve"]] {
        let refused = run_cli(args, &env).await;
        let stderr = String::from_utf8_lossy(&refused.stderr).to_string();
        assert!(!refused.status.success(), "{args:?} must refuse: {stderr}");
        assert!(
            stderr.contains("migrated by a newer smsgw") && stderr.contains(FUTURE_MIGRATION),
            "{args:?}: {stderr}"
        );
    }
    let _ = db.close().await;
}

async fn a_dry_run_applies_nothing(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let env = [
        ("SMSGW_DATABASE__URL", url.as_str()),
        ("SMSGW_SECRETS__KEY", crate::helpers::POSTGRES_SECRETS_KEY),
    ];
    let dry = run_cli(&["migrate", "--dry-run"], &env).await;
    let listed = String::from_utf8_lossy(&dry.stdout).to_string();
    assert!(dry.status.success(), "{dry:?}");
    assert!(
        listed.contains("m20261122_000001_create_core_tables"),
        "every migration is pending on an empty database: {listed}"
    );
    let db = sea_orm::Database::connect(&url).await.expect("connect");
    let manager = migration::SchemaManager::new(&db);
    assert!(
        !manager.has_table("phones").await.expect("schema read"),
        "a dry run creates no table"
    );
    let applied = run_cli(&["migrate"], &env).await;
    assert!(applied.status.success(), "{applied:?}");
    assert!(manager.has_table("phones").await.expect("schema read"));
    let after = run_cli(&["migrate", "--dry-run"], &env).await;
    assert!(
        String::from_utf8_lossy(&after.stdout).contains("no pending migrations"),
        "{after:?}"
    );
    let _ = db.close().await;
}

/// Writes the fixture of today's schema (run by hand, once per fixture; see the module docs).
#[cfg(feature = "write-fixtures")]
#[test]
fn write_upgrade_fixture() {
    run(fixture_writer::write());
}

#[cfg(feature = "write-fixtures")]
mod fixture_writer {
    use std::time::Duration;

    use sea_orm::ConnectionTrait;
    use serde_json::{Value, json};
    use smsgw::domain::protocol::PhoneFrame;

    use super::{FIXTURE, fixture_dir};
    use crate::helpers::{Backend, WebhookReceiver, eventually, send_body, spawn_app_with};

    const PHONE: &str = "+14155550100";
    const OTHER_PHONE: &str = "+14155550101";
    const CUSTOMER: &str = "+14155550177";
    const CONTACT: &str = "+14155550178";
    const OPTED_OUT: &str = "+14155550179";
    const WAIT: Duration = Duration::from_secs(15);

    fn id(reply: &Value) -> String {
        reply["id"].as_str().expect("id").to_string()
    }

    pub async fn write() {
        let app = spawn_app_with(Backend::Sqlite, |s| {
            s.pace.per_minute = 1_000;
            s.pace.per_30_minutes = 10_000;
            s.messages.ttl = Duration::from_secs(3);
            s.webhooks.allow_insecure_targets = true;
        })
        .await;
        // expired: queued on a phone that went away, past the 3 s time to live.
        let (other_id, other_token) = app.pair_phone(OTHER_PHONE).await;
        let other = app.connect_phone(&other_token).await;
        app.wait_online(&other_id, true).await;
        let mut soon = send_body(OTHER_PHONE, CUSTOMER, "fixture expired");
        soon["scheduled_for"] =
            json!((chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339());
        let expiring = app
            .send(&app.live_key, soon)
            .await
            .expect(202)
            .data()
            .clone();
        other.close().await;
        app.wait_online(&other_id, false).await;
        app.wait_for_status(&app.live_key, &id(&expiring), "expired")
            .await;
        let expired_id = id(&expiring);

        // Everything else lives long: a fixture is read back long after it was written.
        let app = app
            .restart_with(|s| s.messages.ttl = Duration::from_secs(3_650 * 24 * 3_600))
            .await;
        let key = app.live_key.clone();
        let mut manifest = json!({
            "live_key": app.live_key,
            "test_key": app.test_key,
            "workspace_id": app.workspace_id.to_string(),
            "phone_number": PHONE,
        });

        // Keys: one more, and a revoked one.
        let extra = app
            .post("/v1/keys", &key, json!({}))
            .await
            .expect(201)
            .data()
            .clone();
        manifest["extra_key"] = extra["key"].clone();
        let revoked = app
            .post("/v1/keys", &key, json!({}))
            .await
            .expect(201)
            .data()
            .clone();
        app.delete(&format!("/v1/keys/{}", id(&revoked)), &key)
            .await
            .expect(200);
        manifest["revoked_key"] = revoked["key"].clone();

        // The workspace's settings, and its client-API settings document.
        app.patch("/v1/workspace", &key, json!({"default_country": "US"}))
            .await
            .expect(200);
        let client_settings = app
            .client_api(
                "PATCH",
                "/settings",
                Some(&crate::helpers::bearer(&key)),
                Some(json!({"messages": {"log_lifetime_days": 30}})),
            )
            .await;
        assert_eq!(client_settings.status, 200, "{}", client_settings.body);

        // A webhook endpoint that keeps failing: its deliveries stay pending.
        let receiver = WebhookReceiver::start().await;
        receiver.answer(&[500; 50]);
        let endpoint = app
            .subscribe(&key, &receiver, &["message.sent", "message.delivered"])
            .await;
        manifest["endpoint_id"] = endpoint["id"].clone();
        manifest["endpoint_url"] = endpoint["url"].clone();

        // Contacts, one with a tag (created with a request_id: an idempotency key).
        app.post(
            "/v1/contacts",
            &key,
            json!({"phone_number": CONTACT, "name": "Ada", "tags": ["vip"], "request_id": "fixture-contact"}),
        )
        .await
        .expect(201);
        manifest["contact_number"] = json!(CONTACT);
        manifest["opted_out_number"] = json!(OPTED_OUT);

        // AI replies by rule, in draft mode.
        app.request(
            "PUT",
            "/v1/ai/settings",
            Some(&key),
            Some(json!({"enabled": true, "mode": "draft",
                "rules": [{"keywords": ["price"], "reply": "It is 10 EUR"}]})),
        )
        .await
        .expect(200);

        // The phone, named, with its own pace.
        let phone = app
            .post(
                "/v1/phones",
                &key,
                json!({"phone_number": PHONE, "name": "Front desk"}),
            )
            .await
            .expect(201)
            .data()
            .clone();
        let phone_id = id(&phone);
        manifest["phone_id"] = json!(phone_id);
        manifest["device_token"] = phone["device_token"].clone();
        app.patch(
            &format!("/v1/phones/{phone_id}"),
            &key,
            json!({"pace": {"per_minute": 500, "per_30_minutes": 5_000}}),
        )
        .await
        .expect(200);
        let mut session = app
            .connect_phone(phone["device_token"].as_str().expect("token"))
            .await;
        app.wait_online(&phone_id, true).await;

        let mut messages = serde_json::Map::new();
        messages.insert("expired".into(), json!(expired_id));
        // delivered, sent, failed, sending: one send each, reported as such.
        for (status, content) in [
            ("delivered", "fixture delivered"),
            ("sent", "fixture sent"),
            ("failed", "fixture failed"),
            ("sending", "fixture sending"),
        ] {
            let message = app
                .send(&key, send_body(PHONE, CUSTOMER, content))
                .await
                .expect(202)
                .data()
                .clone();
            let (message_id, _, _, _) = session.expect_send().await;
            assert_eq!(message_id.to_string(), id(&message));
            match status {
                "delivered" => {
                    session
                        .report_acked(PhoneFrame::Sent {
                            message_id,
                            reference: Some("s1".into()),
                        })
                        .await;
                    session
                        .report_acked(PhoneFrame::Delivered {
                            message_id,
                            reference: Some("d1".into()),
                        })
                        .await;
                }
                "sent" => {
                    session
                        .report_acked(PhoneFrame::Sent {
                            message_id,
                            reference: Some("s2".into()),
                        })
                        .await;
                }
                "failed" => {
                    // Every attempt fails (three in all), each handed over again.
                    for attempt in 1..=3 {
                        if attempt > 1 {
                            let (again, _, _, _) = session.expect_send().await;
                            assert_eq!(again, message_id);
                        }
                        session
                            .report_acked(PhoneFrame::Failed {
                                message_id,
                                error: "RESULT_ERROR_GENERIC_FAILURE".into(),
                                reference: Some(format!("f{attempt}")),
                            })
                            .await;
                    }
                }
                _ => {}
            }
            app.wait_for_status(&key, &id(&message), status).await;
            messages.insert(status.into(), json!(id(&message)));
        }
        let failed = app
            .message(&key, messages["failed"].as_str().expect("id"))
            .await;
        manifest["failure_reason"] = failed["failure_reason"].clone();

        // queued: held for a month; canceled: held, then cancelled.
        let later = (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339();
        let mut held = send_body(PHONE, CUSTOMER, "fixture queued");
        held["scheduled_for"] = json!(later);
        let queued = app
            .send(&key, held.clone())
            .await
            .expect(202)
            .data()
            .clone();
        messages.insert("queued".into(), json!(id(&queued)));
        held["content"] = json!("fixture canceled");
        let canceled = app.send(&key, held).await.expect(202).data().clone();
        app.delete(&format!("/v1/messages/{}", id(&canceled)), &key)
            .await
            .expect(200);
        messages.insert("canceled".into(), json!(id(&canceled)));

        // received, which the AI rule drafts a reply to; an opt-out.
        session.receive("r1", CUSTOMER, "what is the price?").await;
        session.receive("r2", OPTED_OUT, "STOP").await;
        let inbound = app.messages(&key, "direction=inbound").await;
        let received = inbound
            .iter()
            .find(|m| m["content"] == "what is the price?")
            .expect("the received message");
        messages.insert("received".into(), received["id"].clone());
        let mut draft_id = String::new();
        eventually("an AI draft", WAIT, async || {
            let drafts = app.get("/v1/ai/drafts", &key).await.expect(200);
            match drafts.data()["drafts"].as_array().and_then(|d| d.first()) {
                Some(draft) => {
                    draft_id = id(draft);
                    true
                }
                None => false,
            }
        })
        .await;
        manifest["ai_draft_id"] = json!(draft_id);
        manifest["messages"] = Value::Object(messages);

        // A completed campaign of two, and a draft of one.
        let campaign = app
            .post(
                "/v1/campaigns",
                &key,
                json!({"name": "fixture campaign", "from_number": PHONE, "body": "Hi {{name}}",
                    "recipients": [{"to": "+14155550190", "vars": {"name": "A"}},
                                   {"to": "+14155550191", "vars": {"name": "B"}}],
                    "launch_now": true}),
            )
            .await
            .expect(201)
            .data()
            .clone();
        for n in 0..2 {
            let (message_id, _, _, _) = session.expect_send().await;
            session
                .report_sent_then_delivered(message_id, [format!("cs{n}"), format!("cd{n}")])
                .await;
        }
        let campaign_id = id(&campaign);
        eventually("the campaign completes", WAIT, async || {
            let c = app
                .get(&format!("/v1/campaigns/{campaign_id}"), &key)
                .await
                .expect(200);
            c.data()["status"] == "completed"
        })
        .await;
        manifest["campaign_id"] = json!(campaign_id);
        let draft = app
            .post(
                "/v1/campaigns",
                &key,
                json!({"name": "fixture draft", "from_number": PHONE, "body": "Later",
                    "recipients": [{"to": "+14155550192"}]}),
            )
            .await
            .expect(201)
            .data()
            .clone();
        manifest["draft_campaign_id"] = draft["id"].clone();

        // Test mode: a send delivered by the simulated phone.
        let test_message = app
            .send(&app.test_key, send_body(PHONE, CUSTOMER, "fixture test"))
            .await
            .expect(202)
            .data()
            .clone();
        app.wait_for_status(&app.test_key, &id(&test_message), "delivered")
            .await;
        manifest["test_message_id"] = json!(id(&test_message));

        // The endpoint has tried at least once.
        let endpoint_id = manifest["endpoint_id"].as_str().expect("id").to_string();
        eventually("a failed delivery attempt", WAIT, async || {
            let deliveries = app
                .get(&format!("/v1/webhooks/{endpoint_id}/deliveries"), &key)
                .await
                .expect(200);
            deliveries.data()["deliveries"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["state"] == "pending"))
        })
        .await;

        app.stop_gracefully().await;
        let db = sea_orm::Database::connect(&app.database_url)
            .await
            .expect("connect");
        let target = fixture_dir().join(format!("{FIXTURE}.db"));
        let _ = std::fs::remove_file(&target);
        std::fs::create_dir_all(fixture_dir()).expect("fixture dir");
        db.execute_unprepared(&format!("VACUUM INTO '{}'", target.display()))
            .await
            .expect("snapshot written");
        manifest["migrations"] = json!(migration_names());
        let source_key = app
            .database_url
            .trim_start_matches("sqlite://")
            .trim_end_matches("?mode=rwc")
            .to_string()
            + ".key";
        std::fs::copy(&source_key, fixture_dir().join(format!("{FIXTURE}.db.key")))
            .expect("key copied");
        // Every table holds a row (a cluster's tables stay empty on SQLite).
        for table in [
            "ai_drafts",
            "ai_settings",
            "api_keys",
            "campaign_recipients",
            "campaigns",
            "contact_tags",
            "contacts",
            "daily_stats",
            "idempotency_keys",
            "message_events",
            "messages",
            "phones",
            "webhook_attempts",
            "webhook_deliveries",
            "webhook_endpoints",
            "workspace_settings",
            "workspaces",
        ] {
            let row = db
                .query_one_raw(sea_orm::Statement::from_string(
                    db.get_database_backend(),
                    format!("SELECT COUNT(*) AS n FROM {table}"),
                ))
                .await
                .expect("count")
                .expect("a row");
            let n: i64 = row.try_get("", "n").expect("n");
            println!("{table}: {n}");
        }
        std::fs::write(
            fixture_dir().join(format!("{FIXTURE}.json")),
            serde_json::to_string_pretty(&manifest).expect("json") + "\n",
        )
        .expect("manifest written");
    }

    fn migration_names() -> Vec<String> {
        use migration::MigratorTrait;
        migration::Migrator::migrations()
            .iter()
            .map(|m| m.name().to_string())
            .collect()
    }
}
