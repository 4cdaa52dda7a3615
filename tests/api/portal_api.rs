//! The public API the portal stands on (docs/api.md, "Workspace", "Number lookup", "Idempotent
//! creates", "Live events"): every route here is an ordinary `/v1` route any client can call.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::{Backend, RECIPIENT, SENDER, TestApp, poll, spawn_app, spawn_app_with};

async fn workspace_is_read_with_the_key_and_updated(backend: Backend) {
    let app = spawn_app(backend).await;
    let live = app.get("/v1/workspace", &app.live_key).await.expect(200);
    let data = live.data();
    assert_eq!(data["id"], app.workspace_id.to_string());
    assert_eq!(data["name"], "default");
    assert_eq!(data["mode"], "live");
    assert_eq!(data["default_country"], Value::Null);
    assert_eq!(data["default_country_set"], false);
    assert!(data["created_at"].as_str().unwrap().ends_with("+00:00"));
    // No public_url: the address the request came in on.
    assert_eq!(
        data["pairing"]["device_api_url"],
        format!("{}/mobile/v1", app.address)
    );
    assert_eq!(
        data["pairing"]["websocket_url"],
        format!(
            "{}/v1/phones/connect",
            app.address.replacen("http", "ws", 1)
        )
    );
    let test = app.get("/v1/workspace", &app.test_key).await.expect(200);
    assert_eq!(test.data()["mode"], "test");
    assert_eq!(test.data()["id"], data["id"]);

    // A wrong key is refused up front, like everywhere.
    let wrong = format!("sk_live_{}", "A".repeat(40));
    app.get("/v1/workspace", &wrong)
        .await
        .expect_error(401, "invalid_api_key");
    app.request("GET", "/v1/workspace", None, None)
        .await
        .expect_error(401, "missing_api_key");

    let patch = |body: Value| app.patch("/v1/workspace", &app.live_key, body);
    let updated = patch(json!({ "name": "Smile Dental", "default_country": "GB" }))
        .await
        .expect(200);
    assert_eq!(updated.data()["name"], "Smile Dental");
    assert_eq!(updated.data()["default_country"], "GB");
    assert_eq!(updated.data()["default_country_set"], true);
    // Both modes see the workspace's settings.
    let seen = app.get("/v1/workspace", &app.test_key).await.expect(200);
    assert_eq!(seen.data()["name"], "Smile Dental");
    assert_eq!(seen.data()["default_country"], "GB");

    // Bad values are refused and change nothing.
    for (body, field) in [
        (json!({ "default_country": "gb" }), "default_country"),
        (json!({ "default_country": "ZZ" }), "default_country"),
        (json!({ "default_country": "GBR" }), "default_country"),
        (json!({ "name": "" }), "name"),
        (json!({ "name": "x".repeat(121) }), "name"),
    ] {
        let reply = patch(body).await.expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field);
    }
    patch(json!({ "default_country": 5 }))
        .await
        .expect_error(400, "invalid_json");
    let unchanged = app.get("/v1/workspace", &app.live_key).await.expect(200);
    assert_eq!(unchanged.data()["name"], "Smile Dental");
    assert_eq!(unchanged.data()["default_country"], "GB");

    // An absent field stays; null returns to the server default (unset here).
    let kept = patch(json!({ "name": "Smile" })).await.expect(200);
    assert_eq!(kept.data()["default_country"], "GB");
    let cleared = patch(json!({ "default_country": null })).await.expect(200);
    assert_eq!(cleared.data()["default_country"], Value::Null);
    assert_eq!(cleared.data()["default_country_set"], false);
}

async fn server_defaults_apply_to_the_workspace(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.portal.default_country = Some("US".into());
        s.server.public_url = Some("https://sms.example.com/".into());
    })
    .await;
    let data = app.get("/v1/workspace", &app.live_key).await.expect(200);
    assert_eq!(data.data()["default_country"], "US");
    assert_eq!(data.data()["default_country_set"], false);
    assert_eq!(
        data.data()["pairing"],
        json!({
            "device_api_url": "https://sms.example.com/mobile/v1",
            "websocket_url": "wss://sms.example.com/v1/phones/connect",
        })
    );
    // The workspace's own country wins over the server's.
    app.patch(
        "/v1/workspace",
        &app.live_key,
        json!({ "default_country": "DE" }),
    )
    .await
    .expect(200);
    let lookup = app
        .get("/v1/numbers/lookup?number=030%20123456", &app.live_key)
        .await
        .expect(200);
    assert_eq!(lookup.data()["e164"], "+4930123456");
}

