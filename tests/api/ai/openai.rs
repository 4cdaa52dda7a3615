//! The `openai` provider against a fake OpenAI-compatible server: what it is sent, its
//! failures, and messages left without a draft.

use super::*;

/// The provider gets the configured model and key, the instructions as the system message and
/// the conversation between the two numbers oldest first, ending with the new message; its
/// trimmed reply is the draft, cut to 10 segments when longer.
async fn openai_provider_gets_instructions_and_the_conversation(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    fake.reply(" Sure! ");
    let app = drafting_with_openai(backend, &fake).await;

    let hello = app.test_inbound(CUSTOMER, "Hello").await;
    let first = wait_for_draft(&app, &app.test_key, &id_of(&hello)).await;
    assert_eq!(first["content"], "Sure!");
    assert_eq!(first["status"], "pending");
    let requests = fake.wait_for(1).await;
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.authorization, "Bearer k-123");
    assert_eq!(request.body["model"], "test-model");
    assert_eq!(
        request.conversation(),
        [
            ("system".to_string(), "Be brief.".to_string()),
            ("user".to_string(), "Hello".to_string()),
        ]
    );

    // Our answer (the draft, edited), and a message to someone else that is not part of it.
    let answer = send_edited(&app, &app.test_key, &id_of(&first), "Hi! How can I help?").await;
    app.wait_for_status(&app.test_key, &id_of(&answer), "delivered")
        .await;
    let unrelated = app
        .send(&app.test_key, send_body(SENDER, OTHER, "Unrelated"))
        .await
        .expect(202);
    app.wait_for_status(&app.test_key, &id_of(unrelated.data()), "delivered")
        .await;

    let question = app.test_inbound(CUSTOMER, "Do you ship to Spain?").await;
    let second = wait_for_draft(&app, &app.test_key, &id_of(&question)).await;
    assert_eq!(second["content"], "Sure!");
    let requests = fake.received();
    assert_eq!(requests.len(), 2, "one provider call per inbound message");
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].authorization, "Bearer k-123");
    assert_eq!(requests[1].body["model"], "test-model");
    assert_eq!(
        requests[1].conversation(),
        [
            ("system".to_string(), "Be brief.".to_string()),
            ("user".to_string(), "Hello".to_string()),
            ("assistant".to_string(), "Hi! How can I help?".to_string()),
            ("user".to_string(), "Do you ship to Spain?".to_string()),
        ]
    );

    // A reply longer than 10 segments is cut to fit.
    let long_reply = "a".repeat(2000);
    fake.reply(&long_reply);
    let more = app.test_inbound(CUSTOMER, "Tell me everything").await;
    let third = wait_for_draft(&app, &app.test_key, &id_of(&more)).await;
    let content = third["content"].as_str().unwrap();
    assert!(!content.is_empty());
    assert!(
        content.chars().count() <= 1530,
        "at most 10 GSM-7 segments, got {} characters",
        content.chars().count()
    );
    assert!(
        long_reply.starts_with(content),
        "cut, not rewritten: {content}"
    );
    fake.stop().await;
}

/// A provider answering 500 or something that is not a completion leaves no draft; an empty
/// reply leaves none either; the inbound messages are stored all the same and each error is
/// counted as `provider_error`.
async fn openai_provider_errors_leave_no_draft_and_keep_the_message(backend: Backend) {
    let (fake, app) = failing_provider(backend, "boom").await;
    let errors_before = ai_drafts_metric(&app, "provider_error").await;

    let failed = app.test_inbound(CUSTOMER, "First question").await;
    fake.wait_for(1).await;
    fake.answer(200, "this is not JSON");
    let garbled = app.test_inbound("+14155550231", "Second question").await;
    fake.wait_for(2).await;
    fake.reply("   ");
    let empty = app.test_inbound("+14155550232", "Third question").await;
    fake.wait_for(3).await;
    // Positive control: a good answer makes a draft.
    fake.reply("Fine");
    let fine = app.test_inbound("+14155550233", "Fourth question").await;
    let draft = wait_for_draft(&app, &app.test_key, &id_of(&fine)).await;
    assert_eq!(draft["content"], "Fine");
    // The failures are counted (their outcome is decided), and the control is drafted.
    poll(DEADLINE, Duration::from_millis(50), async || {
        let errors = ai_drafts_metric(&app, "provider_error").await;
        if errors >= errors_before + 2.0 && errors >= 1.0 {
            return Ok(());
        }
        Err(format!("smsgw_ai_drafts_total{{outcome=\"provider_error\"}} went from {errors_before} to {errors}"))
    })
    .await;

    let all = drafts(&app, &app.test_key, "").await;
    assert_eq!(all.len(), 1, "{all:?}");
    let stored = app.messages(&app.test_key, "direction=inbound").await;
    for message in [&failed, &garbled, &empty, &fine] {
        assert!(
            stored.iter().any(|m| m["id"] == message["id"]),
            "inbound {} is stored: {stored:?}",
            message["content"]
        );
    }
    fake.stop().await;
}

/// A provider that failed (or a server stopped before the draft was stored) leaves an inbound
/// message without a draft; a starting server answers the last minutes' such messages again.
async fn messages_left_without_a_draft_are_answered_after_a_restart(backend: Backend) {
    let (fake, app) = failing_provider(backend, "down").await;
    let errors_before = ai_drafts_metric(&app, "provider_error").await;
    let asked = app.test_inbound(CUSTOMER, "Are you open today?").await;
    fake.wait_for(1).await;
    // The failure is counted: the message's outcome is decided, and it has no draft.
    wait_for_ai_metric(&app, "provider_error", errors_before + 1.0).await;
    assert!(drafts(&app, &app.test_key, "").await.is_empty());

    fake.reply("Yes, until 6");
    let app = app.restart().await;
    let draft = wait_for_draft(&app, &app.test_key, &id_of(&asked)).await;
    assert_eq!(draft["content"], "Yes, until 6");
    assert_eq!(draft["status"], "pending");
    // Answered once: a second restart finds it drafted. Another message left without a
    // draft before that restart proves the restart's look for such messages ran: it is
    // answered, and the drafted one is not asked again.
    fake.answer(500, &json!({ "error": { "message": "down" } }).to_string());
    let later = app.test_inbound(OTHER, "And tomorrow?").await;
    // Its request arrived and got the 500 (the fake picks the answer as it records the
    // request). Not the error metric: it is the process's, and other tests running beside
    // this one move it too.
    fake.wait_for(3).await;
    fake.reply("Yes, until 6");
    let app = app.restart().await;
    wait_for_draft(&app, &app.test_key, &id_of(&later)).await;
    assert_eq!(drafts(&app, &app.test_key, "").await.len(), 2);
    let asked_about: Vec<String> = fake
        .received()
        .iter()
        .filter_map(|r| r.conversation().last().map(|(_, content)| content.clone()))
        .collect();
    assert_eq!(
        asked_about,
        [
            "Are you open today?",
            "Are you open today?",
            "And tomorrow?",
            "And tomorrow?"
        ],
        "the provider was asked once per start for each message without a draft"
    );
}

backend_tests!(
    openai_provider_gets_instructions_and_the_conversation,
    openai_provider_errors_leave_no_draft_and_keep_the_message,
    messages_left_without_a_draft_are_answered_after_a_restart,
);
