//! Premium-rate numbers and opt-outs (docs/api.md "AI reply drafts"): no draft, no auto reply,
//! and drafts that can no longer be sent.

use super::*;

/// A premium-rate sender gets no draft in draft mode and no reply in auto mode (a toll-fraud
/// path otherwise); an ordinary sender asked at the same time is answered.
async fn premium_rate_senders_get_no_draft_and_no_auto_reply(backend: Backend) {
    let app = spawn_app(backend).await;
    for (mode, control) in [("draft", CUSTOMER), ("auto", OTHER)] {
        enable(&app, &app.test_key, mode, json!([price_rule()])).await;
        let premium = app.test_inbound(PREMIUM, "What's the price?").await;
        let asked = app.test_inbound(control, "What's the price?").await;
        // The control came after the premium-rate sender and is answered: the responder
        // takes messages in order, so that one has been taken too.
        wait_for_draft(&app, &app.test_key, &id_of(&asked)).await;
        let all = drafts(&app, &app.test_key, "").await;
        assert!(
            all.iter().all(|d| d["message_id"] != premium["id"]),
            "{mode}: no draft for a premium-rate sender: {all:?}"
        );
        assert!(
            texts_to(&app, &app.test_key, PREMIUM).await.is_empty(),
            "{mode}: nothing is sent to a premium-rate number"
        );
    }
    assert_eq!(texts_to(&app, &app.test_key, OTHER).await.len(), 1);
}

/// A pending draft whose recipient is a premium-rate number (stored before such drafts were
/// refused) cannot be sent: 403 `premium_rate_blocked`, field `to_number`, nothing sent, the
/// draft stays pending.
async fn a_draft_to_a_premium_rate_number_is_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let [draft] = pending_drafts(&app, &[CUSTOMER]).await.try_into().unwrap();
    // The draft of an older server: its sender is a premium-rate number.
    let db = sea_orm::Database::connect(&app.database_url).await.unwrap();
    use sea_orm::ConnectionTrait;
    db.execute_unprepared(&format!("UPDATE ai_drafts SET from_number = '{PREMIUM}'"))
        .await
        .unwrap();
    db.close().await.unwrap();

    let refused = send_draft(&app, &app.test_key, &id_of(&draft), None)
        .await
        .expect_error(403, "premium_rate_blocked");
    assert_eq!(refused.data()["field"], "to_number");
    let kept = get_draft(&app, &app.test_key, &id_of(&draft)).await;
    assert_eq!(kept["status"], "pending");
    assert!(
        app.messages(&app.test_key, "direction=outbound")
            .await
            .is_empty()
    );
    // It can still be discarded.
    discard_draft(&app, &app.test_key, &id_of(&draft))
        .await
        .expect(200);
}

/// STOP and STOP AI discard the sender's pending drafts in the transaction that applies them:
/// the draft reads `discarded` and sending it is 409 `invalid_state`; nothing is sent. Another
/// sender's draft is untouched.
async fn stop_and_stop_ai_discard_pending_drafts(backend: Backend) {
    let app = spawn_app(backend).await;
    let stopper = "+14155550221";
    let no_ai = "+14155550222";
    let [stopped, silenced, kept] = pending_drafts(&app, &[stopper, no_ai, OTHER])
        .await
        .try_into()
        .unwrap();
    app.test_inbound(stopper, "stop").await;
    app.test_inbound(no_ai, "STOP  AI").await;

    for draft in [&stopped, &silenced] {
        assert_eq!(
            get_draft(&app, &app.test_key, &id_of(draft)).await["status"],
            "discarded"
        );
        let refused = send_draft(&app, &app.test_key, &id_of(draft), None)
            .await
            .expect_error(409, "invalid_state");
        assert_eq!(refused.data()["status"], "discarded");
    }
    assert!(
        app.messages(&app.test_key, "direction=outbound")
            .await
            .is_empty()
    );
    assert_eq!(
        get_draft(&app, &app.test_key, &id_of(&kept)).await["status"],
        "pending"
    );
    send_draft(&app, &app.test_key, &id_of(&kept), None)
        .await
        .expect(202);
}

