//! AI reply drafts (docs/api.md, AI reply drafts): settings and their
//! validation, when a draft is made (rules provider, opt-out keywords, `ai_replies`), sending and
//! discarding drafts, auto mode and its fallbacks, and the `openai` provider against a fake
//! OpenAI-compatible server on loopback.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use smsgw::config::Settings;
use uuid::Uuid;

use crate::backend_tests;
use crate::helpers::{
    Backend, SENDER, TestApp, WebhookReceiver, poll, send_body, spawn_app, spawn_app_with,
};

backend_tests!(
    settings_default_round_trip_and_validation,
    rules_draft_mode_makes_a_pending_draft_and_fires_the_event,
    disabled_settings_make_no_draft,
    opt_out_keywords_and_stop_ai_get_no_draft,
    sending_a_draft_queues_the_reply_once,
    discarding_filtering_and_paging_drafts,
    a_live_draft_needs_an_online_phone,
    auto_mode_sends_the_reply_at_once,
    auto_mode_over_the_new_workspace_limit_keeps_the_draft_pending,
    openai_provider_gets_instructions_and_the_conversation,
    openai_provider_errors_leave_no_draft_and_keep_the_message,
    messages_left_without_a_draft_are_answered_after_a_restart,
    premium_rate_senders_get_no_draft_and_no_auto_reply,
    a_draft_to_a_premium_rate_number_is_refused,
    stop_and_stop_ai_discard_pending_drafts,
    drafts_of_a_contact_opted_out_by_hand_cannot_be_sent,
    a_reply_made_while_the_contact_opted_out_is_neither_sent_nor_kept,
);

/// Someone texting the workspace's number.
const CUSTOMER: &str = "+14155550177";
/// Another sender.
const OTHER: &str = "+14155550178";
/// How long a condition may take to come true before a poll gives up.
const DEADLINE: Duration = Duration::from_secs(10);
/// How long "nothing happens" is watched for, after a positive control came true.
const QUIET: Duration = Duration::from_millis(1000);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The settings of a workspace and mode that never saved any.
fn default_settings() -> Value {
    json!({ "enabled": false, "mode": "draft", "instructions": "", "rules": [] })
}

/// The rule most tests use.
fn price_rule() -> Value {
    json!({ "keywords": ["price", "cost"], "reply": "It is 10 EUR" })
}

/// Loopback http webhook targets allowed (the receiver is local).
fn insecure(s: &mut Settings) {
    s.webhooks.allow_insecure_targets = true;
}

async fn put_settings(app: &TestApp, key: &str, body: Value) -> crate::helpers::Reply {
    app.request("PUT", "/v1/ai/settings", Some(key), Some(body))
        .await
}

async fn get_settings(app: &TestApp, key: &str) -> Value {
    app.get("/v1/ai/settings", key)
        .await
        .expect(200)
        .data()
        .clone()
}

/// Enables AI replies in `mode` with `rules` for the key's mode.
async fn enable(app: &TestApp, key: &str, mode: &str, rules: Value) {
    put_settings(
        app,
        key,
        json!({ "enabled": true, "mode": mode, "rules": rules }),
    )
    .await
    .expect(200);
}

fn id_of(record: &Value) -> String {
    record["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {record}"))
        .to_string()
}

/// Drafts of the key's mode, newest first (one page of 100).
async fn drafts(app: &TestApp, key: &str, query: &str) -> Vec<Value> {
    app.get(&format!("/v1/ai/drafts?limit=100&{query}"), key)
        .await
        .expect(200)
        .data()["drafts"]
        .as_array()
        .expect("drafts is a list")
        .clone()
}

/// Polls until the draft answering inbound message `message_id` exists.
async fn wait_for_draft(app: &TestApp, key: &str, message_id: &str) -> Value {
    poll(DEADLINE, Duration::from_millis(20), async || {
        let all = drafts(app, key, "").await;
        if let Some(draft) = all.iter().find(|d| d["message_id"] == message_id) {
            return Ok(draft.clone());
        }
        Err(format!(
            "no draft for message {message_id}; drafts: {all:?}"
        ))
    })
    .await
}

/// After a refused send of `draft`: it is still pending, and the key's mode still has
/// `outbound` outbound messages.
async fn assert_refused_changed_nothing(app: &TestApp, key: &str, draft: &Value, outbound: usize) {
    assert_eq!(
        get_draft(app, key, &id_of(draft)).await["status"],
        "pending"
    );
    let sent = app.messages(key, "direction=outbound").await;
    assert_eq!(sent.len(), outbound, "{sent:?}");
}

