//! Campaigns API (docs/api.md, Campaigns): create (draft or launched), launch, pause, resume,
//! cancel, delete, read with progress counts, list, and the recipients with their statuses.
//!
//! Creation validates everything first, expands `contact_tags`, renders each recipient's text
//! and decides who is skipped (`prepare`), then stores the campaign and its recipients in one
//! writer job (atomic, and counted against the new-workspace limit when launched). Sending is
//! the campaign actor's job (`actors::campaign`). The request and response bodies are in
//! `wire`; this file holds the handlers.

mod prepare;
mod wire;

use actix_web::http::StatusCode;
use actix_web::web;
use uuid::Uuid;

pub(super) use prepare::prepare;
use wire::{
    CampaignEnvelope, CampaignPage, CampaignPageEnvelope, CampaignRecipientPage,
    CampaignRecipientPageEnvelope, campaign_out, recipient_out,
};
pub use wire::{CampaignOut, CampaignRecipientOut, CreateCampaignIn};

use super::idempotent::{Created, create_once};
use super::page::PageParams;
use super::schemas::{DeletedEnvelope, deleted};
use super::sending::sender;
use super::{
    Answer, AppState, Caller, DocumentedRoute, JsonBody, PageRequest, QueryParams, parse_id,
};
use crate::actors::campaign::Wake;
use crate::actors::registry::Cancel;
use crate::clock::format_ms;
use crate::domain::campaign::{CampaignStatus, Control, RecipientStatus};
use crate::domain::ids::CampaignId;
use crate::error::{ApiError, ErrorCode, success};
use crate::store::campaigns::{self, Campaign, CampaignQuotas, NewCampaign, NewRecipient};
use crate::store::writer::{CampaignOp, CampaignOutcome};

/// The campaign operations (route list, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_create>(|| web::to(create)).errors(&[
            ValidationFailed,
            InvalidPhoneNumber,
            ContentTooLong,
            QuotaExceeded,
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
        DocumentedRoute::of::<__path_delete>(|| web::to(delete)).errors(&[InvalidState]),
    ]
}

async fn with_counts<'a>(
    state: &AppState,
    campaign: &'a Campaign,
) -> Result<CampaignOut<'a>, ApiError> {
    let counts = campaigns::counts(&state.db, campaign.id).await?;
    Ok(campaign_out(campaign, &counts))
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
    JsonBody(body): JsonBody<CreateCampaignIn>,
) -> Answer {
    create_once(&state, &caller, body, create_campaign).await
}

/// Creates a campaign: the response and the campaign's id.
async fn create_campaign(state: &AppState, caller: &Caller, body: CreateCampaignIn) -> Created {
    let prepared = prepare(state, caller, body).await?;
    let recipients: Vec<NewRecipient> = prepared.recipients.into_iter().map(|(r, _)| r).collect();
    let initial: Vec<RecipientStatus> = recipients.iter().map(|r| r.status).collect();
    let launch = prepared.launch;
    let new = NewCampaign {
        id: CampaignId::from(Uuid::now_v7()),
        scope: caller.scope(),
        name: prepared.name,
        from_number: prepared
            .from_number
            .map(|n| n.as_str().to_string())
            .unwrap_or_default(),
        pool_id: prepared.pool_id,
        body: prepared.template,
        scheduled_for: prepared.scheduled_for,
        recipients,
    };
    let op = CampaignOp::Create {
        campaign: new,
        launch,
        limit: sender(caller).new_workspace_limit(&state.settings.limits),
        quotas: CampaignQuotas::of(&state.settings.quotas),
    };
    let campaign = controlled(state, state.writer.campaign(op).await?)?;
    for status in RecipientStatus::ALL {
        let n = initial.iter().filter(|s| **s == status).count() as u64;
        crate::telemetry::count_campaign_recipients(status, n);
    }
    if launch {
        state.campaigns.do_send(Wake { id: campaign.id });
    }
    let response = success(
        StatusCode::CREATED,
        "campaign created",
        with_counts(state, &campaign).await?,
    );
    Ok((response, campaign.id.as_uuid()))
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
        CampaignOutcome::QuotaExceeded(quota) => Err(ApiError::QuotaExceeded {
            quota: quota.quota,
            limit: quota.limit,
        }),
        CampaignOutcome::Fed { .. } | CampaignOutcome::Deleted | CampaignOutcome::LeaseLost => Err(
            ApiError::internal("the writer answered a control with another operation's outcome"),
        ),
    }
}

