//! Hardening of the HTTP and WebSocket edges: slow bodies, trailing garbage, request ids,
//! failed-auth budgets, inbound frame bounds, invalid UTF-8, webhook URL rules, /docs headers.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::backend_tests;
use crate::helpers::{Backend, RECIPIENT, SENDER, TestApp, send_body, spawn_app, spawn_app_with};

/// Opens a raw connection to the app.
async fn connect(app: &TestApp) -> tokio::net::TcpStream {
    let address = app.address.trim_start_matches("http://");
    tokio::net::TcpStream::connect(address).await.unwrap()
}

/// A body that trickles in (one byte every 200 ms of a declared 1,000,000) is answered 408
/// `request_timeout` once `server.body_timeout` has passed, and the connection is closed.
async fn a_slow_body_is_cut_off_with_408(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.server.body_timeout = Duration::from_secs(1)).await;
    let stream = connect(&app).await;
    let (mut read, mut write) = stream.into_split();
    let head = format!(
        "POST /v1/messages/send HTTP/1.1\r\nHost: localhost\r\nx-api-key: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{",
        app.test_key
    );
    write.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    // The trickle goes on until the server closes the connection (or 20 s, far past the test).
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(b" ").await.is_err() {
                break;
            }
        }
    });
    let mut response = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), read.read_to_end(&mut response))
        .await
        .expect("the connection is closed within the deadline and a margin");
    // A reset after the answer is a close too.
    let _ = closed;
    let elapsed = started.elapsed();
    trickle.abort();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 408"), "response: {text}");
    assert!(
        elapsed >= Duration::from_millis(900),
        "answered before the deadline: {elapsed:?}"
    );
    let body_at = text.find("\r\n\r\n").expect("a response head") + 4;
    let body: serde_json::Value = serde_json::from_str(&text[body_at..]).expect("a JSON body");
    assert_eq!(body["status"], "error");
    assert_eq!(body["error_code"], "request_timeout");
    assert!(body["data"].is_object());
    // Nothing was sent.
    let listed = app.get("/v1/messages", &app.test_key).await.expect(200);
    assert_eq!(listed.data()["messages"], json!([]));
}

/// Only whitespace may follow the JSON value of a body.
async fn trailing_garbage_after_a_json_body_is_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = send_body(SENDER, RECIPIENT, "hello").to_string();
    let reply = app
        .raw(
            "POST",
            "/v1/messages/send",
            Some(&app.test_key),
            "application/json",
            format!("{body} xx").into_bytes(),
        )
        .await;
    assert_eq!(reply.status, 400, "body: {}", reply.body);
    assert_eq!(reply.body["error_code"], "invalid_json");
    assert_eq!(reply.body["status"], "error");
    let listed = app.get("/v1/messages", &app.test_key).await.expect(200);
    assert_eq!(listed.data()["messages"], json!([]), "nothing was sent");
    let reply = app
        .raw(
            "POST",
            "/v1/messages/send",
            Some(&app.test_key),
            "application/json",
            format!("{body} \r\n\t ").into_bytes(),
        )
        .await;
    assert_eq!(reply.status, 202, "body: {}", reply.body);
}

backend_tests!(
    a_slow_body_is_cut_off_with_408,
    trailing_garbage_after_a_json_body_is_refused,
);
