//! The SMSGate-compatible client API (`/3rdparty/v1`, docs/compat.md) through HTTP, as the
//! official clients call it: Basic or Bearer with an smsgw API key, `{message}` errors,
//! `Content-Type: application/json` exactly.

use std::time::Duration;

use serde_json::{Value, json};
use smsgw::domain::pace::Pace;
use smsgw::domain::protocol::PhoneFrame;

use crate::backend_tests;
use crate::helpers::{
    Backend, Reply, SENDER, TestApp, basic, bearer, poll, spawn_app, spawn_app_with,
};

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

async fn revoked_keys_and_the_failed_auth_budget_apply(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.limits.failed_auth_per_second = 1).await;
    let created = app
        .request("POST", "/v1/keys", Some(&app.test_key), None)
        .await
        .expect(201);
    let key = created.data()["key"].as_str().unwrap().to_string();
    let key_id = created.data()["id"].as_str().unwrap().to_string();
    let reply = app
        .client_api("GET", "/messages", Some(&bearer(&key)), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    app.delete(&format!("/v1/keys/{key_id}"), &app.test_key)
        .await
        .expect(200);
    let reply = app
        .client_api("GET", "/messages", Some(&bearer(&key)), None)
        .await;
    expect_client_error(&reply, 401);
    let good = bearer(&app.live_key);
    let reply = app.client_api("GET", "/devices", Some(&good), None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Guessing keys spends the address's budget (1 per second, burst 2): then 429.
    let mut statuses = Vec::new();
    for i in 0..6 {
        let guess = bearer(&format!("sk_live_{i:0>40}"));
        let reply = app.client_api("GET", "/devices", Some(&guess), None).await;
        if reply.status == 429 {
            expect_client_error(&reply, 429);
            assert!(
                reply.headers.contains_key("retry-after"),
                "{:?}",
                reply.headers
            );
        }
        statuses.push(reply.status);
    }
    assert_eq!(statuses[0], 401, "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    // A good key already in use is still served.
    let reply = app.client_api("GET", "/devices", Some(&good), None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// A server whose phones have pace to spare for a few messages at once.
async fn spawn_fast(backend: Backend) -> TestApp {
    spawn_app_with(backend, |s| {
        s.pace = Pace::new(600, 10_000).expect("pace");
    })
    .await
}

/// Polls `GET /messages/{id}` until `check` holds, or panics after 10 s.
async fn wait_for_state(
    app: &TestApp,
    auth: &str,
    id: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let reply = app
                .client_api("GET", &format!("/messages/{id}"), Some(auth), None)
                .await;
            if reply.status == 200 && check(&reply.body) {
                return Ok(reply.body);
            }
            Err(format!(
                "message {id} never reached the expected state; last: {}",
                reply.body
            ))
        },
    )
    .await
}

/// Asserts a timestamp the clients parse: RFC 3339, three fractional digits, `Z`.
#[track_caller]
fn assert_wire_time(value: &Value) {
    let text = value.as_str().unwrap_or_default();
    assert_eq!(text.len(), 24, "{text}");
    assert!(text.ends_with('Z') && text.as_bytes()[19] == b'.', "{text}");
    assert!(chrono::DateTime::parse_from_rfc3339(text).is_ok(), "{text}");
}

async fn a_message_goes_through_a_phone_and_aggregates_its_recipients(backend: Backend) {
    let app = spawn_fast(backend).await;
    let auth = basic("any-login", &app.live_key);
    let (phone_id, mut phone) = app.online_phone(SENDER).await;
    let body = json!({
        "id": "order-1001",
        "textMessage": {"text": "your code is 1234"},
        "phoneNumbers": ["+14155550123", "+14155550124"],
        "withDeliveryReport": true, "isEncrypted": false, "priority": 0,
    });
    let reply = app
        .client_api("POST", "/messages", Some(&auth), Some(body))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(
        reply.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert!(
        reply.headers["location"].ends_with("/3rdparty/v1/messages/order-1001"),
        "{:?}",
        reply.headers
    );
    assert_eq!(reply.body["id"], "order-1001");
    assert_eq!(reply.body["textMessage"]["text"], "your code is 1234");
    assert_eq!(reply.body["deviceId"], phone_id.as_str());
    let recipients = reply.body["recipients"].as_array().expect("recipients");
    assert_eq!(recipients.len(), 2);
    assert_eq!(recipients[0]["phoneNumber"], "+14155550123");
    assert_wire_time(&reply.body["states"]["Pending"]);

    // The phone sends both; one is delivered, the other fails for good.
    let mut sent = Vec::new();
    for _ in 0..2 {
        let (message_id, to, content, _) = phone.expect_send().await;
        assert_eq!(content, "your code is 1234");
        sent.push((message_id, to));
    }
    sent.sort_by(|a, b| a.1.cmp(&b.1));
    let (first, second) = (sent[0].0, sent[1].0);
    phone
        .report(PhoneFrame::Sent {
            message_id: first,
            reference: Some("s1".into()),
        })
        .await;
    let state = wait_for_state(&app, &auth, "order-1001", |m| {
        m["recipients"][0]["state"] == "Sent"
    })
    .await;
    // One sent, one still with the phone: the group is Processed.
    assert_eq!(state["state"], "Processed", "{state}");
    phone
        .report(PhoneFrame::Delivered {
            message_id: first,
            reference: Some("d1".into()),
        })
        .await;
    for attempt in 1..=3 {
        if attempt > 1 {
            let (again, _, _, _) = phone.expect_send().await;
            assert_eq!(again, second);
        }
        phone
            .report(PhoneFrame::Failed {
                message_id: second,
                error: "no signal".into(),
                reference: Some(format!("f{attempt}")),
            })
            .await;
    }
    let state = wait_for_state(&app, &auth, "order-1001", |m| m["state"] == "Sent").await;
    assert_eq!(state["recipients"][0]["state"], "Delivered");
    assert_eq!(state["recipients"][1]["state"], "Failed");
    assert_eq!(state["recipients"][1]["error"], "no signal");
    for reached in ["Pending", "Processed", "Sent"] {
        assert_wire_time(&state["states"][reached]);
    }
    // Delivered and Failed were never the whole group's state.
    assert!(state["states"].get("Delivered").is_none(), "{state}");
    assert!(state["states"].get("Failed").is_none(), "{state}");
    // The same id again is refused, and nothing new is sent.
    let again = json!({"id": "order-1001", "message": "again", "phoneNumbers": ["+14155550125"]});
    let reply = app
        .client_api("POST", "/messages", Some(&auth), Some(again))
        .await;
    expect_client_error(&reply, 409);
    assert_eq!(
        reply.body["message"],
        "message with the same ID already exists"
    );
    assert!(
        phone
            .next_frame_within(Duration::from_millis(300))
            .await
            .is_none()
    );
}

async fn a_test_key_sends_through_the_simulated_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    let auth = bearer(&app.test_key);
    // The legacy singular route and text field of older clients.
    let body = json!({"message": "hello", "phoneNumbers": ["+14155550123"]});
    let reply = app
        .client_api("POST", "/message", Some(&auth), Some(body))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let id = reply.body["id"].as_str().expect("generated id").to_string();
    assert_eq!(id.len(), 21, "{id}");
    assert!(reply.headers["location"].ends_with(&format!("/messages/{id}")));
    let state = wait_for_state(&app, &auth, &id, |m| m["state"] == "Delivered").await;
    for reached in ["Pending", "Processed", "Sent", "Delivered"] {
        assert_wire_time(&state["states"][reached]);
    }
    let legacy = app
        .client_api("GET", &format!("/message/{id}"), Some(&auth), None)
        .await;
    assert_eq!(legacy.body["state"], "Delivered");
    // The live key does not see test messages.
    let live = app
        .client_api(
            "GET",
            &format!("/messages/{id}"),
            Some(&bearer(&app.live_key)),
            None,
        )
        .await;
    expect_client_error(&live, 404);
    // Any characters in a given id: the Location is percent-encoded and leads back to it.
    let body = json!({"id": "my id:ü", "message": "hello", "phoneNumbers": ["+14155550124"]});
    let reply = app
        .client_api("POST", "/messages", Some(&auth), Some(body))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let location = reply.headers["location"].clone();
    assert!(
        location.ends_with("/messages/my%20id%3A%C3%BC"),
        "{location}"
    );
    let path = location
        .split("/3rdparty/v1")
        .nth(1)
        .expect("under the mount");
    let found = app.client_api("GET", path, Some(&auth), None).await;
    assert_eq!(found.body["id"], "my id:ü", "{}", found.body);
    let bad_query = app
        .client_api("GET", "/messages?limit=%zz", Some(&auth), None)
        .await;
    expect_client_error(&bad_query, 400);
    // A live key without phones cannot send.
    let body = json!({"message": "hello", "phoneNumbers": ["+14155550123"]});
    let reply = app
        .client_api(
            "POST",
            "/messages",
            Some(&bearer(&app.live_key)),
            Some(body),
        )
        .await;
    expect_client_error(&reply, 400);
}

async fn bad_messages_are_refused_and_store_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let auth = bearer(&app.test_key);
    let text = json!({"text": "hi"});
    let cases = [
        json!({"textMessage": text, "phoneNumbers": []}),
        json!({"textMessage": text}),
        json!({"phoneNumbers": ["+14155550123"]}),
        json!({"textMessage": text, "phoneNumbers": ["89990001234"]}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123", "+1 415 555 0123"]}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123"], "priority": 128}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123"], "priority": -129}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123"], "simNumber": 4}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123"], "ttl": 60, "validUntil": "2030-01-01T00:00:00"}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123"], "validUntil": "yesterday"}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123"], "isEncrypted": true}),
        json!({"dataMessage": {"data": "aGk=", "port": 53739}, "phoneNumbers": ["+14155550123"]}),
        json!({"mmsMessage": {"text": "hi"}, "phoneNumbers": ["+14155550123"]}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123"], "id": "x".repeat(37)}),
        json!({"textMessage": text, "phoneNumbers": ["+14155550123"], "deviceId": "invalid-device-id"}),
        json!({"textMessage": text, "phoneNumbers": "+14155550123"}),
    ];
    for body in cases {
        let reply = app
            .client_api("POST", "/messages", Some(&auth), Some(body.clone()))
            .await;
        expect_client_error(&reply, 400);
        assert!(
            !reply.body["message"].as_str().unwrap_or("").is_empty(),
            "{body}"
        );
    }
    let reply = app
        .client_api(
            "POST",
            "/messages",
            Some(&auth),
            Some(json!({"textMessage": text, "phoneNumbers": ["+14155550123", "+14155550123"]})),
        )
        .await;
    assert_eq!(reply.body["message"], "phone numbers must be unique");
    let premium = json!({"textMessage": text, "phoneNumbers": ["+19005550123"]});
    let reply = app
        .client_api("POST", "/messages", Some(&auth), Some(premium))
        .await;
    expect_client_error(&reply, 403);
    let list = app.client_api("GET", "/messages", Some(&auth), None).await;
    assert_eq!(list.body, json!([]));
    assert_eq!(list.headers["x-total-count"], "0");
}

