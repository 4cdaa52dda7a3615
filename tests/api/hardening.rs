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
    slow_body_is_cut_off(backend, false).await;
}

/// The same for a chunked body (one 1-byte chunk every 200 ms), which actix-http would
/// otherwise go on reading after the answer.
async fn a_slow_chunked_body_is_cut_off_with_408(backend: Backend) {
    slow_body_is_cut_off(backend, true).await;
}

async fn slow_body_is_cut_off(backend: Backend, chunked: bool) {
    let app = spawn_app_with(backend, |s| s.server.body_timeout = Duration::from_secs(1)).await;
    let stream = connect(&app).await;
    let (mut read, mut write) = stream.into_split();
    let (framing, first, each): (&str, &[u8], &[u8]) = if chunked {
        ("Transfer-Encoding: chunked", b"1\r\n{\r\n", b"1\r\n \r\n")
    } else {
        ("Content-Length: 1000000", b"{", b" ")
    };
    let head = format!(
        "POST /v1/messages/send HTTP/1.1\r\nHost: localhost\r\nx-api-key: {}\r\n\
         Content-Type: application/json\r\n{framing}\r\n\r\n",
        app.test_key
    );
    write.write_all(head.as_bytes()).await.unwrap();
    write.write_all(first).await.unwrap();
    let started = Instant::now();
    // The trickle goes on until the server closes the connection (or 20 s, far past the test).
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(each).await.is_err() {
                break;
            }
        }
    });
    let mut response = Vec::new();
    // Read until the server closes (a reset after the answer counts as closed too).
    let _ = tokio::time::timeout(Duration::from_secs(5), read.read_to_end(&mut response))
        .await
        .expect("the connection is closed within the deadline and a margin");
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
    let send_text = |text: String| {
        app.raw(
            "POST",
            "/v1/messages/send",
            Some(&app.test_key),
            "application/json",
            text.into_bytes(),
        )
    };
    let reply = send_text(format!("{body} xx")).await;
    assert_eq!(reply.status, 400, "body: {}", reply.body);
    assert_eq!(reply.body["error_code"], "invalid_json");
    assert_eq!(reply.body["status"], "error");
    let listed = app.get("/v1/messages", &app.test_key).await.expect(200);
    assert_eq!(listed.data()["messages"], json!([]), "nothing was sent");
    let reply = send_text(format!("{body} \r\n\t ")).await;
    assert_eq!(reply.status, 202, "body: {}", reply.body);
}

/// Look-ups of unknown keys spend a per-address budget (429 with Retry-After once spent, and
/// no look-up until it refills); a key already known as unknown is answered 401 from memory,
/// and a known key keeps working.
async fn unknown_keys_spend_a_per_address_budget(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.limits.failed_auth_per_second = 1).await;
    app.get("/v1/phones", &app.live_key).await.expect(200);
    let unknown = |n: u32| format!("sk_live_{}{n:08}", "Z".repeat(32));
    // The burst is two failures.
    for n in [1, 2] {
        app.get("/v1/phones", &unknown(n))
            .await
            .expect_error(401, "invalid_api_key");
    }
    for n in [3, 4] {
        let refused = app
            .get("/v1/phones", &unknown(n))
            .await
            .expect_error(429, "rate_limited");
        let retry_after: u64 = refused.headers["retry-after"].parse().unwrap();
        assert!(retry_after >= 1);
    }
    // Remembered as unknown: refused from memory, so 401, not 429.
    app.get("/v1/phones", &unknown(1))
        .await
        .expect_error(401, "invalid_api_key");
    // A malformed key costs no look-up either.
    app.get("/v1/phones", "sk_live_short")
        .await
        .expect_error(401, "invalid_api_key");
    // A known key is served.
    app.get("/v1/phones", &app.live_key).await.expect(200);
}

/// A client's `x-request-id` is used (and echoed) only when it is 1–64 characters of
/// `[A-Za-z0-9._:-]`; anything else is replaced by a generated id.
async fn a_request_id_is_echoed_only_when_plain(backend: Backend) {
    let app = spawn_app(backend).await;
    let echoed = |id: &str| {
        let request = app
            .client
            .get(format!("{}/health", app.address))
            .insert_header(("x-request-id", id.to_string()));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200);
            response
                .headers()
                .get("x-request-id")
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        }
    };
    for plain in ["abc-123", "Trace_1.2:3", &"a".repeat(64)] {
        assert_eq!(echoed(plain).await, plain);
    }
    for forged in [
        "abc\" level=error msg=\"x",
        "a b",
        "a=b",
        &"a".repeat(65),
        "caf\u{e9}",
    ] {
        let id = echoed(forged).await;
        assert_ne!(id, forged);
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
    }
}

