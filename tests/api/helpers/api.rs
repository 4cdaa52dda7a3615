//! Talking to a [`TestApp`] over HTTP: the JSON envelope of a reply, requests with a key, and
//! the waits on what they report.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use smsgw::domain::protocol::ServerFrame;

use super::{FakePhone, TestApp, WebhookReceiver};

/// The sending number tests use.
pub const SENDER: &str = "+14155550100";
/// A valid US recipient.
pub const RECIPIENT: &str = "+14155550123";

/// A response: HTTP status and the parsed JSON envelope.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub headers: HashMap<String, String>,
}

impl Reply {
    /// The envelope's data.
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }

    /// The envelope's data read as the API's response type `T` (see [`typed`]).
    #[track_caller]
    pub fn read<T: serde::Deserialize<'static> + serde::Serialize>(&self) -> T {
        typed(self.data())
    }

    /// The envelope's error_code (empty on success).
    pub fn code(&self) -> &str {
        self.body["error_code"].as_str().unwrap_or("")
    }

    /// Asserts the status and returns self, printing the body on mismatch.
    #[track_caller]
    pub fn expect(self, status: u16) -> Reply {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.body
        );
        self
    }

    /// Asserts an error status and code, and that the envelope is well formed.
    #[track_caller]
    pub fn expect_error(self, status: u16, code: &str) -> Reply {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.body
        );
        assert_eq!(self.body["status"], "error", "body: {}", self.body);
        assert_eq!(self.code(), code, "body: {}", self.body);
        assert!(self.body["message"].is_string(), "body: {}", self.body);
        assert!(self.body["data"].is_object(), "body: {}", self.body);
        self
    }
}

