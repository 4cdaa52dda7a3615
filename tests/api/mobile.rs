//! The device API compatible with the SMSGate Android app (docs/api.md "Device API for the
//! SMSGate Android app"): registration, the event stream, fetching and reporting messages, and
//! inbound SMS posted as signed webhooks. `AppClient` behaves as the app does (read from its
//! source): Bearer token, camelCase JSON, one event stream per service start.

use std::time::Duration;

use awc::Client;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::{
    Backend, RECIPIENT, SENDER, TestApp, WebhookReceiver, json_body, poll, spawn_app,
    spawn_app_with, spawn_paced, timeline,
};

/// The mount the app's users copy from the upstream docs; `/mobile/v1` is the other.
const BASE: &str = "/api/mobile/v1";

/// A client that speaks to the device API the way the app does.
struct AppClient {
    base: String,
    token: String,
    client: Client,
}

/// An answer of the device API.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    body: Value,
}

impl AppClient {
    fn new(app: &TestApp, base: &str, token: &str) -> AppClient {
        AppClient {
            base: format!("{}{base}", app.address),
            token: token.to_string(),
            client: Client::builder().timeout(Duration::from_secs(30)).finish(),
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Answer {
        let method = awc::http::Method::from_bytes(method.as_bytes()).unwrap();
        let req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        let mut response = match body {
            Some(body) => req.send_json(&body).await,
            None => req.send().await,
        }
        .expect("request completes");
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = response.body().await.expect("body");
        Answer {
            status: response.status().as_u16(),
            content_type,
            body: json_body(&bytes),
        }
    }

    /// `POST /device` with the private token, as the app's first start does.
    async fn register(&self) -> Answer {
        self.call(
            "POST",
            "/device",
            Some(json!({
                "name": "Google/sdk_gphone64",
                "simCards": [{ "slotIndex": 0, "simNumber": 1, "phoneNumber": "***0100",
                               "carrierName": "T-Mobile", "iccid": "***1234" }]
            })),
        )
        .await
    }

    /// The messages `GET /message` hands out now.
    async fn fetch(&self, order: &str) -> Vec<Value> {
        let answer = self
            .call("GET", &format!("/message?order={order}"), None)
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.content_type, "application/json");
        answer.body.as_array().expect("an array").clone()
    }

    /// `PATCH /message` with one item, as the app's state worker sends it.
    async fn report(&self, id: &str, state: &str, error: Option<&str>) {
        let mut recipient = json!({ "phoneNumber": RECIPIENT, "state": state });
        if let Some(error) = error {
            recipient["error"] = json!(error);
        }
        let body = json!([{
            "id": id,
            "state": state,
            "recipients": [recipient],
            "states": { state: "2026-11-25T10:00:00.000+00:00" }
        }]);
        let answer = self.call("PATCH", "/message", Some(body)).await;
        assert_eq!(answer.status, 204, "{answer:?}");
    }

    /// Opens `GET /events`.
    async fn events(&self) -> EventStream {
        let response = self
            .client
            .get(format!("{}/events", self.base))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(3600))
            .send()
            .await
            .expect("event stream opens");
        assert_eq!(response.status().as_u16(), 200);
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default()
        };
        assert_eq!(header("content-type"), "text/event-stream");
        assert_eq!(header("x-accel-buffering"), "no");
        EventStream {
            body: Box::pin(response),
            buffer: String::new(),
        }
    }
}

type Body = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<bytes::Bytes, awc::error::PayloadError>>>,
>;

/// A server-sent event stream, read frame by frame.
struct EventStream {
    body: Body,
    buffer: String,
}

/// One frame of the stream: a named event with its data, or a comment.
#[derive(Debug, Clone, PartialEq)]
enum Sse {
    Event { name: String, data: String },
    Comment(String),
}

