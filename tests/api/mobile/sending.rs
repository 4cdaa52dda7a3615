//! The app sends: fetching and reporting messages, the pace, cancels, retries after a failure,
//! and answers once a report is stored.

use super::*;

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
    // Both reports are processed (the messages are `sent`); what a fetch hands out is the
    // phone's decision at the time of the fetch, so there is nothing more to wait for.
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

backend_tests!(
    a_retry_after_failed_is_a_new_send_for_the_app,
    a_report_is_answered_once_it_is_stored,
    the_app_sends_through_events_fetch_and_reports,
    pace_holds_and_cancel_is_announced,
);
