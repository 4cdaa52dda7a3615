//! AI reply drafts: one actor per server takes every stored inbound message (from the writer's
//! change listener), asks the configured provider for a reply and stores the draft (mode
//! `draft`) or sends the reply (mode `auto`). Messages wait in the actor's queue, and at most
//! [`MAX_CONCURRENT`] are answered at once, each as a future of its own, so a slow provider
//! delays only drafts, never the inbound path: the message is stored (and acked to the phone)
//! before the provider is asked.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;
use secrecy::ExposeSecret;
use uuid::Uuid;

use super::Deps;
use crate::config::AiProvider;
use crate::domain::ai::{AiMode, DraftStatus, fit_reply, match_rule};
use crate::domain::keywords;
use crate::domain::phone_number::PhoneNumber;
use crate::domain::sms::SmsText;
use crate::domain::status::{Direction, Mode};
use crate::store::ai::{self, AiSettings, NewDraft};
use crate::store::messages::Message;
use crate::store::scoped::Scope;
use crate::store::writer::DraftLink;
use crate::store::{contacts, workspaces};
use crate::telemetry::AiDraftOutcome;

/// Provider calls running at once.
const MAX_CONCURRENT: usize = 32;
/// How long a provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(20);
/// Messages of the conversation an `openai` provider sees, the new one included.
const CONVERSATION: u64 = 10;
const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// Inbound messages just stored.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Received(pub Vec<Message>);

/// An auto-mode reply to send, its draft kept with it.
#[derive(Debug, Clone)]
pub struct AutoReplyRequest {
    pub scope: Scope,
    /// When the workspace was created (ms; None when unknown): the new-workspace limit counts
    /// AI sends too (docs/api.md, Messages).
    pub workspace_created_at: Option<i64>,
    /// The number of yours the conversation is on.
    pub from_number: PhoneNumber,
    pub to_number: PhoneNumber,
    pub text: SmsText,
    pub draft: DraftLink,
}

/// Sends an auto-mode reply: the send use case (`send::auto_reply`), injected at start-up
/// (the use case sits above the actors).
pub type AutoReplies = Arc<
    dyn Fn(AutoReplyRequest) -> LocalBoxFuture<'static, Result<AutoReply, crate::store::StoreError>>
        + Send
        + Sync,
>;

/// The AI reply actor.
pub struct AiResponder {
    deps: Deps,
    send: AutoReplies,
    /// Messages to answer, oldest first, not started yet. Only [`MAX_CONCURRENT`] futures are
    /// spawned at a time: an actor polls every future it holds on each wake-up, so one future
    /// per waiting message made each wake-up cost the whole backlog, and a burst of inbound SMS
    /// took the actor thread that the phones and webhooks share (BENCHMARKS.md, "Inbound").
    waiting: VecDeque<Message>,
    /// Messages being answered now.
    running: usize,
    client: Option<awc::Client>,
}

impl AiResponder {
    /// The responder; auto-mode replies go out through `send`.
    pub fn new(deps: Deps, send: AutoReplies) -> AiResponder {
        AiResponder {
            deps,
            send,
            waiting: VecDeque::new(),
            running: 0,
            client: None,
        }
    }

    fn client(&mut self) -> awc::Client {
        self.client
            .get_or_insert_with(|| {
                awc::Client::builder()
                    .timeout(PROVIDER_TIMEOUT)
                    .disable_redirects()
                    .finish()
            })
            .clone()
    }
}

/// How far back a starting responder looks for inbound messages without a draft.
const CATCH_UP: Duration = Duration::from_secs(10 * 60);
/// Most messages one catch-up answers.
const CATCH_UP_LIMIT: u64 = 1_000;

