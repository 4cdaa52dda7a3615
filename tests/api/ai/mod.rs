//! AI reply drafts (docs/api.md, AI reply drafts): what the topic files share, with a fake
//! OpenAI-compatible server on loopback. `drafting` holds settings and when a draft is made;
//! `sending` sending, discarding and auto mode; `openai` the `openai` provider; `opt_outs`
//! premium-rate numbers and opt-outs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use smsgw::config::Settings;
use uuid::Uuid;

use crate::backend_tests;
use crate::helpers::{
    Backend, SENDER, TestApp, WebhookReceiver, poll, send_body, spawn_app, spawn_app_with,
};

mod drafting;
mod openai;
mod opt_outs;
mod sending;

/// Someone texting the workspace's number.
const CUSTOMER: &str = "+14155550177";
/// Another sender.
const OTHER: &str = "+14155550178";
/// How long a condition may take to come true before a poll gives up.
const DEADLINE: Duration = Duration::from_secs(10);

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

/// An app whose test mode drafts replies with the `openai` provider of `fake`, told to be brief.
async fn drafting_with_openai(backend: Backend, fake: &FakeOpenAi) -> TestApp {
    let app = spawn_with_openai(backend, fake).await;
    put_settings(
        &app,
        &app.test_key,
        json!({ "enabled": true, "mode": "draft", "instructions": "Be brief." }),
    )
    .await
    .expect(200);
    app
}

// ---------------------------------------------------------------------------------------------
// Sending drafts
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

// ---------------------------------------------------------------------------------------------
// A provider that fails
// ---------------------------------------------------------------------------------------------

/// An app in draft mode on the `openai` provider, whose fake server answers 500 with `error`.
async fn failing_provider(backend: Backend, error: &str) -> (FakeOpenAi, TestApp) {
    let fake = FakeOpenAi::start().await;
    fake.answer(500, &json!({ "error": { "message": error } }).to_string());
    let app = drafting_with_openai(backend, &fake).await;
    (fake, app)
}

// ---------------------------------------------------------------------------------------------
// Premium-rate numbers and opt-outs
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
