//! Webhooks (docs/api.md, Webhooks): endpoint API, signed
//! deliveries to a real local receiver, retries, filters, SSRF refusals, isolation.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use smsgw::actors::webhook_target::StaticResolver;
use smsgw::domain::protocol::{PhoneFrame, ServerFrame};
use smsgw::domain::signing;

use crate::backend_tests;
use crate::helpers::{
    Backend, RECIPIENT, Reply, SENDER, TestApp, WebhookReceiver, poll, spawn_app_with,
    spawn_app_with_resolver,
};

backend_tests!(
    endpoint_api_and_validation,
    deliveries_are_signed_by_both_rules,
    server_errors_are_retried_and_every_attempt_recorded,
    client_errors_stop_at_once,
    timeouts_are_retried,
    pending_retries_survive_a_restart,
    event_and_phone_filters,
    manual_retry_sends_again,
    manual_retry_of_a_waiting_delivery_sends_it_now,
    every_ssrf_class_is_refused_at_creation,
    a_name_rebound_to_loopback_is_refused_at_delivery,
    a_hanging_endpoint_does_not_delay_a_healthy_one,
    inbound_messages_fire_message_received,
    an_expired_message_fires_message_failed,
    a_message_removed_by_retention_ends_its_delivery,
    deleting_an_endpoint_stops_its_retries,
);

/// Short retries and timeout; http to loopback allowed (the receiver is local).
async fn spawn_insecure(backend: Backend) -> TestApp {
    spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.retry_schedule = vec![Duration::from_millis(300); 3];
        s.webhooks.timeout = Duration::from_millis(500);
    })
    .await
}

/// A receiver subscribed to the test mode's `message.sent`, answering `statuses` first (then
/// 200); the receiver and the endpoint's id.
async fn sent_hook(app: &TestApp, statuses: &[u16]) -> (WebhookReceiver, String) {
    let receiver = WebhookReceiver::start().await;
    receiver.answer(statuses);
    let endpoint = app
        .subscribe(&app.test_key, &receiver, &["message.sent"])
        .await;
    (receiver, endpoint["id"].as_str().unwrap().to_string())
}

/// An app that retries webhooks after each delay of `retry_schedule`; http to loopback
/// allowed (the receiver is local).
async fn spawn_retrying(backend: Backend, retry_schedule: Vec<Duration>) -> TestApp {
    spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.retry_schedule = retry_schedule;
    })
    .await
}

/// Polls the deliveries log until it holds at least `n` attempts (newest first).
async fn wait_for_attempts(app: &TestApp, key: &str, endpoint_id: &str, n: usize) -> Vec<Value> {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let reply = app
                .get(&format!("/v1/webhooks/{endpoint_id}/deliveries"), key)
                .await
                .expect(200);
            let rows = reply.data()["deliveries"].as_array().unwrap().clone();
            if rows.len() >= n {
                return Ok(rows);
            }
            Err(format!("expected {n} attempts, log: {}", reply.body))
        },
    )
    .await
}

fn is_api_timestamp(text: &str) -> bool {
    // 2026-11-22T10:15:30.123+00:00
    text.len() == 29
        && chrono::DateTime::parse_from_rfc3339(text).is_ok()
        && text.as_bytes()[19] == b'.'
        && text.ends_with("+00:00")
}