impl Actor for AiResponder {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(16_384);
        // A stopped server may have stored inbound messages whose drafts it never made (the
        // provider was still answering, or failed): answer those of the last minutes again.
        // A message that has a draft meanwhile is refused by the drafts' unique index.
        let db = self.deps.db.clone();
        let now = self.deps.clock.now_ms();
        let since = now.saturating_sub(i64::try_from(CATCH_UP.as_millis()).unwrap_or(0));
        ctx.spawn(
            async move { ai::inbound_without_draft(&db, since, now, CATCH_UP_LIMIT).await }
                .into_actor(self)
                .map(|found, act, ctx| match found {
                    Ok(messages) if !messages.is_empty() => {
                        tracing::info!(
                            count = messages.len(),
                            "answering inbound messages left without a draft"
                        );
                        act.answer(messages, ctx);
                    }
                    Ok(_) => {}
                    Err(err) => tracing::error!(error = %err, "AI catch-up failed"),
                }),
        );
        self.start(ctx);
    }
}

impl Supervised for AiResponder {
    fn restarting(&mut self, _: &mut Self::Context) {
        // The futures of the stopped context are gone; the messages still waiting start again
        // from `started`, and those that were running are answered by the catch-up.
        self.running = 0;
    }
}

impl Handler<Received> for AiResponder {
    type Result = ();

    fn handle(&mut self, msg: Received, ctx: &mut Self::Context) {
        self.answer(msg.0, ctx);
    }
}

impl AiResponder {
    /// Queues the messages to answer (all but keywords and senders that cannot be answered)
    /// and starts as many as the limit allows.
    fn answer(&mut self, messages: Vec<Message>, ctx: &mut Context<Self>) {
        let answerable = messages.into_iter().filter(|message| {
            // Keyword messages never get a draft; a sender that is not a phone number (a
            // short code, a name) cannot be answered, and a premium-rate one must not be
            // (a reply would be charged to the workspace: a toll-fraud path).
            keywords::classify(&message.content).is_none()
                && PhoneNumber::parse(&message.from_number).is_ok_and(|n| !n.is_premium_rate())
        });
        self.waiting.extend(answerable);
        self.start(ctx);
    }

    /// Starts the oldest waiting messages while fewer than [`MAX_CONCURRENT`] run; each one
    /// that ends starts the next.
    fn start(&mut self, ctx: &mut Context<Self>) {
        while self.running < MAX_CONCURRENT {
            let Some(message) = self.waiting.pop_front() else {
                return;
            };
            let job = Job {
                deps: self.deps.clone(),
                send: self.send.clone(),
                client: self.client(),
                message,
            };
            self.running += 1;
            ctx.spawn(job.run().into_actor(self).map(|(), act, ctx| {
                act.running -= 1;
                act.start(ctx);
            }));
        }
    }
}

/// What became of an auto-mode reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoReply {
    /// Queued, its draft stored as sent.
    Sent,
    /// Its recipient opted out or turned AI replies off: nothing is sent or stored.
    Refused,
    /// It cannot go now: the draft is stored pending instead.
    Later,
}

/// One inbound message to answer.
struct Job {
    deps: Deps,
    send: AutoReplies,
    client: awc::Client,
    message: Message,
}

impl Job {
    async fn run(self) {
        let id = self.message.id;
        if let Err(err) = self.answer().await {
            tracing::error!(message_id = %id, error = %err, "AI draft not made");
        }
    }

    fn scope(&self) -> Scope {
        Scope {
            workspace_id: self.message.workspace_id,
            mode: self.message.mode,
        }
    }