async fn get_draft(app: &TestApp, key: &str, id: &str) -> Value {
    app.get(&format!("/v1/ai/drafts/{id}"), key)
        .await
        .expect(200)
        .data()
        .clone()
}

/// Every field of the draft record is present.
#[track_caller]
fn assert_draft_shape(draft: &Value) {
    for field in [
        "id",
        "message_id",
        "from_number",
        "to_number",
        "content",
        "status",
        "sent_message_id",
        "created_at",
        "updated_at",
    ] {
        assert!(draft.get(field).is_some(), "draft lacks {field}: {draft}");
    }
    assert!(draft["created_at"].is_string(), "{draft}");
    assert!(draft["updated_at"].is_string(), "{draft}");
}

/// Sends the draft with its text replaced by `content`; the accepted message.
async fn send_edited(app: &TestApp, key: &str, id: &str, content: &str) -> Value {
    send_draft(app, key, id, Some(json!({ "content": content })))
        .await
        .expect(202)
        .data()
        .clone()
}

async fn send_draft(
    app: &TestApp,
    key: &str,
    id: &str,
    body: Option<Value>,
) -> crate::helpers::Reply {
    app.request("POST", &format!("/v1/ai/drafts/{id}/send"), Some(key), body)
        .await
}

async fn discard_draft(app: &TestApp, key: &str, id: &str) -> crate::helpers::Reply {
    app.request(
        "POST",
        &format!("/v1/ai/drafts/{id}/discard"),
        Some(key),
        None,
    )
    .await
}

/// `smsgw_ai_drafts_total{outcome=…}` now (see [`TestApp::metric`]).
async fn ai_drafts_metric(app: &TestApp, outcome: &str) -> f64 {
    app.metric("smsgw_ai_drafts_total", &format!("outcome=\"{outcome}\""))
        .await
}

// ---------------------------------------------------------------------------------------------
// A fake OpenAI-compatible server on loopback
// ---------------------------------------------------------------------------------------------

/// One request the fake provider got.
#[derive(Debug, Clone)]
struct ProviderRequest {
    method: String,
    path: String,
    authorization: String,
    /// The body parsed as JSON (Null when it was not JSON).
    body: Value,
}

impl ProviderRequest {
    /// The `messages` of the chat request as (role, content) pairs.
    fn conversation(&self) -> Vec<(String, String)> {
        self.body["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("no messages in {}", self.body))
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or("").to_string(),
                    m["content"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }
}

#[derive(Default)]
struct ProviderScript {
    /// Status and raw body answered to every request.
    answer: (u16, String),
    received: Vec<ProviderRequest>,
}

/// A real HTTP server on 127.0.0.1 speaking just enough of the OpenAI chat API: it records each
/// request and answers with the scripted status and body.
struct FakeOpenAi {
    /// The base URL to configure as `ai.base_url` (ends in `/v1`).
    base_url: String,
    state: Arc<Mutex<ProviderScript>>,
    /// Answers wait while this is false (see [`FakeOpenAi::hold`]).
    gate: tokio::sync::watch::Sender<bool>,
    handle: actix_web::dev::ServerHandle,
}

/// An OpenAI chat completion whose first choice says `content`.
fn completion(content: &str) -> String {
    json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": content },
            "finish_reason": "stop"
        }],
        "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
    })
    .to_string()
}

