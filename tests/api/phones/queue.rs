//! Sending through a phone: the queue and its priority, the pace, retries, expiry, late and
//! out-of-order reports, restarts and phones sharing a number.

use super::*;

async fn live_send_is_delivered_through_the_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, mut phone) = app.online_phone(SENDER).await;
    let id = app.send_live("via a real phone").await;
    let (message_id, to, content, attempt) = phone.expect_send().await;
    assert_eq!(message_id.to_string(), id);
    assert_eq!(
        (to.as_str(), content.as_str(), attempt),
        (RECIPIENT, "via a real phone", 1)
    );
    phone
        .report_acked(PhoneFrame::Sent {
            message_id,
            reference: Some("r1".into()),
        })
        .await;
    phone
        .report_acked(PhoneFrame::Delivered {
            message_id,
            reference: Some("r2".into()),
        })
        .await;
    let message = app.wait_for_status(&app.live_key, &id, "delivered").await;
    assert_eq!(message["device_id"], phone_id.as_str());
    let kinds = timeline(&message);
    assert_eq!(kinds, ["queued", "sending", "sent", "delivered"]);
    // A repeated report does not move the message and is still acked.
    phone
        .report_acked(PhoneFrame::Delivered {
            message_id,
            reference: Some("r2".into()),
        })
        .await;
    // A report about a message this phone was never sent is refused, the session stays open.
    let reply = phone
        .report(PhoneFrame::Sent {
            message_id: uuid::Uuid::now_v7(),
            reference: Some("r3".into()),
        })
        .await;
    assert!(
        matches!(reply, Some(ServerFrame::Error { ref code, .. }) if code == "unknown_message"),
        "{reply:?}"
    );
    phone.send_text("{\"type\":\"teleport\"}").await;
    assert!(matches!(
        phone.next_frame().await,
        Some(ServerFrame::Error { .. })
    ));
    phone.send_text("not json").await;
    assert!(matches!(
        phone.next_frame().await,
        Some(ServerFrame::Error { .. })
    ));
    phone
        .send(&PhoneFrame::Heartbeat {
            battery: Some(0.5),
            signal: None,
        })
        .await;
    let id2 = app.send_live("still open").await;
    let (second, ..) = phone.expect_send().await;
    assert_eq!(second.to_string(), id2);
}

async fn pace_holds_extras_in_the_queue(backend: Backend) {
    let app = spawn_paced(backend, 2, 3).await;
    let (phone_id, mut phone) = app.online_phone(SENDER).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(app.send_live(&format!("paced {i}")).await);
    }
    let (first, ..) = phone.expect_send().await;
    let (second, ..) = phone.expect_send().await;
    assert_eq!(
        [first.to_string(), second.to_string()],
        [ids[0].clone(), ids[1].clone()]
    );
    assert!(
        phone
            .next_frame_within(Duration::from_millis(1500))
            .await
            .is_none(),
        "no third send inside the minute window"
    );
    for id in &ids[2..] {
        let m = app.message(&app.live_key, id).await;
        assert_eq!(m["status"], "queued", "extras wait, they are not rejected");
    }
    // Lifting the pace releases the queue at once, in order.
    app.set_pace(&phone_id, 100, 100).await;
    for id in &ids[2..] {
        let (next, ..) = phone.expect_send().await;
        assert_eq!(&next.to_string(), id);
    }
}

async fn queue_classes_are_served_in_priority_order(backend: Backend) {
    let app = spawn_paced(backend, 1, 1).await;
    let (phone_id, mut phone) = app.online_phone(SENDER).await;
    let first = app.send_live("takes the only slot").await;
    assert_eq!(phone.expect_send().await.0.to_string(), first);
    let bulk = app
        .bulk_send(&app.live_key,
            json!({ "from_number": SENDER, "content": "bulk", "to_numbers": ["+447911123456", "+4915123456789"] }))
        .await
        .expect(202);
    let single = app.send_live("single after bulk").await;
    app.set_pace(&phone_id, 100, 100).await;
    let order: Vec<String> = [
        phone.expect_send().await.0,
        phone.expect_send().await.0,
        phone.expect_send().await.0,
    ]
    .iter()
    .map(|id| id.to_string())
    .collect();
    let bulk_ids: Vec<String> = bulk.data()["message_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, [single, bulk_ids[0].clone(), bulk_ids[1].clone()]);
}

async fn disconnect_mid_send_requeues_and_resends_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    let id = app.send_live("interrupted").await;
    let (message_id, _, _, attempt) = phone.expect_send().await;
    assert_eq!(attempt, 1);
    phone.close().await;
    app.wait_online(&phone_id, false).await;
    app.wait_for_status(&app.live_key, &id, "queued").await;
    let mut phone = app.connect_phone(&token).await;
    let (again, _, _, attempt) = phone.expect_send().await;
    assert_eq!((again, attempt), (message_id, 2));
    assert!(
        phone
            .next_frame_within(Duration::from_millis(500))
            .await
            .is_none(),
        "sent once more, not twice"
    );
    phone
        .report(PhoneFrame::Delivered {
            message_id,
            reference: Some("d".into()),
        })
        .await;
    app.wait_for_status(&app.live_key, &id, "delivered").await;
}

