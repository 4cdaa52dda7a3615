//! Campaigns API (docs/api.md, Campaigns): create (draft or launched), launch, pause, resume,
//! cancel, read with progress counts, list, and the recipients with their statuses.
//!
//! Creation validates everything first, expands `contact_tags`, renders each recipient's text
//! and decides who is skipped, then stores the campaign and its recipients in one writer job
//! (atomic, and counted against the new-workspace limit when launched). Sending is the
//! campaign actor's job (`actors::campaign`).

use crate::api::page::PageParams;
use std::collections::{BTreeMap, HashMap, HashSet};

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::envelope_of;
use super::idempotent::create_once;
use super::messages::{new_workspace_limit, parse_number, parse_timestamp};
use super::page::{Page, Positioned, page_out};
use super::{
    AppState, Caller, DocumentedRoute, JsonBody, PageRequest, missing, off_worker, parse_id,
    query_param, required,
};
use crate::actors::campaign::Wake;
use crate::actors::registry::Cancel;
use crate::clock::format_ms;
use crate::domain::campaign::{
    CampaignStatus, Control, RecipientStatus, RenderFailure, SkipReason,
};
use crate::domain::phone_number::PhoneNumber;
use crate::domain::sms::{self, ContentError, MAX_SEGMENTS, SmsText, SmsTextBuilder};
use crate::domain::status::Mode;
use crate::domain::template;
use crate::error::{ApiError, ErrorCode, success};
use crate::store::campaigns::{self, Campaign, Counts, NewCampaign, NewRecipient, Recipient};
use crate::store::contacts::{self, Contact};
use crate::store::idempotency::Operation;
use crate::store::messages::Position;
use crate::store::phones;
use crate::store::writer::{CampaignOp, CampaignOutcome};

/// Most recipients of one campaign, explicit and from tags together (docs/api.md, Campaigns).
pub const MAX_CAMPAIGN_RECIPIENTS: usize = 10_000;
/// Longest campaign name (docs/api.md, Campaigns).
const MAX_NAME_CHARS: usize = 120;
/// Longest campaign body, in characters: the 1,530 of a text of 10 segments with room for
/// its tokens (docs/api.md "Campaigns", limits).
const MAX_BODY_CHARS: usize = 4_096;
/// Most vars of one recipient, and the longest name, in characters (the limits of a contact's
/// custom fields).
const MAX_VARS: usize = 50;
const MAX_VAR_NAME_CHARS: usize = 64;
/// Longest var value, in characters: 10 segments of GSM-7; a text holding a longer value
/// cannot be sent.
const MAX_VAR_VALUE_CHARS: usize = 1_530;

/// The campaign operations (route list, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_create>(|| web::to(create)).errors(&[
            ValidationFailed,
            InvalidPhoneNumber,
            ContentTooLong,
            NewAccountLimit,
            DuplicateRequest,
        ]),
        DocumentedRoute::of::<__path_list>(|| web::to(list)).errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_get>(|| web::to(get)),
        DocumentedRoute::of::<__path_recipients>(|| web::to(recipients))
            .errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_launch>(|| web::to(launch))
            .errors(&[InvalidState, NewAccountLimit]),
        DocumentedRoute::of::<__path_pause>(|| web::to(pause)).errors(&[InvalidState]),
        DocumentedRoute::of::<__path_resume>(|| web::to(resume)).errors(&[InvalidState]),
        DocumentedRoute::of::<__path_cancel>(|| web::to(cancel)).errors(&[InvalidState]),
    ]
}

/// One explicit recipient.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RecipientIn {
    /// E.164.
    #[schema(required = true, nullable = false)]
    pub to: Option<String>,
    /// Template variables for this recipient; they win over the contact's fields. At most 50,
    /// names of 1 to 64 characters, values of at most 1,530.
    pub vars: Option<BTreeMap<String, String>>,
}

