//! Live events (docs/api.md, "Live events"): a server-sent event stream that follows phones
//! and messages, bounded per workspace.

use super::*;

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

impl EventStream {
    /// Reads until the server ends the response; false when it is still open after `within`.
    async fn ends_within(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(None) => return true,
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(err))) => panic!("the stream broke instead of ending: {err}"),
                Err(_) => return false,
            }
        }
    }
}

/// A key created for the test, and its id.
async fn new_key(app: &TestApp) -> (String, String) {
    let created = app
        .request("POST", "/v1/keys", Some(&app.live_key), None)
        .await
        .expect(201);
    let data = created.data();
    (
        data["key"].as_str().unwrap().to_string(),
        data["id"].as_str().unwrap().to_string(),
    )
}

/// An open stream ends soon after its key is revoked, through the API or by the CLI on the
/// running server; the streams of other keys stay open.
async fn a_revoked_keys_streams_end(backend: Backend) {
    let app = spawn_app(backend).await;
    let (key, key_id) = new_key(&app).await;
    let mut revoked = EventStream::open(&app, &key).await.unwrap();
    let mut kept = EventStream::open(&app, &app.live_key).await.unwrap();
    for stream in [&mut revoked, &mut kept] {
        let (name, _) = stream.next_within(Duration::from_secs(5)).await.unwrap();
        assert_eq!(name, "snapshot");
    }
    // Open and quiet: a stream does not end by itself.
    assert!(!revoked.ends_within(Duration::from_millis(1500)).await);
    app.delete(&format!("/v1/keys/{key_id}"), &app.live_key)
        .await
        .expect(200);
    assert!(
        revoked.ends_within(Duration::from_secs(2)).await,
        "the revoked key's stream is still open"
    );
    assert!(!kept.ends_within(Duration::from_millis(500)).await);

    // By the CLI, another process: the server learns of it through the key generation.
    let (key, _) = new_key(&app).await;
    let mut stream = EventStream::open(&app, &key).await.unwrap();
    stream.next_within(Duration::from_secs(5)).await.unwrap();
    let env = [("SMSGW_DATABASE__URL", app.database_url.as_str())];
    let out = crate::helpers::run_cli(&["key", "revoke", &key], &env).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stream.ends_within(Duration::from_secs(2)).await,
        "the stream of a key revoked by the CLI is still open"
    );
    assert!(!kept.ends_within(Duration::from_millis(200)).await);
}

backend_tests!(
    a_revoked_keys_streams_end,
    live_events_follow_phones_and_messages,
    event_streams_per_workspace_are_bounded,
);