async fn a_reused_id_creates_nothing_even_under_concurrency(backend: Backend) {
    let app = spawn_app(backend).await;
    let auth = bearer(&app.test_key);
    let sends = (0..8).map(|i| {
        let body = json!({
            "id": "same-id",
            "textMessage": {"text": format!("attempt {i}")},
            "phoneNumbers": ["+14155550123", "+14155550124"],
        });
        app.client_api("POST", "/messages", Some(&auth), Some(body))
    });
    let replies = futures_util::future::join_all(sends).await;
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    let conflicts: Vec<&Reply> = replies.iter().filter(|r| r.status == 409).collect();
    assert_eq!(accepted, 1, "{replies:?}");
    assert_eq!(conflicts.len(), 7, "{replies:?}");
    for reply in conflicts {
        assert_eq!(
            reply.body["message"],
            "message with the same ID already exists"
        );
    }
    let state = app
        .client_api("GET", "/messages/same-id", Some(&auth), None)
        .await;
    assert_eq!(state.body["recipients"].as_array().map(Vec::len), Some(2));
    let list = app.client_api("GET", "/messages", Some(&auth), None).await;
    assert_eq!(list.headers["x-total-count"], "1");
    // Through /v1 too: exactly the two messages of the one accepted request.
    let v1 = app
        .get("/v1/messages?limit=100", &app.test_key)
        .await
        .expect(200);
    assert_eq!(v1.data()["messages"].as_array().map(Vec::len), Some(2));
}