async fn lookup(app: &TestApp, query: &str) -> Value {
    app.get(&format!("/v1/numbers/lookup?{query}"), &app.live_key)
        .await
        .expect(200)
        .data()
        .clone()
}

async fn numbers_are_looked_up_as_people_type_them(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.portal.default_country = Some("US".into())).await;
    assert_eq!(
        lookup(&app, "number=(415)%20555-0177").await,
        json!({
            "input": "(415) 555-0177",
            "valid": true,
            "e164": "+14155550177",
            "country": "US",
            "type": "fixed_line_or_mobile",
            "premium_rate": false,
            "reason": null,
        })
    );
    let premium = lookup(&app, "number=%2B19005550123").await;
    assert_eq!(premium["valid"], true);
    assert_eq!(premium["type"], "premium_rate");
    assert_eq!(premium["premium_rate"], true);
    let uk = lookup(&app, "number=07400%20123456&country=GB").await;
    assert_eq!(uk["e164"], "+447400123456");
    assert_eq!(uk["country"], "GB");
    assert_eq!(uk["type"], "mobile");

    // Text that is no number is an answer in plain words, not an error.
    for query in ["number=hello", "number=12", "number=%2B999"] {
        let answer = lookup(&app, query).await;
        assert_eq!(answer["valid"], false, "{query}: {answer}");
        assert_eq!(answer["e164"], Value::Null, "{query}");
        assert_eq!(answer["type"], Value::Null, "{query}");
        assert!(!answer["reason"].as_str().unwrap().is_empty(), "{query}");
    }
    assert_eq!(
        lookup(&app, "number=hello").await["reason"],
        "this doesn't look like a phone number"
    );

    // Bounded input, a known country, a number to look up.
    for (query, field) in [
        (format!("number={}", "1".repeat(65)), "number"),
        ("country=US".to_string(), "number"),
        ("number=4155550177&country=usa".to_string(), "country"),
        ("number=4155550177&country=ZZ".to_string(), "country"),
    ] {
        let reply = app
            .get(&format!("/v1/numbers/lookup?{query}"), &app.live_key)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field, "{query}");
    }
    let longest = lookup(&app, &format!("number={}", "1".repeat(64))).await;
    assert_eq!(longest["valid"], false);
}

async fn national_numbers_need_a_country(backend: Backend) {
    let app = spawn_app(backend).await;
    let answer = lookup(&app, "number=4155550177").await;
    assert_eq!(answer["valid"], false);
    assert!(answer["reason"].as_str().unwrap().contains("country"));
    let with = lookup(&app, "number=4155550177&country=US").await;
    assert_eq!(with["e164"], "+14155550177");
}

/// (path, body) of each create that takes a `request_id`.
fn creates() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/v1/campaigns",
            json!({ "name": "Reminders", "from_number": SENDER, "body": "Hi {{name}}",
                    "recipients": [{ "to": RECIPIENT, "vars": { "name": "Ann" } }],
                    "launch_now": true }),
        ),
        (
            "/v1/contacts",
            json!({ "phone_number": RECIPIENT, "first_name": "Ann" }),
        ),
        ("/v1/phones", json!({ "phone_number": SENDER })),
        (
            "/v1/webhooks",
            json!({ "url": "http://127.0.0.1:9/hook", "events": ["message.sent"] }),
        ),
        (
            "/v1/messages/bulk-send",
            json!({ "from_number": SENDER, "to_numbers": [RECIPIENT, "+14155550124"],
                    "content": "Closed tomorrow" }),
        ),
    ]
}

fn with_request_id(body: &Value, request_id: &str) -> Value {
    let mut body = body.clone();
    body["request_id"] = json!(request_id);
    body
}

/// Resources the create at `path` made so far: items of the first page of its list (a bulk
/// send's: its messages, two per bulk send).
async fn listed(app: &TestApp, path: &str, key: &str) -> usize {
    if path == BULK {
        let list = app.get("/v1/messages?limit=100", key).await.expect(200);
        let sent = list.data()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["content"] == "Closed tomorrow")
            .count();
        return sent / 2;
    }
    let list = app.get(path, key).await.expect(200);
    let name = path.trim_start_matches("/v1/");
    list.data()[name].as_array().unwrap().len()
}