async fn endpoint_api_and_validation(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let receiver = WebhookReceiver::start().await;
    let created = app.create_webhook(&app.live_key,
        json!({ "url": receiver.url, "events": ["message.sent", "message.sent", "message.failed"],
                "phone_numbers": [SENDER, SENDER] }),
    )
    .await;
    let id = created["id"].as_str().unwrap().to_string();
    let key = created["signing_key"].as_str().unwrap();
    assert!(key.starts_with("whsec_"), "{created}");
    assert_eq!(created["events"], json!(["message.sent", "message.failed"]));
    assert_eq!(created["phone_numbers"], json!(["+14155550100"]));
    assert_eq!(created["enabled"], true);
    assert!(is_api_timestamp(created["created_at"].as_str().unwrap()));

    let got = app
        .get(&format!("/v1/webhooks/{id}"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(got.data()["url"], receiver.url.as_str());
    assert!(
        got.data().get("signing_key").is_none(),
        "key shown again: {}",
        got.body
    );
    let listed = app.get("/v1/webhooks", &app.live_key).await.expect(200);
    assert_eq!(listed.data()["webhooks"].as_array().unwrap().len(), 1);
    assert!(listed.data()["webhooks"][0].get("signing_key").is_none());
    assert_eq!(listed.data()["has_more"], false);

    // The other mode sees nothing.
    app.get(&format!("/v1/webhooks/{id}"), &app.test_key)
        .await
        .expect_error(404, "not_found");
    let other = app.get("/v1/webhooks", &app.test_key).await.expect(200);
    assert_eq!(other.data()["webhooks"], json!([]));

    let patched = app
        .patch(
            &format!("/v1/webhooks/{id}"),
            &app.live_key,
            json!({ "events": ["message.delivered"], "phone_numbers": [], "enabled": false }),
        )
        .await
        .expect(200);
    assert_eq!(patched.data()["events"], json!(["message.delivered"]));
    assert_eq!(patched.data()["phone_numbers"], json!([]));
    assert_eq!(patched.data()["enabled"], false);

    let rotated = app
        .post(
            &format!("/v1/webhooks/{id}/rotate-key"),
            &app.live_key,
            json!({}),
        )
        .await
        .expect(200);
    let new_key = rotated.data()["signing_key"].as_str().unwrap();
    assert!(new_key.starts_with("whsec_") && new_key != key);

    // Validation: 422 naming the field; nothing is created.
    app.post(
        "/v1/webhooks",
        &app.live_key,
        json!({ "events": ["message.sent"] }),
    )
    .await
    .expect_error(422, "validation_failed");
    let r = app
        .post(
            "/v1/webhooks",
            &app.live_key,
            json!({ "url": receiver.url, "events": ["message.sent", "message.bounced"] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.data()["field"], "events[1]");
    let r = app
        .post(
            "/v1/webhooks",
            &app.live_key,
            json!({ "url": receiver.url, "events": [] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.data()["field"], "events");
    let r = app
        .post(
            "/v1/webhooks",
            &app.live_key,
            json!({ "url": receiver.url, "events": ["message.sent"], "phone_numbers": ["12"] }),
        )
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(r.data()["field"], "phone_numbers[0]");
    let r = app
        .post(
            "/v1/webhooks",
            &app.live_key,
            json!({ "url": "ftp://example.com/x", "events": ["message.sent"] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.data()["field"], "url");
    app.post(
        "/v1/webhooks",
        &app.live_key,
        json!({ "url": 5, "events": ["message.sent"] }),
    )
    .await
    .expect_error(400, "invalid_json");
    let listed = app.get("/v1/webhooks", &app.live_key).await.expect(200);
    assert_eq!(listed.data()["webhooks"].as_array().unwrap().len(), 1);
    let r = app
        .get(
            "/v1/webhooks/not-a-uuid/deliveries?cursor=zzz",
            &app.live_key,
        )
        .await;
    assert_eq!(r.status, 404);
    let r = app
        .get(
            &format!("/v1/webhooks/{id}/deliveries?limit=0"),
            &app.live_key,
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.data()["field"], "limit");

    app.delete(&format!("/v1/webhooks/{id}"), &app.live_key)
        .await
        .expect(200);
    app.get(&format!("/v1/webhooks/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("/v1/webhooks/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    receiver.stop().await;
}

async fn deliveries_are_signed_by_both_rules(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let receiver = WebhookReceiver::start().await;
    let live_receiver = WebhookReceiver::start().await;
    let created = app
        .subscribe(
            &app.test_key,
            &receiver,
            &["message.sent", "message.delivered"],
        )
        .await;
    app.subscribe(
        &app.live_key,
        &live_receiver,
        &["message.sent", "message.delivered"],
    )
    .await;
    let key = created["signing_key"].as_str().unwrap().to_string();
    let sent = app.send_test(RECIPIENT, "hello webhooks").await.expect(202);
    let message_id = sent.data()["id"].as_str().unwrap().to_string();

    let received = receiver.wait_for(2, Duration::from_secs(10)).await;
    let now = chrono::Utc::now().timestamp();
    let mut events = Vec::new();
    for r in &received {
        assert_eq!(r.header("content-type"), "application/json");
        assert_eq!(r.header("user-agent"), "smsgw-webhooks");
        let timestamp: i64 = r.header("x-timestamp").parse().unwrap();
        assert!((now - timestamp).abs() < 60);
        // docs/api.md, Webhooks: lowercase hex HMAC-SHA256 of the exact body, keyed with the key.
        let signature = r.header("x-signature");
        assert_eq!(signature, signature.to_lowercase());
        signing::verify(&key, &r.body, signature, timestamp, now).expect("X-Signature verifies");
        assert!(signing::verify(&key, b"{}", signature, timestamp, now).is_err());
        // The Standard Webhooks rule.
        let body = r.json();
        assert_eq!(r.header("webhook-id"), r.header("x-event-id"));
        assert_eq!(body["event_id"], r.header("x-event-id"));
        assert_eq!(r.header("webhook-timestamp"), r.header("x-timestamp"));
        r.assert_standard_signature(&key, now);
        assert_eq!(body["message"]["id"], message_id.as_str());
        assert_eq!(body["message"]["direction"], "outbound");
        assert_eq!(body["message"]["from_number"], SENDER);
        assert_eq!(body["message"]["to_number"], RECIPIENT);
        assert!(body["message"]["content"].is_string());
        assert!(body["message"]["status"].is_string());
        assert!(
            is_api_timestamp(body["timestamp"].as_str().unwrap()),
            "{body}"
        );
        events.push(body["event"].as_str().unwrap().to_string());
    }
    events.sort();
    assert_eq!(events, ["message.delivered", "message.sent"]);
    // Test-mode events go to test-mode endpoints only.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(live_receiver.received().is_empty());
    let mut metrics = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    let text = String::from_utf8(metrics.body().await.unwrap().to_vec()).unwrap();
    assert!(text.contains("smsgw_webhook_attempts_total"), "{text}");
    assert!(
        text.contains("smsgw_webhook_attempt_duration_seconds"),
        "{text}"
    );
    receiver.stop().await;
    live_receiver.stop().await;
}

/// `smsgw_webhook_attempts_total{outcome="…"}` now (see [`TestApp::metric`]).
async fn outcome_count(app: &TestApp, outcome: &str) -> u64 {
    let label = format!("outcome=\"{outcome}\"");
    app.metric("smsgw_webhook_attempts_total", &label).await as u64
}

async fn server_errors_are_retried_and_every_attempt_recorded(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let (receiver, id) = sent_hook(&app, &[500, 503]).await;
    let before = (
        outcome_count(&app, "server_error").await,
        outcome_count(&app, "success").await,
    );
    app.send_test(RECIPIENT, "retry me").await.expect(202);
    let received = receiver.wait_for(3, Duration::from_secs(10)).await;
    // Same event id on every attempt, each signed anew.
    let ids: Vec<&str> = received.iter().map(|r| r.header("x-event-id")).collect();
    assert!(ids.iter().all(|i| *i == ids[0]));
    let rows = wait_for_attempts(&app, &app.test_key, &id, 3).await;
    assert_eq!(rows[0]["attempt"], 3);
    assert_eq!(rows[0]["status_code"], 200);
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(rows[0]["error"], Value::Null);
    assert_eq!(rows[1]["attempt"], 2);
    assert_eq!(rows[1]["status_code"], 503);
    assert_eq!(rows[1]["error"], "http_status");
    assert_eq!(rows[1]["state"], "pending");
    assert!(rows[1]["next_attempt_at"].is_string());
    assert_eq!(rows[2]["attempt"], 1);
    assert_eq!(rows[2]["status_code"], 500);
    // The attempts are counted under the documented outcome labels (the recorder is shared by
    // the tests of this process: compare with before).
    assert!(outcome_count(&app, "server_error").await >= before.0 + 2);
    assert!(outcome_count(&app, "success").await > before.1);
    for row in &rows {
        assert_eq!(row["event"], "message.sent");
        assert_eq!(row["event_id"], ids[0]);
        assert!(row["duration_ms"].is_i64());
        assert!(is_api_timestamp(row["attempted_at"].as_str().unwrap()));
    }
    // Paging: newest first, one per page.
    let page = app
        .get(
            &format!("/v1/webhooks/{id}/deliveries?limit=2"),
            &app.test_key,
        )
        .await
        .expect(200);
    assert_eq!(page.data()["has_more"], true);
    let cursor = page.data()["next_cursor"].as_str().unwrap();
    let next = app
        .get(
            &format!("/v1/webhooks/{id}/deliveries?limit=2&cursor={cursor}"),
            &app.test_key,
        )
        .await
        .expect(200);
    assert_eq!(next.data()["deliveries"][0]["attempt"], 1);
    assert_eq!(next.data()["has_more"], false);
    receiver.stop().await;
}

async fn client_errors_stop_at_once(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let (receiver, id) = sent_hook(&app, &[410, 404]).await;
    app.send_test(RECIPIENT, "gone").await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 1).await;
    assert_eq!(rows[0]["status_code"], 410);
    assert_eq!(rows[0]["state"], "failed");
    assert_eq!(rows[0]["next_attempt_at"], Value::Null);
    // Longer than the whole retry schedule: nothing more arrives.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.received().len(), 1);
    receiver.stop().await;
}

async fn timeouts_are_retried(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let (receiver, id) = sent_hook(&app, &[]).await;
    receiver.delay(&[Duration::from_secs(3)]);
    app.send_test(RECIPIENT, "slow").await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[1]["error"], "timeout");
    assert_eq!(rows[1]["status_code"], Value::Null);
    assert!(rows[1]["duration_ms"].as_i64().unwrap() >= 400);
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(rows[0]["status_code"], 200);
    receiver.stop().await;
}

async fn pending_retries_survive_a_restart(backend: Backend) {
    let app = spawn_retrying(backend, vec![Duration::from_secs(2)]).await;
    let (receiver, id) = sent_hook(&app, &[500]).await;
    app.send_test("+15005550002", "survive").await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 1).await;
    assert_eq!(rows[0]["state"], "pending");
    let app = app.restart().await;
    let received = receiver.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(
        received[0].header("x-event-id"),
        received[1].header("x-event-id")
    );
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[0]["attempt"], 2);
    assert_eq!(rows[0]["state"], "succeeded");
    // It fired on schedule, not at once after the restart's first instant.
    let gap = received[1].at.duration_since(received[0].at);
    assert!(gap >= Duration::from_millis(1800), "retried after {gap:?}");
    receiver.stop().await;
}

async fn event_and_phone_filters(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let delivered_only = WebhookReceiver::start().await;
    let other_phone = WebhookReceiver::start().await;
    let this_phone = WebhookReceiver::start().await;
    app.subscribe(&app.test_key, &delivered_only, &["message.delivered"])
        .await;
    app.create_webhook(
        &app.test_key,
        json!({ "url": other_phone.url, "events": ["message.sent", "message.delivered"],
                "phone_numbers": ["+14155550199"] }),
    )
    .await;
    app.create_webhook(
        &app.test_key,
        json!({ "url": this_phone.url, "events": ["message.sent", "message.delivered"],
                "phone_numbers": [SENDER] }),
    )
    .await;
    app.send_test(RECIPIENT, "filtered").await.expect(202);
    this_phone.wait_for(2, Duration::from_secs(10)).await;
    let got = delivered_only.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got[0].json()["event"], "message.delivered");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(delivered_only.received().len(), 1);
    assert!(other_phone.received().is_empty());
    for r in [delivered_only, other_phone, this_phone] {
        r.stop().await;
    }
}

/// An app whose `message.sent` endpoint answered its first attempt with `first`, the receiver,
/// the endpoint id, and the attempt rows (newest first).
async fn first_attempt_answered(
    backend: Backend,
    first: u16,
    content: &str,
) -> (TestApp, WebhookReceiver, String, Vec<Value>) {
    let app = spawn_insecure(backend).await;
    let (receiver, id) = sent_hook(&app, &[first]).await;
    app.send_test(RECIPIENT, content).await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 1).await;
    (app, receiver, id, rows)
}

/// `POST /v1/webhooks/{id}/deliveries/{delivery}/retry` (a delivery or an attempt id).
async fn retry_by_hand(app: &TestApp, key: &str, id: &str, delivery: &str) -> Reply {
    app.post(
        &format!("/v1/webhooks/{id}/deliveries/{delivery}/retry"),
        key,
        json!({}),
    )
    .await
}

/// A delivery waiting for its next retry (the default schedule waits a minute) is sent at once
/// when retried by hand, and only once.
async fn manual_retry_of_a_waiting_delivery_sends_it_now(backend: Backend) {
    let (app, receiver, id, rows) = first_attempt_answered(backend, 500, "wait").await;
    assert_eq!(rows[0]["status_code"], 500);
    let delivery_id = rows[0]["delivery_id"].as_str().unwrap();
    retry_by_hand(&app, &app.test_key, &id, delivery_id)
        .await
        .expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[0]["attempt"], 2);
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(rows[0]["event_id"], rows[1]["event_id"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), 2, "sent once more, not twice");
    receiver.stop().await;
}

async fn manual_retry_sends_again(backend: Backend) {
    let (app, receiver, id, rows) = first_attempt_answered(backend, 400, "again").await;
    assert_eq!(rows[0]["state"], "failed");
    let delivery_id = rows[0]["delivery_id"].as_str().unwrap();
    let reply = retry_by_hand(&app, &app.test_key, &id, delivery_id)
        .await
        .expect(202);
    assert_eq!(reply.data()["state"], "pending");
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[0]["attempt"], 2);
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(rows[0]["event_id"], rows[1]["event_id"]);
    // The attempt id works too; unknown ids and other modes are 404.
    let attempt_id = rows[1]["id"].as_str().unwrap();
    retry_by_hand(&app, &app.test_key, &id, attempt_id)
        .await
        .expect(202);
    receiver.wait_for(3, Duration::from_secs(10)).await;
    retry_by_hand(&app, &app.test_key, &id, &uuid::Uuid::new_v4().to_string())
        .await
        .expect_error(404, "not_found");
    retry_by_hand(&app, &app.live_key, &id, delivery_id)
        .await
        .expect_error(404, "not_found");
    receiver.stop().await;
}

async fn every_ssrf_class_is_refused_at_creation(backend: Backend) {
    let resolver = Arc::new(StaticResolver::new());
    resolver.set("loopback.example", vec!["127.0.0.1".parse().unwrap()]);
    resolver.set("private.example", vec!["10.1.2.3".parse().unwrap()]);
    resolver.set(
        "mixed.example",
        vec![
            "93.184.216.34".parse().unwrap(),
            "192.168.1.1".parse().unwrap(),
        ],
    );
    resolver.set("metadata.example", vec!["169.254.169.254".parse().unwrap()]);
    resolver.set("v6local.example", vec!["fd00::1".parse().unwrap()]);
    resolver.set("public.example", vec!["93.184.216.34".parse().unwrap()]);
    let app = spawn_app_with_resolver(backend, resolver, |_| {}).await;
    assert!(!app.settings.webhooks.allow_insecure_targets);
    let refused = [
        "http://public.example/hook",
        "https://127.0.0.1/hook",
        "https://127.1.2.3:8443/hook",
        "https://[::1]/hook",
        "https://10.0.0.1/hook",
        "https://172.16.5.4/hook",
        "https://192.168.0.10/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/hook",
        "https://[fc00::1]/hook",
        "https://[fe80::1]/hook",
        "https://224.0.0.1/hook",
        "https://[ff02::1]/hook",
        "https://0.0.0.0/hook",
        "https://[::]/hook",
        "https://192.0.2.1/hook",
        "https://198.51.100.7/hook",
        "https://203.0.113.9/hook",
        "https://[2001:db8::1]/hook",
        "https://198.18.0.1/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[::ffff:10.0.0.1]/hook",
        "https://[64:ff9b::a9fe:a9fe]/hook",
        "https://[2002:7f00:1::]/hook",
        "https://2130706433/hook",
        "https://0x7f.0.0.1/hook",
        "https://user:pw@public.example/hook",
        "https://loopback.example/hook",
        "https://private.example/hook",
        "https://mixed.example/hook",
        "https://metadata.example/hook",
        "https://v6local.example/hook",
        "https://unknown.example/hook",
    ];
    for url in refused {
        let reply = app
            .post(
                "/v1/webhooks",
                &app.live_key,
                json!({ "url": url, "events": ["message.sent"] }),
            )
            .await;
        assert_eq!(reply.status, 422, "{url} was not refused: {}", reply.body);
        assert_eq!(reply.code(), "validation_failed", "{url}");
        assert_eq!(reply.data()["field"], "url", "{url}");
    }
    let listed = app.get("/v1/webhooks", &app.live_key).await.expect(200);
    assert_eq!(listed.data()["webhooks"], json!([]));
    // A public name is accepted (no request is made at creation).
    app.create_webhook(
        &app.live_key,
        json!({ "url": "https://public.example/hook", "events": ["message.sent"] }),
    )
    .await;
}

async fn a_name_rebound_to_loopback_is_refused_at_delivery(backend: Backend) {
    let resolver = Arc::new(StaticResolver::new());
    resolver.set("rebind.example", vec!["93.184.216.34".parse().unwrap()]);
    let app = spawn_app_with_resolver(backend, resolver.clone(), |s| {
        s.webhooks.retry_schedule = vec![Duration::from_millis(200)];
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let endpoint = app
        .create_webhook(
            &app.test_key,
            json!({ "url": "https://rebind.example/hook", "events": ["message.sent"] }),
        )
        .await;
    // After creation the name re-resolves to loopback (DNS rebinding).
    resolver.set("rebind.example", vec!["127.0.0.1".parse().unwrap()]);
    let id = endpoint["id"].as_str().unwrap();
    app.send_test(RECIPIENT, "rebind").await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, id, 1).await;
    assert_eq!(rows[0]["error"], "blocked_address", "{}", rows[0]);
    assert_eq!(rows[0]["status_code"], Value::Null);
    assert_eq!(rows[0]["state"], "failed");
    assert!(receiver.received().is_empty());
    receiver.stop().await;
}

async fn a_hanging_endpoint_does_not_delay_a_healthy_one(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.timeout = Duration::from_secs(10);
    })
    .await;
    let hanging = WebhookReceiver::start().await;
    hanging.delay_always(Duration::from_secs(8));
    let healthy = WebhookReceiver::start().await;
    app.subscribe(
        &app.test_key,
        &hanging,
        &["message.sent", "message.delivered"],
    )
    .await;
    app.subscribe(
        &app.test_key,
        &healthy,
        &["message.sent", "message.delivered"],
    )
    .await;
    let started = std::time::Instant::now();
    for i in 0..20 {
        app.send_test(RECIPIENT, &format!("m{i}")).await.expect(202);
    }
    // 40 events reach the healthy endpoint while the other one holds 16 requests for 8 s.
    let received = healthy.wait_for(40, Duration::from_secs(5)).await;
    let last = received.iter().map(|r| r.at).max().unwrap();
    assert!(
        last.duration_since(started) < Duration::from_secs(3),
        "healthy endpoint delayed: {:?}",
        last.duration_since(started)
    );
    assert!(!hanging.received().is_empty());
    healthy.stop().await;
}

async fn inbound_messages_fire_message_received(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let receiver = WebhookReceiver::start().await;
    let (_, token) = app.pair_phone(SENDER).await;
    app.create_webhook(
        &app.live_key,
        json!({ "url": receiver.url, "events": ["message.received"], "phone_numbers": [SENDER] }),
    )
    .await;
    let mut phone = app.connect_phone(&token).await;
    let ack = phone
        .report(PhoneFrame::Received {
            reference: "in-1".into(),
            from: RECIPIENT.into(),
            content: "hi there".into(),
            received_at: chrono::Utc::now(),
        })
        .await;
    assert!(matches!(ack, Some(ServerFrame::Ack { .. })), "{ack:?}");
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    let body = got[0].json();
    assert_eq!(body["event"], "message.received");
    assert_eq!(body["message"]["direction"], "inbound");
    assert_eq!(body["message"]["from_number"], RECIPIENT);
    assert_eq!(body["message"]["to_number"], SENDER);
    assert_eq!(body["message"]["content"], "hi there");
    assert_eq!(
        body["message"]["expires_at"],
        Value::Null,
        "nothing expires inbound"
    );
    assert_eq!(body["message"]["test_mode"], false);
    receiver.stop().await;
}

/// docs/api.md, Webhooks: a message not handed to a phone by expires_at becomes `expired` and fires
/// message.failed.
async fn an_expired_message_fires_message_failed(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.messages.ttl = Duration::from_secs(1);
        s.pace.per_minute = 1;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let (_, token) = app.pair_phone(SENDER).await;
    app.subscribe(&app.live_key, &receiver, &["message.failed"])
        .await;
    let mut phone = app.connect_phone(&token).await;
    let send = |content: &'static str| {
        app.send(
            &app.live_key,
            json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": content }),
        )
    };
    let handed = send("first").await.expect(202);
    // The pace (1 a minute) holds the second in the queue until it expires.
    let waiting = send("second").await.expect(202);
    let (first, ..) = phone.expect_send().await;
    assert_eq!(first.to_string(), handed.data()["id"].as_str().unwrap());
    let waiting_id = waiting.data()["id"].as_str().unwrap();
    app.wait_for_status(&app.live_key, waiting_id, "expired")
        .await;
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "only the expired message failed");
    let body = got[0].json();
    assert_eq!(body["event"], "message.failed");
    assert_eq!(body["message"]["id"], waiting_id);
    assert_eq!(body["message"]["status"], "expired");
    // The whole record, as the API shows it (docs/api.md, Messages).
    let record = app
        .get(&format!("/v1/messages/{waiting_id}"), &app.live_key)
        .await
        .expect(200)
        .data()
        .clone();
    let mut expected = record.as_object().unwrap().clone();
    expected.remove("events");
    assert_eq!(body["message"], Value::Object(expected));
    assert_eq!(body["message"]["failure_reason"], "expired");
    receiver.stop().await;
}

