//! `POST /v1/campaigns/preview`: what a campaign creation with the same body would do, without
//! writing anything (docs/api.md, "Campaign preview"): how many people it texts and from which
//! phone, a few rendered texts with their segments, and the recipients whose template
//! variables have no value (they would get a blank where the variable is).

use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::campaigns::{CreateCampaignIn, prepare};
use super::envelope::envelope_of;
use super::phones::live_states;
use super::{Answer, AppState, Caller, DocumentedRoute, JsonBody};
use crate::domain::campaign::{RecipientStatus, SkipReason};
use crate::domain::status::Mode;
use crate::error::{ErrorCode, success};
use crate::store::phones;

/// Rendered texts a preview shows.
const SAMPLES: usize = 5;
/// Recipients with missing variables a preview lists (all are counted).
const MISSING_LISTED: usize = 100;

/// The preview operation (route registry, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_preview>(|| web::to(preview)).errors(&[
            ValidationFailed,
            InvalidPhoneNumber,
            ContentTooLong,
        ]),
    ]
}

/// The phone a campaign would send from.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PreviewPhoneOut {
    pub id: Uuid,
    pub phone_number: String,
    pub name: Option<String>,
    pub online: bool,
}

/// One rendered text.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PreviewSampleOut {
    pub to: String,
    pub text: String,
    pub segments: u32,
    /// `GSM-7` or `UCS-2`.
    pub encoding: String,
}

/// A recipient whose text would have blanks.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MissingVarsOut {
    pub to: String,
    /// The variables without a value (in the body's order).
    pub names: Vec<String>,
}

/// Recipients a campaign would skip.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PreviewSkippedOut {
    pub opted_out: u64,
    pub premium_rate: u64,
}

/// What creating the campaign would do.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CampaignPreviewOut {
    /// Recipients a message would go to (the campaign's `counts.total` less `unsendable`).
    pub recipient_count: u64,
    /// Recipients skipped (opted out, premium rate), as creation would count them.
    pub skipped: PreviewSkippedOut,
    /// Recipients whose rendered text is empty or over 10 segments (creation makes them
    /// `failed`).
    pub unsendable: u64,
    /// The phone paired with `from_number` that would send (an online one first); null in test
    /// mode (the simulated phone) or when none is paired.
    pub phone: Option<PreviewPhoneOut>,
    /// The first five texts that would be sent.
    pub samples: Vec<PreviewSampleOut>,
    /// Up to 100 recipients whose texts have variables without a value.
    pub missing_vars: Vec<MissingVarsOut>,
    /// All such recipients.
    pub missing_vars_count: u64,
    /// The most segments of any text that would be sent (0 when none).
    pub max_segments: u32,
}
envelope_of!(
    CampaignPreviewEnvelope,
    CampaignPreviewOut,
    "What creating the campaign would do."
);

/// Answers what `POST /v1/campaigns` with this body would do, with the same validation and
/// errors; writes nothing, launches nothing (`launch_now` and `request_id` are ignored).
#[utoipa::path(
    post,
    path = "/v1/campaigns/preview",
    tag = "campaigns",
    request_body = CreateCampaignIn,
    responses((status = 200, description = "What the campaign would do.", body = CampaignPreviewEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn preview(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<CreateCampaignIn>,
) -> Answer {
    let prepared = prepare(&state, &caller, body).await?;
    let mut out = CampaignPreviewOut {
        recipient_count: 0,
        skipped: PreviewSkippedOut {
            opted_out: 0,
            premium_rate: 0,
        },
        unsendable: 0,
        phone: None,
        samples: Vec::new(),
        missing_vars: Vec::new(),
        missing_vars_count: 0,
        max_segments: 0,
    };
    for (recipient, missing) in prepared.recipients {
        match recipient.status {
            RecipientStatus::Skipped => {
                if recipient.skip_reason.as_deref() == Some(SkipReason::OptedOut.as_str()) {
                    out.skipped.opted_out += 1;
                } else {
                    out.skipped.premium_rate += 1;
                }
                continue;
            }
            RecipientStatus::Pending => {
                out.recipient_count += 1;
                out.max_segments = out.max_segments.max(recipient.segments);
            }
            _ => out.unsendable += 1,
        }
        if !missing.is_empty() {
            out.missing_vars_count += 1;
            if out.missing_vars.len() < MISSING_LISTED {
                out.missing_vars.push(MissingVarsOut {
                    to: recipient.to_number.clone(),
                    names: missing,
                });
            }
        }
        if recipient.status == RecipientStatus::Pending && out.samples.len() < SAMPLES {
            out.samples.push(PreviewSampleOut {
                to: recipient.to_number,
                text: recipient.content,
                segments: recipient.segments,
                encoding: recipient.encoding,
            });
        }
    }
    if caller.mode == Mode::Live
        && let Some(from_number) = &prepared.from_number
    {
        let paired = phones::with_number(&state.db, caller.scope(), from_number.as_str()).await?;
        let live = live_states(&state, &paired).await;
        let online = |id: &Uuid| live.get(id).is_some_and(|s| s.online);
        let chosen = paired
            .iter()
            .find(|p| online(&p.id))
            .or_else(|| paired.first());
        out.phone = chosen.map(|p| PreviewPhoneOut {
            id: p.id,
            phone_number: p.phone_number.clone(),
            name: p.name.clone(),
            online: online(&p.id),
        });
    }
    Ok(success(StatusCode::OK, "campaign preview", out))
}
