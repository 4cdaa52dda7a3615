//! What is delivered: signed bodies, event and phone filters, the events of inbound and expired
//! messages, and a hanging endpoint that delays no other.

use super::*;
use crate::helpers::assert_null;

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
    let live_endpoint = app
        .subscribe(
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
    // Test-mode events go to test-mode endpoints only: both events were fanned out (the
    // test endpoint has them), and the live endpoint has no delivery of either.
    let live_deliveries = app
        .get(
            &format!(
                "/v1/webhooks/{}/deliveries",
                live_endpoint["id"].as_str().unwrap()
            ),
            &app.live_key,
        )
        .await
        .expect(200);
    assert_eq!(live_deliveries.data()["deliveries"], json!([]));
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

async fn event_and_phone_filters(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let delivered_only = WebhookReceiver::start().await;
    let other_phone = WebhookReceiver::start().await;
    let this_phone = WebhookReceiver::start().await;
    let delivered_endpoint = app
        .subscribe(&app.test_key, &delivered_only, &["message.delivered"])
        .await;
    let other_endpoint = app
        .create_webhook(
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
    // Both events were fanned out (this phone's endpoint has them): the filtered endpoints
    // have exactly what they will ever get, one succeeded delivery and none.
    let delivered_rows = wait_for_attempts(
        &app,
        &app.test_key,
        delivered_endpoint["id"].as_str().unwrap(),
        1,
    )
    .await;
    assert_eq!(delivered_rows.len(), 1, "{delivered_rows:?}");
    assert_eq!(delivered_rows[0]["state"], "succeeded");
    assert_eq!(delivered_only.received().len(), 1);
    let other_rows = wait_for_attempts(
        &app,
        &app.test_key,
        other_endpoint["id"].as_str().unwrap(),
        0,
    )
    .await;
    assert!(other_rows.is_empty(), "{other_rows:?}");
    assert!(other_phone.received().is_empty());
    for r in [delivered_only, other_phone, this_phone] {
        r.stop().await;
    }
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
    assert_null(&body["message"], "expires_at"); // nothing expires inbound
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

backend_tests!(
    deliveries_are_signed_by_both_rules,
    event_and_phone_filters,
    a_hanging_endpoint_does_not_delay_a_healthy_one,
    inbound_messages_fire_message_received,
    an_expired_message_fires_message_failed,
);
