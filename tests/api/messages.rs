//! The messages API (docs/api.md, Messages and Errors) in test mode and at its boundaries.

use std::collections::HashSet;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::{
    Backend, FAILED_THREE_TIMES, RECIPIENT, SENDER, TestApp, send_body, spawn_app, spawn_app_with,
    the_one_accepted, timeline,
};

async fn send_content(app: &TestApp, content: &str) -> crate::helpers::Reply {
    app.send(&app.test_key, send_body(SENDER, RECIPIENT, content))
        .await
}

async fn test_send_is_delivered_with_full_timeline(backend: Backend) {
    let app = spawn_app(backend).await;
    let reply = app.send_test(RECIPIENT, "Hello there").await.expect(202);
    let data = reply.data();
    assert_eq!(data["status"], "queued");
    assert_eq!(data["from_number"], SENDER);
    assert_eq!(data["to_number"], RECIPIENT);
    assert_eq!(data["segments"], 1);
    assert_eq!(data["encoding"], "GSM-7");
    assert_eq!(data["test_mode"], true);
    let created =
        chrono::DateTime::parse_from_rfc3339(data["created_at"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(data["expires_at"].as_str().unwrap()).unwrap();
    // expires_at is set when the request is parsed, created_at when its batch commits.
    let ttl = (expires - created).num_milliseconds();
    assert!(
        (86_390_000..=86_400_000).contains(&ttl),
        "expires_at = now + messages.ttl, got {ttl} ms"
    );
    let id = data["id"].as_str().unwrap();
    let message = app.wait_for_status(&app.test_key, id, "delivered").await;
    let kinds = timeline(&message);
    assert_eq!(kinds, ["queued", "sending", "sent", "delivered"]);
    assert!(message["sent_at"].is_string());
    assert!(message["delivered_at"].is_string());
    assert_eq!(message["send_attempts"], 1);
    let at = message["events"][0]["at"].as_str().unwrap();
    assert!(
        at.ends_with("+00:00") && at.len() == "2026-11-22T10:15:30.123+00:00".len(),
        "{at}"
    );
}

async fn magic_recipients_fail_or_never_deliver(backend: Backend) {
    let app = spawn_app(backend).await;
    let failing = app.send_test("+15005550001", "fails").await.expect(202);
    let never = app
        .send_test("+15005550002", "stays sent")
        .await
        .expect(202);
    let failed = app
        .wait_for_status(
            &app.test_key,
            failing.data()["id"].as_str().unwrap(),
            "failed",
        )
        .await;
    assert_eq!(
        failed["send_attempts"], 3,
        "retried up to messages.max_send_attempts"
    );
    assert!(
        failed["failure_reason"]
            .as_str()
            .unwrap()
            .contains("simulated")
    );
    let kinds = timeline(&failed);
    assert_eq!(kinds, FAILED_THREE_TIMES);
    let id = never.data()["id"].as_str().unwrap();
    app.wait_for_status(&app.test_key, id, "sent").await;
    // A message sent after it is delivered: its report would have come by now.
    let later = app.send_test(RECIPIENT, "delivered").await.expect(202);
    let later = later.data()["id"].as_str().unwrap();
    app.wait_for_status(&app.test_key, later, "delivered").await;
    let still = app.message(&app.test_key, id).await;
    assert_eq!(still["status"], "sent", "no delivery report: stays sent");
}

async fn content_length_boundaries(backend: Backend) {
    let app = spawn_app(backend).await;
    let cases: Vec<(String, u64, &str)> = vec![
        ("a".repeat(160), 1, "GSM-7"),
        ("a".repeat(161), 2, "GSM-7"),
        ("a".repeat(1530), 10, "GSM-7"),
        ("€".repeat(80), 1, "GSM-7"),
        ("€".repeat(81), 2, "GSM-7"),
        ("ж".repeat(70), 1, "UCS-2"),
        ("ж".repeat(71), 2, "UCS-2"),
        ("😀".repeat(330), 10, "UCS-2"),
    ];
    for (content, segments, encoding) in cases {
        let reply = send_content(&app, &content).await.expect(202);
        assert_eq!(
            reply.data()["segments"],
            segments,
            "{} chars",
            content.chars().count()
        );
        assert_eq!(reply.data()["encoding"], encoding);
    }
    for (content, encoding) in [
        ("a".repeat(1531), "GSM-7"),
        ("€".repeat(766), "GSM-7"),
        ("😀".repeat(331), "UCS-2"),
    ] {
        let reply = send_content(&app, &content)
            .await
            .expect_error(422, "content_too_long");
        assert_eq!(reply.data()["field"], "content");
        assert_eq!(reply.data()["encoding"], encoding);
        assert_eq!(reply.data()["segments"], 11);
    }
    send_content(&app, "")
        .await
        .expect_error(422, "validation_failed");
    let list = app.messages(&app.test_key, "").await;
    assert_eq!(list.len(), 8, "refused sends write nothing");
}

async fn invalid_numbers_name_their_field(backend: Backend) {
    let app = spawn_app(backend).await;
    for (body, field) in [
        (send_body("4155550100", RECIPIENT, "x"), "from_number"),
        (send_body(SENDER, "+1555", "x"), "to_number"),
        (send_body(SENDER, "+44 7911 123456", "x"), "to_number"),
        (send_body(SENDER, "+19001234567", "x"), "to_number"),
    ] {
        let reply = app
            .send(&app.test_key, body)
            .await
            .expect_error(422, "invalid_phone_number");
        assert_eq!(reply.data()["field"], field);
    }
    let reply = app
        .bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "x",
                    "to_numbers": [RECIPIENT, "+447911123456", "+4915123456789", "not-a-number"] }),
        )
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(reply.data()["field"], "to_numbers[3]");
    let reply = app
        .get("/v1/messages?phone_number=12345", &app.test_key)
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(reply.data()["field"], "phone_number");
    // Validation order: a bad number is reported before content that is too long.
    let reply = app
        .send(&app.test_key, send_body(SENDER, "nope", &"a".repeat(2000)))
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(reply.data()["field"], "to_number");
}

