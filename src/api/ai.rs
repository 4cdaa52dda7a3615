//! AI reply drafts API (docs/api.md, AI reply drafts): the settings of the key's workspace and
//! mode, and the drafts (list, read, send, discard). Drafts are made by `actors::ai`.

use crate::api::page::PageParams;

use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::envelope_of;
use super::fields::{parse_content, parse_number};
use super::messages::message_out;
use super::page::page_out;
use super::sending::{send_error, sender};
use super::{
    Answer, AppState, Caller, DocumentedRoute, JsonBody, OptionalJsonBody, PageRequest,
    QueryParams, parse_id, required,
};
use crate::clock::format_ms;
use crate::domain::ai::{AiMode, DraftStatus, Rule};

use crate::error::{ApiError, ErrorCode, success};
use crate::send::{self, ReplyRequest};
use crate::store::ai::{self, AiSettings, Draft};
use crate::store::writer::DraftLink;

/// Longest `instructions`.
const MAX_INSTRUCTIONS_CHARS: usize = 4_000;
/// Most rules, keywords per rule, and characters per keyword.
const MAX_RULES: usize = 100;
const MAX_KEYWORDS: usize = 20;
const MAX_KEYWORD_CHARS: usize = 64;

/// The AI operations (route list, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_get_settings>(|| web::to(get_settings)),
        DocumentedRoute::of::<__path_put_settings>(|| web::to(put_settings))
            .errors(&[ValidationFailed, ContentTooLong]),
        DocumentedRoute::of::<__path_list_drafts>(|| web::to(list_drafts))
            .errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_get_draft>(|| web::to(get_draft)),
        DocumentedRoute::of::<__path_send_draft>(|| web::to(send_draft)).errors(&[
            ValidationFailed,
            ContentTooLong,
            InvalidState,
            PremiumRateBlocked,
            RecipientOptedOut,
            AiRepliesOff,
            NoDeviceAvailable,
            QuotaExceeded,
            NewAccountLimit,
            DailyQuotaExceeded,
        ]),
        DocumentedRoute::of::<__path_discard_draft>(|| web::to(discard_draft))
            .errors(&[InvalidState]),
    ]
}

/// Body of `PUT /v1/ai/settings`: replaces the settings whole.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AiSettingsIn {
    #[schema(required = true, nullable = false)]
    pub enabled: Option<bool>,
    /// `draft` or `auto`.
    #[schema(required = true, nullable = false)]
    pub mode: Option<String>,
    /// For the `openai` provider: the system message. Up to 4,000 characters.
    pub instructions: Option<String>,
    /// For the `rules` provider: the first rule with a keyword in the text gives the draft.
    pub rules: Option<Vec<RuleIn>>,
}

/// One rule of [`AiSettingsIn`].
#[derive(Debug, Deserialize, ToSchema)]
pub struct RuleIn {
    #[schema(required = true, nullable = false)]
    pub keywords: Option<Vec<String>>,
    #[schema(required = true, nullable = false)]
    pub reply: Option<String>,
}

/// Body of `POST /v1/ai/drafts/{id}/send`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct SendDraftIn {
    /// Replaces the draft's text.
    pub content: Option<String>,
}

/// The AI reply settings of the key's workspace and mode.
#[derive(Serialize, ToSchema)]
pub struct AiSettingsOut<'a> {
    pub enabled: bool,
    /// `draft`: stored for review; `auto`: sent at once.
    pub mode: AiMode,
    pub instructions: &'a str,
    pub rules: &'a [Rule],
}
envelope_of!(
    AiSettingsEnvelope,
    AiSettingsOut<'static>,
    "AI reply settings."
);

/// An AI reply draft.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct DraftOut<'a> {
    pub id: Uuid,
    /// The inbound message it answers.
    pub message_id: Uuid,
    /// The contact who wrote.
    pub from_number: &'a str,
    /// Your number it arrived on; the reply goes from it.
    pub to_number: &'a str,
    pub content: &'a str,
    pub status: DraftStatus,
    /// The reply once sent.
    pub sent_message_id: Option<Uuid>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}
