//! Secrets at rest: webhook signing keys are stored sealed under the secrets key, deliveries
//! still verify with the key shown at creation (also after a restart and after clear values
//! from before encryption are sealed at start), and a wrong key stops the start naming it.

use std::time::Duration;

use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use secrecy::ExposeSecret;
use serde_json::Value;
use smsgw::domain::signing;
use smsgw::startup::Application;

use crate::backend_tests;
use crate::helpers::{Backend, RECIPIENT, TestApp, WebhookReceiver, run_cli, spawn_app_with};

/// The stored signing_key column of every endpoint.
async fn stored_keys(db: &DatabaseConnection) -> Vec<String> {
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT signing_key FROM webhook_endpoints".to_string(),
        ))
        .await
        .unwrap();
    rows.iter()
        .map(|row| row.try_get::<String>("", "signing_key").unwrap())
        .collect()
}

/// An app (http to loopback allowed) with a test-mode `message.sent` endpoint on a receiver;
/// the endpoint as created, its signing key in the clear.
async fn app_with_an_endpoint(backend: Backend) -> (TestApp, WebhookReceiver, Value) {
    let app = spawn_app_with(backend, |s| s.webhooks.allow_insecure_targets = true).await;
    let receiver = WebhookReceiver::start().await;
    let created = app
        .subscribe(&app.test_key, &receiver, &["message.sent"])
        .await;
    (app, receiver, created)
}

/// Sends a test message and checks that its `message.sent` delivery (the `n`-th delivery the
/// receiver got) verifies with `key` by both signature rules.
async fn delivery_verifies(app: &TestApp, receiver: &WebhookReceiver, n: usize, key: &str) {
    app.send_test(RECIPIENT, "sealed").await.expect(202);
    let received = receiver.wait_for(n, Duration::from_secs(10)).await;
    let r = &received[n - 1];
    let now = chrono::Utc::now().timestamp();
    let timestamp: i64 = r.header("x-timestamp").parse().unwrap();
    signing::verify(key, &r.body, r.header("x-signature"), timestamp, now)
        .expect("X-Signature verifies with the key shown at creation");
    r.assert_standard_signature(key, now);
}

async fn signing_keys_are_sealed_at_rest(backend: Backend) {
    let (app, receiver, created) = app_with_an_endpoint(backend).await;
    let key = created["signing_key"].as_str().unwrap().to_string();
    let endpoint_id = created["id"].as_str().unwrap().to_string();

    // The row holds no clear key, and the same key rotated twice is never stored the same.
    let db = Database::connect(&app.database_url).await.unwrap();
    let stored = stored_keys(&db).await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].starts_with("v1:"), "{}", stored[0]);
    assert!(!stored[0].contains(&key));
    assert!(!stored[0].contains(key.trim_start_matches("whsec_")));
    delivery_verifies(&app, &receiver, 1, &key).await;

    // On SQLite the key was generated beside the database, readable by its owner only.
    if backend == Backend::Sqlite {
        let path = smsgw::secrets::default_key_file(&app.database_url);
        let meta = std::fs::metadata(&path).expect("key file beside the database");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o600,
            "{}",
            path.display()
        );
    }

    // A start with another key fails, naming the key, and changes nothing.
    let mut wrong = app.settings.clone();
    wrong.secrets.key = Some(smsgw::domain::secrets::SecretBox::generate_key().into());
    let err = match Application::build(wrong).await {
        Ok(_) => panic!("a wrong secrets key must stop the start"),
        Err(err) => err.to_string(),
    };
    assert!(err.contains("does not decrypt"), "{err}");
    assert!(err.contains("secrets.key"), "{err}");
    assert!(err.contains(&endpoint_id), "{err}");
    assert_eq!(stored_keys(&db).await, stored);

    // A restart with the same key keeps signing with the same key.
    let app = app.restart().await;
    delivery_verifies(&app, &receiver, 2, &key).await;

    // A clear value from before encryption at rest is sealed at the next start and still used.
    let clear = signing::generate_signing_key();
    db.execute_unprepared(&format!(
        "UPDATE webhook_endpoints SET signing_key = '{clear}'"
    ))
    .await
    .unwrap();
    let app = app.restart().await;
    let stored = stored_keys(&db).await;
    assert!(stored[0].starts_with("v1:"), "{}", stored[0]);
    assert!(!stored[0].contains(&clear));
    delivery_verifies(&app, &receiver, 3, &clear).await;
    receiver.stop().await;
}

async fn the_secrets_key_rotates_with_the_cli(backend: Backend) {
    let (app, receiver, created) = app_with_an_endpoint(backend).await;
    let key = created["signing_key"].as_str().unwrap().to_string();
    let db = Database::connect(&app.database_url).await.unwrap();
    let before = stored_keys(&db).await;

    let new_key = smsgw::domain::secrets::SecretBox::generate_key();
    let mut env = vec![("SMSGW_DATABASE__URL", app.database_url.as_str())];
    if let Some(current) = &app.settings.secrets.key {
        env.push(("SMSGW_SECRETS__KEY", current.expose_secret()));
    }
    let output = run_cli(&["secrets", "rotate", "--new-key", &new_key], &env).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("sealed 1 signing keys"));
    let after = stored_keys(&db).await;
    assert_ne!(after, before);
    assert!(after[0].starts_with("v1:"));

    // A bad new key changes nothing.
    let output = run_cli(&["secrets", "rotate", "--new-key", "short"], &env).await;
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--new-key"));
    assert_eq!(stored_keys(&db).await, after);

    // Started with the new key, the endpoint signs with the key shown at creation.
    let app = app
        .restart_with(|s| s.secrets.key = Some(new_key.clone().into()))
        .await;
    delivery_verifies(&app, &receiver, 1, &key).await;
    receiver.stop().await;
}

backend_tests!(
    signing_keys_are_sealed_at_rest,
    the_secrets_key_rotates_with_the_cli,
);