impl EventStream {
    /// The next frame within `within`; None when the stream ended or nothing came.
    async fn next_within(&mut self, within: Duration) -> Option<Sse> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let mut name = None;
                let mut data = None;
                for line in frame.lines() {
                    if let Some(text) = line.strip_prefix(':') {
                        return Some(Sse::Comment(text.to_string()));
                    }
                    if let Some(v) = line.strip_prefix("event: ") {
                        name = Some(v.to_string());
                    }
                    if let Some(v) = line.strip_prefix("data: ") {
                        data = Some(v.to_string());
                    }
                }
                return Some(Sse::Event {
                    name: name.expect("every event is named"),
                    data: data.expect("every event has a data line"),
                });
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()??
                .ok()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The next named event within `within`, skipping comments.
    async fn event_within(&mut self, within: Duration) -> Option<(String, String)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(left).await? {
                Sse::Event { name, data } => return Some((name, data)),
                Sse::Comment(_) => {}
            }
        }
    }
}

async fn status_of(app: &TestApp, id: &str) -> String {
    app.get(&format!("/v1/messages/{id}"), &app.live_key)
        .await
        .expect(200)
        .data()["status"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A timestamp with exactly three fractional digits and an offset.
fn has_millis(at: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(at).is_ok()
        && at
            .split('.')
            .nth(1)
            .is_some_and(|f| f.len() >= 4 && f[..3].chars().all(|c| c.is_ascii_digit()))
        && !at.split('.').nth(1).unwrap()[3..].starts_with(|c: char| c.is_ascii_digit())
}

async fn registration_binds_the_app_to_its_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    for base in ["/mobile/v1", BASE] {
        let phone = AppClient::new(&app, base, &token);
        let registered = phone.register().await;
        assert_eq!(registered.status, 201, "{registered:?}");
        assert_eq!(registered.content_type, "application/json");
        assert_eq!(registered.body["id"], phone_id.as_str());
        assert_eq!(registered.body["login"], app.workspace_id.to_string());
        let handed = registered.body["token"].as_str().unwrap().to_string();
        // The token handed out is the one every later call carries.
        let later = AppClient::new(&app, base, &handed);
        let patched = later
            .call(
                "PATCH",
                "/device",
                Some(json!({ "id": phone_id, "pushToken": null, "simCards": [] })),
            )
            .await;
        assert_eq!(patched.status, 204, "{patched:?}");
        let device = later.call("GET", "/device", None).await;
        assert_eq!(device.status, 200, "{device:?}");
        assert_eq!(device.body["device"]["id"], phone_id.as_str());
        for at in ["createdAt", "updatedAt"] {
            let at = device.body["device"][at].as_str().unwrap();
            assert!(has_millis(at), "{at}");
        }
        let settings = later.call("GET", "/settings", None).await;
        assert_eq!(settings.status, 200);
        assert_eq!(settings.content_type, "application/json");
        assert!(settings.body.is_object(), "{settings:?}");
        assert!(settings.body.get("gateway").is_none(), "{settings:?}");
        let hooks = later.call("GET", "/webhooks", None).await;
        assert_eq!(hooks.status, 200);
        assert!(hooks.body.is_array(), "{hooks:?}");
        let messages = later.fetch("fifo").await;
        assert!(messages.is_empty());
    }
    // Registering again is idempotent: no second phone.
    let phones = app.get("/v1/phones", &app.live_key).await.expect(200);
    assert_eq!(phones.data()["phones"].as_array().unwrap().len(), 1);
    // Another phone's id is refused, and changes nothing.
    let phone = AppClient::new(&app, BASE, &token);
    let other = phone
        .call(
            "PATCH",
            "/device",
            Some(json!({ "id": uuid::Uuid::now_v7() })),
        )
        .await;
    assert_eq!(other.status, 403, "{other:?}");
    assert!(other.body["message"].is_string());
}

async fn a_wrong_token_is_401_at_every_route(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let routes = [
        ("POST", "/device", Some(json!({ "name": "x" }))),
        ("PATCH", "/device", Some(json!({ "id": phone_id }))),
        ("GET", "/device", None),
        ("GET", "/events", None),
        ("GET", "/message?order=fifo", None),
        ("PATCH", "/message", Some(json!([]))),
        ("GET", "/settings", None),
        ("GET", "/webhooks", None),
    ];
    for bad in ["dt_not_a_token", "sk_live_nope", ""] {
        let phone = AppClient::new(&app, BASE, bad);
        for (method, path, body) in &routes {
            let answer = phone.call(method, path, body.clone()).await;
            assert_eq!(
                answer.status, 401,
                "{method} {path} with {bad:?}: {answer:?}"
            );
            assert_eq!(answer.content_type, "application/json");
            assert!(answer.body["message"].is_string(), "{answer:?}");
        }
    }
    // A rotated token is refused at once; the new one registers the same phone.
    let rotated = app
        .post(
            &format!("/v1/phones/{phone_id}/rotate-token"),
            &app.live_key,
            json!({}),
        )
        .await
        .expect(200);
    let new_token = rotated.data()["device_token"].as_str().unwrap().to_string();
    let old = AppClient::new(&app, BASE, &token).register().await;
    assert_eq!(old.status, 401, "{old:?}");
    let new = AppClient::new(&app, BASE, &new_token).register().await;
    assert_eq!(new.status, 201);
    assert_eq!(new.body["id"], phone_id.as_str());
}

async fn the_app_sends_through_events_fetch_and_reports(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    app.subscribe(
        &app.live_key,
        &receiver,
        &["message.sent", "message.delivered"],
    )
    .await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(&app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let mut first = phone.events().await;
    let mut second = phone.events().await;
    app.wait_online(&phone_id, true).await;

    let id = app.send_live("Hello from the app").await;
    for stream in [&mut first, &mut second] {
        let (name, data) = stream
            .event_within(Duration::from_secs(1))
            .await
            .expect("MessageEnqueued within a second of the send");
        assert_eq!((name.as_str(), data.as_str()), ("MessageEnqueued", "null"));
    }
    let messages = phone.fetch("lifo").await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    let m = &messages[0];
    assert_eq!(m["id"], id.as_str());
    assert_eq!(m["textMessage"]["text"], "Hello from the app");
    assert_eq!(m["phoneNumbers"], json!([RECIPIENT]));
    assert_eq!(m["withDeliveryReport"], true);
    assert_eq!(m["isEncrypted"], false);
    assert!(has_millis(m["createdAt"].as_str().unwrap()), "{m}");
    assert!(has_millis(m["validUntil"].as_str().unwrap()), "{m}");
    assert_eq!(status_of(&app, &id).await, "sending");
    // Served again until a state is reported.
    assert_eq!(phone.fetch("fifo").await.len(), 1);

    phone.report(&id, "Processed", None).await;
    assert_eq!(status_of(&app, &id).await, "sending");
    assert!(phone.fetch("fifo").await.is_empty(), "reported: not served");
    phone.report(&id, "Sent", None).await;
    app.wait_for_status(&app.live_key, &id, "sent").await;
    phone.report(&id, "Delivered", None).await;
    let message = app.wait_for_status(&app.live_key, &id, "delivered").await;
    let kinds = timeline(&message);
    assert_eq!(kinds, ["queued", "sending", "sent", "delivered"]);
    // A report never moves a message backwards; an unknown id changes nothing.
    phone.report(&id, "Sent", None).await;
    phone
        .report(&uuid::Uuid::now_v7().to_string(), "Sent", None)
        .await;
    let hooks = receiver.wait_for(2, Duration::from_secs(10)).await;
    let mut events: Vec<String> = hooks
        .iter()
        .map(|r| r.json()["event"].as_str().unwrap().to_string())
        .collect();
    events.sort();
    assert_eq!(events, ["message.delivered", "message.sent"]);
    assert_eq!(status_of(&app, &id).await, "delivered");
    receiver.stop().await;
}

async fn pace_holds_and_cancel_is_announced(backend: Backend) {
    let app = spawn_paced(backend, 2, 3).await;
    let (phone, mut events) = online_app(&app).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(app.send_live(&format!("paced {i}")).await);
    }
    // Only what the pace allows is handed out, in order, whatever the app asks for.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut served = phone.fetch("fifo").await;
    while served.len() < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        served = phone.fetch("fifo").await;
    }
    let served: Vec<&str> = served.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(served, [ids[0].as_str(), ids[1].as_str()]);
    for id in &ids[..2] {
        phone.report(id, "Sent", None).await;
        app.wait_for_status(&app.live_key, id, "sent").await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        phone.fetch("fifo").await.is_empty(),
        "no third message inside the minute"
    );
    for id in &ids[2..] {
        assert_eq!(status_of(&app, id).await, "queued");
    }
    // Cancelling a queued message tells the phone.
    app.delete(&format!("/v1/messages/{}", ids[3]), &app.live_key)
        .await
        .expect(200);
    let deadline = Duration::from_secs(5);
    loop {
        let (name, data) = events
            .event_within(deadline)
            .await
            .expect("MessageCancelled arrives");
        if name == "MessageCancelled" {
            let data: Value = serde_json::from_str(&data).unwrap();
            assert_eq!(data, json!({ "messageId": ids[3] }));
            break;
        }
    }
}