    async fn answer(&self) -> Result<(), crate::store::StoreError> {
        let db = &self.deps.db;
        let settings = ai::settings(db, self.scope()).await?;
        if !settings.enabled
            || !contacts::ai_replies_to(db, self.scope(), &self.message.from_number).await?
        {
            return Ok(());
        }
        let reply = match self.deps.settings.ai.provider {
            AiProvider::Openai => match self.ask_openai(&settings).await {
                Ok(reply) => reply,
                Err(err) => {
                    // The error, never the conversation: message text stays out of the log.
                    tracing::warn!(message_id = %self.message.id, error = %err, "AI provider failed; no draft");
                    crate::telemetry::count_ai_draft(AiDraftOutcome::ProviderError);
                    return Ok(());
                }
            },
            AiProvider::Rules => {
                match_rule(&settings.rules, &self.message.content).map(str::to_string)
            }
        };
        let Some(content) = reply.map(|r| fit_reply(&r)).filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        let draft = NewDraft {
            id: Uuid::now_v7(),
            message: self.message.clone(),
            content,
            status: DraftStatus::Pending,
        };
        if settings.mode == AiMode::Auto {
            match self.send_now(&draft).await? {
                AutoReply::Sent => {
                    crate::telemetry::count_ai_draft(AiDraftOutcome::AutoSent);
                    return Ok(());
                }
                AutoReply::Refused => {
                    crate::telemetry::count_ai_draft(AiDraftOutcome::OptedOut);
                    return Ok(());
                }
                AutoReply::Later => {}
            }
        }
        match self.deps.writer.draft(draft).await {
            Ok(true) => crate::telemetry::count_ai_draft(AiDraftOutcome::Created),
            // The sender texted STOP or STOP AI while the provider was answering.
            Ok(false) => crate::telemetry::count_ai_draft(AiDraftOutcome::OptedOut),
            // The message has a draft already (a repeat notification).
            Err(crate::store::StoreError::Conflict(_)) => {}
            Err(err) => return Err(err),
        }
        Ok(())
    }

    /// Auto mode: the reply is accepted with its draft stored as sent, unless the sender opted
    /// out or turned AI replies off meanwhile (checked in the writer's transaction) or it cannot
    /// go now (no online phone, the new-workspace limit: the draft is then stored pending).
    async fn send_now(&self, draft: &NewDraft) -> Result<AutoReply, crate::store::StoreError> {
        let Ok(text) = SmsText::parse(draft.content.clone()) else {
            return Ok(AutoReply::Later);
        };
        // The stored inbound numbers were parsed when they arrived; one that no longer
        // parses (a rule changed since) leaves the draft pending.
        let (Ok(from_number), Ok(to_number)) = (
            PhoneNumber::parse(&self.message.to_number),
            PhoneNumber::parse(&self.message.from_number),
        ) else {
            return Ok(AutoReply::Later);
        };
        let request = AutoReplyRequest {
            scope: self.scope(),
            workspace_created_at: self.workspace_created_at().await?,
            from_number,
            to_number,
            text,
            draft: DraftLink::New(Box::new(draft.clone())),
        };
        (self.send)(request).await
    }

    /// When the message's workspace was created (None: it is gone), for the new-workspace
    /// limit of a live workspace (AI sends count, docs/api.md, Messages).
    async fn workspace_created_at(&self) -> Result<Option<i64>, crate::store::StoreError> {
        if self.message.mode == Mode::Test {
            return Ok(None);
        }
        workspaces::created_at(&self.deps.db, self.message.workspace_id).await
    }

    /// Asks an OpenAI-compatible chat-completions server for a reply to the conversation.
    async fn ask_openai(&self, settings: &AiSettings) -> Result<Option<String>, ProviderError> {
        let config = &self.deps.settings.ai;
        let conversation = ai::conversation(
            &self.deps.db,
            self.scope(),
            &self.message.to_number,
            &self.message.from_number,
            CONVERSATION,
        )
        .await
        .map_err(ProviderError::Conversation)?;
        let mut messages = vec![ChatMessage {
            role: Role::System,
            content: &settings.instructions,
        }];
        for m in &conversation {
            let role = match m.direction {
                Direction::Inbound => Role::User,
                Direction::Outbound => Role::Assistant,
            };
            messages.push(ChatMessage {
                role,
                content: &m.content,
            });
        }
        if !conversation.iter().any(|m| m.id == self.message.id) {
            messages.push(ChatMessage {
                role: Role::User,
                content: &self.message.content,
            });
        }
        let base = config.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL);
        let url = format!("{}/chat/completions", base.trim_end_matches('/'));
        let body = ChatRequest {
            model: config.model.as_deref().unwrap_or(DEFAULT_MODEL),
            messages,
        };
        let mut request = self
            .client
            .post(&url)
            .insert_header(("content-type", "application/json"));
        if let Some(key) = &config.api_key {
            let key = key.expose_secret();
            request = request.insert_header(("authorization", format!("Bearer {key}")));
        }
        let mut response = request
            .send_json(&body)
            .await
            .map_err(|e| ProviderError::Request(e.to_string()))?;
        if !response.status().is_success() {
            return Err(ProviderError::Status(response.status().as_u16()));
        }
        let answer: ChatAnswer = response
            .json()
            .limit(1 << 20)
            .await
            .map_err(|e| ProviderError::Answer(e.to_string()))?;
        let content = answer.reply().ok_or(ProviderError::NoContent)?;
        Ok(Some(content.trim().to_string()))
    }
}