async fn offline_phones_ttl_and_cancel_of_a_handed_message(backend: Backend) {
    // A phone that is paired but offline: messages stay queued.
    let app = spawn_fast(backend).await;
    let auth = bearer(&app.live_key);
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    phone.close().await;
    app.wait_online(&phone_id, false).await;
    let body = json!({"id": "later", "textMessage": {"text": "hi"}, "phoneNumbers": ["+14155550123", "+14155550124"], "deviceId": phone_id});
    let reply = app
        .client_api("POST", "/messages", Some(&auth), Some(body))
        .await;
    // An offline phone cannot take it now (smsgw queues only for a reachable phone).
    expect_client_error(&reply, 503);
    let mut phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    let body = json!({"id": "later", "textMessage": {"text": "hi"}, "phoneNumbers": ["+14155550123"], "deviceId": phone_id, "simNumber": 2, "priority": 100, "withDeliveryReport": false, "ttl": 3600});
    let reply = app
        .client_api("POST", "/messages", Some(&auth), Some(body))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let (message_id, _, _, _) = phone.expect_send().await;
    let reply = app
        .client_api("DELETE", "/messages/later", Some(&auth), None)
        .await;
    // Handed to the phone already: nothing is pending.
    expect_client_error(&reply, 409);
    assert_eq!(reply.body["message"], "message is not pending");
    let v1 = app.message(&app.live_key, &message_id.to_string()).await;
    let expires = chrono::DateTime::parse_from_rfc3339(v1["expires_at"].as_str().unwrap()).unwrap();
    let created = chrono::DateTime::parse_from_rfc3339(v1["created_at"].as_str().unwrap()).unwrap();
    assert!(
        (expires - created).num_seconds() <= 3600,
        "ttl caps the expiry"
    );

    let unknown = app
        .client_api("DELETE", "/messages/nothing", Some(&auth), None)
        .await;
    expect_client_error(&unknown, 404);
}