impl FakeOpenAi {
    async fn start() -> FakeOpenAi {
        let state = Arc::new(Mutex::new(ProviderScript {
            answer: (200, completion("ok")),
            received: Vec::new(),
        }));
        let shared = state.clone();
        let (gate, _) = tokio::sync::watch::channel(true);
        let opened = gate.clone();
        let server = actix_web::HttpServer::new(move || {
            let shared = shared.clone();
            let opened = opened.clone();
            actix_web::App::new().default_service(actix_web::web::to(
                move |req: actix_web::HttpRequest, body: actix_web::web::Bytes| {
                    let shared = shared.clone();
                    let mut open = opened.subscribe();
                    async move {
                        // Record and pick the answer under one lock, so a test that saw the
                        // request arrive may change the script for the next one safely.
                        let (status, text) = {
                            let mut script = shared.lock().unwrap();
                            script.received.push(ProviderRequest {
                                method: req.method().to_string(),
                                path: req.path().to_string(),
                                authorization: req
                                    .headers()
                                    .get("authorization")
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or("")
                                    .to_string(),
                                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                            });
                            script.answer.clone()
                        };
                        // A held provider answers once released (the request is recorded).
                        let _ = open.wait_for(|open| *open).await;
                        actix_web::HttpResponse::build(
                            actix_web::http::StatusCode::from_u16(status).unwrap(),
                        )
                        .content_type("application/json")
                        .body(text)
                    }
                },
            ))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .bind("127.0.0.1:0")
        .expect("fake provider binds");
        let address = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        FakeOpenAi {
            base_url: format!("http://{address}/v1"),
            state,
            gate,
            handle,
        }
    }

    /// Later answers wait until [`FakeOpenAi::release`].
    fn hold(&self) {
        self.gate.send_replace(false);
    }

    /// Lets every held and later answer go.
    fn release(&self) {
        self.gate.send_replace(true);
    }

    /// Answers every later request with this status and raw body.
    fn answer(&self, status: u16, body: &str) {
        self.state.lock().unwrap().answer = (status, body.to_string());
    }

    /// Answers every later request with a completion saying `content`.
    fn reply(&self, content: &str) {
        self.answer(200, &completion(content));
    }

    fn received(&self) -> Vec<ProviderRequest> {
        self.state.lock().unwrap().received.clone()
    }

    /// Waits until at least `n` requests arrived; panics after [`DEADLINE`].
    async fn wait_for(&self, n: usize) -> Vec<ProviderRequest> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let received = self.received();
            if received.len() >= n {
                return received;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "provider got {} requests, expected {n}",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) {
        self.handle.stop(false).await;
    }
}

/// The app with the `openai` provider pointed at `fake`.
async fn spawn_with_openai(backend: Backend, fake: &FakeOpenAi) -> TestApp {
    let base_url = fake.base_url.clone();
    spawn_app_with(backend, move |s| {
        s.ai.provider = smsgw::config::AiProvider::Openai;
        s.ai.base_url = Some(base_url);
        s.ai.model = Some("test-model".into());
        s.ai.api_key = Some("k-123".into());
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// When a draft is made
// ---------------------------------------------------------------------------------------------

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
    assert_eq!(draft["sent_message_id"], Value::Null);
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
    tokio::time::sleep(QUIET).await;

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
    tokio::time::sleep(QUIET).await;

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
    tokio::time::sleep(QUIET).await;

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

// ---------------------------------------------------------------------------------------------
// Sending and discarding
// ---------------------------------------------------------------------------------------------

/// Pending drafts answering one inbound message from each of `senders`, made one after the
/// other (so the newest is the last).
async fn pending_drafts(app: &TestApp, senders: &[&str]) -> Vec<Value> {
    enable(app, &app.test_key, "draft", json!([price_rule()])).await;
    let mut out = Vec::new();
    for sender in senders {
        let asked = app.test_inbound(sender, "price?").await;
        let draft = wait_for_draft(app, &app.test_key, &id_of(&asked)).await;
        assert_eq!(draft["status"], "pending");
        out.push(draft);
    }
    out
}

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
    assert_eq!(third_now["sent_message_id"], Value::Null);

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
    assert_eq!(discarded["sent_message_id"], Value::Null);
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

// ---------------------------------------------------------------------------------------------
// Auto mode
// ---------------------------------------------------------------------------------------------

/// Auto mode queues the reply at once: the draft is stored sent with the reply's id, the reply
/// fires `message.sent` like any send, and no `ai.draft.created` fires.
async fn auto_mode_sends_the_reply_at_once(backend: Backend) {
    let app = spawn_app_with(backend, insecure).await;
    let drafts_hook = WebhookReceiver::start().await;
    let sent_hook = WebhookReceiver::start().await;
    app.subscribe(&app.test_key, &drafts_hook, &["ai.draft.created"])
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
    tokio::time::sleep(QUIET).await;
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
    assert_eq!(draft["sent_message_id"], Value::Null);
    let outbound = app.messages(&app.live_key, "direction=outbound").await;
    assert_eq!(outbound.len(), 1, "no reply was queued: {outbound:?}");

    let refused = send_draft(&app, &app.live_key, &id_of(&draft), None)
        .await
        .expect_error(429, "new_account_limit");
    assert_eq!(refused.data()["limit"], 1);
    assert_refused_changed_nothing(&app, &app.live_key, &draft, 1).await;
    receiver.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The openai provider
// ---------------------------------------------------------------------------------------------

/// The provider gets the configured model and key, the instructions as the system message and
/// the conversation between the two numbers oldest first, ending with the new message; its
/// trimmed reply is the draft, cut to 10 segments when longer.
async fn openai_provider_gets_instructions_and_the_conversation(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    fake.reply(" Sure! ");
    let app = spawn_with_openai(backend, &fake).await;
    put_settings(
        &app,
        &app.test_key,
        json!({ "enabled": true, "mode": "draft", "instructions": "Be brief." }),
    )
    .await
    .expect(200);

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

/// An app in draft mode on the `openai` provider, whose fake server answers 500 with `error`.
async fn failing_provider(backend: Backend, error: &str) -> (FakeOpenAi, TestApp) {
    let fake = FakeOpenAi::start().await;
    fake.answer(500, &json!({ "error": { "message": error } }).to_string());
    let app = spawn_with_openai(backend, &fake).await;
    put_settings(
        &app,
        &app.test_key,
        json!({ "enabled": true, "mode": "draft", "instructions": "Be brief." }),
    )
    .await
    .expect(200);
    (fake, app)
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
    tokio::time::sleep(QUIET).await;

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
    poll(DEADLINE, Duration::from_millis(50), async || {
        let errors = ai_drafts_metric(&app, "provider_error").await;
        if errors >= errors_before + 2.0 && errors >= 1.0 {
            return Ok(());
        }
        Err(format!("smsgw_ai_drafts_total{{outcome=\"provider_error\"}} went from {errors_before} to {errors}"))
    })
    .await;
    fake.stop().await;
}

/// A provider that failed (or a server stopped before the draft was stored) leaves an inbound
/// message without a draft; a starting server answers the last minutes' such messages again.
async fn messages_left_without_a_draft_are_answered_after_a_restart(backend: Backend) {
    let (fake, app) = failing_provider(backend, "down").await;
    let asked = app.test_inbound(CUSTOMER, "Are you open today?").await;
    fake.wait_for(1).await;
    tokio::time::sleep(QUIET).await;
    assert!(drafts(&app, &app.test_key, "").await.is_empty());

    fake.reply("Yes, until 6");
    let app = app.restart().await;
    let draft = wait_for_draft(&app, &app.test_key, &id_of(&asked)).await;
    assert_eq!(draft["content"], "Yes, until 6");
    assert_eq!(draft["status"], "pending");
    // Answered once: a second restart finds it drafted.
    let app = app.restart().await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(drafts(&app, &app.test_key, "").await.len(), 1);
    assert_eq!(
        fake.received().len(),
        2,
        "the provider was asked once per start"
    );
}

// ---------------------------------------------------------------------------------------------
// Premium-rate numbers and opt-outs (docs/api.md "AI reply drafts")
// ---------------------------------------------------------------------------------------------

/// A premium-rate number (US 900).
const PREMIUM: &str = "+19005550123";

/// Polls until `smsgw_ai_drafts_total{outcome=…}` reaches `at_least`.
async fn wait_for_ai_metric(app: &TestApp, outcome: &str, at_least: f64) {
    poll(DEADLINE, Duration::from_millis(20), async || {
        let now = ai_drafts_metric(app, outcome).await;
        if now >= at_least {
            return Ok(());
        }
        Err(format!("{outcome} stayed at {now}, expected {at_least}"))
    })
    .await
}

/// Outbound messages of the key's mode to `number`.
async fn texts_to(app: &TestApp, key: &str, number: &str) -> Vec<Value> {
    app.messages(key, "direction=outbound")
        .await
        .into_iter()
        .filter(|m| m["to_number"] == number)
        .collect()
}

/// A premium-rate sender gets no draft in draft mode and no reply in auto mode (a toll-fraud
/// path otherwise); an ordinary sender asked at the same time is answered.
async fn premium_rate_senders_get_no_draft_and_no_auto_reply(backend: Backend) {
    let app = spawn_app(backend).await;
    for (mode, control) in [("draft", CUSTOMER), ("auto", OTHER)] {
        enable(&app, &app.test_key, mode, json!([price_rule()])).await;
        let premium = app.test_inbound(PREMIUM, "What's the price?").await;
        let asked = app.test_inbound(control, "What's the price?").await;
        wait_for_draft(&app, &app.test_key, &id_of(&asked)).await;
        tokio::time::sleep(QUIET).await;
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
        wait_for_ai_metric(&app, "opted_out", before + 1.0).await;
        tokio::time::sleep(QUIET).await;
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
