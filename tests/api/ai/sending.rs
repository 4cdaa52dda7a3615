//! Sending and discarding drafts, a live draft's phone, and auto mode with its fallbacks.

use super::*;
use crate::helpers::typed;
use smsgw::api::ai::DraftOut;

/// Sending queues one reply from the number the message arrived on to its sender, marks the
/// draft sent, and works once; edited content is sent and kept; content that is too long is
/// refused and the draft stays pending; unknown and other-mode ids are 404.
async fn sending_a_draft_queues_the_reply_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let [first, second, third] =
        pending_drafts(&app, &["+14155550211", "+14155550212", "+14155550213"])
            .await
            .try_into()
            .unwrap();

    // No body: the draft's own text.
    let message = send_draft(&app, &app.test_key, &id_of(&first), None)
        .await
        .expect(202)
        .data()
        .clone();
    assert_eq!(message["direction"], "outbound");
    assert_eq!(message["from_number"], first["to_number"]);
    assert_eq!(message["to_number"], first["from_number"]);
    assert_eq!(message["from_number"], SENDER);
    assert_eq!(message["content"], "It is 10 EUR");
    assert_eq!(message["status"], "queued");
    assert_eq!(message["test_mode"], true);
    let message_id = id_of(&message);
    app.wait_for_status(&app.test_key, &message_id, "delivered")
        .await;
    let sent = get_draft(&app, &app.test_key, &id_of(&first)).await;
    assert_eq!(sent["status"], "sent");
    assert_eq!(sent["sent_message_id"], message_id.as_str());
    assert_eq!(sent["content"], "It is 10 EUR");
    assert_eq!(sent["message_id"], first["message_id"]);

    // Once only: a second send and a discard are refused with the current status.
    let again = send_draft(&app, &app.test_key, &id_of(&first), None)
        .await
        .expect_error(409, "invalid_state");
    assert_eq!(again.data()["status"], "sent");
    let discard = discard_draft(&app, &app.test_key, &id_of(&first))
        .await
        .expect_error(409, "invalid_state");
    assert_eq!(discard.data()["status"], "sent");

    // Edited content is what is sent, and what the draft keeps.
    let edited = send_edited(&app, &app.test_key, &id_of(&second), "Edited").await;
    assert_eq!(edited["content"], "Edited");
    assert_eq!(edited["to_number"], "+14155550212");
    app.wait_for_status(&app.test_key, &id_of(&edited), "delivered")
        .await;
    let second_now = get_draft(&app, &app.test_key, &id_of(&second)).await;
    assert_eq!(second_now["status"], "sent");
    assert_eq!(second_now["content"], "Edited");
    assert_eq!(second_now["sent_message_id"], edited["id"]);

    // Content over 10 segments: refused like a send; the draft is untouched.
    let long = send_draft(
        &app,
        &app.test_key,
        &id_of(&third),
        Some(json!({ "content": "a".repeat(2000) })),
    )
    .await
    .expect_error(422, "content_too_long");
    assert_eq!(long.data()["field"], "content");
    let third_now = get_draft(&app, &app.test_key, &id_of(&third)).await;
    assert_eq!(third_now["status"], "pending");
    assert_eq!(third_now["content"], "It is 10 EUR");
    assert_eq!(typed::<DraftOut>(&third_now).sent_message_id, None);

    let outbound = app.messages(&app.test_key, "direction=outbound").await;
    assert_eq!(outbound.len(), 2, "{outbound:?}");

    // Unknown ids, ids that are not UUIDs and the other mode's drafts are not found.
    let unknown = Uuid::new_v4().to_string();
    for id in [unknown.as_str(), "not-a-uuid"] {
        app.get(&format!("/v1/ai/drafts/{id}"), &app.test_key)
            .await
            .expect_error(404, "not_found");
        send_draft(&app, &app.test_key, id, None)
            .await
            .expect_error(404, "not_found");
        discard_draft(&app, &app.test_key, id)
            .await
            .expect_error(404, "not_found");
    }
    let third_id = id_of(&third);
    app.get(&format!("/v1/ai/drafts/{third_id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    send_draft(&app, &app.live_key, &third_id, None)
        .await
        .expect_error(404, "not_found");
    discard_draft(&app, &app.live_key, &third_id)
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        get_draft(&app, &app.test_key, &third_id).await["status"],
        "pending"
    );
}

