//! Settings and their validation, and when a draft is made: the rules provider, opt-out
//! keywords, `ai_replies` and disabled settings.

use super::*;
use crate::helpers::typed;
use smsgw::api::ai::DraftOut;

/// Defaults, a whole-replacing PUT, the boundaries that pass, every validation error (which
/// changes nothing), and one settings record per mode.
async fn settings_default_round_trip_and_validation(backend: Backend) {
    let app = spawn_app(backend).await;
    assert_eq!(get_settings(&app, &app.test_key).await, default_settings());
    assert_eq!(get_settings(&app, &app.live_key).await, default_settings());
    app.request("GET", "/v1/ai/settings", None, None)
        .await
        .expect_error(401, "missing_api_key");

    let full = json!({
        "enabled": true,
        "mode": "auto",
        "instructions": "Be brief and friendly.",
        "rules": [
            price_rule(),
            { "keywords": ["opening hours", "open"], "reply": "9 to 5, Monday to Friday" },
        ],
    });
    let stored = put_settings(&app, &app.test_key, full.clone())
        .await
        .expect(200);
    assert_eq!(stored.data(), &full);
    assert_eq!(get_settings(&app, &app.test_key).await, full);
    // The live mode has settings of its own.
    assert_eq!(get_settings(&app, &app.live_key).await, default_settings());

    // A PUT replaces the settings whole: absent instructions and rules are reset.
    let bare = put_settings(
        &app,
        &app.test_key,
        json!({ "enabled": false, "mode": "draft" }),
    )
    .await
    .expect(200);
    assert_eq!(bare.data(), &default_settings());
    assert_eq!(get_settings(&app, &app.test_key).await, default_settings());

    // Every limit, at its boundary, is accepted: 4,000 characters of instructions, 100 rules
    // of 20 keywords (one of 64 characters) and a reply of exactly 10 GSM-7 segments.
    let edge_rules: Vec<Value> = (0..100)
        .map(|i| {
            let keywords: Vec<String> = (0..20)
                .map(|j| match j {
                    0 => format!("{i:03}{}", "k".repeat(61)),
                    _ => format!("word{i}x{j}"),
                })
                .collect();
            json!({ "keywords": keywords, "reply": "a".repeat(1530) })
        })
        .collect();
    assert_eq!(
        edge_rules[0]["keywords"][0]
            .as_str()
            .unwrap()
            .chars()
            .count(),
        64
    );
    let edge = json!({
        "enabled": true,
        "mode": "draft",
        "instructions": "i".repeat(4000),
        "rules": edge_rules,
    });
    let stored = put_settings(&app, &app.test_key, edge.clone())
        .await
        .expect(200);
    assert_eq!(stored.data(), &edge);
    assert_eq!(get_settings(&app, &app.test_key).await, edge);

    put_settings(&app, &app.test_key, full.clone())
        .await
        .expect(200);

    let rule_with =
        |keywords: Value, reply: Value| json!([{ "keywords": keywords, "reply": reply }]);
    let base = |rules: Value| json!({ "enabled": true, "mode": "draft", "rules": rules });
    let too_many_keywords: Vec<String> = (0..21).map(|j| format!("w{j}")).collect();
    let too_many_rules: Vec<Value> = (0..101).map(|_| price_rule()).collect();
    let cases = [
        (
            json!({ "mode": "draft" }),
            422,
            "validation_failed",
            "enabled",
        ),
        (
            json!({ "enabled": "yes", "mode": "draft" }),
            400,
            "invalid_json",
            "enabled",
        ),
        (json!({ "enabled": true }), 422, "validation_failed", "mode"),
        (
            json!({ "enabled": true, "mode": "x" }),
            422,
            "validation_failed",
            "mode",
        ),
        (
            json!({ "enabled": true, "mode": "draft", "instructions": "i".repeat(4001) }),
            422,
            "validation_failed",
            "instructions",
        ),
        (
            base(Value::Array(too_many_rules)),
            422,
            "validation_failed",
            "rules",
        ),
        (
            base(rule_with(json!([]), json!("x"))),
            422,
            "validation_failed",
            "rules[0].keywords",
        ),
        (
            base(rule_with(json!(too_many_keywords), json!("x"))),
            422,
            "validation_failed",
            "rules[0].keywords",
        ),
        (
            base(json!([{ "reply": "x" }])),
            422,
            "validation_failed",
            "rules[0].keywords",
        ),
        (
            base(rule_with(json!([""]), json!("x"))),
            422,
            "validation_failed",
            "rules[0].keywords[0]",
        ),
        (
            base(rule_with(json!(["ok", "   "]), json!("x"))),
            422,
            "validation_failed",
            "rules[0].keywords[1]",
        ),
        (
            base(rule_with(json!(["k".repeat(65)]), json!("x"))),
            422,
            "validation_failed",
            "rules[0].keywords[0]",
        ),
        (
            base(rule_with(json!(["price"]), json!(""))),
            422,
            "validation_failed",
            "rules[0].reply",
        ),
        (
            base(json!([{ "keywords": ["price"] }])),
            422,
            "validation_failed",
            "rules[0].reply",
        ),
        (
            base(json!([price_rule(), { "keywords": ["open"], "reply": "" }])),
            422,
            "validation_failed",
            "rules[1].reply",
        ),
        (
            base(rule_with(json!(["price"]), json!("a".repeat(1531)))),
            422,
            "content_too_long",
            "rules[0].reply",
        ),
    ];
    for (body, status, code, field) in cases {
        let reply = put_settings(&app, &app.test_key, body.clone())
            .await
            .expect_error(status, code);
        assert_eq!(reply.data()["field"], field, "body: {body}");
        if code == "content_too_long" {
            assert_eq!(reply.data()["segments"], 11, "{}", reply.body);
        }
        assert_eq!(
            get_settings(&app, &app.test_key).await,
            full,
            "a refused PUT changes nothing: {body}"
        );
    }
    app.raw(
        "PUT",
        "/v1/ai/settings",
        Some(&app.test_key),
        "application/json",
        b"{not json".to_vec(),
    )
    .await
    .expect_error(400, "invalid_json");
    assert_eq!(get_settings(&app, &app.test_key).await, full);

    // Each mode keeps its own record: writing the live one leaves the test one alone.
    let live = json!({ "enabled": true, "mode": "draft", "instructions": "Live only.",
                       "rules": [{ "keywords": ["hours"], "reply": "9 to 5" }] });
    put_settings(&app, &app.live_key, live.clone())
        .await
        .expect(200);
    assert_eq!(get_settings(&app, &app.live_key).await, live);
    assert_eq!(get_settings(&app, &app.test_key).await, full);
}