async fn premium_rate_destinations_are_blocked(backend: Backend) {
    let app = spawn_app(backend).await;
    let reply = app
        .send(&app.test_key, send_body(SENDER, "+19005550123", "x"))
        .await
        .expect_error(403, "premium_rate_blocked");
    assert_eq!(reply.data()["field"], "to_number");
    let reply = app
        .bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "x",
                    "to_numbers": [RECIPIENT, "+449090901234"] }),
        )
        .await
        .expect_error(403, "premium_rate_blocked");
    assert_eq!(reply.data()["field"], "to_numbers[1]");
    let list = app.get("/v1/messages", &app.test_key).await.expect(200);
    assert!(
        list.data()["messages"].as_array().unwrap().is_empty(),
        "atomic: nothing written"
    );
}

/// Marks a contact opted out (or back in) by hand.
async fn set_opted_out(app: &TestApp, contact_id: &str, opted_out: bool) {
    app.patch(
        &format!("/v1/contacts/{contact_id}"),
        &app.test_key,
        json!({ "opted_out": opted_out }),
    )
    .await
    .expect(200);
}

/// docs/api.md "Messages": a single send to a number that opted out (STOP, or `opted_out` set
/// by hand) is 403 `recipient_opted_out` (field `to_number`) and stores nothing; the opt-out is
/// per mode; START sends again.
async fn single_send_to_an_opted_out_number_is_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let stopped = "+14155550301";
    let by_hand = "+14155550302";
    app.test_inbound(stopped, "STOP").await;
    let contact = app
        .post(
            "/v1/contacts",
            &app.test_key,
            json!({ "phone_number": by_hand }),
        )
        .await
        .expect(201);
    let contact_id = contact.data()["id"].as_str().unwrap().to_string();
    set_opted_out(&app, &contact_id, true).await;

    for number in [stopped, by_hand] {
        let refused = app
            .send(&app.test_key, send_body(SENDER, number, "Hello again"))
            .await
            .expect_error(403, "recipient_opted_out");
        assert_eq!(refused.data()["field"], "to_number");
    }
    let outbound = app.messages(&app.test_key, "direction=outbound").await;
    assert!(outbound.is_empty(), "nothing written: {outbound:?}");
    // A retried keyed send whose first attempt was refused is refused again, not a repeat.
    let keyed = json!({ "from_number": SENDER, "to_number": stopped, "content": "x",
                        "request_id": "after-stop" });
    for _ in 0..2 {
        app.send(&app.test_key, keyed.clone())
            .await
            .expect_error(403, "recipient_opted_out");
    }

    // START opts back in; a hand opt-out is undone by hand.
    app.test_inbound(stopped, "START").await;
    set_opted_out(&app, &contact_id, false).await;
    for number in [stopped, by_hand] {
        app.send(&app.test_key, send_body(SENDER, number, "Welcome back"))
            .await
            .expect(202);
    }
}

