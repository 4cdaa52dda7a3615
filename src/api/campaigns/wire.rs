//! The campaigns API's request and response bodies (docs/api.md, Campaigns): each is both the
//! wire format and its OpenAPI schema.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::api::envelope::envelope_of;
use crate::api::idempotent::create_body;
use crate::api::page::{Positioned, page_out};
use crate::clock::format_ms;
use crate::domain::campaign::{CampaignStatus, RecipientStatus};
use crate::store::campaigns::{Campaign, Counts, Recipient};
use crate::store::messages::Position;

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
    /// E.164; with a live key, the number of one of your phones. Exactly one of this and
    /// `from_pool`.
    #[schema(nullable = false)]
    pub from_number: Option<String>,
    /// A sender pool's id or name (docs/api.md, "Pools"): each recipient's line is chosen in
    /// it as it is fed.
    #[schema(nullable = false)]
    pub from_pool: Option<String>,
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
create_body!(CreateCampaignIn => CreateCampaign, "campaign");

/// How many recipients of a campaign are in each state; they add up to `total`.
#[derive(Serialize, Deserialize, ToSchema)]
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
#[derive(Serialize, Deserialize, ToSchema)]
pub struct CampaignSkippedOut {
    pub opted_out: u64,
    pub premium_rate: u64,
}

/// A campaign (docs/api.md, Campaigns).
#[derive(Serialize, Deserialize, ToSchema)]
pub struct CampaignOut<'a> {
    pub id: Uuid,
    pub name: &'a str,
    /// Null when it sends from a pool.
    pub from_number: Option<&'a str>,
    /// The sender pool it sends from; null otherwise.
    pub pool_id: Option<Uuid>,
    /// The template, with `{{variable}}` tokens.
    pub body: &'a str,
    pub status: CampaignStatus,
    /// Why a `paused` campaign paused itself: `daily_quota_exceeded` (the test-mode daily
    /// message quota is used up; resume it once the day rolls over). Null otherwise, and for a
    /// pause through the API.
    pub paused_reason: Option<&'static str>,
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
    /// Progress per sending line, by its queued messages and what became of them (only on
    /// `GET /v1/campaigns/{id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<CampaignLineOut>>,
}

/// One line's share of a campaign: its messages by status.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct CampaignLineOut {
    pub phone_id: Option<Uuid>,
    pub from_number: String,
    pub queued: u64,
    pub sent: u64,
    pub delivered: u64,
    pub failed: u64,
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
#[derive(Serialize, Deserialize, ToSchema)]
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
pub(super) fn campaign_out<'a>(c: &'a Campaign, counts: &Counts) -> CampaignOut<'a> {
    CampaignOut {
        id: c.id.as_uuid(),
        name: &c.name,
        from_number: c.pool_id.is_none().then_some(c.from_number.as_str()),
        pool_id: c.pool_id,
        lines: None,
        body: &c.body,
        status: c.status,
        paused_reason: c.paused_reason.map(|r| r.as_str()),
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

pub(super) fn recipient_out(r: &Recipient) -> CampaignRecipientOut<'_> {
    CampaignRecipientOut {
        to: &r.to_number,
        status: r.status,
        message_id: r.message_id,
        skip_reason: r.skip_reason.as_deref(),
        failure_reason: r.failure_reason.as_deref(),
    }
}
