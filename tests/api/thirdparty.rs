//! The SMSGate-compatible client API (`/3rdparty/v1`, docs/compat.md) through HTTP, as the
//! official clients call it: Basic or Bearer with an smsgw API key, `{message}` errors,
//! `Content-Type: application/json` exactly.

use serde_json::Value;

use crate::backend_tests;
use crate::helpers::{Backend, Reply, basic, bearer, spawn_app};

/// Asserts an upstream-style error: the status, `Content-Type: application/json` exactly and
/// a non-empty `message`.
#[track_caller]
fn expect_client_error(reply: &Reply, status: u16) {
    assert_eq!(reply.status, status, "body: {}", reply.body);
    assert_eq!(
        reply.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    let message = reply.body["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "body: {}", reply.body);
}

async fn health_answers_without_credentials_and_ignores_sent_ones(backend: Backend) {
    let app = spawn_app(backend).await;
    let wrong = bearer("sk_live_not_a_key");
    for path in [
        "/health",
        "/health/live",
        "/health/ready",
        "/health/startup",
    ] {
        for auth in [None, Some(wrong.as_str())] {
            let reply = app.client_api("GET", path, auth, None).await;
            assert_eq!(reply.status, 200, "{path}: {}", reply.body);
            assert_eq!(reply.body["status"], "pass", "{path}");
            assert!(reply.body["checks"].is_object(), "{path}");
            assert_eq!(
                reply.headers.get("content-type").map(String::as_str),
                Some("application/json")
            );
        }
    }
    let ready = app.client_api("GET", "/health/ready", None, None).await;
    assert_eq!(ready.body["checks"]["db:ping"]["status"], "pass");
    // The self-hosted path of the upstream server serves the same.
    let mut under_api = app
        .client
        .get(format!("{}/api/3rdparty/v1/health", app.address))
        .send()
        .await
        .expect("health answers");
    assert_eq!(under_api.status().as_u16(), 200);
    let body: Value = under_api.json().await.expect("JSON");
    assert_eq!(body["status"], "pass");
}

async fn credentials_are_checked_like_on_v1(backend: Backend) {
    let app = spawn_app(backend).await;
    // No header, an unknown key, a revoked-looking one, a scheme we do not read.
    let unknown = bearer("sk_live_0000000000000000000000000000000000000000");
    let no_key = basic("login", "");
    for auth in [
        None,
        Some(unknown.as_str()),
        Some(no_key.as_str()),
        Some("Token abc"),
        Some("Basic !!!"),
    ] {
        let reply = app.client_api("GET", "/devices", auth, None).await;
        expect_client_error(&reply, 401);
    }
    // Bearer, Basic with the key as password (any login), Basic with the key as login.
    for auth in [
        bearer(&app.live_key),
        basic("anything", &app.live_key),
        basic(&app.live_key, ""),
    ] {
        let reply = app.client_api("GET", "/devices", Some(&auth), None).await;
        assert_eq!(reply.status, 200, "{auth}: {}", reply.body);
        assert_eq!(reply.body, Value::Array(vec![]));
    }
    // Unknown routes under the scope answer 404 in the same shape.
    let reply = app
        .client_api("GET", "/nothing-here", Some(&bearer(&app.live_key)), None)
        .await;
    expect_client_error(&reply, 404);
}

backend_tests!(
    health_answers_without_credentials_and_ignores_sent_ones,
    credentials_are_checked_like_on_v1,
);