/// Body of `POST /v1/campaigns`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateCampaignIn {
    /// 1 to 120 characters.
    #[schema(required = true, nullable = false)]
    pub name: Option<String>,
    /// E.164; with a live key, the number of one of your phones.
    #[schema(required = true, nullable = false)]
    pub from_number: Option<String>,
    /// The text, with `{{variable}}` tokens; at most 4,096 characters, and its text outside
    /// the tokens at most 10 segments.
    #[schema(required = true, nullable = false)]
    pub body: Option<String>,
    pub recipients: Option<Vec<RecipientIn>>,
    /// Also sends to every contact having any of these tags.
    pub contact_tags: Option<Vec<String>>,
    /// Start time; ISO 8601 with offset.
    pub scheduled_for: Option<String>,
    /// false (default) saves a draft; true starts it (or schedules it).
    pub launch_now: Option<bool>,
    /// Idempotency key (1–255 characters): a repeat answers 409 `duplicate_request` with the
    /// first campaign's id in `data.id` (docs/api.md, "Idempotent creates").
    pub request_id: Option<String>,
}

/// How many recipients of a campaign are in each state; they add up to `total`.
#[derive(Serialize, ToSchema)]
pub struct CampaignCountsOut {
    /// Recipients to send (skipped ones are not counted).
    pub total: u64,
    /// Not queued yet.
    pub pending: u64,
    /// Message queued or with the phone.
    pub queued: u64,
    pub sent: u64,
    pub delivered: u64,
    /// Failed, expired, or a rendered text over 10 segments.
    pub failed: u64,
    /// Canceled with the campaign, or opted out after it was created.
    pub canceled: u64,
}

/// Recipients not sent, by reason.
#[derive(Serialize, ToSchema)]
pub struct CampaignSkippedOut {
    pub opted_out: u64,
    pub premium_rate: u64,
}

/// A campaign (docs/api.md, Campaigns).
#[derive(Serialize, ToSchema)]
pub struct CampaignOut<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub from_number: &'a str,
    /// The template, with `{{variable}}` tokens.
    pub body: &'a str,
    pub status: CampaignStatus,
    #[schema(format = DateTime)]
    pub scheduled_for: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    pub counts: CampaignCountsOut,
    pub skipped: CampaignSkippedOut,
}
envelope_of!(CampaignEnvelope, CampaignOut<'static>, "One campaign.");

page_out!(
    /// A page of campaigns, newest first.
    CampaignPage<'a>, campaigns: CampaignOut<'a>
);
envelope_of!(
    CampaignPageEnvelope,
    CampaignPage<'static>,
    "A page of campaigns."
);

/// One recipient of a campaign.
#[derive(Serialize, ToSchema)]
pub struct CampaignRecipientOut<'a> {
    pub to: &'a str,
    pub status: RecipientStatus,
    /// Its message once queued.
    pub message_id: Option<Uuid>,
    /// `opted_out` or `premium_rate`.
    pub skip_reason: Option<&'a str>,
    /// `content_too_long` or `content_empty` when its rendered text cannot be sent.
    pub failure_reason: Option<&'a str>,
}

page_out!(
    /// A page of a campaign's recipients, in order.
    CampaignRecipientPage<'a>, recipients: CampaignRecipientOut<'a>
);
envelope_of!(
    CampaignRecipientPageEnvelope,
    CampaignRecipientPage<'static>,
    "A page of a campaign's recipients."
);

/// Recipients are paged by their place in the campaign.
impl Positioned for Recipient {
    fn position(&self) -> Position {
        Position {
            created_at: self.position,
            id: self.id,
        }
    }
}

/// A campaign as the API shows it.
pub fn campaign_out<'a>(c: &'a Campaign, counts: &Counts) -> CampaignOut<'a> {
    CampaignOut {
        id: c.id,
        name: &c.name,
        from_number: &c.from_number,
        body: &c.body,
        status: c.status,
        scheduled_for: c.scheduled_for.map(format_ms),
        created_at: format_ms(c.created_at),
        started_at: c.started_at.map(format_ms),
        finished_at: c.finished_at.map(format_ms),
        counts: CampaignCountsOut {
            total: u64::from(c.total),
            pending: counts.pending,
            queued: counts.queued,
            sent: counts.sent,
            delivered: counts.delivered,
            failed: counts.failed,
            canceled: counts.canceled,
        },
        skipped: CampaignSkippedOut {
            opted_out: u64::from(c.skipped_opted_out),
            premium_rate: u64::from(c.skipped_premium_rate),
        },
    }
}