async fn a_reconnecting_stream_loses_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone, events) = online_app(&app).await;
    drop(events);
    // The app reconnects 5 s later; a send meanwhile waits for it.
    let id = app.send_live("while away").await;
    let mut events = phone.events().await;
    let (name, _) = events
        .event_within(Duration::from_secs(2))
        .await
        .expect("MessageEnqueued on open when a message is pending");
    assert_eq!(name, "MessageEnqueued");
    let served = phone.fetch("fifo").await;
    assert_eq!(served.len(), 1, "{served:?}");
    assert_eq!(served[0]["id"], id.as_str());
    phone.report(&id, "Sent", None).await;
    app.wait_for_status(&app.live_key, &id, "sent").await;
    // A keepalive comment comes within 15 s of silence.
    let frame = events.next_within(Duration::from_secs(16)).await;
    assert!(
        matches!(frame, Some(Sse::Comment(ref c)) if c == "keepalive"),
        "{frame:?}"
    );
}

/// The named events that arrive within `within`.
/// Pairs a phone of `SENDER`, registers it as the app does, opens its event stream and waits
/// until it is online: its client and events.
async fn online_app(app: &TestApp) -> (AppClient, EventStream) {
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let events = phone.events().await;
    app.wait_online(&phone_id, true).await;
    (phone, events)
}

