//! The client API's webhooks and settings (docs/compat.md, Webhooks and Settings): create,
//! list, upsert and delete; validation; deliveries in the SMSGate body shape signed as the
//! SMSGate app signs, verified here independently; retries and the attempt log shared with
//! `/v1` endpoints; settings get/put/patch with the signing key never shown.

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::backend_tests;
use crate::helpers::{
    Backend, Reply, SENDER, TestApp, WebhookReceiver, bearer, poll, run_cli, spawn_app,
    spawn_app_with,
};

backend_tests!(
    create_list_upsert_and_delete,
    invalid_webhooks_are_refused_and_nothing_is_created,
    each_event_is_delivered_signed_as_the_app_signs,
    failed_deliveries_are_retried_like_v1_endpoints,
    a_client_api_message_is_delivered_once_per_recipient_under_its_id,
    a_test_mode_phone_of_the_number_is_named_as_live_phones_are,
    settings_get_put_patch_and_the_hidden_key,
    the_settings_key_is_sealed_and_rotates_with_the_secrets_key,
);

const KEY: &str = "receiver-shared-secret";

/// Short retries; http to the local receiver allowed.
async fn spawn_insecure(backend: Backend) -> TestApp {
    spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.retry_schedule = vec![Duration::from_millis(200); 3];
        s.webhooks.timeout = Duration::from_millis(500);
    })
    .await
}

async fn call(app: &TestApp, method: &str, path: &str, key: &str, body: Option<Value>) -> Reply {
    app.client_api(method, path, Some(&bearer(key)), body).await
}

#[track_caller]
fn assert_json(reply: &Reply) {
    assert_eq!(
        reply.headers.get("content-type").map(String::as_str),
        Some("application/json"),
        "{reply:?}"
    );
}

/// A client error: the status and a non-empty `message`.
#[track_caller]
fn assert_refused(reply: &Reply, status: u16, says: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_json(reply);
    let message = reply.body["message"].as_str().unwrap_or("");
    assert!(
        message.contains(says),
        "message {message:?} should say {says:?}"
    );
}

