//! The device API compatible with the SMSGate Android app (docs/api.md "Device API for the
//! SMSGate Android app"): registration, the event stream, fetching and reporting messages, and
//! inbound SMS posted as signed webhooks. `AppClient` behaves as the app does (read from its
//! source): Bearer token, camelCase JSON, one event stream per service start. It lives here with the
//! waits the topic files share.

use std::time::Duration;

use awc::Client;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::{
    Backend, RECIPIENT, SENDER, TestApp, WebhookReceiver, json_body, poll, spawn_app,
    spawn_app_with, spawn_paced, timeline,
};

mod events;
mod health;
mod inbound;
mod limits;
mod lines;
mod registration;
mod sending;

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