async fn events_within(stream: &mut EventStream, within: Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + within;
    let mut names = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match stream.event_within(left).await {
            Some((name, _)) => names.push(name),
            None => return names,
        }
    }
}

async fn a_backlog_is_announced_once_until_the_app_fetches(backend: Backend) {
    let app = spawn_paced(backend, 60, 600).await;
    let (phone, mut events) = online_app(&app).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(app.send_live(&format!("backlog {i}")).await);
    }
    for id in &ids {
        app.wait_for_status(&app.live_key, id, "sending").await;
    }
    // Five hand-overs, one hint: the app fetches once for the whole backlog.
    let heard = events_within(&mut events, Duration::from_millis(1500)).await;
    assert_eq!(heard, ["MessageEnqueued"]);
    let served: Vec<String> = phone
        .fetch("fifo")
        .await
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(served, ids);
    // The fetch answered the hint: the next hand-over hints again.
    let next = app.send_live("after the fetch").await;
    let (name, _) = events
        .event_within(Duration::from_secs(2))
        .await
        .expect("MessageEnqueued for a hand-over after the fetch");
    assert_eq!(name, "MessageEnqueued");
    // A hint no fetch answers is sent again (the app may have lost it).
    let (name, _) = events
        .event_within(Duration::from_secs(12))
        .await
        .expect("the unanswered hint again");
    assert_eq!(name, "MessageEnqueued");
    assert_eq!(phone.fetch("lifo").await[0]["id"], next.as_str());
}