async fn control(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    control: Control,
) -> Answer {
    let id = parse_id(&path, "campaign")?;
    let op = CampaignOp::Control {
        scope: caller.scope(),
        id,
        control,
        limit: sender(&caller).new_workspace_limit(&state.settings.limits),
    };
    let campaign = controlled(&state, state.writer.campaign(op).await?)?;
    state.campaigns.do_send(Wake { id });
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
async fn launch(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
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
async fn pause(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
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
async fn resume(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
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
async fn cancel(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    control(state, caller, path, Control::Cancel).await
}

/// Deletes a draft or finished (completed, canceled) campaign with its recipients; its messages
/// stay, keeping their `campaign_id`.
#[utoipa::path(
    delete,
    path = "/v1/campaigns/{id}",
    tag = "campaigns",
    params(("id" = Uuid, Path, description = "campaign id")),
    responses((status = 200, description = "Deleted.", body = DeletedEnvelope))
)]
#[tracing::instrument(skip_all, fields(campaign_id = %path))]
async fn delete(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let id: CampaignId = parse_id(&path, "campaign")?;
    let op = CampaignOp::Delete {
        scope: caller.scope(),
        id,
    };
    match state.writer.campaign(op).await? {
        CampaignOutcome::Deleted => Ok(deleted("campaign deleted", id.as_uuid())),
        CampaignOutcome::InvalidState(status) => Err(ApiError::InvalidState {
            message: format!(
                "the campaign is {status}; only a draft, completed or canceled campaign can be \
                 deleted: cancel it first"
            ),
            status: status.as_str().to_string(),
        }),
        other => controlled(&state, other).map(|_| deleted("campaign deleted", id.as_uuid())),
    }
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
async fn get(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let campaign: Campaign = state.find(&caller, &path).await?;
    let mut out = with_counts(&state, &campaign).await?;
    let lines = campaigns::lines(&state.db, campaign.id).await?;
    out.lines = Some(
        lines
            .into_iter()
            .map(|l| wire::CampaignLineOut {
                phone_id: l.phone_id,
                from_number: l.from_number,
                queued: l.queued,
                sent: l.sent,
                delivered: l.delivered,
                failed: l.failed,
            })
            .collect(),
    );
    Ok(success(StatusCode::OK, "campaign", out))
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
async fn list(state: web::Data<AppState>, caller: Caller, query: QueryParams) -> Answer {
    let page = PageRequest::parse(&query)?;
    let status = query.filter::<CampaignStatus>()?;
    let rows = page
        .read(|after, limit| campaigns::list(&state.db, caller.scope(), status, after, limit))
        .await?;
    let ids: Vec<CampaignId> = rows.items.iter().map(|c| c.id).collect();
    let mut counts = campaigns::counts_of(&state.db, &ids).await?;
    let items = rows.map(|c| campaign_out(c, &counts.remove(&c.id).unwrap_or_default()));
    Ok(items.answer::<CampaignPage>("campaigns"))
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
    query: QueryParams,
) -> Answer {
    let id: CampaignId = parse_id(&path, "campaign")?;
    let page = PageRequest::parse(&query)?;
    state.find_id::<Campaign>(&caller, id.as_uuid()).await?;
    let rows = page
        .read(|after, limit| {
            campaigns::recipients(&state.db, id, after.map(|p| p.created_at), limit)
        })
        .await?;
    Ok(rows
        .map(recipient_out)
        .answer::<CampaignRecipientPage>("recipients"))
}