/// Discarding works once and blocks sending; the list filters by status, rejects an unknown
/// status, and pages newest first.
async fn discarding_filtering_and_paging_drafts(backend: Backend) {
    let app = spawn_app(backend).await;
    let made = pending_drafts(
        &app,
        &[
            "+14155550221",
            "+14155550222",
            "+14155550223",
            "+14155550224",
        ],
    )
    .await;
    let ids: Vec<String> = made.iter().map(id_of).collect();

    let discarded = discard_draft(&app, &app.test_key, &ids[0])
        .await
        .expect(200)
        .data()
        .clone();
    assert_draft_shape(&discarded);
    assert_eq!(discarded["id"], ids[0].as_str());
    assert_eq!(discarded["status"], "discarded");
    assert_eq!(discarded["content"], "It is 10 EUR");
    assert_eq!(typed::<DraftOut>(&discarded).sent_message_id, None);
    let again = discard_draft(&app, &app.test_key, &ids[0])
        .await
        .expect_error(409, "invalid_state");
    assert_eq!(again.data()["status"], "discarded");
    let send = send_draft(&app, &app.test_key, &ids[0], None)
        .await
        .expect_error(409, "invalid_state");
    assert_eq!(send.data()["status"], "discarded");
    assert!(
        app.messages(&app.test_key, "direction=outbound")
            .await
            .is_empty(),
        "a discarded draft sends nothing"
    );

    send_draft(&app, &app.test_key, &ids[1], Some(json!({})))
        .await
        .expect(202);

    let listed_ids = |list: Vec<Value>| list.iter().map(id_of).collect::<Vec<_>>();
    assert_eq!(
        listed_ids(drafts(&app, &app.test_key, "status=pending").await),
        [ids[3].clone(), ids[2].clone()]
    );
    assert_eq!(
        listed_ids(drafts(&app, &app.test_key, "status=sent").await),
        [ids[1].clone()]
    );
    assert_eq!(
        listed_ids(drafts(&app, &app.test_key, "status=discarded").await),
        [ids[0].clone()]
    );
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(
        listed_ids(drafts(&app, &app.test_key, "").await),
        newest_first
    );
    let bad = app
        .get("/v1/ai/drafts?status=x", &app.test_key)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(bad.data()["field"], "status");
    let bad = app
        .get("/v1/ai/drafts?cursor=garbage", &app.test_key)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(bad.data()["field"], "cursor");
    let bad = app
        .get("/v1/ai/drafts?limit=0", &app.test_key)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(bad.data()["field"], "limit");

    // One at a time, newest first, until has_more is false.
    let mut paged = Vec::new();
    for page in app
        .pages(&app.test_key, "/v1/ai/drafts?limit=1", "drafts")
        .await
    {
        assert_eq!(page.len(), 1, "{page:?}");
        paged.push(id_of(&page[0]));
    }
    assert_eq!(paged, newest_first);
    // A filtered list pages too.
    let page = app
        .get("/v1/ai/drafts?limit=1&status=pending", &app.test_key)
        .await
        .expect(200);
    assert_eq!(page.data()["drafts"][0]["id"], ids[3].as_str());
    assert_eq!(page.data()["has_more"], true);

    // The live mode lists none of them.
    assert!(drafts(&app, &app.live_key, "").await.is_empty());
}

/// A live draft is sent through the phone of its number: none online is 503 and the draft stays
/// pending; once the phone is back the reply is handed to it.
async fn a_live_draft_needs_an_online_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    enable(&app, &app.live_key, "draft", json!([price_rule()])).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    phone.receive("in-1", CUSTOMER, "Price please").await;
    let asked = app.messages(&app.live_key, "direction=inbound").await;
    let draft = wait_for_draft(&app, &app.live_key, &id_of(&asked[0])).await;
    assert_eq!(draft["to_number"], SENDER);
    assert_eq!(draft["from_number"], CUSTOMER);

    phone.close().await;
    app.wait_online(&phone_id, false).await;
    let refused = send_draft(&app, &app.live_key, &id_of(&draft), None)
        .await
        .expect_error(503, "no_device_available");
    assert_eq!(refused.data()["field"], "from_number");
    assert_refused_changed_nothing(&app, &app.live_key, &draft, 0).await;

    let mut phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    let message = send_draft(&app, &app.live_key, &id_of(&draft), None)
        .await
        .expect(202)
        .data()
        .clone();
    let (message_id, to, content, _) = phone.expect_send().await;
    assert_eq!(message_id.to_string(), id_of(&message));
    assert_eq!(to, CUSTOMER);
    assert_eq!(content, "It is 10 EUR");
    let sent = get_draft(&app, &app.live_key, &id_of(&draft)).await;
    assert_eq!(sent["status"], "sent");
    assert_eq!(sent["sent_message_id"], message["id"]);
}

