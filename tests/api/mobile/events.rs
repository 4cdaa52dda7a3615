//! The event stream: reconnects lose nothing, a backlog is announced once (and page by page),
//! and the newest connection wins.

use super::*;

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
    the_newest_connection_wins_and_nothing_is_lost_or_sent_twice,
    a_reconnecting_stream_loses_nothing,
    a_backlog_is_announced_once_until_the_app_fetches,
    a_backlog_longer_than_a_page_is_announced_page_by_page,
);