const BULK: &str = "/v1/messages/bulk-send";

/// The status a successful create at `path` answers.
fn created_status(path: &str) -> u16 {
    if path == BULK { 202 } else { 201 }
}

/// The id a repeat names: the resource's (a bulk send's first message).
fn created_id(path: &str, data: &Value) -> Value {
    if path == BULK {
        data["message_ids"][0].clone()
    } else {
        data["id"].clone()
    }
}

async fn a_repeated_request_id_creates_once(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.webhooks.allow_insecure_targets = true).await;
    let key = app.test_key.clone();
    for (path, body) in creates() {
        let body = with_request_id(&body, "form-1");
        let first = app
            .post(path, &key, body.clone())
            .await
            .expect(created_status(path));
        let id = created_id(path, first.data());
        let repeat = app
            .post(path, &key, body.clone())
            .await
            .expect_error(409, "duplicate_request");
        assert_eq!(repeat.data()["id"], id, "{path}");
        assert_eq!(listed(&app, path, &key).await, 1, "{path}");
        // A key is per workspace and mode: the live side has its own.
        assert_ne!(
            app.post(path, &app.live_key, body).await.status,
            409,
            "{path}"
        );
        // Too long a key is refused before anything is written.
        let long = with_request_id(&creates_body(path), &"r".repeat(256));
        let reply = app
            .post(path, &key, long)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], "request_id", "{path}");
    }
}

fn creates_body(path: &str) -> Value {
    creates()
        .into_iter()
        .find(|(p, _)| *p == path)
        .map(|(_, body)| body)
        .unwrap()
}

async fn a_double_click_creates_one_resource(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.webhooks.allow_insecure_targets = true).await;
    let key = app.test_key.clone();
    for (path, body) in creates() {
        let body = with_request_id(&body, "double-click");
        let (a, b) = futures_util::future::join(
            app.post(path, &key, body.clone()),
            app.post(path, &key, body.clone()),
        )
        .await;
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [created_status(path), 409],
            "{path}: {} / {}",
            a.body,
            b.body
        );
        let (created, repeat) = if a.status == 409 { (b, a) } else { (a, b) };
        assert_eq!(repeat.code(), "duplicate_request");
        assert_eq!(
            repeat.data()["id"],
            created_id(path, created.data()),
            "{path}"
        );
        assert_eq!(listed(&app, path, &key).await, 1, "{path}");
    }
}

async fn a_failed_create_leaves_its_request_id_free(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    let bad = json!({ "name": "Reminders", "from_number": SENDER, "body": "",
                      "recipients": [{ "to": RECIPIENT }], "request_id": "retry-me" });
    app.post("/v1/campaigns", &key, bad)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(listed(&app, "/v1/campaigns", &key).await, 0);
    let good = json!({ "name": "Reminders", "from_number": SENDER, "body": "See you",
                       "recipients": [{ "to": RECIPIENT }], "request_id": "retry-me" });
    let created = app
        .post("/v1/campaigns", &key, good.clone())
        .await
        .expect(201);
    let repeat = app
        .post("/v1/campaigns", &key, good)
        .await
        .expect_error(409, "duplicate_request");
    assert_eq!(repeat.data()["id"], created.data()["id"]);
    // The same key on another kind of create is another key.
    app.post(
        "/v1/contacts",
        &key,
        json!({ "phone_number": RECIPIENT, "request_id": "retry-me" }),
    )
    .await
    .expect(201);
}

/// An open event stream and the events read from it so far.
struct EventStream {
    body: futures_util::stream::LocalBoxStream<
        'static,
        Result<bytes::Bytes, awc::error::PayloadError>,
    >,
    buffer: String,
}

impl EventStream {
    async fn open(app: &TestApp, key: &str) -> Result<EventStream, u16> {
        let response = awc::Client::new()
            .get(format!("{}/v1/events/stream", app.address))
            .insert_header(("x-api-key", key))
            .send()
            .await
            .expect("stream request completes");
        if response.status().as_u16() != 200 {
            return Err(response.status().as_u16());
        }
        let headers = response.headers();
        assert_eq!(headers.get("content-type").unwrap(), "text/event-stream");
        assert_eq!(headers.get("x-accel-buffering").unwrap(), "no");
        assert_eq!(headers.get("cache-control").unwrap(), "no-cache");
        Ok(EventStream {
            body: response.boxed_local(),
            buffer: String::new(),
        })
    }

