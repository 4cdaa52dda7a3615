//! API keys through the API and the CLI: listing without secrets, creation, and revocation
//! that is in force at once in the serving process and within a second from another process,
//! other keys unaffected.

use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;

use crate::backend_tests;
use crate::helpers::typed;
use crate::helpers::{Backend, TestApp, run_cli, spawn_app};
use smsgw::api::api_keys::ApiKeyOut;

/// The keys the caller's listing shows, by id.
async fn listed(app: &TestApp, key: &str) -> Vec<Value> {
    let reply = app.get("/v1/keys", key).await.expect(200);
    reply.data()["keys"].as_array().unwrap().clone()
}

async fn keys_are_listed_created_and_revoked_at_once(backend: Backend) {
    let app = spawn_app(backend).await;
    // The test key sees the test keys of its workspace only: itself.
    let keys = listed(&app, &app.test_key).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0]["mode"], "test");
    assert_eq!(keys[0]["prefix"], app.test_key[..12]);
    assert_eq!(typed::<ApiKeyOut>(&keys[0]).revoked_at, None);
    let listed_text = serde_json::to_string(&keys).unwrap();
    assert!(
        !listed_text.contains(&app.test_key),
        "no secret in a listing"
    );
    for field in ["key", "key_hash", "hash", "secret"] {
        assert!(keys[0].get(field).is_none(), "{field} is not listed");
    }

    // A second test key, shown once, works at once.
    let created = app
        .request("POST", "/v1/keys", Some(&app.test_key), None)
        .await
        .expect(201);
    let second = created.data()["key"].as_str().unwrap().to_string();
    let second_id = created.data()["id"].as_str().unwrap().to_string();
    assert!(second.starts_with("sk_test_"));
    assert_eq!(created.data()["mode"], "test");
    app.get("/v1/messages", &second).await.expect(200);
    assert_eq!(listed(&app, &app.test_key).await.len(), 2);

    // A live key neither sees nor revokes test keys.
    let live_keys = listed(&app, &app.live_key).await;
    assert_eq!(live_keys.len(), 1);
    assert_eq!(live_keys[0]["mode"], "live");
    app.delete(&format!("/v1/keys/{second_id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    app.get("/v1/messages", &second).await.expect(200);

    // Revoked through the API: refused by the very next request, the other keys unaffected.
    let revoked = app
        .delete(&format!("/v1/keys/{second_id}"), &app.test_key)
        .await
        .expect(200);
    assert_eq!(revoked.data()["id"], second_id.as_str());
    let revoked_at = revoked.data()["revoked_at"].as_str().unwrap().to_string();
    app.get("/v1/messages", &second)
        .await
        .expect_error(401, "invalid_api_key");
    app.get("/v1/messages", &app.test_key).await.expect(200);
    app.get("/v1/messages", &app.live_key).await.expect(200);
    let keys = listed(&app, &app.test_key).await;
    let entry = keys.iter().find(|k| k["id"] == second_id.as_str()).unwrap();
    assert_eq!(entry["revoked_at"], revoked_at.as_str());

    // Revoking again answers the same record; unknown ids are 404.
    let again = app
        .delete(&format!("/v1/keys/{second_id}"), &app.test_key)
        .await
        .expect(200);
    assert_eq!(again.data()["revoked_at"], revoked_at.as_str());
    for id in [Uuid::now_v7().to_string(), "not-a-uuid".to_string()] {
        app.delete(&format!("/v1/keys/{id}"), &app.test_key)
            .await
            .expect_error(404, "not_found");
    }

    // A key may revoke itself; that request is its last.
    let own_id = keys.iter().find(|k| k["revoked_at"].is_null()).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.delete(&format!("/v1/keys/{own_id}"), &app.test_key)
        .await
        .expect(200);
    app.get("/v1/keys", &app.test_key)
        .await
        .expect_error(401, "invalid_api_key");
    app.get("/v1/messages", &app.live_key).await.expect(200);
}

async fn cli_revokes_a_key_while_the_server_runs(backend: Backend) {
    let app = spawn_app(backend).await;
    let db_env = [("SMSGW_DATABASE__URL", app.database_url.as_str())];
    // Both keys are in the server's cache.
    app.get("/v1/messages", &app.live_key).await.expect(200);
    app.get("/v1/messages", &app.test_key).await.expect(200);

    let output = run_cli(&["key", "revoke", &app.live_key], &db_env).await;
    let revoked_at = Instant::now();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.starts_with("revoked: live key "), "{stdout}");
    assert!(stdout.contains(&app.live_key[..12]), "{stdout}");
    assert!(
        !stdout.contains(&app.live_key),
        "the key is not echoed whole"
    );

    // The running server refuses it within a second.
    loop {
        let reply = app.get("/v1/messages", &app.live_key).await;
        if reply.status == 401 {
            reply.expect_error(401, "invalid_api_key");
            break;
        }
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(
            revoked_at.elapsed() < Duration::from_secs(1),
            "the revoked key still works a second later"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(revoked_at.elapsed() < Duration::from_secs(1));
    app.get("/v1/messages", &app.test_key).await.expect(200);
    let test_keys = app.get("/v1/keys", &app.test_key).await.expect(200);
    let first: ApiKeyOut = typed(&test_keys.data()["keys"][0]);
    assert_eq!(first.revoked_at, None);

    // Again: already revoked, still a success.
    let output = run_cli(&["key", "revoke", &app.live_key], &db_env).await;
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("already revoked: "));

    // A well-formed key nobody issued, and text that is no key: clear errors, exit non-zero.
    let unknown = format!("sk_live_{}", "A".repeat(40));
    let output = run_cli(&["key", "revoke", &unknown], &db_env).await;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("no such API key"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = run_cli(&["key", "revoke", "hello"], &db_env).await;
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("not an API key"));
    app.get("/v1/messages", &app.test_key).await.expect(200);
}

/// At most `quotas.api_keys` (20) unrevoked keys per workspace and mode: the 21st is refused by
/// the API and by the CLI, a revoked key frees its place, and the other mode has its own.
async fn active_keys_are_capped_per_workspace_and_mode(backend: Backend) {
    let app = spawn_app(backend).await;
    let create = |key: String| {
        let app = &app;
        async move { app.request("POST", "/v1/keys", Some(&key), None).await }
    };
    // The workspace's first live key, and 19 more.
    let mut ids = Vec::new();
    for _ in 0..19 {
        let created = create(app.live_key.clone()).await.expect(201);
        ids.push(created.data()["id"].as_str().unwrap().to_string());
    }
    let refused = create(app.live_key.clone())
        .await
        .expect_error(422, "quota_exceeded");
    assert_eq!(refused.data()["quota"], "api_keys");
    assert_eq!(refused.data()["limit"], 20);
    assert_eq!(
        listed(&app, &app.live_key).await.len(),
        20,
        "nothing written"
    );
    let workspace = app.workspace_id.to_string();
    let db_env = [("SMSGW_DATABASE__URL", app.database_url.as_str())];
    let args = ["key", "create", "--workspace", &workspace, "--mode", "live"];
    let cli_create = || run_cli(&args, &db_env);
    let output = cli_create().await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("quota exceeded"), "{stderr}");
    // The test side has its own 20.
    create(app.test_key.clone()).await.expect(201);
    // A revoked key frees its place.
    app.delete(&format!("/v1/keys/{}", ids[0]), &app.live_key)
        .await
        .expect(200);
    let output = cli_create().await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    create(app.live_key.clone())
        .await
        .expect_error(422, "quota_exceeded");
}

backend_tests!(
    active_keys_are_capped_per_workspace_and_mode,
    keys_are_listed_created_and_revoked_at_once,
    cli_revokes_a_key_while_the_server_runs,
);