/// The ids of a fetched page.
fn ids_of(page: &[Value]) -> Vec<String> {
    page.iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

async fn a_backlog_longer_than_a_page_is_announced_page_by_page(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.pace.per_minute = 1_000;
        s.pace.per_30_minutes = 10_000;
        s.limits.new_workspace_messages = 1_000;
    })
    .await;
    let (phone, mut events) = online_app(&app).await;
    let mut ids = Vec::new();
    for i in 0..150 {
        ids.push(app.send_live(&format!("page {i}")).await);
    }
    for id in &ids {
        app.wait_for_status(&app.live_key, id, "sending").await;
    }
    // Every message is handed over; the hints so far are answered by one fetch of a page.
    let heard = events_within(&mut events, Duration::from_millis(300)).await;
    assert!(!heard.is_empty(), "the backlog was announced");
    let page = ids_of(&phone.fetch("fifo").await);
    assert_eq!(page, ids[..100]);
    for id in &page {
        phone.report(id, "Processed", None).await;
        phone.report(id, "Sent", None).await;
    }
    // The app fetches once per hint and never asks for a second page by itself: once it
    // reported its page, the rest of the backlog is announced.
    let (name, _) = events
        .event_within(Duration::from_secs(2))
        .await
        .expect("MessageEnqueued for the rest of the backlog once the page is reported");
    assert_eq!(name, "MessageEnqueued");
    let rest = ids_of(&phone.fetch("fifo").await);
    assert_eq!(rest, ids[100..]);
    // An app that fetched and then went quiet (the answer lost on the way) hears it again, and
    // is served the same messages under the same ids.
    let (name, _) = events
        .event_within(Duration::from_secs(12))
        .await
        .expect("MessageEnqueued again after a quiet fetch");
    assert_eq!(name, "MessageEnqueued");
    assert_eq!(ids_of(&phone.fetch("fifo").await), rest);
    for id in &rest {
        phone.report(id, "Sent", None).await;
    }
    for id in &ids {
        app.wait_for_status(&app.live_key, id, "sent").await;
    }
    assert!(phone.fetch("fifo").await.is_empty());
}

/// Posts an `sms:received` webhook the way the app does: body, then X-Timestamp and X-Signature
/// (hex HMAC-SHA256 of body + timestamp). Returns the status.
async fn post_inbound(url: &str, event_id: &str, timestamp: i64, sign_with: &str) -> u16 {
    use hmac::{Hmac, KeyInit, Mac};
    let body = json!({
        "id": event_id,
        "webhookId": "smsgw-inbound",
        "event": "sms:received",
        "deviceId": "device",
        "payload": {
            "messageId": "3f2a", "message": "STOP", "sender": "+14155550177",
            "recipient": "***0100", "simNumber": 1, "phoneNumber": "+14155550177",
            "receivedAt": "2026-11-25T10:00:00.000+00:00"
        }
    })
    .to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(sign_with.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    mac.update(timestamp.to_string().as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    Client::default()
        .post(url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("x-timestamp", timestamp.to_string()))
        .insert_header(("x-signature", signature))
        .send_body(body)
        .await
        .expect("post completes")
        .status()
        .as_u16()
}

async fn inbound_posts_are_verified_and_stored_once(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    app.subscribe(&app.live_key, &receiver, &["message.received"])
        .await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(&app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let hooks = phone.call("GET", "/webhooks", None).await.body;
    let hooks = hooks.as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["event"], "sms:received");
    assert_eq!(hooks[0]["deviceId"], phone_id.as_str());
    let url = hooks[0]["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&app.address), "{url}");
    let settings = phone.call("GET", "/settings", None).await.body;
    let key = settings["webhooks"]["signing_key"]
        .as_str()
        .unwrap()
        .to_string();
    let now = chrono::Utc::now().timestamp();

    // Refused and not stored: a bad signature, a stale or future timestamp, a wrong path.
    assert_eq!(post_inbound(&url, "ev-1", now, "wrong key").await, 401);
    assert_eq!(post_inbound(&url, "ev-1", now - 301, &key).await, 401);
    // (10 s of margin: the server reads its clock after this test read its own, and a loaded
    // machine can put seconds between the two.)
    assert_eq!(post_inbound(&url, "ev-1", now + 310, &key).await, 401);
    let wrong_path = format!("{}0", url.trim_end_matches(char::is_alphanumeric));
    assert_eq!(post_inbound(&wrong_path, "ev-1", now, &key).await, 404);
    assert!(
        app.messages(&app.live_key, "direction=inbound")
            .await
            .is_empty()
    );

    // Posted twice (the app retries): stored once.
    assert_eq!(post_inbound(&url, "ev-1", now, &key).await, 200);
    let now = chrono::Utc::now().timestamp();
    assert_eq!(post_inbound(&url, "ev-1", now - 290, &key).await, 200);
    let stored = app.messages(&app.live_key, "direction=inbound").await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["from_number"], "+14155550177");
    assert_eq!(stored[0]["to_number"], SENDER);
    assert_eq!(stored[0]["content"], "STOP");
    // The same path as a WebSocket `received` frame: the opt-out keyword and the webhook.
    let contacts = app.get("/v1/contacts", &app.live_key).await.expect(200);
    let contact = &contacts.data()["contacts"][0];
    assert_eq!(contact["phone_number"], "+14155550177");
    assert_eq!(contact["opted_out"], true, "{contact}");
    let hooks = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(hooks[0].json()["event"], "message.received");
    receiver.stop().await;
}

/// Polls `GET /message` until it serves `n` messages (or panics after 10 s); their ids.
async fn fetch_n(phone: &AppClient, n: usize) -> Vec<String> {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let served = phone.fetch("fifo").await;
            if served.len() >= n {
                return Ok(served
                    .iter()
                    .map(|m| m["id"].as_str().unwrap().to_string())
                    .collect());
            }
            Err(format!("{n} messages never served; last {served:?}"))
        },
    )
    .await
}

