//! Documentation shapes of the OpenAPI document: the envelope, every response `data` object and
//! the error codes. Handlers build their JSON elsewhere; `tests/api/openapi.rs` checks real answers
//! against these shapes (unknown fields fail), so the two cannot silently drift.
//!
//! Request bodies are the handlers' own `…In` structs (they derive `ToSchema` where they are).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

pub use crate::error::ErrorCode;

/// Declares `NAME`: the success envelope `{status: "success", message, data: DATA}`.
macro_rules! envelope {
    ($name:ident, $data:ty, $doc:literal) => {
        #[doc = $doc]
        #[derive(Serialize, ToSchema)]
        pub struct $name {
            /// Always `success`.
            #[schema(pattern = "^success$")]
            pub status: String,
            /// A human-readable summary.
            pub message: String,
            pub data: $data,
        }
    };
}

/// The error envelope (docs/api.md, Errors): `status` is `error` exactly when the HTTP
/// status is ≥ 400.
#[derive(Serialize, ToSchema)]
pub struct ErrorEnvelope {
    /// Always `error`.
    #[schema(pattern = "^error$")]
    pub status: String,
    /// A human-readable explanation; a 500 says nothing internal.
    pub message: String,
    pub data: ErrorData,
    pub error_code: ErrorCode,
}

/// Details of an error; which keys appear depends on `error_code` (docs/api.md, Errors).
#[derive(Serialize, ToSchema)]
pub struct ErrorData {
    /// The offending field, e.g. `to_number`, `to_numbers[3]`, `pace.per_minute`.
    pub field: Option<String>,
    /// `duplicate_request`: the original message; `already_exists`: the existing resource.
    pub id: Option<Uuid>,
    /// `invalid_state`: the resource's current status.
    pub status: Option<String>,
    /// `content_too_long`: segments the content needs.
    pub segments: Option<u32>,
    /// `content_too_long`: `GSM-7` or `UCS-2`.
    pub encoding: Option<String>,
    /// `new_account_limit`: messages allowed in the window; `quota_exceeded` and
    /// `daily_quota_exceeded`: the quota's limit.
    pub limit: Option<u32>,
    /// `new_account_limit`: when the window ends.
    pub window_ends_at: Option<String>,
    /// `quota_exceeded`, `daily_quota_exceeded`: which quota (`phones`, `webhook_endpoints`,
    /// `contacts`, `queued_messages`, `test_messages_per_day`).
    pub quota: Option<String>,
    /// `daily_quota_exceeded`: when the quota resets (the next UTC midnight).
    pub resets_at: Option<String>,
}

/// An empty `data` object.
#[derive(Serialize, ToSchema)]
pub struct Empty {}

envelope!(
    EmptyEnvelope,
    Empty,
    "A success envelope with an empty `data` object."
);

/// `GET /ready` data.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// `ok` when the database answered.
    pub database: String,
}
envelope!(ReadinessEnvelope, Readiness, "`GET /ready`.");

/// Message direction.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Outbound,
    Inbound,
}

/// Message status (docs/api.md, Messages); terminal: delivered, failed, expired, canceled.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    Queued,
    Sending,
    Sent,
    Delivered,
    Failed,
    Expired,
    Canceled,
}

/// SMS encoding.
#[derive(Serialize, ToSchema)]
pub enum Encoding {
    #[serde(rename = "GSM-7")]
    Gsm7,
    #[serde(rename = "UCS-2")]
    Ucs2,
}

/// A message record (docs/api.md, Messages); timestamps are RFC 3339 with milliseconds.
#[derive(Serialize, ToSchema)]
pub struct MessageOut {
    pub id: Uuid,
    pub direction: Direction,
    pub status: MessageStatus,
    pub from_number: String,
    pub to_number: String,
    /// Empty once retention removed it.
    pub content: String,
    pub segments: u32,
    pub encoding: Encoding,
    /// The phone that sends (or sent) it.
    pub device_id: Option<Uuid>,
    pub campaign_id: Option<Uuid>,
    pub request_id: Option<String>,
    #[schema(format = DateTime)]
    pub scheduled_for: Option<String>,
    /// Outbound only (null for inbound messages).
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub sent_at: Option<String>,
    #[schema(format = DateTime)]
    pub delivered_at: Option<String>,
    #[schema(format = DateTime)]
    pub failed_at: Option<String>,
    pub failure_reason: Option<String>,
    pub send_attempts: u32,
    pub test_mode: bool,
}
envelope!(MessageEnvelope, MessageOut, "One message.");