/// `/docs` carries the portal's security headers; its inline style is allowed by hash.
async fn docs_page_has_the_security_headers(backend: Backend) {
    let app = spawn_app(backend).await;
    let page = app.fetch("/docs", &[]).await;
    assert_eq!(page.status, 200);
    let header = |name: &str| {
        let value = page.header(name);
        assert!(!value.is_empty(), "{name} missing");
        value
    };
    let csp = header("content-security-policy");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("style-src 'sha256-"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(header("x-content-type-options"), "nosniff");
    assert_eq!(header("referrer-policy"), "no-referrer");
    assert_eq!(header("x-frame-options"), "DENY");
}

/// IPv4-translated IPv6 targets (`::ffff:0:0:0/96`) and URLs the HTTP client cannot use (a
/// non-ASCII path) are refused at creation like any bad URL.
async fn unusable_webhook_urls_are_refused_at_creation(backend: Backend) {
    let app = spawn_app(backend).await;
    for url in [
        "https://[::ffff:0:7f00:1]/hook",
        "https://[::ffff:0:808:808]/hook",
        "https://example.com/caf\u{e9}",
        "https://example.com/a%zz",
    ] {
        let reply = app
            .post(
                "/v1/webhooks",
                &app.live_key,
                json!({ "url": url, "events": ["message.sent"] }),
            )
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], "url", "{url}");
    }
    let listed = app.get("/v1/webhooks", &app.live_key).await.expect(200);
    assert_eq!(listed.data()["webhooks"], json!([]));
}

/// A `received` frame with an overlong or empty sender, overlong text or an overlong ref is
/// answered with an `error` frame and stores nothing; the session stays open.
async fn inbound_frames_are_bounded(backend: Backend) {
    use smsgw::domain::protocol::{PhoneFrame, ServerFrame};
    let app = spawn_app(backend).await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    let refused = [
        ("r1", "9".repeat(33), "hello".to_string()),
        ("r2", " ".into(), "hello".into()),
        ("r3", "+14155550177".into(), "a".repeat(1_601)),
        ("r4", "+14155550177".into(), "\u{1F600}".repeat(801)),
        ("r5", "+14155550177".into(), String::new()),
        ("r6", "+1415\n5552006".into(), "hello".into()),
    ];
    for (reference, from, content) in refused {
        let answer = phone
            .report(PhoneFrame::Received {
                reference: reference.into(),
                from,
                content,
                received_at: chrono::Utc::now(),
            })
            .await;
        match answer {
            Some(ServerFrame::Error { code, message }) => {
                assert_eq!(code, "bad_frame");
                assert!(message.contains("refused"), "{message}");
            }
            other => panic!("{reference}: expected an error frame, got {other:?}"),
        }
    }
    let long_ref = "r".repeat(129);
    let answer = phone
        .report(PhoneFrame::Received {
            reference: long_ref,
            from: "+14155550177".into(),
            content: "hello".into(),
            received_at: chrono::Utc::now(),
        })
        .await;
    assert!(
        matches!(answer, Some(ServerFrame::Error { .. })),
        "{answer:?}"
    );
    // At the bounds: accepted and stored.
    phone
        .receive("ok1", &"9".repeat(32), &"a".repeat(1_600))
        .await;
    let listed = app
        .get("/v1/messages?direction=inbound", &app.live_key)
        .await
        .expect(200);
    let messages = listed.data()["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
}

/// A `failed` report's text is cut to 512 characters (the report still counts), as for the
/// device API.
async fn a_failure_text_is_cut_on_the_websocket(backend: Backend) {
    use smsgw::domain::protocol::PhoneFrame;
    let app = spawn_app_with(backend, |s| s.messages.max_send_attempts = 1).await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    let id = app.send_live("will fail").await;
    let (message_id, ..) = phone.expect_send().await;
    phone
        .report_acked(PhoneFrame::Failed {
            message_id,
            // 40 KB: within the 64 KiB a WebSocket message may have.
            error: "é".repeat(20_000),
            reference: Some("f1".into()),
        })
        .await;
    let failed = app.wait_for_status(&app.live_key, &id, "failed").await;
    assert_eq!(failed["failure_reason"], "é".repeat(512));
}

/// A text frame that is not UTF-8 closes the session with 1007 (RFC 6455 §8.1).
async fn invalid_utf8_text_closes_with_1007(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    phone
        .send_raw_text_frame(b"{\"type\":\"heartbeat\xff\xfe\"}")
        .await;
    assert_eq!(phone.close_code().await, Some(1007));
}

backend_tests!(
    a_slow_body_is_cut_off_with_408,
    a_slow_chunked_body_is_cut_off_with_408,
    trailing_garbage_after_a_json_body_is_refused,
    unknown_keys_spend_a_per_address_budget,
    a_request_id_is_echoed_only_when_plain,
    docs_page_has_the_security_headers,
    unusable_webhook_urls_are_refused_at_creation,
    inbound_frames_are_bounded,
    a_failure_text_is_cut_on_the_websocket,
    invalid_utf8_text_closes_with_1007,
);