/// Why the provider gave no reply; logged once, without the conversation's text.
#[derive(Debug, thiserror::Error)]
enum ProviderError {
    #[error("conversation not read: {0}")]
    Conversation(#[source] crate::store::StoreError),
    /// The request did not reach the provider or its answer did not arrive (the client's
    /// error, as text: it is neither `Send` nor `Sync`).
    #[error("request failed: {0}")]
    Request(String),
    #[error("HTTP {0}")]
    Status(u16),
    /// The answer's body is not a chat completion (the client's error, as text).
    #[error("answer is not JSON: {0}")]
    Answer(String),
    #[error("answer has no choices[0].message.content")]
    NoContent,
}

/// The body of an OpenAI-compatible `POST /chat/completions`.
#[derive(Debug, serde::Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
}

/// One turn of the conversation sent to the provider.
#[derive(Debug, serde::Serialize)]
struct ChatMessage<'a> {
    role: Role,
    content: &'a str,
}

/// Who said a turn: the instructions, the person texting, or the gateway's replies.
#[derive(Debug, Clone, Copy, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    System,
    User,
    Assistant,
}

/// What the server answers, of which only the first choice's text is read; everything else
/// (usage, ids, further choices' contents) is ignored.
#[derive(Debug, serde::Deserialize)]
struct ChatAnswer {
    #[serde(default)]
    choices: Vec<Choice>,
}

#[derive(Debug, serde::Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<AnswerMessage>,
}

#[derive(Debug, serde::Deserialize)]
struct AnswerMessage {
    #[serde(default)]
    content: Option<String>,
}

impl ChatAnswer {
    /// `choices[0].message.content`, when the answer has one.
    fn reply(&self) -> Option<&str> {
        self.choices.first()?.message.as_ref()?.content.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_the_chat_completions_body() {
        let body = ChatRequest {
            model: "gpt-4o-mini",
            messages: vec![
                ChatMessage {
                    role: Role::System,
                    content: "Be brief.",
                },
                ChatMessage {
                    role: Role::User,
                    content: "Open today?",
                },
                ChatMessage {
                    role: Role::Assistant,
                    content: "Yes.",
                },
            ],
        };
        assert_eq!(
            serde_json::to_value(&body).ok(),
            Some(serde_json::json!({
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Open today?"},
                    {"role": "assistant", "content": "Yes."},
                ],
            }))
        );
    }

    #[test]
    fn only_the_first_choice_text_is_read() {
        let answer: Option<ChatAnswer> = serde_json::from_str(
            r#"{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":" Hi "}},{"message":{}}],"usage":{}}"#,
        )
        .ok();
        assert_eq!(answer.as_ref().and_then(ChatAnswer::reply), Some(" Hi "));
        for without in [
            r#"{}"#,
            r#"{"choices":[]}"#,
            r#"{"choices":[{}]}"#,
            r#"{"choices":[{"message":{"content":null}}]}"#,
        ] {
            let answer: Option<ChatAnswer> = serde_json::from_str(without).ok();
            assert!(answer.is_some(), "{without}");
            assert_eq!(
                answer.as_ref().and_then(ChatAnswer::reply),
                None,
                "{without}"
            );
        }
    }
}