/// docs/api.md "Messages": one opted-out number rejects a whole bulk send (403
/// `recipient_opted_out`, field `to_numbers[i]` of its first place in the request), like a
/// premium-rate number; nothing is written. Another mode's opt-out does not count.
async fn bulk_send_with_an_opted_out_number_is_refused_whole(backend: Backend) {
    let app = spawn_app(backend).await;
    let stopped = "+14155550303";
    app.test_inbound(stopped, "STOP").await;
    let refused = app
        .bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "Sale!",
                    "to_numbers": [RECIPIENT, RECIPIENT, stopped, stopped] }),
        )
        .await
        .expect_error(403, "recipient_opted_out");
    assert_eq!(refused.data()["field"], "to_numbers[2]");
    let outbound = app.messages(&app.test_key, "direction=outbound").await;
    assert!(outbound.is_empty(), "atomic: nothing written: {outbound:?}");
    // The opt-out belongs to the test mode: a live bulk send to the number gets as far as
    // routing (no phone is paired).
    app.bulk_send(
        &app.live_key,
        json!({ "from_number": SENDER, "content": "Sale!", "to_numbers": [stopped] }),
    )
    .await
    .expect_error(503, "no_device_available");
    // Without the opted-out number the same bulk send goes out.
    let sent = app
        .bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "Sale!",
                    "to_numbers": [RECIPIENT, "+14155550304"] }),
        )
        .await
        .expect(202);
    assert_eq!(sent.data()["count"], 2);
}

async fn request_id_is_idempotent_under_concurrency(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "once",
                       "request_id": "order-42" });
    let replies = join_all((0..1000).map(|_| app.send(&app.test_key, body.clone()))).await;
    the_one_accepted(&replies);
    let list = app.messages(&app.test_key, "").await;
    assert_eq!(list.len(), 1);
    // The same request_id in the other mode is a different key space.
    let live = app.send(&app.live_key, body).await;
    assert_eq!(live.code(), "no_device_available");
}

async fn bulk_send_bounds_and_duplicates(backend: Backend) {
    let app = spawn_app(backend).await;
    let numbers = |n: usize| -> Vec<String> {
        (0..n)
            .map(|i| format!("+1415555{:04}", i % 10_000))
            .collect()
    };
    let reply = app
        .bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "hi", "to_numbers": numbers(500) }),
        )
        .await
        .expect(202);
    assert_eq!(reply.data()["count"], 500);
    assert_eq!(reply.data()["message_ids"].as_array().unwrap().len(), 500);
    let reply = app
        .bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "hi", "to_numbers": numbers(501) }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "to_numbers");
    app.bulk_send(
        &app.test_key,
        json!({ "from_number": SENDER, "content": "hi", "to_numbers": [] }),
    )
    .await
    .expect_error(422, "validation_failed");
    let reply = app
        .bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "dup",
                    "to_numbers": [RECIPIENT, RECIPIENT, "+447911123456"] }),
        )
        .await
        .expect(202);
    assert_eq!(reply.data()["count"], 2, "duplicate numbers are sent once");
    let first = reply.data()["message_ids"][0].as_str().unwrap().to_string();
    app.wait_for_status(&app.test_key, &first, "delivered")
        .await;
}