/// The rules provider in draft mode: a matching inbound text gets a pending draft answering it
/// (first matching rule, whole words, any case) and one `ai.draft.created` delivery; a text
/// matching no rule gets none.
async fn rules_draft_mode_makes_a_pending_draft_and_fires_the_event(backend: Backend) {
    let app = spawn_app_with(backend, insecure).await;
    let receiver = WebhookReceiver::start().await;
    app.subscribe(&app.test_key, &receiver, &["ai.draft.created"])
        .await;
    enable(
        &app,
        &app.test_key,
        "draft",
        json!([price_rule(), { "keywords": ["opening hours"], "reply": "9 to 5" }]),
    )
    .await;

    let asked = app.test_inbound(CUSTOMER, "What's the PRICE?").await;
    let draft = wait_for_draft(&app, &app.test_key, &id_of(&asked)).await;
    assert_draft_shape(&draft);
    assert_eq!(draft["content"], "It is 10 EUR");
    assert_eq!(draft["status"], "pending");
    assert_eq!(draft["from_number"], CUSTOMER);
    assert_eq!(draft["to_number"], SENDER);
    assert_eq!(typed::<DraftOut>(&draft).sent_message_id, None);
    assert_eq!(get_draft(&app, &app.test_key, &id_of(&draft)).await, draft);

    let got = receiver.wait_for(1, DEADLINE).await;
    let body = got[0].json();
    assert_eq!(body["event"], "ai.draft.created");
    assert_eq!(body["message"]["id"], asked["id"]);
    assert_eq!(body["message"]["direction"], "inbound");
    assert_eq!(body["message"]["from_number"], CUSTOMER);
    assert_eq!(body["message"]["to_number"], SENDER);
    assert_eq!(body["message"]["content"], "What's the PRICE?");
    assert_eq!(body["draft"]["id"], draft["id"]);
    assert_eq!(body["draft"]["content"], "It is 10 EUR");

    // No rule matches: no draft. "priceless" is not the word "price".
    let hello = app.test_inbound(OTHER, "Hello there").await;
    let priceless = app.test_inbound(OTHER, "This view is priceless").await;
    // Positive controls: a phrase keyword of the second rule, then a text matching both rules
    // (the first rule wins).
    let hours = app
        .test_inbound(OTHER, "What are your opening hours?")
        .await;
    let hours_draft = wait_for_draft(&app, &app.test_key, &id_of(&hours)).await;
    assert_eq!(hours_draft["content"], "9 to 5");
    let both = app
        .test_inbound(OTHER, "Opening hours, and what does it cost?")
        .await;
    let both_draft = wait_for_draft(&app, &app.test_key, &id_of(&both)).await;
    assert_eq!(both_draft["content"], "It is 10 EUR");
    // The controls came after "hello" and "priceless" and are drafted: the responder takes
    // messages in order, so those two have been taken too.

    let all = drafts(&app, &app.test_key, "").await;
    assert_eq!(all.len(), 3, "{all:?}");
    for unanswered in [&hello, &priceless] {
        assert!(
            all.iter().all(|d| d["message_id"] != unanswered["id"]),
            "no rule matches {}: {all:?}",
            unanswered["content"]
        );
    }
    // One delivery per draft, never two.
    let deliveries: Vec<Value> = receiver.received().iter().map(|r| r.json()).collect();
    assert_eq!(deliveries.len(), 3, "{deliveries:?}");
    for d in &all {
        let matching = deliveries
            .iter()
            .filter(|b| b["draft"]["id"] == d["id"])
            .count();
        assert_eq!(matching, 1, "draft {d} delivered {matching} times");
    }
    assert!(
        deliveries.iter().all(|b| b["event"] == "ai.draft.created"),
        "{deliveries:?}"
    );
    // The live mode sees none of it.
    assert!(drafts(&app, &app.live_key, "").await.is_empty());
    receiver.stop().await;
}