impl TestApp {
    /// Sends a request with an optional key and JSON body.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let header = key.map(|key| ("x-api-key", key));
        self.json_request(method, path, header, body).await
    }

    /// Sends `method` to `path` (below the address) with one optional header and an optional
    /// JSON body; the reply's body is whatever JSON came back (`Null` when empty).
    async fn json_request(
        &self,
        method: &str,
        path: &str,
        header: Option<(&str, &str)>,
        body: Option<Value>,
    ) -> Reply {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .client
            .request(method, format!("{}{}", self.address, path));
        if let Some(header) = header {
            req = req.insert_header(header);
        }
        let mut response = match body {
            Some(body) => req.send_json(&body).await,
            None => req.send().await,
        }
        .expect("request completes");
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let bytes = response.body().limit(16 * 1024 * 1024).await.expect("body");
        Reply {
            status,
            body: json_body(&bytes),
            headers,
        }
    }

    /// `GET path` with these request headers, redirects not followed, as a browser fetches a
    /// page or an asset.
    pub async fn fetch(&self, path: &str, headers: &[(&str, &str)]) -> Fetched {
        let client = awc::Client::builder().disable_redirects().finish();
        let mut request = client.get(format!("{}{}", self.address, path));
        for (name, value) in headers {
            request = request.insert_header((*name, *value));
        }
        let mut response = request.send().await.expect("request completes");
        let body = response.body().limit(4 * 1024 * 1024).await.expect("body");
        Fetched {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: String::from_utf8(body.to_vec()).expect("UTF-8 body"),
        }
    }

    /// Sends raw bytes with a content type.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Reply {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .client
            .request(method, format!("{}{}", self.address, path))
            .insert_header(("content-type", content_type));
        if let Some(key) = key {
            req = req.insert_header(("x-api-key", key));
        }
        let mut response = req.send_body(bytes).await.expect("request completes");
        let status = response.status().as_u16();
        let bytes = response.body().limit(16 * 1024 * 1024).await.expect("body");
        Reply {
            status,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            headers: HashMap::new(),
        }
    }

    /// The value of one series of `/metrics` now: the line of `series` whose labels contain
    /// `label` (e.g. `outcome="success"`), 0 when there is none. The recorder is process-wide
    /// and tests run in parallel, so callers compare before and after.
    pub async fn metric(&self, series: &str, label: &str) -> f64 {
        let mut response = self
            .client
            .get(format!("{}/metrics", self.address))
            .send()
            .await
            .expect("metrics answer");
        assert_eq!(response.status().as_u16(), 200);
        let body = response.body().limit(16 << 20).await.expect("metrics body");
        let text = String::from_utf8(body.to_vec()).expect("metrics are text");
        let start = format!("{series}{{");
        text.lines()
            .filter(|line| line.starts_with(&start) && line.contains(label))
            .find_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    }

    pub async fn get(&self, path: &str, key: &str) -> Reply {
        self.request("GET", path, Some(key), None).await
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> Reply {
        self.request("POST", path, Some(key), Some(body)).await
    }

    pub async fn patch(&self, path: &str, key: &str, body: Value) -> Reply {
        self.request("PATCH", path, Some(key), Some(body)).await
    }

    pub async fn delete(&self, path: &str, key: &str) -> Reply {
        self.request("DELETE", path, Some(key), None).await
    }

    /// Sends one message with `key` (`POST /v1/messages/send`).
    pub async fn send(&self, key: &str, body: Value) -> Reply {
        self.post("/v1/messages/send", key, body).await
    }

    /// Sends one text to many numbers with `key` (`POST /v1/messages/bulk-send`).
    pub async fn bulk_send(&self, key: &str, body: Value) -> Reply {
        self.post("/v1/messages/bulk-send", key, body).await
    }

    /// The message as `GET /v1/messages/{id}` shows it to `key`.
    pub async fn message(&self, key: &str, id: &str) -> Value {
        self.get(&format!("/v1/messages/{id}"), key)
            .await
            .expect(200)
            .data()
            .clone()
    }

    /// Sets a phone's pace with the live key: at most `per_minute` sends in any minute and
    /// `per_30_minutes` in any 30 minutes.
    pub async fn set_pace(&self, phone_id: &str, per_minute: u32, per_30_minutes: u32) {
        self.patch(
            &format!("/v1/phones/{phone_id}"),
            &self.live_key,
            json!({ "pace": { "per_minute": per_minute, "per_30_minutes": per_30_minutes } }),
        )
        .await
        .expect(200);
    }

    /// Creates a webhook endpoint with `key` from `body` (`POST /v1/webhooks`); the created
    /// endpoint, signing key included.
    pub async fn create_webhook(&self, key: &str, body: Value) -> Value {
        self.post("/v1/webhooks", key, body)
            .await
            .expect(201)
            .data()
            .clone()
    }

    /// Subscribes `receiver` to `events` of the key's mode: a webhook endpoint with no other
    /// setting; the created endpoint, signing key included.
    pub async fn subscribe(&self, key: &str, receiver: &WebhookReceiver, events: &[&str]) -> Value {
        self.create_webhook(key, json!({ "url": receiver.url, "events": events }))
            .await
    }

    /// The first 100 contacts of the key's mode.
    pub async fn contacts(&self, key: &str) -> Vec<Value> {
        self.get("/v1/contacts?limit=100", key)
            .await
            .expect(200)
            .data()["contacts"]
            .as_array()
            .expect("contacts is a list")
            .clone()
    }

    /// One page of a cursor-paged list at `path` (its query sets the limit and filters): the
    /// items under `list_key`, and the cursor of the next page (None on the last, whose
    /// `has_more` is false).
    pub async fn page(
        &self,
        key: &str,
        path: &str,
        list_key: &str,
        cursor: Option<&str>,
    ) -> (Vec<Value>, Option<String>) {
        let path = match cursor {
            Some(c) if path.contains('?') => format!("{path}&cursor={c}"),
            Some(c) => format!("{path}?cursor={c}"),
            None => path.to_string(),
        };
        let reply = self.get(&path, key).await.expect(200);
        let next = reply.data()["next_cursor"].as_str().map(str::to_string);
        assert_eq!(
            reply.data()["has_more"],
            next.is_some(),
            "has_more says whether a next_cursor comes: {}",
            reply.body
        );
        let items = reply.data()[list_key]
            .as_array()
            .unwrap_or_else(|| panic!("no list {list_key}: {}", reply.body))
            .clone();
        (items, next)
    }

    /// Every page of a cursor-paged list at `path`, in order, following `next_cursor`.
    pub async fn pages(&self, key: &str, path: &str, list_key: &str) -> Vec<Vec<Value>> {
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let (items, next) = self.page(key, path, list_key, cursor.as_deref()).await;
            pages.push(items);
            assert!(pages.len() <= 10_000, "{path} never ends");
            match next {
                Some(next) => cursor = Some(next),
                None => return pages,
            }
        }
    }

    /// Every item of a cursor-paged list at `path`, fetched 100 at a time.
    pub async fn all_pages(&self, key: &str, path: &str, list_key: &str) -> Vec<Value> {
        let separator = if path.contains('?') { '&' } else { '?' };
        self.pages(key, &format!("{path}{separator}limit=100"), list_key)
            .await
            .concat()
    }

    /// The first 100 messages the key's mode lists with the filters of `query`
    /// (`direction=outbound`, …), newest first.
    pub async fn messages(&self, key: &str, query: &str) -> Vec<Value> {
        self.get(&format!("/v1/messages?limit=100&{query}"), key)
            .await
            .expect(200)
            .data()["messages"]
            .as_array()
            .expect("messages is a list")
            .clone()
    }

    /// A test-mode inbound SMS from `from` to [`SENDER`]; the stored message.
    pub async fn test_inbound(&self, from: &str, content: &str) -> Value {
        self.post(
            "/v1/test/inbound",
            &self.test_key,
            json!({ "from_number": from, "to_number": SENDER, "content": content }),
        )
        .await
        .expect(201)
        .data()
        .clone()
    }

    /// A test-mode send from a fixed number.
    pub async fn send_test(&self, to: &str, content: &str) -> Reply {
        self.send(&self.test_key, send_body(SENDER, to, content))
            .await
    }

    /// Sends `content` from [`SENDER`] to [`RECIPIENT`] with the live key (so a paired phone
    /// must send it); returns the accepted message's id.
    pub async fn send_live(&self, content: &str) -> String {
        self.send(&self.live_key, send_body(SENDER, RECIPIENT, content))
            .await
            .expect(202)
            .data()["id"]
            .as_str()
            .expect("an accepted send has an id")
            .to_string()
    }

    /// Polls a message until `check` holds, or panics after `within`.
    pub async fn wait_for_message(
        &self,
        key: &str,
        id: &str,
        within: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        poll(within, Duration::from_millis(20), async || {
            let reply = self.get(&format!("/v1/messages/{id}"), key).await;
            if reply.status == 200 && check(reply.data()) {
                return Ok(reply.data().clone());
            }
            Err(format!(
                "message {id} never reached the expected state; last: {}",
                reply.body
            ))
        })
        .await
    }

    /// Waits until the message has `status`.
    pub async fn wait_for_status(&self, key: &str, id: &str, status: &str) -> Value {
        self.wait_for_message(key, id, Duration::from_secs(10), |m| m["status"] == status)
            .await
    }

    /// Pairs a phone with the live key; returns (phone id, device token).
    pub async fn pair_phone(&self, number: &str) -> (String, String) {
        let reply = self
            .post(
                "/v1/phones",
                &self.live_key,
                json!({ "phone_number": number }),
            )
            .await
            .expect(201);
        (
            reply.data()["id"].as_str().expect("id").to_string(),
            reply.data()["device_token"]
                .as_str()
                .expect("token")
                .to_string(),
        )
    }

    /// Pairs a phone for `number` and connects it; its id and its session, once the API
    /// reports it online.
    pub async fn online_phone(&self, number: &str) -> (String, FakePhone) {
        let (phone_id, token) = self.pair_phone(number).await;
        let phone = self.connect_phone(&token).await;
        self.wait_online(&phone_id, true).await;
        (phone_id, phone)
    }

    /// The WebSocket URL of the phone endpoint.
    pub fn ws_url(&self) -> String {
        format!(
            "{}/v1/phones/connect",
            self.address.replacen("http", "ws", 1)
        )
    }

    /// Connects a fake phone with this device token and reads its `hello`.
    pub async fn connect_phone(&self, token: &str) -> FakePhone {
        let mut phone = FakePhone::connect(&self.ws_url(), token)
            .await
            .expect("phone connects");
        match phone.next_frame().await {
            Some(ServerFrame::Hello { .. }) => phone,
            other => panic!("expected hello, got {other:?}"),
        }
    }

    /// Waits until the phone with this id is online (or offline) as the API reports it.
    pub async fn wait_online(&self, phone_id: &str, online: bool) {
        poll(
            Duration::from_secs(10),
            Duration::from_millis(20),
            async || {
                let reply = self
                    .get(&format!("/v1/phones/{phone_id}"), &self.live_key)
                    .await;
                match reply.data()["online"] == online {
                    true => Ok(()),
                    false => Err(format!("phone never became online={online}")),
                }
            },
        )
        .await
    }
}