    /// The next event (name, data), or None when none arrives within `within`.
    async fn next_within(&mut self, within: Duration) -> Option<(String, Value)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if block.starts_with(':') {
                    continue;
                }
                let mut name = String::new();
                let mut data = Value::Null;
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_string();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = serde_json::from_str(d).expect("data is JSON");
                    }
                }
                return Some((name, data));
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next()).await;
            match chunk {
                Ok(Some(Ok(bytes))) => self.buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
                _ => return None,
            }
        }
    }

    /// Reads events until one named `name` satisfies `check`; panics after 10 s.
    async fn wait_for(&mut self, name: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some((event, data)) = self.next_within(left).await else {
                panic!("no {name} event as expected within 10 s");
            };
            if event == name && check(&data) {
                return data;
            }
        }
    }
}

async fn live_events_follow_phones_and_messages(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut stream = EventStream::open(&app, &app.live_key).await.unwrap();
    let mut other_mode = EventStream::open(&app, &app.test_key).await.unwrap();
    let (name, snapshot) = stream.next_within(Duration::from_secs(5)).await.unwrap();
    assert_eq!(name, "snapshot");
    assert_eq!(
        snapshot,
        json!({ "phones": [{ "id": phone_id, "online": false, "last_seen_at": null }] })
    );
    let (_, test_snapshot) = other_mode
        .next_within(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(test_snapshot, json!({ "phones": [] }));

    let mut phone = app.connect_phone(&token).await;
    let online = stream
        .wait_for("phone.status", |d| d["id"] == phone_id.as_str())
        .await;
    assert_eq!(online["online"], true);
    assert!(online["last_seen_at"].is_string());

    let sent = app
        .send(
            &app.live_key,
            json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "hi" }),
        )
        .await
        .expect(202);
    let id = sent.data()["id"].as_str().unwrap().to_string();
    let queued = stream
        .wait_for("message.status", |d| d["id"] == id.as_str())
        .await;
    assert_eq!(queued["direction"], "outbound");
    let (message_id, ..) = phone.expect_send().await;
    assert_eq!(message_id.to_string(), id);
    phone
        .report(smsgw::domain::protocol::PhoneFrame::Sent {
            message_id,
            reference: None,
        })
        .await;
    stream
        .wait_for("message.status", |d| {
            d["id"] == id.as_str() && d["status"] == "sent"
        })
        .await;

    phone.close().await;
    let offline = stream
        .wait_for("phone.status", |d| d["id"] == phone_id.as_str())
        .await;
    assert_eq!(offline["online"], false);

    // The test-mode stream saw none of it.
    assert!(
        other_mode
            .next_within(Duration::from_millis(300))
            .await
            .is_none()
    );
}

