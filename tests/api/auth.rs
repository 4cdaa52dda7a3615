//! Authentication, modes and the envelope of every error (docs/api.md, Authentication and
//! modes; Errors).

use serde_json::json;

use crate::backend_tests;
use crate::helpers::{Backend, RECIPIENT, SENDER, run_cli, send_body, spawn_app, spawn_app_with};

async fn missing_and_invalid_keys_are_401(backend: Backend) {
    let app = spawn_app(backend).await;
    app.request("GET", "/v1/messages", None, None)
        .await
        .expect_error(401, "missing_api_key");
    app.request("GET", "/v1/messages", Some("sk_test_nope"), None)
        .await
        .expect_error(401, "invalid_api_key");
    let unknown = format!("sk_live_{}", "a".repeat(40));
    app.request("GET", "/v1/messages", Some(&unknown), None)
        .await
        .expect_error(401, "invalid_api_key");
    // Auth comes before the body: a bad body without a key is still a 401.
    app.raw(
        "POST",
        "/v1/messages/send",
        None,
        "application/json",
        b"{nope".to_vec(),
    )
    .await
    .expect_error(401, "missing_api_key");
}

async fn unknown_routes_and_methods_use_the_envelope(backend: Backend) {
    let app = spawn_app(backend).await;
    app.get("/v1/nothing-here", &app.test_key)
        .await
        .expect_error(404, "not_found");
    app.request("GET", "/nothing", None, None)
        .await
        .expect_error(404, "not_found");
    app.request(
        "PUT",
        "/v1/messages/send",
        Some(&app.test_key),
        Some(json!({})),
    )
    .await
    .expect_error(405, "method_not_allowed");
    app.get("/v1/messages/not-a-uuid", &app.test_key)
        .await
        .expect_error(404, "not_found");
}

async fn malformed_bodies_are_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = Some(app.test_key.as_str());
    app.raw(
        "POST",
        "/v1/messages/send",
        key,
        "application/json",
        b"{not json".to_vec(),
    )
    .await
    .expect_error(400, "invalid_json");
    // A JSON body is read as JSON whatever its content type (curl's `-d` sends a form type);
    // here it lacks the required fields.
    let plain = app
        .raw(
            "POST",
            "/v1/messages/send",
            key,
            "application/x-www-form-urlencoded",
            b"{}".to_vec(),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(plain.data()["field"], "from_number");
    // Text that is not JSON is invalid_json, with no field to name.
    let not_json = app
        .raw(
            "POST",
            "/v1/messages/send",
            key,
            "text/plain",
            b"{bad".to_vec(),
        )
        .await
        .expect_error(400, "invalid_json");
    assert!(not_json.data().get("field").is_none(), "{}", not_json.body);
    let wrong_type = app
        .send(
            &app.test_key,
            json!({ "from_number": SENDER, "to_number": 5, "content": "x" }),
        )
        .await
        .expect_error(400, "invalid_json");
    assert_eq!(wrong_type.data()["field"], "to_number");
    let huge = vec![b' '; 2 * 1024 * 1024 + 1];
    app.raw("POST", "/v1/messages/send", key, "application/json", huge)
        .await
        .expect_error(413, "payload_too_large");
    let missing = app
        .send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "x" }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(missing.data()["field"], "to_number");
}