fn recipient_out(r: &Recipient) -> CampaignRecipientOut<'_> {
    CampaignRecipientOut {
        to: &r.to_number,
        status: r.status,
        message_id: r.message_id,
        skip_reason: r.skip_reason.as_deref(),
        failure_reason: r.failure_reason.as_deref(),
    }
}

async fn with_counts<'a>(
    state: &AppState,
    campaign: &'a Campaign,
) -> Result<CampaignOut<'a>, ApiError> {
    let counts = campaigns::counts(&state.db, campaign.id).await?;
    Ok(campaign_out(campaign, &counts))
}

/// A recipient before expansion: the explicit ones keep their vars.
struct Wanted {
    to: PhoneNumber,
    vars: BTreeMap<String, String>,
}

/// Renders a recipient's text: its vars first, then its contact's fields; missing → "".
/// Rendering stops as soon as the text cannot fit in 10 segments, so a recipient costs at most
/// that much memory and work, whatever the body's tokens and the values.
fn render(
    body: &str,
    vars: &BTreeMap<String, String>,
    contact: Option<&Contact>,
) -> Result<SmsText, ContentError> {
    let mut text = SmsTextBuilder::new();
    let lookup = |name: &str| value_of(name, vars, contact);
    // A break only means the text is too long; `finish` says so.
    let _ = template::render_into(body, lookup, |piece| text.push_str(piece));
    text.finish()
}

/// A template variable's value for one recipient: its vars first, then its contact's fields.
fn value_of<'v>(
    name: &str,
    vars: &'v BTreeMap<String, String>,
    contact: Option<&'v Contact>,
) -> Option<&'v str> {
    if let Some(value) = vars.get(name) {
        return Some(value.as_str());
    }
    let contact = contact?;
    match name {
        "first_name" => contact.first_name.as_deref(),
        "last_name" => contact.last_name.as_deref(),
        "email" => contact.email.as_deref(),
        other => contact.custom_fields.get(other).map(String::as_str),
    }
}

/// The variables of `names` that render empty for one recipient (no value, or a blank one).
fn missing_vars(
    names: &[String],
    vars: &BTreeMap<String, String>,
    contact: Option<&Contact>,
) -> Vec<String> {
    names
        .iter()
        .filter(|name| value_of(name, vars, contact).is_none_or(|v| v.trim().is_empty()))
        .cloned()
        .collect()
}

/// Checks a campaign body: at most [`MAX_BODY_CHARS`], and its own text (the tokens left
/// empty) within 10 segments, since rendering only adds to it.
fn parse_body(body: &str) -> Result<(), ApiError> {
    if body.trim().is_empty() {
        return Err(ApiError::validation("body", "body must not be empty"));
    }
    if body.chars().count() > MAX_BODY_CHARS {
        return Err(ApiError::validation(
            "body",
            format!("body must be at most {MAX_BODY_CHARS} characters"),
        ));
    }
    let mut literal = String::with_capacity(body.len());
    let _ = template::render_into(
        body,
        |_| None,
        |piece| {
            literal.push_str(piece);
            std::ops::ControlFlow::Continue(())
        },
    );
    let measure = sms::measure(&literal);
    if measure.segments > MAX_SEGMENTS {
        return Err(ApiError::ContentTooLong {
            field: "body".to_string(),
            segments: measure.segments,
            encoding: measure.encoding.as_str(),
        });
    }
    Ok(())
}