/// Auto mode queues the reply at once: the draft is stored sent with the reply's id, the reply
/// fires `message.sent` like any send, and no `ai.draft.created` fires.
async fn auto_mode_sends_the_reply_at_once(backend: Backend) {
    let app = spawn_app_with(backend, insecure).await;
    let drafts_hook = WebhookReceiver::start().await;
    let sent_hook = WebhookReceiver::start().await;
    let drafts_endpoint = app
        .subscribe(&app.test_key, &drafts_hook, &["ai.draft.created"])
        .await;
    app.subscribe(&app.test_key, &sent_hook, &["message.sent"])
        .await;
    enable(&app, &app.test_key, "auto", json!([price_rule()])).await;

    let asked = app.test_inbound(CUSTOMER, "What does it cost?").await;
    let draft = wait_for_draft(&app, &app.test_key, &id_of(&asked)).await;
    assert_draft_shape(&draft);
    assert_eq!(draft["status"], "sent", "{draft}");
    assert_eq!(draft["content"], "It is 10 EUR");
    let reply_id = draft["sent_message_id"]
        .as_str()
        .unwrap_or_else(|| panic!("an auto draft has its reply: {draft}"))
        .to_string();

    let outbound = app.messages(&app.test_key, "direction=outbound").await;
    assert_eq!(outbound.len(), 1, "{outbound:?}");
    assert_eq!(outbound[0]["id"], reply_id.as_str());
    assert_eq!(outbound[0]["from_number"], SENDER);
    assert_eq!(outbound[0]["to_number"], CUSTOMER);
    assert_eq!(outbound[0]["content"], "It is 10 EUR");
    app.wait_for_status(&app.test_key, &reply_id, "delivered")
        .await;

    let got = sent_hook.wait_for(1, DEADLINE).await;
    let body = got[0].json();
    assert_eq!(body["event"], "message.sent");
    assert_eq!(body["message"]["id"], reply_id.as_str());
    // The reply's message.sent is fanned out, and a draft event would have been before it:
    // the drafts endpoint has no delivery at all.
    let deliveries = app
        .get(
            &format!("/v1/webhooks/{}/deliveries", id_of(&drafts_endpoint)),
            &app.test_key,
        )
        .await
        .expect(200);
    assert_eq!(deliveries.data()["deliveries"], json!([]));
    assert!(
        drafts_hook.received().is_empty(),
        "auto mode fires no ai.draft.created: {:?}",
        drafts_hook
            .received()
            .iter()
            .map(|r| r.json())
            .collect::<Vec<_>>()
    );
    assert_eq!(sent_hook.received().len(), 1);
    // The sent auto draft cannot be sent again.
    send_draft(&app, &app.test_key, &id_of(&draft), None)
        .await
        .expect_error(409, "invalid_state");
    drafts_hook.stop().await;
    sent_hook.stop().await;
}

/// Auto mode over the new-workspace limit: nothing is queued, the draft stays pending and
/// `ai.draft.created` fires instead; sending it by hand is refused with 429 while the limit holds.
async fn auto_mode_over_the_new_workspace_limit_keeps_the_draft_pending(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        insecure(s);
        s.limits.new_workspace_messages = 1;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    app.subscribe(&app.live_key, &receiver, &["ai.draft.created"])
        .await;
    enable(&app, &app.live_key, "auto", json!([price_rule()])).await;
    let (_, mut phone) = app.online_phone(SENDER).await;

    // The one message the limit allows.
    app.send(&app.live_key, send_body(SENDER, OTHER, "Hello"))
        .await
        .expect(202);
    let (_, to, _, _) = phone.expect_send().await;
    assert_eq!(to, OTHER);

    phone.receive("in-1", CUSTOMER, "What's the price?").await;
    let asked = app.messages(&app.live_key, "direction=inbound").await;
    assert_eq!(asked.len(), 1);
    let got = receiver.wait_for(1, DEADLINE).await;
    let body = got[0].json();
    assert_eq!(body["event"], "ai.draft.created");
    assert_eq!(body["message"]["id"], asked[0]["id"]);
    assert_eq!(body["draft"]["content"], "It is 10 EUR");
    let draft = wait_for_draft(&app, &app.live_key, &id_of(&asked[0])).await;
    assert_eq!(body["draft"]["id"], draft["id"]);
    assert_eq!(draft["status"], "pending");
    assert_eq!(typed::<DraftOut>(&draft).sent_message_id, None);
    let outbound = app.messages(&app.live_key, "direction=outbound").await;
    assert_eq!(outbound.len(), 1, "no reply was queued: {outbound:?}");

    let refused = send_draft(&app, &app.live_key, &id_of(&draft), None)
        .await
        .expect_error(429, "new_account_limit");
    assert_eq!(refused.data()["limit"], 1);
    assert_refused_changed_nothing(&app, &app.live_key, &draft, 1).await;
    receiver.stop().await;
}

backend_tests!(
    sending_a_draft_queues_the_reply_once,
    discarding_filtering_and_paging_drafts,
    a_live_draft_needs_an_online_phone,
    auto_mode_sends_the_reply_at_once,
    auto_mode_over_the_new_workspace_limit_keeps_the_draft_pending,
);
