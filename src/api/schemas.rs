//! The response shapes every resource shares: the error envelope and its codes, the empty
//! `data` and the id of a removed resource (their success envelopes declared with
//! `envelope_of!` in `api::envelope`).
//!
//! Each resource's own response structs (`…Out`) live in its module: they are both what the
//! handler serializes and the schema the document shows. Request bodies are the handlers' `…In`
//! structs.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

pub use crate::error::ErrorCode;

use super::envelope::envelope_of;
use crate::error::success;

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

envelope_of!(
    EmptyEnvelope,
    Empty,
    "A success envelope with an empty `data` object."
);

/// `GET /ready` data.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// `ok` when the database answered.
    pub database: &'static str,
    /// In a cluster (PostgreSQL): this node's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// In a cluster: `ok` while the node's leases are renewed in time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases: Option<&'static str>,
}
envelope_of!(ReadinessEnvelope, Readiness, "`GET /ready`.");

/// The id of a removed resource.
#[derive(Serialize, ToSchema)]
pub struct DeletedOut {
    pub id: Uuid,
}
envelope_of!(DeletedEnvelope, DeletedOut, "The id of what was removed.");

/// A delete's answer: 200 with the removed resource's id.
pub fn deleted(message: &str, id: Uuid) -> HttpResponse {
    success(StatusCode::OK, message, DeletedOut { id })
}