async fn a_message_removed_by_retention_ends_its_delivery(backend: Backend) {
    let app = spawn_retrying(backend, vec![Duration::from_millis(500)]).await;
    let (receiver, id) = sent_hook(&app, &[500]).await;
    let sent = app
        .send_test("+15005550002", "short-lived")
        .await
        .expect(202);
    let message_id = sent.data()["id"].as_str().unwrap().to_string();
    wait_for_attempts(&app, &app.test_key, &id, 1).await;
    // Retention removes the record between two attempts.
    let db = sea_orm::Database::connect(&app.database_url).await.unwrap();
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entity::messages::Entity::delete_many()
        .filter(entity::messages::Column::Id.eq(uuid::Uuid::parse_str(&message_id).unwrap()))
        .exec(&db)
        .await
        .unwrap();
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[0]["error"], "message_deleted", "{}", rows[0]);
    assert_eq!(rows[0]["state"], "failed");
    assert_eq!(rows[0]["status_code"], Value::Null);
    assert_eq!(receiver.received().len(), 1);
    receiver.stop().await;
}

async fn deleting_an_endpoint_stops_its_retries(backend: Backend) {
    let app = spawn_retrying(backend, vec![Duration::from_millis(500); 3]).await;
    let (receiver, id) = sent_hook(&app, &[500, 500, 500, 500]).await;
    app.send_test(RECIPIENT, "doomed").await.expect(202);
    receiver.wait_for(1, Duration::from_secs(10)).await;
    app.delete(&format!("/v1/webhooks/{id}"), &app.test_key)
        .await
        .expect(200);
    let before = receiver.received().len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        receiver.received().len(),
        before,
        "retries continued after delete"
    );
    // Another endpoint still gets events.
    let second = WebhookReceiver::start().await;
    app.subscribe(&app.test_key, &second, &["message.sent"])
        .await;
    app.send_test(RECIPIENT, "alive").await.expect(202);
    second.wait_for(1, Duration::from_secs(10)).await;
    receiver.stop().await;
    second.stop().await;
}