async fn event_streams_per_workspace_are_bounded(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    let mut open = Vec::new();
    for _ in 0..5 {
        open.push(EventStream::open(&app, &key).await.unwrap());
    }
    assert_eq!(EventStream::open(&app, &key).await.err(), Some(429));
    // The other mode has places of its own.
    let _live = EventStream::open(&app, &app.live_key).await.unwrap();
    // Closing one frees its place once the server notices, at its next writes to it: test
    // sends make events to write.
    drop(open.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match EventStream::open(&app, &key).await {
            Ok(_) => break,
            Err(429) if tokio::time::Instant::now() < deadline => {
                app.send_test(RECIPIENT, "tick").await.expect(202);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("a place was not freed: {status}"),
        }
    }
}

async fn conversations_group_messages_by_the_other_side(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    let other = "+14155550124";
    app.request(
        "PUT",
        "/v1/ai/settings",
        Some(&key),
        Some(json!({ "enabled": true, "mode": "draft",
                     "rules": [{ "keywords": ["hours"], "reply": "Open 9 to 5" }] })),
    )
    .await
    .expect(200);
    app.post(
        "/v1/contacts",
        &key,
        json!({ "phone_number": RECIPIENT, "first_name": "Ann", "last_name": "Lee" }),
    )
    .await
    .expect(201);
    app.send_test(RECIPIENT, "Your appointment is at 3")
        .await
        .expect(202);
    app.send_test(other, "Hello").await.expect(202);
    for content in ["Thanks!", "What are your hours?"] {
        app.test_inbound(RECIPIENT, content).await;
    }
    // The draft is made off the request path: wait for it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let list = loop {
        let list = app.get("/v1/conversations", &key).await.expect(200);
        if list.data()["conversations"][0]["pending_drafts"] == 1 {
            break list;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no draft: {}",
            list.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let items = list.data()["conversations"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{}", list.body);
    let ann = &items[0];
    assert_eq!(ann["number"], RECIPIENT);
    assert_eq!(ann["contact"]["name"], "Ann Lee");
    assert_eq!(ann["inbound_count"], 2);
    assert_eq!(ann["last_message"]["direction"], "inbound");
    assert_eq!(ann["last_message"]["body"], "What are your hours?");
    assert_eq!(ann["last_activity_at"], ann["last_message"]["created_at"]);
    assert_eq!(items[1]["number"], other);
    assert_eq!(items[1]["contact"], Value::Null);
    assert_eq!(items[1]["inbound_count"], 0);
    assert_eq!(items[1]["pending_drafts"], 0);
    assert_eq!(list.data()["has_more"], false);

    // Search by name or by number; pages by cursor.
    let numbers = |reply: &crate::helpers::Reply| -> Vec<String> {
        reply.data()["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["number"].as_str().unwrap().to_string())
            .collect()
    };
    for (q, expected) in [
        ("ann", vec![RECIPIENT]),
        ("LEE", vec![RECIPIENT]),
        ("0124", vec![other]),
        ("(415) 555-0124", vec![other]),
        ("nobody", vec![]),
    ] {
        let found = app
            .get(&format!("/v1/conversations?q={}", urlencode(q)), &key)
            .await
            .expect(200);
        assert_eq!(numbers(&found), expected, "q={q}");
    }
    let first = app.get("/v1/conversations?limit=1", &key).await.expect(200);
    assert_eq!(numbers(&first), vec![RECIPIENT]);
    assert_eq!(first.data()["has_more"], true);
    let cursor = first.data()["next_cursor"].as_str().unwrap();
    let second = app
        .get(&format!("/v1/conversations?limit=1&cursor={cursor}"), &key)
        .await
        .expect(200);
    assert_eq!(numbers(&second), vec![other]);
    assert_eq!(second.data()["has_more"], false);
    assert_eq!(second.data()["next_cursor"], Value::Null);

    // One conversation, oldest first, drafts beside the message they answer.
    let path = format!("/v1/conversations/{}", urlencode(RECIPIENT));
    let detail = app.get(&path, &key).await.expect(200);
    assert_eq!(detail.data()["number"], RECIPIENT);
    assert_eq!(detail.data()["contact"]["name"], "Ann Lee");
    let messages = detail.data()["messages"].as_array().unwrap();
    let texts: Vec<&str> = messages
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "Your appointment is at 3",
            "Thanks!",
            "What are your hours?"
        ]
    );
    assert!(
        messages[0].get("drafts").is_none(),
        "outbound messages carry no drafts"
    );
    assert_eq!(messages[1]["drafts"], json!([]));
    assert_eq!(messages[2]["drafts"][0]["status"], "pending");
    assert_eq!(messages[2]["drafts"][0]["body"], "Open 9 to 5");
    let newest = app.get(&format!("{path}?limit=2"), &key).await.expect(200);
    let texts: Vec<&str> = newest.data()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Thanks!", "What are your hours?"]);
    let older = newest.data()["next_cursor"].as_str().unwrap();
    let rest = app
        .get(&format!("{path}?limit=2&cursor={older}"), &key)
        .await
        .expect(200);
    assert_eq!(
        rest.data()["messages"][0]["content"],
        "Your appointment is at 3"
    );
    assert_eq!(rest.data()["has_more"], false);

    // Modes do not mix; bad input is refused.
    let live = app
        .get("/v1/conversations", &app.live_key)
        .await
        .expect(200);
    assert_eq!(live.data()["conversations"], json!([]));
    let empty = app.get(&path, &app.live_key).await.expect(200);
    assert_eq!(empty.data()["messages"], json!([]));
    for (query, field) in [
        ("cursor=nonsense", "cursor"),
        ("limit=0", "limit"),
        (&*format!("q={}", "a".repeat(65)), "q"),
    ] {
        let reply = app
            .get(&format!("/v1/conversations?{query}"), &key)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field);
    }
    app.get(&format!("{path}?limit=201"), &key)
        .await
        .expect_error(422, "validation_failed");
}

async fn a_campaign_preview_shows_texts_and_blanks_and_writes_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    let (ann, bob, nameless) = ("+14155550201", "+14155550202", "+14155550203");
    for (number, first_name) in [(ann, Some("Ann")), (bob, Some("Bob")), (nameless, None)] {
        app.post(
            "/v1/contacts",
            &key,
            json!({ "phone_number": number, "first_name": first_name, "tags": ["patients"] }),
        )
        .await
        .expect(201);
    }
    let bob_id = app.get("/v1/contacts?limit=100", &key).await.data()["contacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["phone_number"] == bob)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.patch(
        &format!("/v1/contacts/{bob_id}"),
        &key,
        json!({ "opted_out": true }),
    )
    .await
    .expect(200);
    let body = json!({
        "name": "Reminders",
        "from_number": SENDER,
        "body": "Hi {{first_name}}, see you at {{time}}",
        "recipients": [
            { "to": RECIPIENT, "vars": { "first_name": "Zed", "time": "3pm" } },
            { "to": "+19005550123" },
        ],
        "contact_tags": ["patients"],
        "launch_now": true,
        "request_id": "preview-is-not-a-create",
    });
    let preview = app
        .post("/v1/campaigns/preview", &key, body.clone())
        .await
        .expect(200);
    let data = preview.data();
    assert_eq!(data["recipient_count"], 3, "{}", preview.body);
    assert_eq!(
        data["skipped"],
        json!({ "opted_out": 1, "premium_rate": 1 })
    );
    assert_eq!(data["unsendable"], 0);
    assert_eq!(data["phone"], Value::Null, "test mode has no phone");
    assert_eq!(data["max_segments"], 1);
    assert_eq!(
        data["samples"][0],
        json!({ "to": RECIPIENT, "text": "Hi Zed, see you at 3pm", "segments": 1, "encoding": "GSM-7" })
    );
    assert_eq!(data["samples"][1]["text"], "Hi Ann, see you at ");
    assert_eq!(data["samples"].as_array().unwrap().len(), 3);
    assert_eq!(
        data["missing_vars"],
        json!([
            { "to": ann, "names": ["time"] },
            { "to": nameless, "names": ["first_name", "time"] },
        ])
    );
    assert_eq!(data["missing_vars_count"], 2);

    // Nothing was written, and the request_id is still free for the real create.
    let listed = app.get("/v1/campaigns", &key).await.expect(200);
    assert_eq!(listed.data()["campaigns"], json!([]));
    app.post("/v1/campaigns", &key, body).await.expect(201);

    // The same validation and errors as creation.
    let bad = app
        .post(
            "/v1/campaigns/preview",
            &key,
            json!({ "name": "x", "from_number": SENDER, "body": "", "recipients": [{ "to": RECIPIENT }] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(bad.data()["field"], "body");
    let bad = app
        .post(
            "/v1/campaigns/preview",
            &key,
            json!({ "name": "x", "from_number": SENDER, "body": "hi", "recipients": [{ "to": "12" }] }),
        )
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(bad.data()["field"], "recipients[0].to");

    // Live: the phone that would send, online or not.
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let live_body = json!({ "name": "x", "from_number": SENDER, "body": "hi",
                            "recipients": [{ "to": RECIPIENT }] });
    let offline = app
        .post("/v1/campaigns/preview", &app.live_key, live_body.clone())
        .await
        .expect(200);
    assert_eq!(offline.data()["phone"]["id"], phone_id.as_str());
    assert_eq!(offline.data()["phone"]["phone_number"], SENDER);
    assert_eq!(offline.data()["phone"]["online"], false);
    let _phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    let online = app
        .post("/v1/campaigns/preview", &app.live_key, live_body)
        .await
        .expect(200);
    assert_eq!(online.data()["phone"]["online"], true);
}

async fn contacts_are_searched_and_imports_previewed(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    for (number, first, last, email) in [
        ("+14155550177", "Ann", "Lee", "ann@example.com"),
        ("+14155550178", "Annabel", "Smith", "bel@example.com"),
        ("+447911123456", "Bob", "Lee", "bob@example.org"),
    ] {
        app.post(
            "/v1/contacts",
            &key,
            json!({ "phone_number": number, "first_name": first, "last_name": last, "email": email }),
        )
        .await
        .expect(201);
    }
    let found = |q: &'static str| {
        let app = &app;
        let key = key.clone();
        async move {
            let reply = app
                .get(&format!("/v1/contacts?q={}", urlencode(q)), &key)
                .await
                .expect(200);
            let mut numbers: Vec<String> = reply.data()["contacts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["phone_number"].as_str().unwrap().to_string())
                .collect();
            numbers.sort();
            numbers
        }
    };
    assert_eq!(found("ann").await, ["+14155550177", "+14155550178"]);
    assert_eq!(found("ANN lee").await, ["+14155550177"]);
    assert_eq!(found("lee").await, ["+14155550177", "+447911123456"]);
    assert_eq!(found("7911").await, ["+447911123456"]);
    assert_eq!(found("example.org").await, ["+447911123456"]);
    assert_eq!(found("%").await, Vec::<String>::new());
    assert_eq!(found("zed").await, Vec::<String>::new());
    // Combined with the other filters, and paged.
    let page = app
        .get("/v1/contacts?q=lee&limit=1", &key)
        .await
        .expect(200);
    assert_eq!(page.data()["has_more"], true);
    app.get(&format!("/v1/contacts?q={}", "a".repeat(65)), &key)
        .await
        .expect_error(422, "validation_failed");

    // A dry-run import says what it would do and writes nothing.
    let import = json!({ "contacts": [
        { "phone_number": "+14155550177", "first_name": "Annie" },
        { "phone_number": "+14155550999", "first_name": "New" },
    ] });
    let plan = app
        .post("/v1/contacts/import?dry_run=true", &key, import.clone())
        .await
        .expect(200);
    assert_eq!(
        plan.data(),
        &json!({ "created": 1, "updated": 1, "items": [
            { "index": 0, "phone_number": "+14155550177", "action": "update" },
            { "index": 1, "phone_number": "+14155550999", "action": "create" },
        ] })
    );
    assert_eq!(found("annie").await, Vec::<String>::new());
    assert_eq!(found("0999").await, Vec::<String>::new());
    // The same errors as the import.
    let bad = app
        .post(
            "/v1/contacts/import?dry_run=true",
            &key,
            json!({ "contacts": [{ "phone_number": "12" }] }),
        )
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(bad.data()["field"], "contacts[0].phone_number");
    app.post("/v1/contacts/import?dry_run=maybe", &key, import.clone())
        .await
        .expect_error(422, "validation_failed");
    // The real import does what the plan said.
    let done = app
        .post("/v1/contacts/import", &key, import)
        .await
        .expect(200);
    assert_eq!(done.data(), &json!({ "created": 1, "updated": 1 }));
    assert_eq!(found("annie").await, ["+14155550177"]);
}

async fn a_dry_run_import_checks_the_quota(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.quotas.contacts = 1).await;
    let key = app.test_key.clone();
    let two = json!({ "contacts": [
        { "phone_number": "+14155550177" }, { "phone_number": "+14155550178" },
    ] });
    app.post("/v1/contacts/import?dry_run=true", &key, two)
        .await
        .expect_error(422, "quota_exceeded");
    let one = json!({ "contacts": [{ "phone_number": "+14155550177" }] });
    app.post("/v1/contacts/import?dry_run=true", &key, one)
        .await
        .expect(200);
}

/// Polls `path` until `check` holds on its data; panics after 10 s.
async fn wait_for_data(
    app: &TestApp,
    path: &str,
    key: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || {
            let reply = app.get(path, key).await.expect(200);
            if check(reply.data()) {
                return Ok(reply.data().clone());
            }
            Err(format!("{path} never as expected: {}", reply.body))
        },
    )
    .await
}

async fn daily_counts_and_the_overview_add_up(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.webhooks.allow_insecure_targets = true).await;
    let key = app.test_key.clone();
    for (url, enabled) in [
        ("http://127.0.0.1:9/refused", true),
        ("http://127.0.0.1:9/off", false),
    ] {
        app.post(
            "/v1/webhooks",
            &key,
            json!({ "url": url, "events": ["message.sent"], "enabled": enabled }),
        )
        .await
        .expect(201);
    }
    app.send_test(RECIPIENT, "one").await.expect(202);
    app.send_test("+14155550124", "two").await.expect(202);
    // Test mode's number that fails every attempt.
    app.send_test("+15005550001", "three").await.expect(202);
    app.test_inbound(RECIPIENT, "hello").await;

    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let stats = wait_for_data(&app, "/v1/stats/daily", &key, |d| {
        let last = &d["days"][6];
        last["delivered"] == 2 && last["failed"] == 1 && last["received"] == 1
    })
    .await;
    let days = stats["days"].as_array().unwrap();
    assert_eq!(days.len(), 7);
    assert_eq!(days[6]["date"], today.as_str());
    assert_eq!(days[6]["sent"], 2);
    let dates: Vec<&str> = days.iter().map(|d| d["date"].as_str().unwrap()).collect();
    let mut sorted = dates.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, dates, "oldest first, each day once");
    for day in &days[..6] {
        assert_eq!(
            (
                &day["sent"],
                &day["delivered"],
                &day["failed"],
                &day["received"]
            ),
            (&json!(0), &json!(0), &json!(0), &json!(0))
        );
    }
    let one = app.get("/v1/stats/daily?days=1", &key).await.expect(200);
    assert_eq!(one.data()["days"].as_array().unwrap().len(), 1);
    assert_eq!(
        app.get("/v1/stats/daily?days=90", &key)
            .await
            .expect(200)
            .data()["days"]
            .as_array()
            .unwrap()
            .len(),
        90
    );
    for days in ["0", "91", "week"] {
        let reply = app
            .get(&format!("/v1/stats/daily?days={days}"), &key)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], "days");
    }
    // The live side counted nothing.
    let live = app.get("/v1/stats/daily", &app.live_key).await.expect(200);
    assert_eq!(live.data()["days"][6]["sent"], 0);

    // The overview: today's counts, and the endpoint that refuses plus the disabled one.
    let overview = wait_for_data(&app, "/v1/overview", &key, |d| {
        d["webhook_endpoints_failing"] == 2
    })
    .await;
    assert_eq!(
        overview["today"],
        json!({ "sent": 2, "delivered": 2, "failed": 1, "received": 1 })
    );
    assert_eq!(overview["phones"], json!({ "total": 0, "online": 0 }));
    assert_eq!(overview["campaigns_running"], 0);

    // Live: a phone paired and offline, a campaign running (waiting for it), then online.
    let (phone_id, token) = app.pair_phone(SENDER).await;
    app.post(
        "/v1/campaigns",
        &app.live_key,
        json!({ "name": "Reminders", "from_number": SENDER, "body": "See you",
                "recipients": [{ "to": RECIPIENT }], "launch_now": true }),
    )
    .await
    .expect(201);
    let live = app.get("/v1/overview", &app.live_key).await.expect(200);
    assert_eq!(live.data()["phones"], json!({ "total": 1, "online": 0 }));
    assert_eq!(live.data()["campaigns_running"], 1);
    assert_eq!(live.data()["webhook_endpoints_failing"], 0);
    let _phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    let live = app.get("/v1/overview", &app.live_key).await.expect(200);
    assert_eq!(live.data()["phones"], json!({ "total": 1, "online": 1 }));
}

/// Percent-encodes a query or path value.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

backend_tests!(
    daily_counts_and_the_overview_add_up,
    contacts_are_searched_and_imports_previewed,
    a_dry_run_import_checks_the_quota,
    a_campaign_preview_shows_texts_and_blanks_and_writes_nothing,
    conversations_group_messages_by_the_other_side,
    workspace_is_read_with_the_key_and_updated,
    server_defaults_apply_to_the_workspace,
    numbers_are_looked_up_as_people_type_them,
    national_numbers_need_a_country,
    a_repeated_request_id_creates_once,
    a_double_click_creates_one_resource,
    a_failed_create_leaves_its_request_id_free,
    live_events_follow_phones_and_messages,
    event_streams_per_workspace_are_bounded,
);