/// The `type` of each entry of a message's timeline (`events`), oldest first.
pub fn timeline(message: &Value) -> Vec<&str> {
    message["events"]
        .as_array()
        .expect("a message has its timeline")
        .iter()
        .map(|e| e["type"].as_str().expect("a timeline entry has a type"))
        .collect()
}

/// The timeline of a message the phone failed at every one of its three attempts.
pub const FAILED_THREE_TIMES: [&str; 7] = [
    "queued",
    "sending",
    "attempt_failed",
    "sending",
    "attempt_failed",
    "sending",
    "failed",
];

/// The id of the one send of `replies` that was accepted (202), once each other reply is the
/// 409 `duplicate_request` naming that id: what concurrent sends under one request_id get.
#[track_caller]
pub fn the_one_accepted(replies: &[Reply]) -> String {
    let accepted: Vec<&Value> = replies
        .iter()
        .filter(|r| r.status == 202)
        .map(|r| r.data())
        .collect();
    assert_eq!(accepted.len(), 1, "exactly one send is accepted");
    let id = accepted[0]["id"]
        .as_str()
        .expect("an accepted send has an id");
    for reply in replies.iter().filter(|r| r.status != 202) {
        assert_eq!(reply.status, 409, "{}", reply.body);
        assert_eq!(reply.code(), "duplicate_request");
        assert_eq!(reply.data()["id"], id);
    }
    id.to_string()
}