/// A retry after retention emptied the message's content carries `content: ""` (the body is
/// rebuilt from the record at each attempt), with the same event id and a fresh signature.
async fn retries_after_content_removal_carry_empty_content(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.retry_schedule = vec![Duration::from_millis(1500); 2];
        s.webhooks.timeout = Duration::from_millis(500);
        s.retention.content_after = Duration::from_millis(200);
        s.retention.record_after = Duration::from_secs(3600);
        s.retention.interval = Duration::from_millis(100);
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    receiver.answer(&[500, 200]);
    let endpoint = app
        .subscribe(&app.test_key, &receiver, &["message.received"])
        .await;
    let signing_key = endpoint["signing_key"].as_str().unwrap().to_string();
    let inbound = app.test_inbound(RECIPIENT, "short-lived").await;
    let id = inbound["id"].as_str().unwrap().to_string();
    let got = receiver.wait_for(2, Duration::from_secs(15)).await;
    let (first, retry) = (got[0].json(), got[1].json());
    assert_eq!(first["message"]["id"], id.as_str());
    assert_eq!(first["message"]["content"], "short-lived");
    assert_eq!(retry["message"]["id"], id.as_str());
    assert_eq!(retry["message"]["content"], "", "{retry}");
    assert_eq!(retry["event_id"], first["event_id"]);
    assert_eq!(
        got[1].header("x-signature"),
        signing::signature_hex(&signing_key, &got[1].body)
    );
    let stored = app.message(&app.test_key, &id).await;
    assert_eq!(stored["content"], "");
    receiver.stop().await;
}

backend_tests!(retries_after_content_removal_carry_empty_content);
