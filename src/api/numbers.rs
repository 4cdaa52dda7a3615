//! Number lookup: a number as a person types it, read with libphonenumber's metadata in the
//! workspace's default country (docs/api.md, "Number lookup"). A lookup, not a write: text
//! that is no number is an answer (`valid: false`), not an error.

use actix_web::http::StatusCode;
use actix_web::web;
use serde::Serialize;
use utoipa::ToSchema;

use super::envelope::envelope_of;
use super::{Answer, AppState, Caller, DocumentedRoute, QueryParams, missing, required};
use crate::domain::number_lookup::{self, Country, Lookup, MAX_LOOKUP_CHARS, NumberType};
use crate::error::{ApiError, ErrorCode, success};
use crate::store::workspaces;

/// The number operations (route registry, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    vec![
        DocumentedRoute::of::<__path_lookup>(|| web::to(lookup))
            .errors(&[ErrorCode::ValidationFailed]),
    ]
}

/// What a lookup found.
#[derive(Debug, Serialize, ToSchema)]
pub struct NumberLookupOut {
    /// The text as given.
    pub input: String,
    /// Whether the API would accept `e164` as a number.
    pub valid: bool,
    /// The number in E.164 form; null when not valid.
    pub e164: Option<String>,
    /// ISO 3166-1 alpha-2 region of the number (null when unknown).
    pub country: Option<String>,
    /// libphonenumber's type: `mobile`, `fixed_line`, `fixed_line_or_mobile`, `toll_free`,
    /// `premium_rate`, `shared_cost`, `voip`, `personal_number`, `pager`, `uan`, …; null when
    /// not valid.
    #[serde(rename = "type")]
    #[schema(value_type = Option<String>)]
    pub kind: Option<NumberType>,
    /// Sends to it are refused (403 `premium_rate_blocked`).
    pub premium_rate: bool,
    /// Why the number is not valid, in plain words; null when valid.
    pub reason: Option<String>,
}
envelope_of!(NumberLookupEnvelope, NumberLookupOut, "A number lookup.");

/// Reads a number as typed: E.164, international, or national in `country` (default: the
/// workspace's default country).
#[utoipa::path(
    get,
    path = "/v1/numbers/lookup",
    tag = "numbers",
    params(
        ("number" = String, Query, description = "The number as typed, up to 64 characters"),
        ("country" = Option<String>, Query, description = "ISO 3166-1 alpha-2 to read a national number in; default: the workspace's default country"),
    ),
    responses((status = 200, description = "What the number is (also for text that is no number).", body = NumberLookupEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn lookup(state: web::Data<AppState>, caller: Caller, query: QueryParams) -> Answer {
    let input = required(query.get("number").cloned(), "number")?;
    if input.chars().count() > MAX_LOOKUP_CHARS {
        return Err(ApiError::validation(
            "number",
            "number must be at most 64 characters",
        ));
    }
    let country = match query.get("country").map(String::as_str) {
        Some(code) if !code.is_empty() => Some(
            Country::parse(code).map_err(|err| ApiError::validation("country", err.to_string()))?,
        ),
        _ => {
            let workspace = workspaces::get(&state.db, caller.workspace_id)
                .await
                .map_err(missing("workspace"))?;
            super::workspace::default_country(&state, &workspace)
        }
    };
    let out = match number_lookup::lookup(&input, country) {
        Lookup::Valid {
            e164,
            country,
            kind,
        } => NumberLookupOut {
            input,
            valid: true,
            e164: Some(e164),
            country: country.map(str::to_string),
            premium_rate: kind == NumberType::PremiumRate,
            kind: Some(kind),
            reason: None,
        },
        Lookup::Invalid { country, reason } => NumberLookupOut {
            input,
            valid: false,
            e164: None,
            country: country.map(str::to_string),
            kind: None,
            premium_rate: false,
            reason: Some(reason.to_string()),
        },
    };
    Ok(success(StatusCode::OK, "number lookup", out))
}