/// Checks one recipient's vars (`field` is `recipients[i].vars`): how many, their names and
/// the length of each value, the first offending name in order being the one named.
fn parse_vars(vars: &BTreeMap<String, String>, field: &str) -> Result<(), ApiError> {
    if vars.len() > MAX_VARS {
        return Err(ApiError::validation(
            field,
            format!("{field} may have at most {MAX_VARS} entries"),
        ));
    }
    for (name, value) in vars {
        let name_chars = name.chars().count();
        if name_chars == 0 || name_chars > MAX_VAR_NAME_CHARS {
            return Err(ApiError::validation(
                field,
                format!("{field} names must be 1 to {MAX_VAR_NAME_CHARS} characters"),
            ));
        }
        if value.chars().count() > MAX_VAR_VALUE_CHARS {
            let at = format!("{field}.{name}");
            return Err(ApiError::validation(
                &at,
                format!("{at} must be at most {MAX_VAR_VALUE_CHARS} characters"),
            ));
        }
    }
    Ok(())
}

/// The explicit recipients, each number and its vars parsed (the first invalid one is the
/// error).
fn parse_recipients(explicit: Vec<RecipientIn>) -> Result<Vec<Wanted>, ApiError> {
    let mut wanted = Vec::with_capacity(explicit.len());
    for (i, r) in explicit.into_iter().enumerate() {
        let field = format!("recipients[{i}].to");
        let to = required(r.to, &field)?;
        let to = parse_number(&to, &field)?;
        let vars = r.vars.unwrap_or_default();
        parse_vars(&vars, &format!("recipients[{i}].vars"))?;
        wanted.push(Wanted { to, vars });
    }
    Ok(wanted)
}

/// Adds the tagged contacts not already wanted (in their order), refuses a campaign past its
/// limit, and renders each recipient's text; with each, the body's variables it has no value
/// for (none for a skipped recipient).
fn expand(
    mut wanted: Vec<Wanted>,
    mut seen: HashSet<String>,
    tagged: Vec<Contact>,
    mut by_number: HashMap<String, Contact>,
    template: &str,
) -> Result<Vec<(NewRecipient, Vec<String>)>, ApiError> {
    for contact in tagged {
        if seen.contains(&contact.phone_number) {
            continue;
        }
        let Ok(to) = PhoneNumber::parse(&contact.phone_number) else {
            continue;
        };
        seen.insert(contact.phone_number.clone());
        wanted.push(Wanted {
            to,
            vars: BTreeMap::new(),
        });
        by_number.insert(contact.phone_number.clone(), contact);
        if wanted.len() > MAX_CAMPAIGN_RECIPIENTS {
            return Err(ApiError::validation(
                "contact_tags",
                "with the tagged contacts the campaign has over 10,000 recipients",
            ));
        }
    }
    let names = template::variables(template);
    Ok(wanted
        .iter()
        .map(|w| {
            let contact = by_number.get(w.to.as_str());
            let planned = recipient(template, w, contact);
            let missing = if planned.status == RecipientStatus::Skipped {
                Vec::new()
            } else {
                missing_vars(&names, &w.vars, contact)
            };
            (planned, missing)
        })
        .collect())
}

/// The stored form of one recipient: skipped, failed (its text cannot be sent: no text is
/// stored) or pending.
fn recipient(body: &str, wanted: &Wanted, contact: Option<&Contact>) -> NewRecipient {
    let unsent = NewRecipient {
        to_number: wanted.to.as_str().to_string(),
        content: String::new(),
        segments: 0,
        encoding: String::new(),
        status: RecipientStatus::Skipped,
        skip_reason: None,
        failure_reason: None,
    };
    let skip_reason = if wanted.to.is_premium_rate() {
        Some(SkipReason::PremiumRate)
    } else if contact.is_some_and(|c| c.opted_out) {
        Some(SkipReason::OptedOut)
    } else {
        None
    };
    if let Some(reason) = skip_reason {
        return NewRecipient {
            skip_reason: Some(reason.as_str().to_string()),
            ..unsent
        };
    }
    match render(body, &wanted.vars, contact) {
        Ok(text) => NewRecipient {
            segments: text.segments(),
            encoding: text.encoding().as_str().to_string(),
            content: text.into_string(),
            status: RecipientStatus::Pending,
            ..unsent
        },
        Err(err) => NewRecipient {
            status: RecipientStatus::Failed,
            failure_reason: Some(
                match err {
                    ContentError::Empty => RenderFailure::ContentEmpty,
                    ContentError::TooLong { .. } => RenderFailure::ContentTooLong,
                }
                .as_str()
                .to_string(),
            ),
            ..unsent
        },
    }
}