async fn event_kinds(app: &TestApp, id: &str) -> Vec<String> {
    app.get(&format!("/v1/messages/{id}"), &app.live_key)
        .await
        .expect(200)
        .data()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

async fn a_retry_after_failed_is_a_new_send_for_the_app(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(&app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let _events = phone.events().await;
    app.wait_online(&phone_id, true).await;
    let id = app.send_live("try again").await;
    // The first send goes by the message id itself.
    assert_eq!(fetch_n(&phone, 1).await, [id.as_str()]);
    phone.report(&id, "Processed", None).await;
    phone
        .report(&id, "Failed", Some("RESULT_ERROR_NO_SERVICE"))
        .await;
    // Answered once stored: the failed attempt is in the timeline already.
    assert!(
        event_kinds(&app, &id)
            .await
            .contains(&"attempt_failed".to_string())
    );
    // The app never sends an id it has seen again: the retry comes under a new one that
    // names the message and its second send.
    let retry = format!("{id}-2");
    assert_eq!(fetch_n(&phone, 1).await, [retry.as_str()]);
    assert_eq!(status_of(&app, &id).await, "sending");
    // The app's state worker repeats a report it is unsure was taken: a late `Failed` of the
    // first send does not fail the second.
    phone
        .report(&id, "Failed", Some("RESULT_ERROR_NO_SERVICE"))
        .await;
    assert_eq!(status_of(&app, &id).await, "sending");
    assert_eq!(phone.fetch("fifo").await.len(), 1);
    // The second send fails too, the third is delivered; the API and the webhooks speak of the
    // message id throughout.
    phone
        .report(&retry, "Failed", Some("RESULT_ERROR_NO_SERVICE"))
        .await;
    let third = format!("{id}-3");
    assert_eq!(fetch_n(&phone, 1).await, [third.as_str()]);
    phone.report(&third, "Sent", None).await;
    assert_eq!(status_of(&app, &id).await, "sent", "answered once stored");
    phone.report(&third, "Delivered", None).await;
    assert_eq!(status_of(&app, &id).await, "delivered");
    let kinds = event_kinds(&app, &id).await;
    assert_eq!(
        kinds,
        [
            "queued",
            "sending",
            "attempt_failed",
            "sending",
            "attempt_failed",
            "sending",
            "sent",
            "delivered"
        ]
    );
    // An id this server never handed out changes nothing.
    phone.report(&format!("{id}-4"), "Failed", None).await;
    phone.report(&format!("{id}-x"), "Failed", None).await;
    assert_eq!(event_kinds(&app, &id).await, kinds);
}

async fn a_report_is_answered_once_it_is_stored(backend: Backend) {
    let app = spawn_paced(backend, 100, 1_000).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(&app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let _events = phone.events().await;
    app.wait_online(&phone_id, true).await;
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(app.send_live(&format!("durable {i}")).await);
    }
    let served = fetch_n(&phone, ids.len()).await;
    assert_eq!(served, ids);
    // Each 204 means stored: the very next read sees the move.
    for id in &ids {
        phone.report(id, "Sent", None).await;
        assert_eq!(status_of(&app, id).await, "sent");
        phone.report(id, "Delivered", None).await;
        assert_eq!(status_of(&app, id).await, "delivered");
    }
}

/// Reads the stream until it ends (within 5 s); the comments it ended with.
async fn stream_ends(stream: &mut EventStream) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut comments = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(!left.is_zero(), "the event stream never ended");
        match stream.next_within(left).await {
            None => return comments,
            Some(Sse::Comment(text)) => comments.push(text),
            Some(Sse::Event { .. }) => {}
        }
    }
}