/// One transition of a message's timeline.
#[derive(Serialize, ToSchema)]
pub struct MessageEventOut {
    /// queued, sending, sent, delivered, failed, expired, canceled, content_removed, …
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    #[schema(format = DateTime)]
    pub at: String,
    pub detail: Option<String>,
}

/// A message with its timeline, oldest event first.
#[derive(Serialize, ToSchema)]
pub struct MessageDetailOut {
    #[serde(flatten)]
    pub message: MessageOut,
    pub events: Vec<MessageEventOut>,
}
envelope!(
    MessageDetailEnvelope,
    MessageDetailOut,
    "One message with its events."
);

/// A page of messages, newest first.
#[derive(Serialize, ToSchema)]
pub struct MessagePage {
    pub messages: Vec<MessageOut>,
    pub has_more: bool,
    /// Pass as `cursor` for the next page; null when `has_more` is false.
    pub next_cursor: Option<String>,
}
envelope!(MessagePageEnvelope, MessagePage, "A page of messages.");

/// Result of a bulk send.
#[derive(Serialize, ToSchema)]
pub struct BulkSendOut {
    /// Messages created (duplicate numbers are sent once).
    pub count: u64,
    pub message_ids: Vec<Uuid>,
}
envelope!(
    BulkSendEnvelope,
    BulkSendOut,
    "Messages queued by a bulk send."
);