/// Creates a campaign: a draft, or launched with `launch_now`.
#[utoipa::path(
    post,
    path = "/v1/campaigns",
    tag = "campaigns",
    request_body = CreateCampaignIn,
    responses((status = 201, description = "The campaign (draft, scheduled or running).", body = CampaignEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(mut body): JsonBody<CreateCampaignIn>,
) -> Result<HttpResponse, ApiError> {
    let request_id = body.request_id.take();
    let operation = Operation::CreateCampaign;
    create_once(
        &state,
        &caller,
        operation,
        "campaign",
        request_id,
        async || create_campaign(&state, &caller, body).await,
    )
    .await
}

/// Creates a campaign: the response and the campaign's id.
async fn create_campaign(
    state: &AppState,
    caller: &Caller,
    body: CreateCampaignIn,
) -> Result<(HttpResponse, Uuid), ApiError> {
    let prepared = prepare(state, caller, body).await?;
    let recipients: Vec<NewRecipient> = prepared.recipients.into_iter().map(|(r, _)| r).collect();
    let initial: Vec<RecipientStatus> = recipients.iter().map(|r| r.status).collect();
    let launch = prepared.launch;
    let new = NewCampaign {
        id: Uuid::now_v7(),
        scope: caller.scope(),
        name: prepared.name,
        from_number: prepared.from_number.as_str().to_string(),
        body: prepared.template,
        scheduled_for: prepared.scheduled_for,
        recipients,
    };
    let op = CampaignOp::Create {
        campaign: new,
        launch,
        limit: new_workspace_limit(state, caller),
    };
    let campaign = controlled(state, state.writer.campaign(op).await?)?;
    for status in RecipientStatus::ALL {
        let n = initial.iter().filter(|s| **s == status).count() as u64;
        crate::telemetry::count_campaign_recipients(status, n);
    }
    if launch {
        state.registry.do_send(Wake { id: campaign.id });
    }
    let response = success(
        StatusCode::CREATED,
        "campaign created",
        with_counts(state, &campaign).await?,
    );
    Ok((response, campaign.id))
}

/// A campaign request validated and expanded: what creation stores and a preview shows.
pub(super) struct Prepared {
    pub name: String,
    pub from_number: PhoneNumber,
    pub template: String,
    pub scheduled_for: Option<i64>,
    pub launch: bool,
    /// Every recipient in order, with the body's variables it has no value for.
    pub recipients: Vec<(NewRecipient, Vec<String>)>,
}

/// Validates a campaign request (docs/api.md, Campaigns, in its order), expands its tags and
/// renders every recipient's text; writes nothing.
pub(super) async fn prepare(
    state: &AppState,
    caller: &Caller,
    body: CreateCampaignIn,
) -> Result<Prepared, ApiError> {
    let name = required(body.name, "name")?;
    if name.trim().is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::validation(
            "name",
            "name must be 1 to 120 characters",
        ));
    }
    let from_text = required(body.from_number, "from_number")?;
    let template = required(body.body, "body")?;
    parse_body(&template)?;
    let explicit = body.recipients.unwrap_or_default();
    let tags = body.contact_tags.unwrap_or_default();
    if explicit.is_empty() && tags.is_empty() {
        return Err(ApiError::validation(
            "recipients",
            "give recipients, contact_tags or both",
        ));
    }
    if explicit.len() > MAX_CAMPAIGN_RECIPIENTS {
        return Err(ApiError::validation(
            "recipients",
            "a campaign has at most 10,000 recipients",
        ));
    }
    let from_number = parse_number(&from_text, "from_number")?;
    // Parsing 10,000 numbers (and below, rendering 10,000 texts) is CPU work of a few hundred
    // milliseconds: it runs on the blocking pool, not on the HTTP worker, whose other
    // connections (phone sessions among them) would wait for it.
    let mut wanted = off_worker(move || parse_recipients(explicit)).await?;
    for (i, tag) in tags.iter().enumerate() {
        if tag.trim().is_empty() {
            return Err(ApiError::validation(
                format!("contact_tags[{i}]"),
                "a tag must not be empty",
            ));
        }
    }
    let scheduled_for = body
        .scheduled_for
        .as_deref()
        .map(|t| parse_timestamp(t, "scheduled_for"))
        .transpose()?
        .map(|t| t.timestamp_millis());
    if caller.mode == Mode::Live
        && !phones::has_number(&state.db, caller.scope(), from_number.as_str()).await?
    {
        return Err(ApiError::validation(
            "from_number",
            "from_number is not the number of one of your phones",
        ));
    }
    // Expand: the explicit list (first entry of a number wins), then the tagged contacts.
    let mut seen = HashSet::new();
    wanted.retain(|w| seen.insert(w.to.as_str().to_string()));
    let numbers: Vec<String> = seen.iter().cloned().collect();
    // Enough tagged contacts to fill the campaign past its limit even if each explicit number
    // is among them (then the request fails); more need not be read.
    let tagged_limit = (MAX_CAMPAIGN_RECIPIENTS + wanted.len() + 1) as u64;
    let (tagged, by_number) =
        contacts::for_campaign(&state.db, caller.scope(), &numbers, &tags, tagged_limit).await?;
    let text = template.clone();
    let recipients = off_worker(move || expand(wanted, seen, tagged, by_number, &text)).await?;
    Ok(Prepared {
        name,
        from_number,
        template,
        scheduled_for,
        launch: body.launch_now.unwrap_or(false),
        recipients,
    })
}