/// Registers `receiver` for `event` through the client API (`POST /webhooks`); the hook's id.
async fn register(app: &TestApp, key: &str, receiver: &WebhookReceiver, event: &str) -> String {
    let reply = call(
        app,
        "POST",
        "/webhooks",
        key,
        Some(json!({"url": receiver.url, "event": event})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.body["id"].as_str().unwrap().to_string()
}

/// Sets the key deliveries are signed with, by `method` (PUT or PATCH) on `/settings`.
async fn sign_with(app: &TestApp, method: &str, key: &str, signing_key: &str) {
    let reply = call(
        app,
        method,
        "/settings",
        key,
        Some(json!({"webhooks": {"signing_key": signing_key}})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

async fn list(app: &TestApp, key: &str) -> Vec<Value> {
    let reply = call(app, "GET", "/webhooks", key, None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_json(&reply);
    reply.body.as_array().expect("an array").clone()
}

async fn create_list_upsert_and_delete(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let key = app.live_key.clone();
    assert_eq!(list(&app, &key).await, Vec::<Value>::new());
    let (phone_id, _) = app.pair_phone("+14155550100").await;

    // "id": null (what the Python client sends) and "id": "" both mean "generate one".
    let url = "http://127.0.0.1:9/hook";
    let generated = call(
        &app,
        "POST",
        "/webhooks",
        &key,
        Some(json!({"id": null, "url": url, "event": "sms:sent"})),
    )
    .await;
    assert_eq!(generated.status, 201, "{}", generated.body);
    assert_json(&generated);
    let generated_id = generated.body["id"].as_str().unwrap().to_string();
    assert!(!generated_id.is_empty());
    assert_eq!(
        generated.body,
        json!({"id": generated_id, "deviceId": null, "url": url, "event": "sms:sent"})
    );
    let empty_id = call(
        &app,
        "POST",
        "/webhooks",
        &key,
        Some(json!({"id": "", "url": url, "event": "sms:batch:received", "deviceId": phone_id})),
    )
    .await;
    assert_eq!(empty_id.status, 201, "{}", empty_id.body);
    assert_ne!(empty_id.body["id"], "");
    assert_ne!(empty_id.body["id"], generated_id.as_str());
    assert_eq!(empty_id.body["deviceId"], phone_id.as_str());

    // A given id is kept; posting it again replaces that webhook.
    let mine = call(
        &app,
        "POST",
        "/webhooks",
        &key,
        Some(json!({"id": "my-hook", "url": url, "event": "system:ping"})),
    )
    .await;
    assert_eq!(mine.status, 201, "{}", mine.body);
    let replaced = call(
        &app,
        "POST",
        "/webhooks",
        &key,
        Some(
            json!({"id": "my-hook", "url": "http://127.0.0.1:10/other", "event": "sms:delivered"}),
        ),
    )
    .await;
    assert_eq!(replaced.status, 201, "{}", replaced.body);
    let listed = list(&app, &key).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    let mine: Vec<&Value> = listed.iter().filter(|w| w["id"] == "my-hook").collect();
    assert_eq!(
        mine,
        vec![&json!({"id": "my-hook", "deviceId": null,
                     "url": "http://127.0.0.1:10/other", "event": "sms:delivered"})]
    );

    // /v1 lists them too, with their format; the test mode sees none of them.
    let v1 = app.get("/v1/webhooks", &key).await.expect(200);
    let v1_items = v1.data()["webhooks"].as_array().unwrap().clone();
    assert_eq!(v1_items.len(), 3);
    assert!(
        v1_items.iter().all(|w| w["format"] == "smsgate"),
        "{v1_items:?}"
    );
    assert_eq!(list(&app, &app.test_key).await, Vec::<Value>::new());
    // Through /v1: events are SMSGate names, and the key is the workspace's, not rotated here.
    let v1_id = v1_items[0]["id"].as_str().unwrap().to_string();
    let patched = app
        .patch(
            &format!("/v1/webhooks/{v1_id}"),
            &key,
            json!({"events": ["sms:failed", "system:ping"]}),
        )
        .await
        .expect(200);
    assert_eq!(
        patched.data()["events"],
        json!(["sms:failed", "system:ping"])
    );
    app.patch(
        &format!("/v1/webhooks/{v1_id}"),
        &key,
        json!({"events": ["message.sent"]}),
    )
    .await
    .expect_error(422, "validation_failed");
    app.post(&format!("/v1/webhooks/{v1_id}/rotate-key"), &key, json!({}))
        .await
        .expect_error(422, "validation_failed");

    // Delete: 204 with an empty body, also for an id that does not exist.
    let deleted = call(&app, "DELETE", "/webhooks/my-hook", &key, None).await;
    assert_eq!(deleted.status, 204);
    assert_eq!(deleted.body, Value::Null);
    let unknown = call(&app, "DELETE", "/webhooks/never-was", &key, None).await;
    assert_eq!(unknown.status, 204);
    let left: Vec<Value> = list(&app, &key).await;
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|w| w["id"] != "my-hook"));

    // Without credentials: 401.
    let anonymous = app.client_api("GET", "/webhooks", None, None).await;
    assert_refused(&anonymous, 401, "");
}

async fn invalid_webhooks_are_refused_and_nothing_is_created(backend: Backend) {
    // Default settings: https and public targets only.
    let app = spawn_app(backend).await;
    let key = app.live_key.clone();
    let ok_url = "https://hooks.example.com/sms";
    for (body, says) in [
        (
            json!({"url": "http://127.0.0.1:9/hook", "event": "sms:sent"}),
            "url is refused: URL scheme not allowed (http:// and private or loopback targets need webhooks.allow_insecure_targets)",
        ),
        (json!({"url": "invalid-url", "event": "sms:sent"}), "url"),
        (json!({"url": "", "event": "sms:sent"}), "url"),
        (json!({"event": "sms:sent"}), "url"),
        (json!({"url": ok_url, "event": ""}), "event"),
        (json!({"url": ok_url}), "event"),
        (
            json!({"url": ok_url, "event": "invalid:event"}),
            "invalid:event",
        ),
        (
            json!({"url": ok_url, "event": "message.sent"}),
            "message.sent",
        ),
        (
            json!({"url": ok_url, "event": "sms:sent", "deviceId": "x".repeat(24)}),
            "device",
        ),
        (
            json!({"url": ok_url, "event": "sms:sent",
                   "deviceId": "0190f5a4-0000-7000-8000-000000000000"}),
            "device",
        ),
        (
            json!({"id": "x".repeat(37), "url": ok_url, "event": "sms:sent"}),
            "id",
        ),
        (json!({"id": 5, "url": ok_url, "event": "sms:sent"}), "JSON"),
    ] {
        let reply = call(&app, "POST", "/webhooks", &key, Some(body.clone())).await;
        assert_refused(&reply, 400, says);
    }
    let not_json = app
        .client_api("POST", "/webhooks", Some(&bearer(&key)), None)
        .await;
    assert_refused(&not_json, 400, "JSON");
    // A phone of the test mode is not a device of the live mode.
    let test_phone = app
        .post(
            "/v1/phones",
            &app.test_key,
            json!({"phone_number": "+14155550177"}),
        )
        .await;
    if test_phone.status == 201 {
        let id = test_phone.data()["id"].as_str().unwrap().to_string();
        let reply = call(
            &app,
            "POST",
            "/webhooks",
            &key,
            Some(json!({"url": ok_url, "event": "sms:sent", "deviceId": id})),
        )
        .await;
        assert_refused(&reply, 400, "device");
    }
    assert_eq!(list(&app, &key).await, Vec::<Value>::new());
    let v1 = app.get("/v1/webhooks", &key).await.expect(200);
    assert_eq!(v1.data()["webhooks"], json!([]));
}

fn hmac_hex(key: &str, parts: &[&[u8]]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    for part in parts {
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// Checks the delivery's signature as a receiver for the SMSGate app does: HMAC-SHA256 keyed
/// with the signing key over the raw body followed by the `X-Timestamp` value.
#[track_caller]
fn assert_signed(received: &crate::helpers::Received, key: &str) {
    let timestamp = received.header("x-timestamp");
    let now = chrono::Utc::now().timestamp();
    let at: i64 = timestamp.parse().expect("X-Timestamp is unix seconds");
    assert!((now - at).abs() < 60, "timestamp {at} vs now {now}");
    assert_eq!(
        received.header("x-signature"),
        hmac_hex(key, &[&received.body, timestamp.as_bytes()]),
        "signature of {}",
        String::from_utf8_lossy(&received.body)
    );
    assert_eq!(received.header("content-type"), "application/json");
}

/// RFC 3339 with exactly three fractional digits and `Z`, as the app writes.
fn is_app_timestamp(value: &Value) -> bool {
    value.as_str().is_some_and(|text| {
        text.len() == 24
            && text.ends_with('Z')
            && text.as_bytes()[19] == b'.'
            && chrono::DateTime::parse_from_rfc3339(text).is_ok()
    })
}

async fn each_event_is_delivered_signed_as_the_app_signs(backend: Backend) {
    let app = spawn_insecure(backend).await;
    // The test mode: simulated phones deliver (and fail on the test recipient) on their own.
    let key = app.test_key.clone();
    let receiver = WebhookReceiver::start().await;
    sign_with(&app, "PATCH", &key, KEY).await;
    let mut hook_ids = Vec::new();
    for event in [
        "sms:sent",
        "sms:delivered",
        "sms:failed",
        "sms:received",
        "system:ping",
        "mms:received",
    ] {
        let reply = call(
            &app,
            "POST",
            "/webhooks",
            &key,
            Some(json!({"id": format!("hook-{event}"), "url": receiver.url, "event": event})),
        )
        .await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        hook_ids.push(reply.body["id"].as_str().unwrap().to_string());
    }

    let sent = app
        .send_test("+14155550123", "hello there")
        .await
        .expect(202);
    let sent_id = sent.data()["id"].as_str().unwrap().to_string();
    let from = sent.data()["from_number"].as_str().unwrap().to_string();
    let failed = app.send_test("+15005550001", "will fail").await.expect(202);
    let failed_id = failed.data()["id"].as_str().unwrap().to_string();
    app.post(
        "/v1/test/inbound",
        &key,
        json!({"from_number": "+14155550199", "to_number": from, "content": "hi back"}),
    )
    .await
    .expect(201);

    // sent and delivered of the first message, failed of the second, received: four. No
    // other event fires (system:ping, mms:received are accepted and never delivered).
    // Then one more inbound message, the marker: once its sms:received has come, every
    // event before it has been fanned out, and nothing but the marker came after the four.
    receiver.wait_for(4, Duration::from_secs(10)).await;
    app.post(
        "/v1/test/inbound",
        &key,
        json!({"from_number": "+14155550199", "to_number": from, "content": "the marker"}),
    )
    .await
    .expect(201);
    let is_marker = |r: &crate::helpers::Received| r.json()["payload"]["message"] == "the marker";
    let all = poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let all = receiver.received();
            match all.iter().any(is_marker) {
                true => Ok(all),
                false => Err(format!("no marker among {} deliveries", all.len())),
            }
        },
    )
    .await;
    let got: Vec<_> = all.into_iter().filter(|r| !is_marker(r)).collect();
    let events: Vec<String> = got
        .iter()
        .map(|r| r.json()["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got.len(), 4, "{events:?}");
    for received in &got {
        assert_signed(received, KEY);
    }
    let body_of = |event: &str| -> Value {
        got.iter()
            .map(|r| r.json())
            .find(|b| b["event"] == event)
            .unwrap_or_else(|| panic!("no {event} in {events:?}"))
    };

    let sent_body = body_of("sms:sent");
    assert_eq!(sent_body["webhookId"], "hook-sms:sent");
    assert!(sent_body["id"].as_str().is_some_and(|id| !id.is_empty()));
    // deviceId is the phone the message went through (absent when none is recorded).
    let record = app.message(&key, &sent_id).await;
    assert_eq!(
        sent_body.get("deviceId").cloned().unwrap_or(Value::Null),
        record["device_id"],
        "{sent_body}"
    );
    let payload = &sent_body["payload"];
    assert_eq!(payload["messageId"], sent_id.as_str());
    assert_eq!(payload["phoneNumber"], "+14155550123");
    assert_eq!(payload["recipient"], "+14155550123");
    assert_eq!(payload["sender"], from.as_str());
    assert_eq!(payload["partsCount"], 1);
    assert!(is_app_timestamp(&payload["sentAt"]), "{payload}");

    let delivered = body_of("sms:delivered");
    assert_eq!(delivered["webhookId"], "hook-sms:delivered");
    assert_eq!(delivered["payload"]["messageId"], sent_id.as_str());
    assert!(is_app_timestamp(&delivered["payload"]["deliveredAt"]));

    let failed_body = body_of("sms:failed");
    assert_eq!(failed_body["payload"]["messageId"], failed_id.as_str());
    assert_eq!(failed_body["payload"]["phoneNumber"], "+15005550001");
    assert!(is_app_timestamp(&failed_body["payload"]["failedAt"]));
    assert!(
        failed_body["payload"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{failed_body}"
    );

    let inbound = body_of("sms:received");
    let payload = &inbound["payload"];
    assert_eq!(payload["message"], "hi back");
    assert_eq!(payload["sender"], "+14155550199");
    assert_eq!(payload["phoneNumber"], "+14155550199");
    assert_eq!(payload["recipient"], from.as_str());
    assert!(payload["messageId"].is_string());
    assert!(is_app_timestamp(&payload["receivedAt"]));

    // The signature is not smsgw's own (body only), and the live mode's key is its own.
    let first = &got[0];
    assert_ne!(first.header("x-signature"), hmac_hex(KEY, &[&first.body]));
    receiver.stop().await;
}

async fn a_client_api_message_is_delivered_once_per_recipient_under_its_id(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let key = app.test_key.clone();
    let receiver = WebhookReceiver::start().await;
    sign_with(&app, "PUT", &key, KEY).await;
    let hook_id = register(&app, &key, &receiver, "sms:delivered").await;
    let recipients = ["+14155550123", "+14155550124"];
    let sent = call(
        &app,
        "POST",
        "/messages",
        &key,
        Some(json!({"id": "grp-1", "phoneNumbers": recipients,
                    "textMessage": {"text": "to both"}, "simNumber": 2})),
    )
    .await;
    assert_eq!(sent.status, 202, "{}", sent.body);
    let got = receiver.wait_for(2, Duration::from_secs(10)).await;
    let mut numbers = Vec::new();
    for received in &got {
        assert_signed(received, KEY);
        let body = received.json();
        assert_eq!(body["event"], "sms:delivered");
        assert_eq!(body["webhookId"], hook_id.as_str());
        assert_eq!(body["payload"]["messageId"], "grp-1");
        assert_eq!(body["payload"]["simNumber"], 2);
        numbers.push(body["payload"]["phoneNumber"].as_str().unwrap().to_string());
    }
    numbers.sort();
    assert_eq!(numbers, recipients);
    // One delivery id per recipient.
    assert_ne!(got[0].json()["id"], got[1].json()["id"]);
    receiver.stop().await;
}

async fn a_test_mode_phone_of_the_number_is_named_as_live_phones_are(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let key = app.test_key.clone();
    let paired = app
        .post("/v1/phones", &key, json!({"phone_number": SENDER}))
        .await
        .expect(201);
    let phone_id = paired.data()["id"].as_str().unwrap().to_string();
    let receiver = WebhookReceiver::start().await;
    register(&app, &key, &receiver, "sms:sent").await;
    register(&app, &key, &receiver, "sms:delivered").await;
    let sent = call(
        &app,
        "POST",
        "/messages",
        &key,
        Some(json!({"id": "named", "phoneNumbers": ["+14155550123"],
                    "textMessage": {"text": "through the test phone"}})),
    )
    .await;
    assert_eq!(sent.status, 202, "{}", sent.body);
    assert_eq!(sent.body["deviceId"], phone_id.as_str(), "{}", sent.body);

    let got = receiver.wait_for(2, Duration::from_secs(10)).await;
    let mut events: Vec<String> = Vec::new();
    for received in &got {
        let body = received.json();
        assert_eq!(body["deviceId"], phone_id.as_str(), "{body}");
        assert_eq!(body["payload"]["messageId"], "named");
        assert_eq!(body["payload"]["sender"], SENDER);
        events.push(body["event"].as_str().unwrap().to_string());
    }
    events.sort();
    assert_eq!(events, ["sms:delivered", "sms:sent"]);
    let state = call(&app, "GET", "/messages/named", &key, None).await;
    assert_eq!(state.status, 200, "{}", state.body);
    assert_eq!(state.body["state"], "Delivered", "{}", state.body);
    assert_eq!(state.body["deviceId"], phone_id.as_str(), "{}", state.body);
    receiver.stop().await;
}

async fn failed_deliveries_are_retried_like_v1_endpoints(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let key = app.test_key.clone();
    let receiver = WebhookReceiver::start().await;
    receiver.answer(&[500, 503]);
    // No key set: one is generated, and the deliveries are signed with it.
    let hook_id = register(&app, &key, &receiver, "sms:sent").await;
    app.send_test("+14155550123", "retry me").await.expect(202);

    let got = receiver.wait_for(3, Duration::from_secs(10)).await;
    let first = got[0].json();
    for again in &got[1..3] {
        // Retries carry the same delivery id, so a receiver can drop repeats.
        assert_eq!(again.json()["id"], first["id"]);
        assert_eq!(again.json()["payload"], first["payload"]);
        let signature = again.header("x-signature");
        assert_eq!(signature.len(), 64);
        assert!(signature.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    // The attempt log of /v1 shows them: find the endpoint by its format.
    let v1 = app.get("/v1/webhooks", &key).await.expect(200);
    let endpoint = v1.data()["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["format"] == "smsgate")
        .expect("the endpoint is listed in /v1")
        .clone();
    assert_eq!(endpoint["events"], json!(["sms:sent"]));
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let attempts = loop {
        let reply = app
            .get(&format!("/v1/webhooks/{endpoint_id}/deliveries"), &key)
            .await
            .expect(200);
        let rows = reply.data()["deliveries"].as_array().unwrap().clone();
        if rows.len() >= 3 && rows[0]["state"] == "succeeded" {
            break rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "log: {}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let codes: Vec<Value> = attempts.iter().map(|a| a["status_code"].clone()).collect();
    assert_eq!(codes, vec![json!(200), json!(503), json!(500)]);
    assert!(attempts.iter().all(|a| a["event"] == "sms:sent"));
    assert_eq!(attempts[2]["state"], "pending");

    // Deleting through the client API removes it from /v1 as well.
    let deleted = call(&app, "DELETE", &format!("/webhooks/{hook_id}"), &key, None).await;
    assert_eq!(deleted.status, 204);
    app.get(&format!("/v1/webhooks/{endpoint_id}"), &key)
        .await
        .expect(404);
    receiver.stop().await;
}

async fn settings_get_put_patch_and_the_hidden_key(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let key = app.test_key.clone();
    let get = call(&app, "GET", "/settings", &key, None).await;
    assert_eq!(get.status, 200);
    assert_json(&get);
    assert_eq!(get.body, json!({}));

    let put = call(
        &app,
        "PUT",
        "/settings",
        &key,
        Some(json!({
            "messages": {"limit_period": "PerDay", "limit_value": 100},
            "webhooks": {"signing_key": KEY, "retry_count": 3},
            "encryption": {"passphrase": "open sesame"},
        })),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.body);
    let stored = json!({
        "messages": {"limit_period": "PerDay", "limit_value": 100},
        "webhooks": {"retry_count": 3},
    });
    assert_eq!(put.body, stored);
    assert_eq!(
        call(&app, "GET", "/settings", &key, None).await.body,
        stored
    );
    // The live mode has settings of its own.
    assert_eq!(
        call(&app, "GET", "/settings", &app.live_key, None)
            .await
            .body,
        json!({})
    );

    let patched = call(
        &app,
        "PATCH",
        "/settings",
        &key,
        Some(json!({"messages": {"limit_value": 5, "limit_period": null}, "ping": {"interval_seconds": 60}})),
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let merged = json!({
        "messages": {"limit_value": 5},
        "webhooks": {"retry_count": 3},
        "ping": {"interval_seconds": 60},
    });
    assert_eq!(patched.body, merged);

    // Bad bodies: 400 {message}, nothing changes.
    for (body, says) in [
        (
            json!({"messages": {"limit_value": "many"}}),
            "messages.limit_value",
        ),
        (json!({"unknown": {}}), "unknown"),
        (
            json!({"gateway": {"private_token": "t"}}),
            "gateway.private_token",
        ),
        (
            json!({"webhooks": {"signing_key": ""}}),
            "webhooks.signing_key",
        ),
        (json!(["not", "an", "object"]), "object"),
    ] {
        for method in ["PUT", "PATCH"] {
            let reply = call(&app, method, "/settings", &key, Some(body.clone())).await;
            assert_refused(&reply, 400, says);
        }
    }
    let huge = json!({"webhooks": {"signing_key": "k".repeat(20_000)}});
    assert_refused(
        &call(&app, "PATCH", "/settings", &key, Some(huge)).await,
        400,
        "",
    );
    assert_eq!(
        call(&app, "GET", "/settings", &key, None).await.body,
        merged
    );

    // A PUT without the (never shown) key keeps it: deliveries still verify with it.
    let put = call(
        &app,
        "PUT",
        "/settings",
        &key,
        Some(json!({"logs": {"lifetime_days": 7}})),
    )
    .await;
    assert_eq!(put.body, json!({"logs": {"lifetime_days": 7}}));
    let receiver = WebhookReceiver::start().await;
    register(&app, &key, &receiver, "sms:sent").await;
    app.send_test("+14155550123", "signed").await.expect(202);
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_signed(&got[0], KEY);

    // A new key through PATCH signs the deliveries after it.
    sign_with(&app, "PATCH", &key, "rotated").await;
    app.send_test("+14155550124", "signed again")
        .await
        .expect(202);
    let got = receiver.wait_for(2, Duration::from_secs(10)).await;
    assert_signed(&got[1], "rotated");
    receiver.stop().await;
}

async fn the_settings_key_is_sealed_and_rotates_with_the_secrets_key(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let key = app.test_key.clone();
    let receiver = WebhookReceiver::start().await;
    call(
        &app,
        "PATCH",
        "/settings",
        &key,
        Some(json!({"webhooks": {"signing_key": KEY}, "encryption": {"passphrase": "p4ss"}})),
    )
    .await;
    register(&app, &key, &receiver, "sms:sent").await;
    let db = sea_orm::Database::connect(&app.database_url).await.unwrap();
    let stored = || async {
        use sea_orm::ConnectionTrait;
        let row = db
            .query_one_raw(sea_orm::Statement::from_string(
                db.get_database_backend(),
                "SELECT document, signing_key, passphrase FROM workspace_settings".to_string(),
            ))
            .await
            .unwrap()
            .expect("one settings row");
        let column = |name: &str| row.try_get::<String>("", name).unwrap();
        [
            column("document"),
            column("signing_key"),
            column("passphrase"),
        ]
    };
    let before = stored().await;
    assert!(
        !before[0].contains(KEY) && !before[0].contains("p4ss"),
        "{before:?}"
    );
    assert!(before[1].starts_with("v1:") && !before[1].contains(KEY));
    assert!(before[2].starts_with("v1:"));

    let new_key = smsgw::domain::secrets::SecretBox::generate_key();
    let mut env = vec![("SMSGW_DATABASE__URL", app.database_url.as_str())];
    let current = app.settings.secrets.key.clone();
    if let Some(current) = &current {
        env.push((
            "SMSGW_SECRETS__KEY",
            secrecy::ExposeSecret::expose_secret(current),
        ));
    }
    let output = run_cli(&["secrets", "rotate", "--new-key", &new_key], &env).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let after = stored().await;
    assert_eq!(after[0], before[0]);
    assert_ne!(after[1], before[1]);
    assert_ne!(after[2], before[2]);

    // Started with the new key, deliveries are still signed with the settings' key.
    let app = app
        .restart_with(|s| s.secrets.key = Some(new_key.clone().into()))
        .await;
    app.send_test("+14155550123", "after rotation")
        .await
        .expect(202);
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_signed(&got[0], KEY);
    receiver.stop().await;
}