async fn batch_status_bounds(backend: Backend) {
    let app = spawn_app(backend).await;
    let sent = app.send_test(RECIPIENT, "x").await.expect(202);
    let id = sent.data()["id"].as_str().unwrap().to_string();
    let mut ids: Vec<String> = (0..99).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    ids.push(id.clone());
    let reply = app
        .post(
            "/v1/messages/batch-status",
            &app.test_key,
            json!({ "message_ids": ids }),
        )
        .await
        .expect(200);
    assert_eq!(reply.data()["messages"].as_array().unwrap().len(), 1);
    assert_eq!(reply.data()["messages"][0]["id"], id.as_str());
    assert!(reply.data()["messages"][0]["updated_at"].is_string());
    assert_eq!(reply.data()["not_found"].as_array().unwrap().len(), 99);
    ids.push(uuid::Uuid::new_v4().to_string());
    let reply = app
        .post(
            "/v1/messages/batch-status",
            &app.test_key,
            json!({ "message_ids": ids }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "message_ids");
    app.post(
        "/v1/messages/batch-status",
        &app.test_key,
        json!({ "message_ids": [] }),
    )
    .await
    .expect_error(422, "validation_failed");
    // Another mode's message is not found.
    let reply = app
        .post(
            "/v1/messages/batch-status",
            &app.live_key,
            json!({ "message_ids": [id] }),
        )
        .await
        .expect(200);
    assert_eq!(reply.data()["not_found"][0], id.as_str());
}

async fn list_limits_filters_and_bad_cursor(backend: Backend) {
    let app = spawn_app(backend).await;
    for i in 0..3 {
        app.send_test(RECIPIENT, &format!("m{i}")).await.expect(202);
    }
    app.send_test("+447911123456", "uk").await.expect(202);
    for limit in ["0", "101", "abc", "-1"] {
        let reply = app
            .get(&format!("/v1/messages?limit={limit}"), &app.test_key)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], "limit");
    }
    let one = app
        .get("/v1/messages?limit=1", &app.test_key)
        .await
        .expect(200);
    assert_eq!(one.data()["messages"].as_array().unwrap().len(), 1);
    assert_eq!(one.data()["has_more"], true);
    assert!(one.data()["next_cursor"].is_string());
    let all = app
        .get("/v1/messages?limit=100", &app.test_key)
        .await
        .expect(200);
    assert_eq!(all.data()["messages"].as_array().unwrap().len(), 4);
    assert_eq!(all.data()["has_more"], false);
    crate::helpers::assert_null(all.data(), "next_cursor");
    let default = app.get("/v1/messages", &app.test_key).await.expect(200);
    assert_eq!(default.data()["messages"].as_array().unwrap().len(), 4);
    let newest = &all.data()["messages"][0];
    assert_eq!(newest["content"], "uk", "newest first");
    let uk = app
        .get("/v1/messages?phone_number=%2B447911123456", &app.test_key)
        .await
        .expect(200);
    assert_eq!(uk.data()["messages"].as_array().unwrap().len(), 1);
    let inbound = app
        .get("/v1/messages?direction=inbound", &app.test_key)
        .await
        .expect(200);
    assert_eq!(inbound.data()["messages"].as_array().unwrap().len(), 0);
    app.get("/v1/messages?direction=sideways", &app.test_key)
        .await
        .expect_error(422, "validation_failed");
    app.get("/v1/messages?status=lost", &app.test_key)
        .await
        .expect_error(422, "validation_failed");
    let reply = app
        .get("/v1/messages?cursor=garbage!", &app.test_key)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "cursor");
    let id = all.data()["messages"][3]["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.wait_for_status(&app.test_key, &id, "delivered").await;
    let delivered = app
        .get("/v1/messages?status=delivered&limit=100", &app.test_key)
        .await
        .expect(200);
    assert!(
        delivered.data()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["status"] == "delivered")
    );
}