/// Turns the writer's answer into the campaign or the error docs/api.md, Campaigns, names; the
/// messages a pause or cancel took off their phones' queues are dropped from them.
fn controlled(state: &AppState, outcome: CampaignOutcome) -> Result<Campaign, ApiError> {
    match outcome {
        CampaignOutcome::Done {
            campaign,
            dropped,
            canceled_pending,
        } => {
            crate::telemetry::count_campaign_recipients(
                RecipientStatus::Canceled,
                canceled_pending,
            );
            for message in dropped {
                state.registry.do_send(Cancel {
                    message_id: message.id,
                    device_id: message.device_id,
                    scope: campaign.scope,
                    from_number: message.from_number,
                });
            }
            Ok(*campaign)
        }
        CampaignOutcome::NotFound => Err(ApiError::NotFound("campaign")),
        CampaignOutcome::InvalidState(status) => Err(ApiError::InvalidState {
            message: format!("the campaign is {status}; that operation does not apply"),
            status: status.as_str().to_string(),
        }),
        CampaignOutcome::LimitReached {
            limit,
            window_ends_at,
        } => Err(ApiError::NewAccountLimit {
            limit,
            window_ends_at: format_ms(window_ends_at),
        }),
        CampaignOutcome::Fed { .. } | CampaignOutcome::LeaseLost => Err(ApiError::Internal(
            "the writer answered a control with an actor's step".into(),
        )),
    }
}

async fn control(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    control: Control,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "campaign")?;
    let op = CampaignOp::Control {
        scope: caller.scope(),
        id,
        control,
        limit: new_workspace_limit(&state, &caller),
    };
    let campaign = controlled(&state, state.writer.campaign(op).await?)?;
    state.registry.do_send(Wake { id });
    let message = match campaign.status {
        CampaignStatus::Scheduled => "campaign scheduled",
        CampaignStatus::Running => "campaign running",
        CampaignStatus::Paused => "campaign paused",
        _ => "campaign canceled",
    };
    Ok(success(
        StatusCode::OK,
        message,
        with_counts(&state, &campaign).await?,
    ))
}

/// Launches a draft: running, or scheduled when `scheduled_for` is ahead.
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/launch",
    tag = "campaigns",
    params(("id" = Uuid, Path, description = "campaign id")),
    responses((status = 200, description = "The campaign.", body = CampaignEnvelope))
)]
#[tracing::instrument(skip_all, fields(campaign_id = %path))]
async fn launch(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    control(state, caller, path, Control::Launch).await
}