/// Calls `attempt` every `every` until it gives `Ok`, and returns that; panics after `within`
/// with what the last attempt gave as `Err`.
pub async fn poll<T>(
    within: Duration,
    every: Duration,
    mut attempt: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match attempt().await {
            Ok(done) => return done,
            Err(last) => assert!(
                tokio::time::Instant::now() < deadline,
                "not within {within:?}: {last}"
            ),
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls every 20 ms until `check` holds, or panics naming `what` after `within`.
pub async fn eventually(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    poll(within, Duration::from_millis(20), async || {
        match check().await {
            true => Ok(()),
            false => Err(what.to_string()),
        }
    })
    .await
}

/// `value` read as the API's response type `T` (an `…Out` type of `smsgw::api`), which it
/// must be exactly: no field of `T` missing (a missing `Option` would read as `None`), none
/// added, each of its type. So a test that reads `draft.sent_message_id == None` fails when
/// the field is renamed or dropped, where `draft["sent_message_id"] == Null` would pass.
///
/// The `…Out` types borrow their strings from the text they are read from; the text is
/// leaked (a few hundred bytes per read, for the test's life) so `T` needs no lifetime here.
#[track_caller]
pub fn typed<T: serde::Deserialize<'static> + serde::Serialize>(value: &Value) -> T {
    let name = std::any::type_name::<T>();
    let text: &'static str = Box::leak(value.to_string().into_boxed_str());
    let read: T =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not a {name}: {e}\n{value}"));
    let written = serde_json::to_value(&read).unwrap();
    assert_eq!(
        &written, value,
        "{name} does not write what was read (a field missing or added)"
    );
    read
}

/// `object[key]` is there and is `null` (not merely absent: indexing a missing key also
/// gives `Null`).
#[track_caller]
pub fn assert_null(object: &Value, key: &str) {
    match object.get(key) {
        Some(Value::Null) => {}
        Some(other) => panic!("{key} is {other}, not null, in {object}"),
        None => panic!("{key} is missing from {object}"),
    }
}

/// A response body parsed as JSON, `Null` when empty; panics on anything else.
pub fn json_body(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(bytes)))
}

/// A page as a browser gets it: status, headers and the body as text.
pub struct Fetched {
    pub status: u16,
    pub headers: awc::http::header::HeaderMap,
    pub body: String,
}

impl Fetched {
    /// A header's value, empty when it is missing.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// The body of a send from `from` to `to`.
pub fn send_body(from: &str, to: &str, content: &str) -> Value {
    json!({ "from_number": from, "to_number": to, "content": content })
}

/// `Authorization: Bearer <key>` for the SMSGate-compatible client API.
pub fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// `Authorization: Basic base64(login:password)` for the SMSGate-compatible client API.
pub fn basic(login: &str, password: &str) -> String {
    use base64::Engine;
    let pair = format!("{login}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

impl TestApp {
    /// A request to the SMSGate-compatible client API (`/3rdparty/v1` + `path`) with an
    /// optional `Authorization` header and JSON body; the reply's body is whatever JSON came
    /// back (`Null` when empty).
    pub async fn client_api(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let header = authorization.map(|value| ("authorization", value));
        self.json_request(method, &format!("/3rdparty/v1{path}"), header, body)
            .await
    }
}