async fn queued_recipients_are_cancelled(backend: Backend) {
    // A phone paced to one message: the other recipients wait in the queue.
    let app = spawn_app_with(backend, |s| {
        s.pace = Pace::new(1, 1).expect("pace");
    })
    .await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    let auth = bearer(&app.live_key);
    let body = json!({"id": "c-1", "textMessage": {"text": "hi"}, "phoneNumbers": ["+14155550123", "+14155550124", "+14155550125"]});
    let reply = app
        .client_api("POST", "/messages", Some(&auth), Some(body))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let (handed, _, _, _) = phone.expect_send().await;
    let reply = app
        .client_api("DELETE", "/messages/c-1", Some(&auth), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let cancelled = reply.body["recipients"]
        .as_array()
        .expect("recipients")
        .iter()
        .filter(|r| r["state"] == "Cancelled")
        .count();
    assert_eq!(cancelled, 2, "{}", reply.body);
    let v1 = app.message(&app.live_key, &handed.to_string()).await;
    assert_eq!(v1["status"], "sending", "the handed one goes on");
    assert_eq!(reply.body["state"], "Cancelled", "{}", reply.body);
    assert_wire_time(&reply.body["states"]["Cancelled"]);
    let again = app
        .client_api("DELETE", "/messages/c-1", Some(&auth), None)
        .await;
    expect_client_error(&again, 409);
    let listed = app
        .client_api("GET", "/messages?state=Cancelled", Some(&auth), None)
        .await;
    assert_eq!(listed.headers["x-total-count"], "1");
}

async fn lists_filter_page_and_count(backend: Backend) {
    let app = spawn_app(backend).await;
    let auth = bearer(&app.test_key);
    for i in 0..5 {
        let body = json!({"id": format!("m{i}"), "textMessage": {"text": "hi"}, "phoneNumbers": [format!("+1415555012{i}")]});
        let reply = app
            .client_api("POST", "/messages", Some(&auth), Some(body))
            .await;
        assert_eq!(reply.status, 202, "{}", reply.body);
    }
    let page = app
        .client_api("GET", "/messages?limit=2&offset=1", Some(&auth), None)
        .await;
    assert_eq!(page.status, 200);
    assert_eq!(page.headers["x-total-count"], "5");
    let ids: Vec<&str> = page
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m3", "m2"]);
    assert!(
        page.body[0].get("textMessage").is_none(),
        "content only on request"
    );
    let oldest = app
        .client_api(
            "GET",
            "/messages?sort=created_at&limit=1",
            Some(&auth),
            None,
        )
        .await;
    assert_eq!(oldest.body[0]["id"], "m0");
    let clamped = app
        .client_api("GET", "/messages?limit=1000", Some(&auth), None)
        .await;
    assert_eq!(clamped.body.as_array().map(Vec::len), Some(5));
    let future = app
        .client_api(
            "GET",
            "/messages?from=2100-01-01T00:00:00",
            Some(&auth),
            None,
        )
        .await;
    assert_eq!(future.body, json!([]));
    assert_eq!(future.headers["x-total-count"], "0");
    let delivered = wait_until_delivered(&app, &auth, 5).await;
    assert_eq!(delivered, 5);
    let pending = app
        .client_api("GET", "/messages?state=Pending", Some(&auth), None)
        .await;
    assert_eq!(pending.headers["x-total-count"], "0");
    for bad in [
        "from=invalid",
        "state=InvalidState",
        "deviceId=abc",
        "offset=-1",
        "sort=name",
    ] {
        let reply = app
            .client_api("GET", &format!("/messages?{bad}"), Some(&auth), None)
            .await;
        expect_client_error(&reply, 400);
    }
}

/// Polls `GET /messages?state=Delivered` until `n` are, and returns the count.
async fn wait_until_delivered(app: &TestApp, auth: &str, n: usize) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let reply = app
            .client_api("GET", "/messages?state=Delivered", Some(auth), None)
            .await;
        let count: usize = reply.headers["x-total-count"].parse().unwrap();
        if count >= n || tokio::time::Instant::now() > deadline {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn devices_inbox_and_logs(backend: Backend) {
    let app = spawn_fast(backend).await;
    let auth = bearer(&app.live_key);
    let (phone_id, _) = app.pair_phone(SENDER).await;
    let devices = app.client_api("GET", "/devices", Some(&auth), None).await;
    assert_eq!(devices.status, 200);
    assert_eq!(devices.body[0]["id"], phone_id.as_str());
    assert_eq!(devices.body[0]["name"], SENDER);
    assert_wire_time(&devices.body[0]["createdAt"]);
    // Test-mode phones are apart.
    let test_devices = app
        .client_api("GET", "/devices", Some(&bearer(&app.test_key)), None)
        .await;
    assert_eq!(test_devices.body, json!([]));
    let refresh = json!({"since": "2026-01-01T00:00:00", "until": "2026-01-02T00:00:00Z", "deviceId": phone_id, "webhookDelivery": "Batch"});
    let reply = app
        .client_api("POST", "/inbox/refresh", Some(&auth), Some(refresh))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let export = json!({"since": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z", "deviceId": phone_id});
    let reply = app
        .client_api("POST", "/messages/inbox/export", Some(&auth), Some(export))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let bad = json!({"since": "never", "until": "2026-01-02T00:00:00Z"});
    let reply = app
        .client_api("POST", "/inbox/refresh", Some(&auth), Some(bad))
        .await;
    expect_client_error(&reply, 400);
    // Logs: the timeline of the caller's messages.
    let test = bearer(&app.test_key);
    let body =
        json!({"id": "log-me", "textMessage": {"text": "hi"}, "phoneNumbers": ["+14155550123"]});
    app.client_api("POST", "/messages", Some(&test), Some(body))
        .await;
    wait_for_state(&app, &test, "log-me", |m| m["state"] == "Delivered").await;
    let logs = app.client_api("GET", "/logs", Some(&test), None).await;
    assert_eq!(logs.status, 200, "{}", logs.body);
    let entries = logs.body.as_array().expect("entries");
    assert!(
        entries.iter().any(|e| e["context"]["event"] == "delivered"),
        "{}",
        logs.body
    );
    assert!(entries.iter().all(|e| e["priority"] == "INFO"));
    assert_wire_time(&entries[0]["createdAt"]);
    let none = app.client_api("GET", "/logs", Some(&auth), None).await;
    assert_eq!(none.body, json!([]));
    let bad = app
        .client_api("GET", "/logs?from=invalid", Some(&auth), None)
        .await;
    expect_client_error(&bad, 400);
    // Removing a device unpairs it.
    let path = format!("/devices/{phone_id}");
    let removed = app.client_api("DELETE", &path, Some(&auth), None).await;
    assert_eq!(removed.status, 204);
    let again = app.client_api("DELETE", &path, Some(&auth), None).await;
    expect_client_error(&again, 404);
    let devices = app.client_api("GET", "/devices", Some(&auth), None).await;
    assert_eq!(devices.body, json!([]));
}

/// Milliseconds since the epoch of an RFC 3339 timestamp.
#[track_caller]
fn rfc3339_ms(value: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(value.as_str().unwrap_or_default())
        .map(|t| t.timestamp_millis())
        .unwrap_or_else(|_| panic!("not a timestamp: {value}"))
}

async fn a_connected_phone_is_seen_now_and_active(backend: Backend) {
    let app = spawn_fast(backend).await;
    let auth = bearer(&app.live_key);
    let (phone_id, token) = app.pair_phone(SENDER).await;
    // Pairing and connecting at distinct milliseconds, so the pairing time (what a value never
    // stored falls back to) cannot pass for the connection's.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let connecting = chrono::Utc::now().timestamp_millis();
    let mut phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;

    let devices = app.client_api("GET", "/devices", Some(&auth), None).await;
    assert_eq!(devices.status, 200, "{}", devices.body);
    let device = &devices.body[0];
    assert_wire_time(&device["lastSeen"]);
    assert!(
        rfc3339_ms(&device["lastSeen"]) >= connecting,
        "connected at {connecting}: {device}"
    );
    assert_eq!(device["updatedAt"], device["lastSeen"], "{device}");

    // The phone asks about itself over the device API.
    let mut response = app
        .client
        .get(format!("{}/mobile/v1/device", app.address))
        .bearer_auth(&token)
        .send()
        .await
        .expect("device answers");
    assert_eq!(response.status().as_u16(), 200);
    let own: Value = response.json().await.expect("JSON");
    assert!(
        rfc3339_ms(&own["device"]["lastSeen"]) >= connecting,
        "connected at {connecting}: {own}"
    );

    // The database holds it while the phone is connected (what other nodes read).
    let db = sea_orm::Database::connect(&app.database_url)
        .await
        .expect("connect");
    let id = phone_id.parse().expect("uuid");
    poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || match smsgw::store::phones::by_id(&db, id).await {
            Ok(Some(p)) if p.last_seen_at.is_some_and(|at| at >= connecting) => Ok(()),
            other => Err(format!(
                "last_seen_at not stored while connected: {other:?}"
            )),
        },
    )
    .await;
    let _ = db.close().await;

    // Seen within the last hour: a send may ask for it.
    let body =
        json!({"id": "active", "textMessage": {"text": "hi"}, "phoneNumbers": ["+14155550123"]});
    let reply = app
        .client_api(
            "POST",
            "/messages?deviceActiveWithin=1",
            Some(&auth),
            Some(body),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.body["deviceId"], phone_id.as_str());
    let (_, to, content, _) = phone.expect_send().await;
    assert_eq!((to.as_str(), content.as_str()), ("+14155550123", "hi"));
}

/// `GET /mobile/v1/message` as the SMSGate app calls it.
async fn app_fetch(app: &TestApp, token: &str) -> Vec<Value> {
    let mut response = app
        .client
        .get(format!("{}/mobile/v1/message", app.address))
        .bearer_auth(token)
        .send()
        .await
        .expect("fetch answers");
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.expect("JSON");
    body.as_array().expect("a list").clone()
}

async fn an_smsgate_app_phone_gets_the_client_options(backend: Backend) {
    let app = spawn_fast(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    // A fetch makes an SMSGate-app phone online for a while.
    assert!(app_fetch(&app, &token).await.is_empty());
    app.wait_online(&phone_id, true).await;
    let body = json!({
        "id": "opts", "textMessage": {"text": "hi"}, "phoneNumbers": ["+14155550123"],
        "simNumber": 2, "priority": 100, "withDeliveryReport": false,
    });
    let auth = bearer(&app.live_key);
    let reply = app
        .client_api("POST", "/messages", Some(&auth), Some(body))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let handed = loop {
        let handed = app_fetch(&app, &token).await;
        if !handed.is_empty() {
            break handed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never handed to the app"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(handed[0]["simNumber"], 2);
    assert_eq!(handed[0]["priority"], 100);
    assert_eq!(handed[0]["withDeliveryReport"], false);
    assert_eq!(handed[0]["phoneNumbers"], json!(["+14155550123"]));
}

/// A settings body naming a key twice in one object is refused (400) and changes nothing, as
/// `/v1` and `/3rdparty/v1/messages` refuse a duplicate field.
async fn settings_refuse_a_duplicate_key(backend: Backend) {
    let app = spawn_app(backend).await;
    let auth = bearer(&app.test_key);
    let before = app.client_api("GET", "/settings", Some(&auth), None).await;
    assert_eq!(before.status, 200, "{}", before.body);
    for method in ["PATCH", "PUT"] {
        let mut response = app
            .client
            .request(
                awc::http::Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{}/3rdparty/v1/settings", app.address),
            )
            .insert_header(("authorization", auth.as_str()))
            .insert_header(("content-type", "application/json"))
            .send_body(r#"{"webhooks":{"retry_count":3,"retry_count":4}}"#)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&response.body().await.unwrap()).unwrap();
        assert_eq!(response.status().as_u16(), 400, "{method}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("duplicate field `retry_count`"),
            "{message}"
        );
    }
    let after = app.client_api("GET", "/settings", Some(&auth), None).await;
    assert_eq!(after.body, before.body, "nothing changed");
}

/// A settings body over 16 KiB is refused (400), and one that stalls is cut off after
/// `server.body_timeout` (408), as every other body.
async fn settings_bodies_are_bounded_in_size_and_time(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app_with(backend, |s| s.server.body_timeout = Duration::from_secs(1)).await;
    let auth = bearer(&app.test_key);
    let big = json!({"webhooks": {"signing_key": "k".repeat(17 * 1024)}});
    let reply = app
        .client_api("PATCH", "/settings", Some(&auth), Some(big))
        .await;
    expect_client_error(&reply, 400);
    assert!(reply.body["message"].as_str().unwrap().contains("16 KiB"));
    let address = app.address.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "PATCH /3rdparty/v1/settings HTTP/1.1\r\nHost: localhost\r\nAuthorization: {auth}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .expect("answered and closed within the deadline and a margin");
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let after = app.client_api("GET", "/settings", Some(&auth), None).await;
    assert_eq!(after.body, json!({}), "nothing changed");
}

backend_tests!(
    settings_refuse_a_duplicate_key,
    settings_bodies_are_bounded_in_size_and_time,
    revoked_keys_and_the_failed_auth_budget_apply,
    an_smsgate_app_phone_gets_the_client_options,
    health_answers_without_credentials_and_ignores_sent_ones,
    credentials_are_checked_like_on_v1,
    a_message_goes_through_a_phone_and_aggregates_its_recipients,
    a_test_key_sends_through_the_simulated_phone,
    bad_messages_are_refused_and_store_nothing,
    a_reused_id_creates_nothing_even_under_concurrency,
    offline_phones_ttl_and_cancel_of_a_handed_message,
    queued_recipients_are_cancelled,
    lists_filter_page_and_count,
    devices_inbox_and_logs,
    a_connected_phone_is_seen_now_and_active,
);