/// Pauses a scheduled or running campaign; its messages not yet with a phone are withdrawn.
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/pause",
    tag = "campaigns",
    params(("id" = Uuid, Path, description = "campaign id")),
    responses((status = 200, description = "The campaign.", body = CampaignEnvelope))
)]
#[tracing::instrument(skip_all, fields(campaign_id = %path))]
async fn pause(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    control(state, caller, path, Control::Pause).await
}

/// Resumes a paused campaign: running, or scheduled when `scheduled_for` is ahead.
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/resume",
    tag = "campaigns",
    params(("id" = Uuid, Path, description = "campaign id")),
    responses((status = 200, description = "The campaign.", body = CampaignEnvelope))
)]
#[tracing::instrument(skip_all, fields(campaign_id = %path))]
async fn resume(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    control(state, caller, path, Control::Resume).await
}

/// Cancels a campaign: pending recipients and queued messages are canceled.
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/cancel",
    tag = "campaigns",
    params(("id" = Uuid, Path, description = "campaign id")),
    responses((status = 200, description = "The campaign.", body = CampaignEnvelope))
)]
#[tracing::instrument(skip_all, fields(campaign_id = %path))]
async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    control(state, caller, path, Control::Cancel).await
}

/// One campaign with its progress.
#[utoipa::path(
    get,
    path = "/v1/campaigns/{id}",
    tag = "campaigns",
    params(("id" = Uuid, Path, description = "campaign id")),
    responses((status = 200, description = "The campaign.", body = CampaignEnvelope))
)]
#[tracing::instrument(skip_all, fields(campaign_id = %path))]
async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "campaign")?;
    let campaign = campaigns::get(&state.db, caller.scope(), id)
        .await
        .map_err(missing("campaign"))?;
    Ok(success(
        StatusCode::OK,
        "campaign",
        with_counts(&state, &campaign).await?,
    ))
}

/// Lists campaigns, newest first, cursor paged.
#[utoipa::path(
    get,
    path = "/v1/campaigns",
    tag = "campaigns",
    params(
        PageParams,
        ("status" = Option<String>, Query, description = "only campaigns in this status"),
    ),
    responses((status = 200, description = "A page of campaigns.", body = CampaignPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    let page = PageRequest::parse(&query)?;
    let status = query_param(
        &query,
        "status",
        CampaignStatus::parse,
        "status must be draft, scheduled, running, paused, completed or canceled",
    )?;
    let rows = Page::read(page, |after, limit| {
        campaigns::list(&state.db, caller.scope(), status, after, limit)
    })
    .await?;
    let ids: Vec<Uuid> = rows.items.iter().map(|c| c.id).collect();
    let mut counts = campaigns::counts_of(&state.db, &ids).await?;
    let items = rows.map(|c| campaign_out(c, &counts.remove(&c.id).unwrap_or_default()));
    Ok(success(
        StatusCode::OK,
        "campaigns",
        CampaignPage::from(items),
    ))
}

/// A campaign's recipients in order, with their statuses, cursor paged.
#[utoipa::path(
    get,
    path = "/v1/campaigns/{id}/recipients",
    tag = "campaigns",
    params(
        ("id" = Uuid, Path, description = "campaign id"),
        PageParams,
    ),
    responses((status = 200, description = "A page of recipients.", body = CampaignRecipientPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(campaign_id = %path))]
async fn recipients(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "campaign")?;
    let page = PageRequest::parse(&query)?;
    campaigns::get(&state.db, caller.scope(), id)
        .await
        .map_err(missing("campaign"))?;
    let rows = Page::read(page, |after, limit| {
        campaigns::recipients(&state.db, id, after.map(|p| p.created_at), limit)
    })
    .await?;
    Ok(success(
        StatusCode::OK,
        "recipients",
        CampaignRecipientPage::from(rows.map(recipient_out)),
    ))
}