/// A contact opted out by hand (PATCH `opted_out`) or with AI replies turned off by hand keeps
/// its pending draft, but sending it is refused (403 `recipient_opted_out` / `ai_replies_off`,
/// field `to_number`) and nothing is sent; undone by hand, the draft can be sent.
async fn drafts_of_a_contact_opted_out_by_hand_cannot_be_sent(backend: Backend) {
    let app = spawn_app(backend).await;
    let [draft] = pending_drafts(&app, &[CUSTOMER]).await.try_into().unwrap();
    let contact = app
        .post(
            "/v1/contacts",
            &app.test_key,
            json!({ "phone_number": CUSTOMER }),
        )
        .await
        .expect(201);
    let contact_path = format!("/v1/contacts/{}", id_of(contact.data()));
    let patch = |body: Value| {
        let (app, path) = (&app, contact_path.clone());
        async move {
            app.patch(&path, &app.test_key, body).await.expect(200);
        }
    };

    patch(json!({ "opted_out": true })).await;
    let refused = send_draft(&app, &app.test_key, &id_of(&draft), None)
        .await
        .expect_error(403, "recipient_opted_out");
    assert_eq!(refused.data()["field"], "to_number");

    patch(json!({ "opted_out": false, "ai_replies": false })).await;
    let refused = send_draft(
        &app,
        &app.test_key,
        &id_of(&draft),
        Some(json!({ "content": "Edited by a person" })),
    )
    .await
    .expect_error(403, "ai_replies_off");
    assert_eq!(refused.data()["field"], "to_number");
    assert_refused_changed_nothing(&app, &app.test_key, &draft, 0).await;

    patch(json!({ "ai_replies": true })).await;
    send_draft(&app, &app.test_key, &id_of(&draft), None)
        .await
        .expect(202);
}

/// The provider is still thinking when the contact texts STOP (or STOP AI): in auto mode the
/// reply is not sent, in draft mode no pending draft is kept; the outcome is counted as
/// `smsgw_ai_drafts_total{outcome="opted_out"}`.
async fn a_reply_made_while_the_contact_opted_out_is_neither_sent_nor_kept(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    fake.reply("Sure, 10 EUR");
    let app = spawn_with_openai(backend, &fake).await;
    let cases = [
        ("auto", "+14155550231", "STOP"),
        ("auto", "+14155550232", "STOP AI"),
        ("draft", "+14155550233", "STOP"),
        ("draft", "+14155550234", "stop ai"),
    ];
    for (asked_so_far, (mode, sender, keyword)) in cases.into_iter().enumerate() {
        enable(&app, &app.test_key, mode, json!([])).await;
        let before = ai_drafts_metric(&app, "opted_out").await;
        fake.hold();
        let asked = app.test_inbound(sender, "How much is it?").await;
        fake.wait_for(asked_so_far + 1).await;
        app.test_inbound(sender, keyword).await;
        fake.release();
        // Counted as opted out: the reply's outcome is decided.
        wait_for_ai_metric(&app, "opted_out", before + 1.0).await;
        let all = drafts(&app, &app.test_key, "").await;
        assert!(
            all.iter().all(|d| d["message_id"] != asked["id"]),
            "{mode} {keyword}: no draft kept: {all:?}"
        );
        assert!(
            texts_to(&app, &app.test_key, sender).await.is_empty(),
            "{mode} {keyword}: nothing sent"
        );
    }
    // Control: a sender who did not opt out is answered.
    enable(&app, &app.test_key, "auto", json!([])).await;
    let asked = app.test_inbound(CUSTOMER, "How much is it?").await;
    let draft = wait_for_draft(&app, &app.test_key, &id_of(&asked)).await;
    assert_eq!(draft["status"], "sent");
    assert_eq!(texts_to(&app, &app.test_key, CUSTOMER).await.len(), 1);
    fake.stop().await;
}

backend_tests!(
    premium_rate_senders_get_no_draft_and_no_auto_reply,
    a_draft_to_a_premium_rate_number_is_refused,
    stop_and_stop_ai_discard_pending_drafts,
    drafts_of_a_contact_opted_out_by_hand_cannot_be_sent,
    a_reply_made_while_the_contact_opted_out_is_neither_sent_nor_kept,
);