async fn the_newest_connection_wins_and_nothing_is_lost_or_sent_twice(backend: Backend) {
    let app = spawn_paced(backend, 100, 1_000).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(&app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let mut stream = phone.events().await;
    app.wait_online(&phone_id, true).await;
    // One physical phone with both transports: what it has sent, by message id (the app and a
    // WebSocket phone both dedupe by id), and how often.
    let mut radio: std::collections::HashMap<String, u32> = Default::default();
    let mut all = Vec::new();
    for round in 0..2 {
        // The event stream is current: three messages are handed to it; the app sends one and
        // has not reported the other two when the WebSocket connects.
        let mut ids = Vec::new();
        for i in 0..3 {
            ids.push(app.send_live(&format!("round {round} sse {i}")).await);
        }
        assert_eq!(fetch_n(&phone, 3).await, ids);
        *radio.entry(ids[0].clone()).or_default() += 1;
        phone.report(&ids[0], "Sent", None).await;

        // The WebSocket is the newest connection: the event stream is told and ends, and the
        // two unreported messages come over the WebSocket under their own ids.
        let mut ws = app.connect_phone(&token).await;
        let told = stream_ends(&mut stream).await;
        assert!(
            told.iter().any(|c| c.contains("replaced")),
            "the stream is told why it ends: {told:?}"
        );
        let mut moved = vec![ws.expect_send().await.0.to_string()];
        moved.push(ws.expect_send().await.0.to_string());
        moved.sort();
        let mut expected = ids[1..].to_vec();
        expected.sort();
        assert_eq!(moved, expected);
        // The app's fetch and reports no longer take the phone back: only a new connection does.
        assert!(phone.fetch("fifo").await.is_empty());
        phone.report(&ids[1], "Processed", None).await;
        for id in &moved {
            *radio.entry(id.clone()).or_default() += 1;
            let message_id = id.parse().unwrap();
            let ack = ws
                .report(smsgw::domain::protocol::PhoneFrame::Sent {
                    message_id,
                    reference: Some(format!("sent-{id}")),
                })
                .await;
            assert!(
                matches!(ack, Some(smsgw::domain::protocol::ServerFrame::Ack { .. })),
                "{ack:?}"
            );
        }
        // Traffic while the WebSocket is current goes to it; it sends nothing yet.
        let mut later = Vec::new();
        for i in 0..2 {
            later.push(app.send_live(&format!("round {round} ws {i}")).await);
        }
        for id in &later {
            assert_eq!(ws.expect_send().await.0.to_string(), *id);
        }

        // The app reconnects its stream: the WebSocket is closed with 4000 and what it held
        // unsent is fetched by the app under the same ids.
        stream = phone.events().await;
        assert_eq!(ws.close_code().await, Some(4000));
        let mut fetched = fetch_n(&phone, 2).await;
        fetched.sort();
        let mut expected = later.clone();
        expected.sort();
        assert_eq!(fetched, expected);
        for id in &later {
            *radio.entry(id.clone()).or_default() += 1;
            phone.report(id, "Sent", None).await;
        }
        all.extend(ids);
        all.extend(later);
    }
    for id in &all {
        assert_eq!(radio.get(id), Some(&1), "{id} sent once");
        assert_eq!(status_of(&app, id).await, "sent", "{id}");
        let kinds = event_kinds(&app, id).await;
        assert_eq!(
            kinds.iter().filter(|k| *k == "sent").count(),
            1,
            "{id}: {kinds:?}"
        );
    }
}

backend_tests!(
    a_retry_after_failed_is_a_new_send_for_the_app,
    a_report_is_answered_once_it_is_stored,
    the_newest_connection_wins_and_nothing_is_lost_or_sent_twice,
    inbound_posts_are_verified_and_stored_once,
    registration_binds_the_app_to_its_phone,
    a_wrong_token_is_401_at_every_route,
    the_app_sends_through_events_fetch_and_reports,
    pace_holds_and_cancel_is_announced,
    a_reconnecting_stream_loses_nothing,
    a_backlog_is_announced_once_until_the_app_fetches,
    a_backlog_longer_than_a_page_is_announced_page_by_page,
);