envelope_of!(DraftEnvelope, DraftOut<'static>, "One AI reply draft.");

page_out!(
    /// A page of drafts, newest first.
    DraftPage<'a>, drafts: DraftOut<'a>
);
envelope_of!(
    DraftPageEnvelope,
    DraftPage<'static>,
    "A page of AI reply drafts."
);

fn settings_out(s: &AiSettings) -> AiSettingsOut<'_> {
    AiSettingsOut {
        enabled: s.enabled,
        mode: s.mode,
        instructions: &s.instructions,
        rules: &s.rules,
    }
}

/// A draft as the API shows it.
pub fn draft_out(d: &Draft) -> DraftOut<'_> {
    DraftOut {
        id: d.id,
        message_id: d.message_id,
        from_number: &d.from_number,
        to_number: &d.to_number,
        content: &d.content,
        status: d.status,
        sent_message_id: d.sent_message_id,
        created_at: format_ms(d.created_at),
        updated_at: format_ms(d.updated_at),
    }
}

/// The AI reply settings.
#[utoipa::path(
    get,
    path = "/v1/ai/settings",
    tag = "ai",
    responses((status = 200, description = "The settings (defaults when never set).", body = AiSettingsEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn get_settings(state: web::Data<AppState>, caller: Caller) -> Answer {
    let settings = ai::settings(&state.db, caller.scope()).await?;
    Ok(success(
        StatusCode::OK,
        "AI settings",
        settings_out(&settings),
    ))
}

fn rule(i: usize, r: RuleIn) -> Result<Rule, ApiError> {
    let keywords = required(r.keywords, &format!("rules[{i}].keywords"))?;
    if keywords.is_empty() || keywords.len() > MAX_KEYWORDS {
        return Err(ApiError::validation(
            format!("rules[{i}].keywords"),
            "a rule has 1 to 20 keywords",
        ));
    }
    let mut kept = Vec::with_capacity(keywords.len());
    for (j, k) in keywords.into_iter().enumerate() {
        let k = k.trim().to_string();
        if k.is_empty() || k.chars().count() > MAX_KEYWORD_CHARS {
            return Err(ApiError::validation(
                format!("rules[{i}].keywords[{j}]"),
                "a keyword is 1 to 64 characters",
            ));
        }
        kept.push(k);
    }
    let field = format!("rules[{i}].reply");
    let reply = required(r.reply, &field)?;
    let reply = parse_content(reply, &field)?.into_string();
    Ok(Rule {
        keywords: kept,
        reply,
    })
}

/// Replaces the AI reply settings.
#[utoipa::path(
    put,
    path = "/v1/ai/settings",
    tag = "ai",
    request_body = AiSettingsIn,
    responses((status = 200, description = "The stored settings.", body = AiSettingsEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn put_settings(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<AiSettingsIn>,
) -> Answer {
    let enabled = required(body.enabled, "enabled")?;
    let mode = required(body.mode, "mode")?;
    let mode = AiMode::parse(&mode)
        .ok_or_else(|| ApiError::validation("mode", "mode must be draft or auto"))?;
    let instructions = body.instructions.unwrap_or_default();
    if instructions.chars().count() > MAX_INSTRUCTIONS_CHARS {
        return Err(ApiError::validation(
            "instructions",
            "instructions must be at most 4,000 characters",
        ));
    }
    let given = body.rules.unwrap_or_default();
    if given.len() > MAX_RULES {
        return Err(ApiError::validation("rules", "at most 100 rules"));
    }
    let rules = given
        .into_iter()
        .enumerate()
        .map(|(i, r)| rule(i, r))
        .collect::<Result<Vec<_>, _>>()?;
    let settings = AiSettings {
        enabled,
        mode,
        instructions,
        rules,
    };
    ai::put_settings(&state.db, caller.scope(), &settings, state.clock.now_ms()).await?;
    Ok(success(
        StatusCode::OK,
        "AI settings saved",
        settings_out(&settings),
    ))
}

/// Lists drafts, newest first, cursor paged.
#[utoipa::path(
    get,
    path = "/v1/ai/drafts",
    tag = "ai",
    params(
        PageParams,
        ("status" = Option<String>, Query, description = "`pending`, `sent` or `discarded`"),
    ),
    responses((status = 200, description = "A page of drafts.", body = DraftPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list_drafts(state: web::Data<AppState>, caller: Caller, query: QueryParams) -> Answer {
    let page = PageRequest::parse(&query)?;
    let status = query.filter::<DraftStatus>()?;
    let rows = page
        .read(|after, limit| ai::list(&state.db, caller.scope(), status, after, limit))
        .await?;
    Ok(rows.map(draft_out).answer::<DraftPage>("drafts"))
}

/// One draft.
#[utoipa::path(
    get,
    path = "/v1/ai/drafts/{id}",
    tag = "ai",
    params(("id" = Uuid, Path, description = "draft id")),
    responses((status = 200, description = "The draft.", body = DraftEnvelope))
)]
#[tracing::instrument(skip_all, fields(draft_id = %path))]
async fn get_draft(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let draft: Draft = state.find(&caller, &path).await?;
    Ok(success(StatusCode::OK, "draft", draft_out(&draft)))
}

fn not_pending(status: DraftStatus) -> ApiError {
    ApiError::InvalidState {
        message: format!("only a pending draft can be sent or discarded; this one is {status}"),
        status: status.as_str().to_string(),
    }
}

/// Sends a pending draft (optionally with edited text) as a reply.
#[utoipa::path(
    post,
    path = "/v1/ai/drafts/{id}/send",
    tag = "ai",
    params(("id" = Uuid, Path, description = "draft id")),
    request_body = SendDraftIn,
    responses((status = 202, description = "The reply, queued.", body = super::messages::MessageEnvelope))
)]
#[tracing::instrument(skip_all, fields(draft_id = %path))]
async fn send_draft(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    OptionalJsonBody(body): OptionalJsonBody<SendDraftIn>,
) -> Answer {
    let draft: Draft = state.find(&caller, &path).await?;
    let id = draft.id;
    // The body may be left out (send the draft as it is).
    let body = body.unwrap_or_default();
    if draft.status != DraftStatus::Pending {
        return Err(not_pending(draft.status));
    }
    let text = parse_content(body.content.unwrap_or(draft.content), "content")?;
    let from_number = parse_number(&draft.to_number, "from_number")?;
    let to_number = parse_number(&draft.from_number, "to_number")?;
    let request = ReplyRequest {
        from_number,
        to_number,
        text,
        draft: DraftLink::Existing(id),
    };
    let message = send::reply(&state.send_deps(), sender(&caller), request)
        .await
        .map_err(|err| send_error(err, |_| "to_number".into()))?;
    crate::telemetry::count_ai_draft(crate::telemetry::AiDraftOutcome::Sent);
    Ok(success(
        StatusCode::ACCEPTED,
        "reply queued",
        message_out(&message),
    ))
}

/// Discards a pending draft.
#[utoipa::path(
    post,
    path = "/v1/ai/drafts/{id}/discard",
    tag = "ai",
    params(("id" = Uuid, Path, description = "draft id")),
    responses((status = 200, description = "The discarded draft.", body = DraftEnvelope))
)]
#[tracing::instrument(skip_all, fields(draft_id = %path))]
async fn discard_draft(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Answer {
    let id = parse_id(&path, "draft")?;
    let discarded = ai::discard(&state.db, caller.scope(), id, state.clock.now_ms()).await?;
    let draft: Draft = state.find_id(&caller, id).await?;
    if !discarded {
        return Err(not_pending(draft.status));
    }
    crate::telemetry::count_ai_draft(crate::telemetry::AiDraftOutcome::Discarded);
    Ok(success(
        StatusCode::OK,
        "draft discarded",
        draft_out(&draft),
    ))
}