async fn modes_and_workspaces_are_isolated(backend: Backend) {
    let app = spawn_app(backend).await;
    let sent = app.send_test(RECIPIENT, "isolated").await.expect(202);
    let id = sent.data()["id"].as_str().unwrap().to_string();
    app.get(&format!("/v1/messages/{id}"), &app.test_key)
        .await
        .expect(200);
    // The live key of the same workspace does not see test-mode messages.
    app.get(&format!("/v1/messages/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    let live_list = app.get("/v1/messages", &app.live_key).await.expect(200);
    assert_eq!(live_list.data()["messages"].as_array().unwrap().len(), 0);

    // A second workspace created by the CLI while the server runs works at once, and sees nothing.
    let other = crate::helpers::create_workspace_with_cli(&app, "other").await;
    let (other_test_key, workspace_id) = (other.test_key, other.id);
    let db_env = [("SMSGW_DATABASE__URL", app.database_url.as_str())];
    app.get(&format!("/v1/messages/{id}"), &other_test_key)
        .await
        .expect_error(404, "not_found");
    app.send(
        &other_test_key,
        send_body(SENDER, RECIPIENT, "from the other workspace"),
    )
    .await
    .expect(202);

    // `smsgw key create` issues one more working key.
    let output = run_cli(
        &[
            "key",
            "create",
            "--workspace",
            &workspace_id,
            "--mode",
            "test",
        ],
        &db_env,
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = String::from_utf8(output.stdout).unwrap();
    let key = line
        .trim()
        .strip_prefix("test key: ")
        .expect("key line")
        .to_string();
    assert!(key.starts_with("sk_test_"));
    let list = app.get("/v1/messages", &key).await.expect(200);
    assert_eq!(list.data()["messages"].as_array().unwrap().len(), 1);
}

async fn rate_limit_answers_429_with_retry_after(backend: Backend) {
    let app = crate::helpers::spawn_app_with(backend, |s| s.limits.api_per_second = 1).await;
    let mut limited = None;
    for _ in 0..10 {
        let reply = app.get("/v1/messages", &app.test_key).await;
        if reply.status == 429 {
            limited = Some(reply);
            break;
        }
    }
    let reply = limited
        .expect("the per-key limit answers 429")
        .expect_error(429, "rate_limited");
    assert!(reply.headers.contains_key("retry-after"));
}

backend_tests!(
    missing_and_invalid_keys_are_401,
    unknown_routes_and_methods_use_the_envelope,
    malformed_bodies_are_refused,
    modes_and_workspaces_are_isolated,
    rate_limit_answers_429_with_retry_after,
);

async fn protocol_errors_are_enveloped_too(backend: Backend) {
    let app = spawn_app(backend).await;
    // A plain GET on the WebSocket endpoint with a valid token is not an upgrade.
    let (_, token) = app.pair_phone(SENDER).await;
    let mut res = app
        .client
        .get(format!("{}/v1/phones/connect", app.address))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 400);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["status"], "error");
    assert_eq!(body["error_code"], "bad_request");
}

backend_tests!(protocol_errors_are_enveloped_too);

async fn internal_errors_leak_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let sent = app.send_test(RECIPIENT, "x").await.expect(202);
    let id = sent.data()["id"].as_str().unwrap().to_string();
    app.wait_for_status(&app.test_key, &id, "delivered").await;
    // Break the storage behind the server's back: the next read fails inside the database.
    let db = sea_orm::Database::connect(&app.database_url).await.unwrap();
    use sea_orm::ConnectionTrait;
    db.execute_unprepared("DROP TABLE message_events")
        .await
        .unwrap();
    let reply = app
        .get(&format!("/v1/messages/{id}"), &app.test_key)
        .await
        .expect_error(500, "internal_error");
    assert_eq!(reply.body["message"], "internal error");
    assert_eq!(reply.data(), &json!({}));
    assert!(
        !reply.body.to_string().contains("message_events"),
        "no SQL details in the body"
    );
}

backend_tests!(internal_errors_leak_nothing);

/// On a dual-stack `[::]` listener IPv4 clients arrive as IPv4-mapped addresses; each is its
/// own client of the failed-auth budget: one spending it leaves another unthrottled.
async fn each_ipv4_client_of_a_dual_stack_bind_has_its_own_failed_auth_budget(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.server.bind = "[::]:0".into();
        s.limits.failed_auth_per_second = 1;
    })
    .await;
    let port = app.address.rsplit(':').next().unwrap().to_string();
    let from = |local: &str| {
        let connector = awc::Connector::new().local_address(local.parse().unwrap());
        awc::Client::builder().connector(connector).finish()
    };
    let (guesser, other) = (from("127.0.0.2"), from("127.0.0.1"));
    let status = |client: &awc::Client, key: String| {
        let request = client
            .get(format!("http://127.0.0.1:{port}/v1/phones"))
            .insert_header(("x-api-key", key));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    // Two fresh keys, never used yet: their first use asks the database.
    let fresh = || async {
        let created = app
            .request("POST", "/v1/keys", Some(&app.live_key), None)
            .await
            .expect(201);
        created.data()["key"].as_str().unwrap().to_string()
    };
    let (for_guesser, for_other) = (fresh().await, fresh().await);

    let unknown = |n: u32| format!("sk_live_{}{n:08}", "Q".repeat(32));
    let mut answers = Vec::new();
    for n in 0..4 {
        answers.push(status(&guesser, unknown(n)).await);
    }
    assert_eq!(answers, [401, 401, 429, 429]);
    // The guesser's budget is spent, even for a valid key it has not used yet...
    assert_eq!(status(&guesser, for_guesser).await, 429);
    // ...and the other IPv4 client's is whole.
    assert_eq!(status(&other, for_other).await, 200);
}

backend_tests!(each_ipv4_client_of_a_dual_stack_bind_has_its_own_failed_auth_budget);