async fn failed_attempts_are_retried_then_fail(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    let id = app.send_live("doomed").await;
    for expected in 1..=3 {
        let (message_id, _, _, attempt) = phone.expect_send().await;
        assert_eq!(attempt, expected);
        let ack = phone
            .report(PhoneFrame::Failed {
                message_id,
                error: "no signal".into(),
                reference: Some(format!("f{expected}")),
            })
            .await;
        assert_eq!(
            ack,
            Some(ServerFrame::Ack {
                reference: format!("f{expected}")
            })
        );
    }
    let message = app.wait_for_status(&app.live_key, &id, "failed").await;
    assert_eq!(message["send_attempts"], 3);
    assert_eq!(message["failure_reason"], "no signal");
    assert!(
        phone
            .next_frame_within(Duration::from_millis(300))
            .await
            .is_none(),
        "no fourth attempt"
    );
}

async fn unsent_messages_expire(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.pace.per_minute = 1;
        s.pace.per_30_minutes = 1;
        s.messages.ttl = Duration::from_millis(800);
    })
    .await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    app.send_live("goes out").await;
    phone.expect_send().await;
    let waiting = app.send_live("waits too long").await;
    let expired = app
        .wait_for_status(&app.live_key, &waiting, "expired")
        .await;
    assert_eq!(expired["failure_reason"], "expired");
    assert!(expired["failed_at"].is_string());
}