async fn paging_is_stable_while_messages_arrive(backend: Backend) {
    let app = spawn_app(backend).await;
    for chunk in 0..5 {
        let numbers: Vec<String> = (0..50)
            .map(|i| format!("+1415555{:04}", chunk * 50 + i))
            .collect();
        app.bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "page", "to_numbers": numbers }),
        )
        .await
        .expect(202);
    }
    let before: HashSet<String> = app
        .all_pages(&app.test_key, "/v1/messages", "messages")
        .await
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(before.len(), 250);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut round = 0;
    loop {
        // New messages arrive between pages.
        app.send_test(RECIPIENT, &format!("late {round}"))
            .await
            .expect(202);
        round += 1;
        let (page, next) = app
            .page(
                &app.test_key,
                "/v1/messages?limit=30",
                "messages",
                cursor.as_deref(),
            )
            .await;
        seen.extend(page.iter().map(|m| m["id"].as_str().unwrap().to_string()));
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let unique: HashSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no message repeated");
    assert!(before.is_subset(&unique), "no message skipped");
}

/// A send of `content` from [`SENDER`] to [`RECIPIENT`] held until `at`.
fn scheduled(content: &str, at: &str) -> Value {
    json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": content, "scheduled_for": at })
}

async fn scheduled_messages_are_held_and_can_be_canceled(backend: Backend) {
    let app = spawn_app(backend).await;
    let at = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let reply = app
        .send(&app.test_key, scheduled("later", &at.to_rfc3339()))
        .await
        .expect(202);
    assert_eq!(reply.data()["status"], "queued");
    assert!(reply.data()["scheduled_for"].is_string());
    let id = reply.data()["id"].as_str().unwrap().to_string();
    // An unscheduled message sent after it is delivered first; the held one is still queued.
    let now = app.send_test(RECIPIENT, "now").await.expect(202);
    let now = now.data()["id"].as_str().unwrap();
    app.wait_for_status(&app.test_key, now, "delivered").await;
    if chrono::Utc::now() < at {
        let held = app.message(&app.test_key, &id).await;
        assert_eq!(held["status"], "queued", "held until scheduled_for");
    }
    let done = app.wait_for_status(&app.test_key, &id, "delivered").await;
    let sent_at = chrono::DateTime::parse_from_rfc3339(done["sent_at"].as_str().unwrap()).unwrap();
    assert!(
        sent_at >= at - chrono::Duration::milliseconds(1),
        "sent after scheduled_for"
    );

    let far = chrono::Utc::now() + chrono::Duration::hours(1);
    let reply = app
        .send(&app.test_key, scheduled("cancel me", &far.to_rfc3339()))
        .await
        .expect(202);
    let id2 = reply.data()["id"].as_str().unwrap().to_string();
    let canceled = app
        .delete(&format!("/v1/messages/{id2}"), &app.test_key)
        .await
        .expect(200);
    assert_eq!(canceled.data()["status"], "canceled");
    let again = app
        .delete(&format!("/v1/messages/{id}"), &app.test_key)
        .await
        .expect_error(409, "invalid_state");
    assert_eq!(again.data()["status"], "delivered");
    app.delete(&format!("/v1/messages/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    let bad = app
        .send(&app.test_key, scheduled("x", "tomorrow"))
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(bad.data()["field"], "scheduled_for");
}

async fn live_sends_need_an_online_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    let reply = app
        .send(&app.live_key, send_body(SENDER, RECIPIENT, "x"))
        .await
        .expect_error(503, "no_device_available");
    assert_eq!(reply.data()["field"], "from_number");
    let (phone_id, _token) = app.pair_phone(SENDER).await;
    let reply = app
        .send(&app.live_key,
            json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "x", "device_id": phone_id }),
        )
        .await
        .expect_error(503, "no_device_available");
    assert_eq!(reply.data()["field"], "device_id");
    let reply = app
        .send(&app.live_key,
            json!({ "from_number": "+447911123456", "to_number": RECIPIENT, "content": "x", "device_id": phone_id }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "device_id");
    let list = app.get("/v1/messages", &app.live_key).await.expect(200);
    assert!(
        list.data()["messages"].as_array().unwrap().is_empty(),
        "nothing queued"
    );
}