/// Disabled settings make no draft; the live mode, enabled, is the positive control.
async fn disabled_settings_make_no_draft(backend: Backend) {
    let app = spawn_app(backend).await;
    put_settings(
        &app,
        &app.test_key,
        json!({ "enabled": false, "mode": "draft", "rules": [price_rule()] }),
    )
    .await
    .expect(200);
    enable(&app, &app.live_key, "draft", json!([price_rule()])).await;
    let (_, mut phone) = app.online_phone(SENDER).await;

    let quiet = app.test_inbound(CUSTOMER, "What's the price?").await;
    phone.receive("in-1", CUSTOMER, "What's the price?").await;
    let live_inbound = app.messages(&app.live_key, "direction=inbound").await;
    assert_eq!(live_inbound.len(), 1);
    let live_draft = wait_for_draft(&app, &app.live_key, &id_of(&live_inbound[0])).await;
    assert_eq!(live_draft["content"], "It is 10 EUR");
    assert_eq!(live_draft["status"], "pending");
    // The live control came after the test-mode message and is drafted: the responder takes
    // messages in order, so that one has been taken too.

    assert!(
        drafts(&app, &app.test_key, "").await.is_empty(),
        "disabled settings made a draft for {quiet}"
    );
    assert_eq!(drafts(&app, &app.live_key, "").await.len(), 1);
}

/// Opt-out keywords never get a draft, even when a rule matches them; a sender whose contact
/// has `ai_replies` false (by "STOP AI" or by PATCH) gets none either, while others do.
async fn opt_out_keywords_and_stop_ai_get_no_draft(backend: Backend) {
    // Keyword messages, senders with AI replies off and opted-out senders get no draft.
    let app = spawn_app(backend).await;
    enable(
        &app,
        &app.test_key,
        "draft",
        json!([{ "keywords": ["stop", "start", "ai", "price"], "reply": "We hear you" }]),
    )
    .await;
    let stopper = "+14155550201";
    let starter = "+14155550202";
    let no_ai = "+14155550203";
    let patched = "+14155550204";
    let control = "+14155550205";

    let contact = app
        .post(
            "/v1/contacts",
            &app.test_key,
            json!({ "phone_number": patched }),
        )
        .await
        .expect(201);
    app.patch(
        &format!("/v1/contacts/{}", id_of(contact.data())),
        &app.test_key,
        json!({ "ai_replies": false }),
    )
    .await
    .expect(200);

    let mut silent = vec![
        app.test_inbound(stopper, "STOP").await,
        app.test_inbound(starter, " start ").await,
        app.test_inbound(no_ai, "Stop AI").await,
    ];
    silent.push(app.test_inbound(no_ai, "What's the price?").await);
    silent.push(app.test_inbound(patched, "What's the price?").await);
    // An opted-out sender gets no text at all, drafted or not.
    silent.push(app.test_inbound(stopper, "What's the price?").await);

    let answered = app
        .test_inbound(control, "Please stop, what's the price?")
        .await;
    let draft = wait_for_draft(&app, &app.test_key, &id_of(&answered)).await;
    assert_eq!(draft["content"], "We hear you");
    assert_eq!(draft["from_number"], control);
    // The control came after every silent message and is drafted: the responder takes
    // messages in order, so those have been taken too.

    let all = drafts(&app, &app.test_key, "").await;
    assert_eq!(
        all.len(),
        1,
        "only the control message gets a draft: {all:?}"
    );
    for message in &silent {
        assert!(
            all.iter().all(|d| d["message_id"] != message["id"]),
            "{message}"
        );
    }
    // The keyword messages themselves are stored like any other.
    let stored = app.messages(&app.test_key, "direction=inbound").await;
    assert_eq!(stored.len(), silent.len() + 1);
    let contacts = app.contacts(&app.test_key).await;
    let no_ai_contact = contacts
        .iter()
        .find(|c| c["phone_number"] == no_ai)
        .expect("STOP AI creates a contact");
    assert_eq!(no_ai_contact["ai_replies"], false);
}

backend_tests!(
    settings_default_round_trip_and_validation,
    rules_draft_mode_makes_a_pending_draft_and_fires_the_event,
    disabled_settings_make_no_draft,
    opt_out_keywords_and_stop_ai_get_no_draft,
);