async fn restart_keeps_the_queue_and_the_pace(backend: Backend) {
    let app = spawn_paced(backend, 2, 2).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    let a = app.send_live("a").await;
    let b = app.send_live("b").await;
    let c = app.send_live("c").await;
    let (first, ..) = phone.expect_send().await;
    let (second, ..) = phone.expect_send().await;
    assert_eq!(
        [first.to_string(), second.to_string()],
        [a.clone(), b.clone()]
    );
    phone
        .report_acked(PhoneFrame::Sent {
            message_id: first,
            reference: Some("s1".into()),
        })
        .await;
    // b is handed over but unreported when the server stops.
    drop(phone);
    let app = app.restart().await;
    let mut phone = app.connect_phone(&token).await;
    // Pace used before the restart still counts: nothing may be sent now.
    assert!(
        phone
            .next_frame_within(Duration::from_millis(1500))
            .await
            .is_none(),
        "the restarted server kept the pace"
    );
    for id in [&b, &c] {
        let m = app.message(&app.live_key, id).await;
        assert_eq!(m["status"], "queued", "nothing lost: {id} is queued again");
    }
    app.set_pace(&phone_id, 10, 10).await;
    let mut resent: Vec<String> = vec![
        phone.expect_send().await.0.to_string(),
        phone.expect_send().await.0.to_string(),
    ];
    resent.sort();
    let mut expected = vec![b, c];
    expected.sort();
    assert_eq!(resent, expected);
    let sent_a = app
        .get(&format!("/v1/messages/{a}"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(
        sent_a.data()["status"],
        "sent",
        "a reported message is not sent again"
    );
}

async fn phones_sharing_a_number_take_over_unpinned_messages(backend: Backend) {
    let app = spawn_paced(backend, 1, 1).await;
    let (first_id, first_token) = app.pair_phone(SENDER).await;
    let (second_id, second_token) = app.pair_phone(SENDER).await;
    let mut first = app.connect_phone(&first_token).await;
    // With one phone online, every send routes to it; its pace lets one out.
    let a = app.send_live("a").await;
    let b = app.send_live("b").await;
    assert_eq!(first.expect_send().await.0.to_string(), a);
    let pinned = app
        .send(&app.live_key,
            json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "pinned", "device_id": first_id }))
        .await
        .expect(202);
    let pinned = pinned.data()["id"].as_str().unwrap().to_string();
    let mut second = app.connect_phone(&second_token).await;
    // The first phone goes away: its unpinned waiting message moves to the second phone.
    first.close().await;
    assert_eq!(second.expect_send().await.0.to_string(), b);
    let moved = app.message(&app.live_key, &b).await;
    assert_eq!(moved["device_id"], second_id.as_str());
    assert!(
        moved["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "rerouted")
    );
    let stays = app
        .get(&format!("/v1/messages/{pinned}"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(
        stays.data()["status"],
        "queued",
        "a pinned message waits for its phone"
    );
    // Unpairing the first phone fails the pinned message.
    app.delete(&format!("/v1/phones/{first_id}"), &app.live_key)
        .await
        .expect(200);
    let failed = app.wait_for_status(&app.live_key, &pinned, "failed").await;
    assert_eq!(failed["failure_reason"], "phone_unpaired");
}

async fn late_reports_settle_requeued_messages(backend: Backend) {
    let app = spawn_paced(backend, 1, 1).await;
    let (_, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    let id = app.send_live("sent before the drop").await;
    let (message_id, ..) = phone.expect_send().await;
    let waiting = app.send_live("never handed over").await;
    phone.close().await;
    app.wait_for_status(&app.live_key, &id, "queued").await;
    // The phone comes back and re-sends its unacked report of the first attempt.
    let mut phone = app.connect_phone(&token).await;
    phone
        .send(&PhoneFrame::Delivered {
            message_id,
            reference: Some("late".into()),
        })
        .await;
    let mut acked = false;
    for _ in 0..3 {
        if let Some(ServerFrame::Ack { reference }) =
            phone.next_frame_within(Duration::from_secs(2)).await
        {
            acked = reference == "late";
            if acked {
                break;
            }
        }
    }
    assert!(acked, "the late report is acked");
    let done = app.wait_for_status(&app.live_key, &id, "delivered").await;
    assert!(done["delivered_at"].is_string());
    // A report about a message this phone was never handed is refused.
    let reply = phone
        .report(PhoneFrame::Delivered {
            message_id: waiting.parse().unwrap(),
            reference: Some("x".into()),
        })
        .await;
    assert!(
        matches!(reply, Some(ServerFrame::Error { ref code, .. }) if code == "unknown_message"),
        "{reply:?}"
    );
}

/// A delivery report that overtakes its `sent` report still records `sent` first, once: the
/// timeline and the events (message.sent webhooks) never skip it.
async fn delivery_before_sent_still_records_sent_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    for (round, sent_too) in [(1, true), (2, false)] {
        let id = app.send_live(&format!("round {round}")).await;
        let (message_id, ..) = phone.expect_send().await;
        let ack = phone
            .report(PhoneFrame::Delivered {
                message_id,
                reference: Some(format!("d{round}")),
            })
            .await;
        assert_eq!(
            ack,
            Some(ServerFrame::Ack {
                reference: format!("d{round}")
            })
        );
        if sent_too {
            let ack = phone
                .report(PhoneFrame::Sent {
                    message_id,
                    reference: Some(format!("s{round}")),
                })
                .await;
            assert_eq!(
                ack,
                Some(ServerFrame::Ack {
                    reference: format!("s{round}")
                })
            );
        }
        let message = app.wait_for_status(&app.live_key, &id, "delivered").await;
        let kinds = timeline(&message);
        assert_eq!(
            kinds,
            ["queued", "sending", "sent", "delivered"],
            "round {round}"
        );
        assert!(message["sent_at"].is_string(), "{message}");
    }
}

/// A send to an idle online phone is handed over in the accept's own commit: the reply still
/// reads `queued` (docs/api.md, Messages), the timeline reads queued then sending, and a request
/// that is refused after the phone reserved its pace slot (a reused request_id) gives the slot
/// back.
async fn immediate_hand_over_keeps_the_contract_and_the_pace(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    app.set_pace(&phone_id, 2, 25).await;
    let mut phone = app.connect_phone(&token).await;
    let mut body = send_body(SENDER, RECIPIENT, "first");
    body["request_id"] = json!("order-1");
    let reply = app.send(&app.live_key, body.clone()).await.expect(202);
    assert_eq!(reply.data()["status"], "queued");
    assert_eq!(reply.data()["send_attempts"], 0);
    let id = reply.data()["id"].as_str().unwrap().to_string();
    let (message_id, _, content, attempt) = phone.expect_send().await;
    assert_eq!(
        (message_id.to_string(), content.as_str(), attempt),
        (id.clone(), "first", 1)
    );
    let stored = app.wait_for_status(&app.live_key, &id, "sending").await;
    let kinds = timeline(&stored);
    assert_eq!(kinds, ["queued", "sending"]);
    assert_eq!(stored["send_attempts"], 1);
    assert_eq!(stored["device_id"], phone_id.as_str());

    // The repeat is refused after routing reserved a slot; the slot comes back, so the second
    // of the two sends this minute still leaves at once.
    let repeat = app
        .send(&app.live_key, body)
        .await
        .expect_error(409, "duplicate_request");
    assert_eq!(repeat.data()["id"], id.as_str());
    let second = app.send_live("second").await;
    let (message_id, _, content, _) = phone.expect_send().await;
    assert_eq!(
        (message_id.to_string(), content.as_str()),
        (second, "second")
    );
    // The pace is spent now: a third waits in the queue.
    let third = app.send_live("third").await;
    assert_eq!(
        phone.next_frame_within(Duration::from_millis(500)).await,
        None
    );
    let waiting = app.message(&app.live_key, &third).await;
    assert_eq!(waiting["status"], "queued");
}

backend_tests!(
    live_send_is_delivered_through_the_phone,
    pace_holds_extras_in_the_queue,
    queue_classes_are_served_in_priority_order,
    disconnect_mid_send_requeues_and_resends_once,
    failed_attempts_are_retried_then_fail,
    unsent_messages_expire,
    restart_keeps_the_queue_and_the_pace,
    phones_sharing_a_number_take_over_unpinned_messages,
    late_reports_settle_requeued_messages,
    delivery_before_sent_still_records_sent_once,
    immediate_hand_over_keeps_the_contract_and_the_pace,
);
