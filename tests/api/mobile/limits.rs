//! The device API's limits (docs/api.md "Device API for the SMSGate Android app", Limits): the
//! path and the token are checked before a body is read, bodies are bounded in size and time,
//! inbound posts are held to the bounds of a WebSocket `received` frame, failure texts are cut,
//! failed look-ups spend the address's failed-auth budget, a token holds at most three event
//! streams, and the inbound secrets cannot be computed from the database alone.

use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::helpers::FakePhone;

/// Sends `head` (a request line and headers, without the blank line) and the first bytes of a
/// body on a raw connection, then sends nothing more. Returns the response, read up to its
/// declared length, and how long it took; panics when none came within 5 s.
async fn stalled_request(app: &TestApp, head: &str, first: &[u8]) -> (String, Duration) {
    let address = app.address.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(format!("{head}\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    stream.write_all(first).await.unwrap();
    let started = Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(5), read_response(&mut stream))
        .await
        .expect("an answer within 5 s");
    (response, started.elapsed())
}

/// Reads one response: its head, then as many body bytes as its Content-Length says.
async fn read_response(stream: &mut tokio::net::TcpStream) -> String {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            if buffer.len() >= end + 4 + length {
                return String::from_utf8_lossy(&buffer[..end + 4 + length]).to_string();
            }
        }
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return String::from_utf8_lossy(&buffer).to_string();
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The JSON body of a raw response.
fn body_of(response: &str) -> Value {
    let at = response.find("\r\n\r\n").expect("a response head") + 4;
    serde_json::from_str(&response[at..]).unwrap_or(Value::Null)
}

/// A paired, registered app phone: its client, the inbound URL's path (below the address) and
/// the signing key, as `GET /webhooks` and `GET /settings` hand them out.
async fn inbound_phone(app: &TestApp) -> (AppClient, String, String, String) {
    let (_, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let hooks = phone.call("GET", "/webhooks", None).await.body;
    let url = hooks[0]["url"].as_str().unwrap().to_string();
    let path = url.trim_start_matches(&app.address).to_string();
    let settings = phone.call("GET", "/settings", None).await.body;
    let key = settings["webhooks"]["signing_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(key.len(), 32);
    (phone, path, key, token)
}

/// Posts `body` to the inbound `path`, signed with `key` as the app signs; status and body.
async fn post_signed(app: &TestApp, path: &str, key: &str, body: &str) -> (u16, Value) {
    use hmac::{Hmac, KeyInit, Mac};
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    mac.update(timestamp.as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    let mut response = Client::default()
        .post(format!("{}{path}", app.address))
        .insert_header(("content-type", "application/json"))
        .insert_header(("x-timestamp", timestamp))
        .insert_header(("x-signature", signature))
        .send_body(body.to_string())
        .await
        .expect("post completes");
    let bytes = response.body().await.expect("body");
    (response.status().as_u16(), json_body(&bytes))
}

/// An `sms:received` post of the app with this sender and text.
fn received_post(id: &str, sender: &str, message: &str) -> String {
    json!({
        "id": id, "webhookId": "smsgw-inbound", "event": "sms:received", "deviceId": "d",
        "payload": { "messageId": "m", "message": message, "sender": sender,
                     "recipient": "***0100", "simNumber": 1,
                     "receivedAt": "2026-11-25T10:00:00.000+00:00" }
    })
    .to_string()
}

async fn a_body_is_read_only_after_the_checks_and_within_bounds(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.server.body_timeout = Duration::from_secs(1)).await;
    let (_, path, _, token) = inbound_phone(&app).await;
    let unknown = uuid::Uuid::now_v7();
    // An unknown phone, or a wrong secret: 404 at once, the announced body never read (a body
    // read first would end in 408 after the body timeout).
    for target in [
        format!("/mobile/v1/inbound/{unknown}/x"),
        format!(
            "{}0",
            path.trim_end_matches(|c: char| c.is_ascii_hexdigit())
        ),
    ] {
        let (response, took) = stalled_request(
            &app,
            &format!("POST {target} HTTP/1.1\r\nContent-Length: 200000"),
            b"{",
        )
        .await;
        assert!(response.starts_with("HTTP/1.1 404"), "{target}: {response}");
        assert!(took < Duration::from_millis(800), "{target}: took {took:?}");
    }
    // The right path with a stalled body: 408 once `server.body_timeout` passed.
    let (response, took) = stalled_request(
        &app,
        &format!("POST {path} HTTP/1.1\r\nContent-Length: 1000"),
        b"{",
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(
        took >= Duration::from_millis(900),
        "answered early: {took:?}"
    );
    assert!(body_of(&response)["message"].is_string(), "{response}");
    // Over 16 KiB, declared or sent in chunks: 413.
    let (response, _) = stalled_request(
        &app,
        &format!("POST {path} HTTP/1.1\r\nContent-Length: 16385"),
        b"{",
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    let chunk = format!("{:x}\r\n{}\r\n", 17 * 1024, " ".repeat(17 * 1024));
    let (response, _) = stalled_request(
        &app,
        &format!("POST {path} HTTP/1.1\r\nTransfer-Encoding: chunked"),
        chunk.as_bytes(),
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(
        body_of(&response)["message"]
            .as_str()
            .unwrap()
            .contains("16 KiB"),
        "{response}"
    );
    // The token holder's routes: an unknown token is 401 at once, a stalled body 408.
    for (method, route) in [
        ("PATCH", "message"),
        ("POST", "device"),
        ("PATCH", "device"),
    ] {
        let (response, took) = stalled_request(
            &app,
            &format!(
                "{method} {BASE}/{route} HTTP/1.1\r\nAuthorization: Bearer dt_unknown\r\n\
                 Content-Length: 1000"
            ),
            b"[",
        )
        .await;
        assert!(response.starts_with("HTTP/1.1 401"), "{route}: {response}");
        assert!(took < Duration::from_millis(800), "{route}: took {took:?}");
        let (response, took) = stalled_request(
            &app,
            &format!(
                "{method} {BASE}/{route} HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\
                 Content-Length: 1000"
            ),
            b"[",
        )
        .await;
        assert!(response.starts_with("HTTP/1.1 408"), "{route}: {response}");
        assert!(took >= Duration::from_millis(900), "{route}: took {took:?}");
    }
    assert!(
        app.messages(&app.live_key, "direction=inbound")
            .await
            .is_empty()
    );
}

async fn inbound_posts_are_held_to_the_frame_bounds(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, path, key, _) = inbound_phone(&app).await;
    let refused = [
        (
            "e1",
            "9".repeat(33),
            "hi".to_string(),
            400,
            "payload.sender",
        ),
        (
            "e2",
            "+1415\n5552006".into(),
            "hi".into(),
            400,
            "payload.sender",
        ),
        ("e3", "  ".into(), "hi".into(), 400, "payload.sender"),
        (
            "e4",
            "+14155550177".into(),
            String::new(),
            400,
            "payload.message",
        ),
        (
            "e5",
            "+14155550177".into(),
            "a".repeat(1_601),
            400,
            "payload.message",
        ),
        (
            "e6",
            format!("+1{}", "4".repeat(29_999)),
            "hi".into(),
            413,
            "16 KiB",
        ),
        (
            "e7",
            "+14155550177".into(),
            "a".repeat(30_000),
            413,
            "16 KiB",
        ),
    ];
    for (id, sender, text, status, named) in refused {
        let (got, body) = post_signed(&app, &path, &key, &received_post(id, &sender, &text)).await;
        assert_eq!(got, status, "{id}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{id}: {message}");
    }
    // Another event, with a payload of its own shape or none: answered 200 and ignored.
    for other in [
        json!({"id": "o1", "event": "sms:sent", "payload": {}}),
        json!({"id": "o2", "event": "mms:received"}),
    ] {
        let (got, body) = post_signed(&app, &path, &key, &other.to_string()).await;
        assert_eq!(got, 200, "{other}: {body}");
    }
    // A health event is read (docs/api.md, "Phone health"): without its payload, refused.
    let ping = json!({"id": "o3", "event": "system:ping"}).to_string();
    let (got, body) = post_signed(&app, &path, &key, &ping).await;
    assert_eq!(got, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("payload"),
        "{body}"
    );
    assert!(
        app.messages(&app.live_key, "direction=inbound")
            .await
            .is_empty(),
        "nothing refused or ignored is stored"
    );
    // At the bounds: stored.
    let post = received_post("ok", &"9".repeat(32), &"a".repeat(1_600));
    assert_eq!(post_signed(&app, &path, &key, &post).await.0, 200);
    let stored = app.messages(&app.live_key, "direction=inbound").await;
    assert_eq!(stored.len(), 1, "{stored:?}");
}

async fn a_reported_failure_text_is_cut_to_512_characters(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.messages.max_send_attempts = 1).await;
    let (phone, _events) = online_app(&app).await;
    let id = app.send_live("will fail").await;
    assert_eq!(fetch_n(&phone, 1).await, [id.as_str()]);
    phone
        .report(&id, "Failed", Some(&"X".repeat(200_000)))
        .await;
    let failed = app.wait_for_status(&app.live_key, &id, "failed").await;
    let reason = failed["failure_reason"].as_str().unwrap();
    assert_eq!(reason, "X".repeat(512));
}

/// Each kind of failed look-up, `attempt` (answering `failed` while the budget lasts), spends
/// the address's budget: 429 with Retry-After once it is spent.
async fn spends_the_budget(
    backend: Backend,
    failed: u16,
    attempt: impl AsyncFn(&TestApp) -> (u16, Option<String>),
) {
    let app = spawn_app_with(backend, |s| s.limits.failed_auth_per_second = 1).await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let (status, retry_after) = attempt(&app).await;
        if status == 429 {
            let retry_after: u64 = retry_after.expect("Retry-After").parse().unwrap();
            assert!(retry_after >= 1);
        }
        statuses.push(status);
    }
    assert_eq!(statuses[0], failed, "{statuses:?}");
    assert_eq!(statuses[5], 429, "{statuses:?}");
}

async fn unknown_tokens_and_inbound_secrets_spend_the_failed_auth_budget(backend: Backend) {
    // The device API with a token nobody issued.
    spends_the_budget(backend, 401, async |app: &TestApp| {
        let token = format!("dt_{}", uuid::Uuid::now_v7().simple());
        let response = Client::default()
            .get(format!("{}{BASE}/device", app.address))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        (response.status().as_u16(), retry_after)
    })
    .await;
    // The phone WebSocket with a token nobody issued.
    spends_the_budget(backend, 401, async |app: &TestApp| {
        let token = format!("dt_{}", uuid::Uuid::now_v7().simple());
        match FakePhone::connect(&app.ws_url(), &token).await {
            Ok(_) => (101, None),
            // The status is all the WebSocket client reports; Retry-After is checked above.
            Err(status) => (status, (status == 429).then(|| "1".to_string())),
        }
    })
    .await;
    // Inbound posts to a phone that does not exist or with a wrong secret.
    spends_the_budget(backend, 404, async |app: &TestApp| {
        let unknown = uuid::Uuid::now_v7();
        let mut response = Client::default()
            .post(format!("{}/mobile/v1/inbound/{unknown}/x", app.address))
            .send_body("{}")
            .await
            .unwrap();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let status = response.status().as_u16();
        let body = json_body(&response.body().await.unwrap());
        assert!(body["message"].is_string(), "{body}");
        (status, retry_after)
    })
    .await;
}

async fn a_token_holds_at_most_three_event_streams(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone, mut oldest) = online_app(&app).await;
    let mut newer = vec![
        phone.events().await,
        phone.events().await,
        phone.events().await,
    ];
    // The fourth ends the first: told why, then closed.
    let started = Instant::now();
    let mut told = Vec::new();
    while let Some(frame) = oldest.next_within(Duration::from_secs(10)).await {
        told.push(frame);
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the oldest stream is still open: {told:?}"
    );
    assert!(
        told.contains(&Sse::Comment(" replaced by a newer event stream".into())),
        "{told:?}"
    );
    // The three newest still hear every event.
    app.send_live("to every open stream").await;
    for stream in &mut newer {
        let (name, _) = stream
            .event_within(Duration::from_secs(2))
            .await
            .expect("MessageEnqueued on each open stream");
        assert_eq!(name, "MessageEnqueued");
    }
}

async fn inbound_secrets_need_the_servers_secrets_key(backend: Backend) {
    use hmac::{Hmac, KeyInit, Mac};
    let app = spawn_app(backend).await;
    let (_, path, key, token) = inbound_phone(&app).await;
    let url_secret = path.rsplit('/').next().unwrap().to_string();
    // What a copy of the database gives: the token hash, and the derivation once used.
    let token_hash = smsgw::domain::keys::hash_secret(&token);
    let from_the_row = |purpose: &str| {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(token_hash.as_bytes()).unwrap();
        mac.update(purpose.as_bytes());
        hex::encode(mac.finalize().into_bytes())[..32].to_string()
    };
    assert_ne!(from_the_row("smsgw device API inbound path"), url_secret);
    assert_ne!(from_the_row("smsgw device API inbound signing key"), key);
    // A post forged with them is refused; the served URL and key work.
    let forged = format!(
        "{}/{}",
        path.rsplit_once('/').unwrap().0,
        from_the_row("smsgw device API inbound path")
    );
    let post = received_post("f1", "+14155550177", "STOP");
    assert_eq!(post_signed(&app, &forged, &key, &post).await.0, 404);
    let forged_key = from_the_row("smsgw device API inbound signing key");
    assert_eq!(post_signed(&app, &path, &forged_key, &post).await.0, 401);
    assert!(
        app.messages(&app.live_key, "direction=inbound")
            .await
            .is_empty()
    );
    assert_eq!(post_signed(&app, &path, &key, &post).await.0, 200);
    assert_eq!(
        app.messages(&app.live_key, "direction=inbound").await.len(),
        1
    );
}

backend_tests!(
    a_body_is_read_only_after_the_checks_and_within_bounds,
    inbound_posts_are_held_to_the_frame_bounds,
    a_reported_failure_text_is_cut_to_512_characters,
    unknown_tokens_and_inbound_secrets_spend_the_failed_auth_budget,
    a_token_holds_at_most_three_event_streams,
    inbound_secrets_need_the_servers_secrets_key,
);