/// The status of one message.
#[derive(Serialize, ToSchema)]
pub struct MessageStatusOut {
    pub id: Uuid,
    pub status: MessageStatus,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// Statuses of the requested messages; unknown ids are listed as given.
#[derive(Serialize, ToSchema)]
pub struct BatchStatusOut {
    pub messages: Vec<MessageStatusOut>,
    pub not_found: Vec<String>,
}
envelope!(BatchStatusEnvelope, BatchStatusOut, "Statuses of messages.");

/// A phone's sending pace: both sliding windows must allow a send.
#[derive(Serialize, ToSchema)]
pub struct PaceOut {
    pub per_minute: u32,
    pub per_30_minutes: u32,
}

/// A paired phone; its `id` is the `device_id` of docs/api.md, Phones.
#[derive(Serialize, ToSchema)]
pub struct PhoneOut {
    pub id: Uuid,
    pub phone_number: String,
    pub name: Option<String>,
    /// True while a WebSocket session is open.
    pub online: bool,
    pub pace: PaceOut,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub last_seen_at: Option<String>,
}
envelope!(PhoneEnvelope, PhoneOut, "One phone.");

/// A phone with its device token, shown only when paired or rotated.
#[derive(Serialize, ToSchema)]
pub struct PhoneWithTokenOut {
    #[serde(flatten)]
    pub phone: PhoneOut,
    /// `dt_…`; the phone authenticates its WebSocket with it.
    pub device_token: String,
}
envelope!(
    PhoneWithTokenEnvelope,
    PhoneWithTokenOut,
    "A phone and its new device token."
);

/// A page of phones.
#[derive(Serialize, ToSchema)]
pub struct PhonePage {
    pub phones: Vec<PhoneOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope!(PhonePageEnvelope, PhonePage, "A page of phones.");

/// The id of a removed resource.
#[derive(Serialize, ToSchema)]
pub struct DeletedOut {
    pub id: Uuid,
}
envelope!(DeletedEnvelope, DeletedOut, "The id of what was removed.");

/// An API key as listed (never the secret nor its hash).
#[derive(Serialize, ToSchema)]
pub struct ApiKeyOut {
    pub id: Uuid,
    /// `live` or `test`: the caller's own mode.
    pub mode: String,
    /// The first 12 characters of the key (`sk_live_` and 4 more), to tell keys apart.
    pub prefix: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When the key was revoked; null while it works.
    #[schema(format = DateTime)]
    pub revoked_at: Option<String>,
}
envelope!(ApiKeyEnvelope, ApiKeyOut, "One API key.");

/// A new API key with its secret, shown only at creation.
#[derive(Serialize, ToSchema)]
pub struct ApiKeyWithSecretOut {
    #[serde(flatten)]
    pub api_key: ApiKeyOut,
    /// `sk_live_…` / `sk_test_…`: the `x-api-key` value. Only its hash is stored.
    pub key: String,
}
envelope!(
    ApiKeyWithSecretEnvelope,
    ApiKeyWithSecretOut,
    "A new API key and its secret."
);

/// A page of API keys, newest first.
#[derive(Serialize, ToSchema)]
pub struct ApiKeyPage {
    pub keys: Vec<ApiKeyOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope!(ApiKeyPageEnvelope, ApiKeyPage, "A page of API keys.");

/// A contact (docs/api.md, Contacts).
#[derive(Serialize, ToSchema)]
pub struct ContactOut {
    pub id: Uuid,
    pub phone_number: String,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub email: Option<String>,
    /// String to string; `{}` when none.
    pub custom_fields: std::collections::BTreeMap<String, String>,
    /// Sorted; `[]` when none.
    pub tags: Vec<String>,
    /// Opted out by keyword (STOP, …) or by hand; campaigns skip the contact.
    pub opted_out: bool,
    #[schema(format = DateTime)]
    pub opted_out_at: Option<String>,
    /// False after STOP AI: no AI replies to this contact.
    pub ai_replies: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}
envelope!(ContactEnvelope, ContactOut, "One contact.");

/// A page of contacts, newest first.
#[derive(Serialize, ToSchema)]
pub struct ContactPage {
    pub contacts: Vec<ContactOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope!(ContactPageEnvelope, ContactPage, "A page of contacts.");

/// What an import did.
#[derive(Serialize, ToSchema)]
pub struct ImportContactsOut {
    pub created: u64,
    pub updated: u64,
}
envelope!(
    ImportContactsEnvelope,
    ImportContactsOut,
    "Counts of an import."
);

/// A webhook endpoint (docs/api.md, Webhooks); the signing key is never shown here.
#[derive(Serialize, ToSchema)]
pub struct WebhookOut {
    pub id: Uuid,
    pub url: String,
    /// Subscribed event kinds.
    pub events: Vec<String>,
    /// E.164 numbers the endpoint is limited to; empty: every phone.
    pub phone_numbers: Vec<String>,
    pub enabled: bool,
    /// The body format: `smsgw`, or `smsgate` for endpoints created through the client API
    /// compatible with the SMSGate clients (their `events` are SMSGate names, docs/compat.md).
    #[schema(example = "smsgw")]
    pub format: String,
    pub test_mode: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}
envelope!(WebhookEnvelope, WebhookOut, "One webhook endpoint.");

/// A webhook endpoint with its signing key, shown only at creation and rotation.
#[derive(Serialize, ToSchema)]
pub struct WebhookWithKeyOut {
    #[serde(flatten)]
    pub webhook: WebhookOut,
    /// `whsec_…`: keys `X-Signature` (whole string) and `webhook-signature` (base64 part).
    pub signing_key: String,
}
envelope!(
    WebhookWithKeyEnvelope,
    WebhookWithKeyOut,
    "A webhook endpoint and its signing key."
);

/// A page of webhook endpoints.
#[derive(Serialize, ToSchema)]
pub struct WebhookPage {
    pub webhooks: Vec<WebhookOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope!(
    WebhookPageEnvelope,
    WebhookPage,
    "A page of webhook endpoints."
);

/// One delivery attempt of the deliveries log.
#[derive(Serialize, ToSchema)]
pub struct DeliveryAttemptOut {
    /// The attempt's id.
    pub id: Uuid,
    pub delivery_id: Uuid,
    pub event: String,
    pub event_id: Uuid,
    pub message_id: Uuid,
    /// From 1.
    pub attempt: u32,
    /// Null when no response arrived.
    pub status_code: Option<u16>,
    /// dns, connect, tls, timeout, blocked_address, redirect, http_status, message_deleted.
    pub error: Option<String>,
    pub error_detail: Option<String>,
    pub duration_ms: i64,
    #[schema(format = DateTime)]
    pub attempted_at: String,
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    /// The delivery's state after this attempt: pending, succeeded or failed.
    pub state: String,
}

/// A page of delivery attempts, newest first.
#[derive(Serialize, ToSchema)]
pub struct DeliveryPage {
    pub deliveries: Vec<DeliveryAttemptOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope!(
    DeliveryPageEnvelope,
    DeliveryPage,
    "A page of delivery attempts."
);

/// A delivery scheduled for another attempt.
#[derive(Serialize, ToSchema)]
pub struct DeliveryRetryOut {
    pub id: Uuid,
    pub event: String,
    pub event_id: Uuid,
    pub message_id: Uuid,
    /// Attempts made so far.
    pub attempts: u32,
    /// Always `pending`.
    pub state: String,
    #[schema(format = DateTime)]
    pub next_attempt_at: String,
}
envelope!(
    DeliveryRetryEnvelope,
    DeliveryRetryOut,
    "The delivery, due now."
);

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

/// Campaign status.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CampaignStatusOut {
    Draft,
    Scheduled,
    Running,
    Paused,
    Completed,
    Canceled,
}

/// A campaign (docs/api.md, Campaigns).
#[derive(Serialize, ToSchema)]
pub struct CampaignOut {
    pub id: Uuid,
    pub name: String,
    pub from_number: String,
    /// The template, with `{{variable}}` tokens.
    pub body: String,
    pub status: CampaignStatusOut,
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
envelope!(CampaignEnvelope, CampaignOut, "One campaign.");

/// A page of campaigns, newest first.
#[derive(Serialize, ToSchema)]
pub struct CampaignPage {
    pub campaigns: Vec<CampaignOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope!(CampaignPageEnvelope, CampaignPage, "A page of campaigns.");

/// Recipient status.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecipientStatusOut {
    Pending,
    Queued,
    Sent,
    Delivered,
    Failed,
    Canceled,
    Skipped,
}

/// One recipient of a campaign.
#[derive(Serialize, ToSchema)]
pub struct CampaignRecipientOut {
    pub to: String,
    pub status: RecipientStatusOut,
    /// Its message once queued.
    pub message_id: Option<Uuid>,
    /// `opted_out` or `premium_rate`.
    pub skip_reason: Option<String>,
    /// `content_too_long` or `content_empty` when its rendered text cannot be sent.
    pub failure_reason: Option<String>,
}

/// A page of a campaign's recipients, in order.
#[derive(Serialize, ToSchema)]
pub struct CampaignRecipientPage {
    pub recipients: Vec<CampaignRecipientOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope!(
    CampaignRecipientPageEnvelope,
    CampaignRecipientPage,
    "A page of a campaign's recipients."
);

/// One keyword rule of the embedded `rules` provider.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct AiRule {
    /// Any of these, found in an inbound text as a whole word or phrase (any case).
    pub keywords: Vec<String>,
    /// The draft's text.
    pub reply: String,
}

/// AI reply mode.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AiModeOut {
    Draft,
    Auto,
}

/// The AI reply settings of the key's workspace and mode.
#[derive(Serialize, ToSchema)]
pub struct AiSettingsOut {
    pub enabled: bool,
    /// `draft`: stored for review; `auto`: sent at once.
    pub mode: AiModeOut,
    pub instructions: String,
    pub rules: Vec<AiRule>,
}
envelope!(AiSettingsEnvelope, AiSettingsOut, "AI reply settings.");

/// Draft status.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DraftStatusOut {
    Pending,
    Sent,
    Discarded,
}

/// An AI reply draft.
#[derive(Serialize, ToSchema)]
pub struct DraftOut {
    pub id: Uuid,
    /// The inbound message it answers.
    pub message_id: Uuid,
    /// The contact who wrote.
    pub from_number: String,
    /// Your number it arrived on; the reply goes from it.
    pub to_number: String,
    pub content: String,
    pub status: DraftStatusOut,
    /// The reply once sent.
    pub sent_message_id: Option<Uuid>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}
envelope!(DraftEnvelope, DraftOut, "One AI reply draft.");

/// A page of drafts, newest first.
#[derive(Serialize, ToSchema)]
pub struct DraftPage {
    pub drafts: Vec<DraftOut>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}
envelope!(DraftPageEnvelope, DraftPage, "A page of AI reply drafts.");