async fn new_workspace_limit_counts_live_sends(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.limits.new_workspace_messages = 3).await;
    let (_, mut phone) = app.online_phone(SENDER).await;
    for i in 0..2 {
        app.send(&app.live_key, send_body(SENDER, RECIPIENT, &format!("{i}")))
            .await
            .expect(202);
    }
    let reply = app
        .bulk_send(&app.live_key,
            json!({ "from_number": SENDER, "content": "bulk", "to_numbers": [RECIPIENT, "+447911123456"] }),
        )
        .await
        .expect_error(429, "new_account_limit");
    assert_eq!(reply.data()["limit"], 3);
    assert!(reply.data()["window_ends_at"].is_string());
    app.send(&app.live_key, send_body(SENDER, RECIPIENT, "third"))
        .await
        .expect(202);
    app.send(&app.live_key, send_body(SENDER, RECIPIENT, "fourth"))
        .await
        .expect_error(429, "new_account_limit");
    let list = app.messages(&app.live_key, "").await;
    assert_eq!(list.len(), 3);
    // Test mode has no new-workspace limit.
    for _ in 0..5 {
        app.send_test(RECIPIENT, "test mode").await.expect(202);
    }
    let (_, _, _, _) = phone.expect_send().await;
}

/// A phone never splits an extension character (ESC + character) or an emoji (a surrogate
/// pair) across two parts (docs/api.md "Messages"): at a part boundary it moves whole to the
/// next part, so the text needs one part more than the ceiling of its length, and a text that
/// just fits 10 parts by length needs 11 and is refused.
async fn escape_or_emoji_at_a_part_boundary_needs_a_part_more(backend: Backend) {
    let app = spawn_app(backend).await;
    // 306 septets, ceil(306 / 153) = 2, but `€` would take septets 153 and 154.
    let straddling = format!("{}€{}", "a".repeat(152), "a".repeat(152));
    let reply = send_content(&app, &straddling).await.expect(202);
    assert_eq!(reply.data()["segments"], 3);
    assert_eq!(reply.data()["encoding"], "GSM-7");
    // The same characters with `€` one septet earlier fit in 2.
    let inside = format!("{}€{}", "a".repeat(151), "a".repeat(153));
    let reply = send_content(&app, &inside).await.expect(202);
    assert_eq!(reply.data()["segments"], 2);
    // 134 code units, ceil(134 / 67) = 2, but the 34th emoji would take units 67 and 68.
    let reply = send_content(&app, &"😀".repeat(67)).await.expect(202);
    assert_eq!(reply.data()["segments"], 3);
    assert_eq!(reply.data()["encoding"], "UCS-2");

    // 1,530 septets, and 670 code units: 10 parts by length, 11 as a phone packs them.
    for (content, encoding) in [
        (format!("{}€{}", "a".repeat(152), "a".repeat(1376)), "GSM-7"),
        ("😀".repeat(335), "UCS-2"),
    ] {
        let reply = send_content(&app, &content)
            .await
            .expect_error(422, "content_too_long");
        assert_eq!(reply.data()["field"], "content");
        assert_eq!(reply.data()["segments"], 11);
        assert_eq!(reply.data()["encoding"], encoding);
    }
    let list = app.messages(&app.test_key, "").await;
    assert_eq!(list.len(), 3, "refused sends write nothing");
}

backend_tests!(
    test_send_is_delivered_with_full_timeline,
    magic_recipients_fail_or_never_deliver,
    content_length_boundaries,
    escape_or_emoji_at_a_part_boundary_needs_a_part_more,
    invalid_numbers_name_their_field,
    premium_rate_destinations_are_blocked,
    single_send_to_an_opted_out_number_is_refused,
    bulk_send_with_an_opted_out_number_is_refused_whole,
    request_id_is_idempotent_under_concurrency,
    bulk_send_bounds_and_duplicates,
    batch_status_bounds,
    list_limits_filters_and_bad_cursor,
    paging_is_stable_while_messages_arrive,
    scheduled_messages_are_held_and_can_be_canceled,
    live_sends_need_an_online_phone,
    new_workspace_limit_counts_live_sends,
);
