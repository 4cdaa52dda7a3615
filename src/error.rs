//! The API's one error type: every failure a client can see, rendered as the envelope with a
//! stable `error_code` (docs/api.md, Errors).

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde_json::{Value, json};

use crate::domain::quota::Quota;
use crate::store::StoreError;

/// The `error_code` of every error answer, written once: the snake_case name of each variant is
/// its code, derived for `as_str`, serde and the OpenAPI schema alike, and docs/api.md "Errors"
/// is checked against [`ErrorCode::iter`] by a test below. Each code has exactly one HTTP status.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    utoipa::ToSchema,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ErrorCode {
    InvalidJson,
    BadRequest,
    MissingApiKey,
    InvalidApiKey,
    PremiumRateBlocked,
    /// The recipient texted STOP (or was opted out by hand): docs/api.md "Messages".
    RecipientOptedOut,
    /// The recipient turned AI replies off (STOP AI, or by hand): docs/api.md "AI reply drafts".
    AiRepliesOff,
    TestModeOnly,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    DuplicateRequest,
    InvalidState,
    AlreadyExists,
    PayloadTooLarge,
    InvalidPhoneNumber,
    ContentTooLong,
    ValidationFailed,
    QuotaExceeded,
    NewAccountLimit,
    DailyQuotaExceeded,
    RateLimited,
    NoDeviceAvailable,
    InternalError,
    /// `GET /ready` only: the database does not answer (docs/api.md "Operations").
    NotReady,
    /// The database cannot be reached for the moment: nothing was changed; retry.
    DatabaseUnavailable,
    /// The database's storage is full (`database.max_size`, or the disk): nothing was changed.
    StorageFull,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub fn iter() -> impl Iterator<Item = ErrorCode> {
        <ErrorCode as strum::IntoEnumIterator>::iter()
    }

    /// The code as it appears in `error_code`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The code an error answer with this HTTP status carries when no handler chose one (an
    /// extractor or protocol error inside actix): docs/api.md "Errors".
    pub fn for_status(status: StatusCode) -> ErrorCode {
        match status.as_u16() {
            401 => ErrorCode::InvalidApiKey,
            404 => ErrorCode::NotFound,
            405 => ErrorCode::MethodNotAllowed,
            408 => ErrorCode::RequestTimeout,
            413 => ErrorCode::PayloadTooLarge,
            415 => ErrorCode::InvalidJson,
            s if s >= 500 => ErrorCode::InternalError,
            _ => ErrorCode::BadRequest,
        }
    }

    /// The HTTP status every answer with this code has.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidJson | ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::MissingApiKey | ErrorCode::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ErrorCode::PremiumRateBlocked
            | ErrorCode::RecipientOptedOut
            | ErrorCode::AiRepliesOff
            | ErrorCode::TestModeOnly => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorCode::DuplicateRequest | ErrorCode::InvalidState | ErrorCode::AlreadyExists => {
                StatusCode::CONFLICT
            }
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::InvalidPhoneNumber
            | ErrorCode::ContentTooLong
            | ErrorCode::ValidationFailed
            | ErrorCode::QuotaExceeded => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::NewAccountLimit | ErrorCode::DailyQuotaExceeded | ErrorCode::RateLimited => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ErrorCode::NoDeviceAvailable
            | ErrorCode::NotReady
            | ErrorCode::DatabaseUnavailable
            | ErrorCode::StorageFull => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error answered to an API client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    InvalidJson {
        message: String,
        field: Option<String>,
    },
    #[error("the x-api-key header is missing")]
    MissingApiKey,
    #[error("the API key is not valid")]
    InvalidApiKey,
    #[error("{field} is a premium-rate number; sending to it is blocked")]
    PremiumRateBlocked { field: String },
    #[error("{field} has opted out (STOP); nothing may be sent to it until it texts START")]
    RecipientOptedOut { field: String },
    #[error("{field} has turned AI replies off (STOP AI); a draft cannot be sent to it")]
    AiRepliesOff { field: String },
    #[error("this operation is only available with a test key")]
    TestModeOnly,
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("request_id was already used; the original {what} is returned in data.id")]
    DuplicateRequest { id: uuid::Uuid, what: &'static str },
    /// A create with this request_id is still running (docs/api.md, "Idempotent creates").
    #[error("a request with this request_id is still being processed; repeat it to get its result")]
    RequestInProgress,
    #[error("{message}")]
    InvalidState { message: String, status: String },
    #[error("{what} already exists")]
    AlreadyExists { what: &'static str, id: uuid::Uuid },
    #[error("the request body is larger than 2 MiB")]
    PayloadTooLarge,
    /// The body did not arrive within `server.body_timeout`; the connection is closed.
    #[error("the request body did not arrive within {secs} s")]
    RequestTimeout { secs: u64 },
    #[error("{field} is not a valid E.164 phone number")]
    InvalidPhoneNumber { field: String },
    #[error("content is {segments} segments of {encoding}; the limit is 10")]
    ContentTooLong {
        field: String,
        segments: u32,
        encoding: &'static str,
    },
    #[error("{message}")]
    Validation { field: String, message: String },
    /// A stored-count quota is full (docs/api.md, "Quotas").
    #[error("the {} quota of this workspace ({limit}) is reached", quota.as_str())]
    QuotaExceeded { quota: Quota, limit: u32 },
    /// A daily quota is used up until `resets_at` (docs/api.md, "Quotas").
    #[error("the {} quota of this workspace ({limit}) is used up until {resets_at}", quota.as_str())]
    DailyQuotaExceeded {
        quota: Quota,
        limit: u32,
        resets_at: String,
        retry_after_secs: u64,
    },
    #[error("a new workspace may send {limit} messages in its first 24 hours")]
    NewAccountLimit { limit: u32, window_ends_at: String },
    #[error("too many requests; retry after {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    #[error("no online phone is paired with {number}")]
    NoDeviceAvailable { field: &'static str, number: String },
    #[error("the HTTP method is not allowed on this route")]
    MethodNotAllowed,
    /// A request the HTTP layer cannot serve as sent (e.g. a WebSocket route without upgrade).
    #[error("{0}")]
    BadRequest(String),
    /// `GET /ready`: the database did not answer in time.
    #[error("the database does not answer")]
    NotReady,
    /// `GET /ready` of a cluster node whose leases are not renewed in time (or that is
    /// stopping): it must not take traffic.
    #[error("this node's leases are not renewed")]
    LeasesNotRenewed,
    /// The database cannot be reached: nothing was changed (docs/api.md, "Errors").
    #[error("the database is unavailable for the moment; nothing was changed, retry shortly")]
    DatabaseUnavailable,
    /// The database's storage is full: nothing was changed (docs/api.md, "Errors").
    #[error("the server's storage is full; nothing was changed, retry once space is freed")]
    StorageFull,
    /// Anything the client cannot fix: the body says only "internal error"; the cause (and its
    /// chain) is logged once, when the answer is rendered.
    #[error("internal error")]
    Internal(#[source] BoxError),
}

/// The `Retry-After` of a `database_unavailable` answer: a short outage is expected to pass.
const DATABASE_RETRY_AFTER_SECS: u64 = 5;

/// The cause an [`ApiError::Internal`] keeps: any error, or a plain message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl ApiError {
    /// A validation error naming the offending field.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::Validation {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A 500 keeping its cause: an error (its source chain is kept too) or a message (`&str`,
    /// `String`) saying what went wrong.
    pub fn internal(cause: impl Into<BoxError>) -> ApiError {
        ApiError::Internal(cause.into())
    }

    /// A 500 whose cause is `cause` while doing `what` ("signing key not sealed"): the log
    /// reads `what: cause: …`.
    pub fn internal_context(what: &'static str, cause: impl Into<BoxError>) -> ApiError {
        ApiError::internal(Context {
            what,
            cause: cause.into(),
        })
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// The error code (docs/api.md, Errors) this error is answered with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ApiError::InvalidJson { .. } => ErrorCode::InvalidJson,
            ApiError::MissingApiKey => ErrorCode::MissingApiKey,
            ApiError::InvalidApiKey => ErrorCode::InvalidApiKey,
            ApiError::PremiumRateBlocked { .. } => ErrorCode::PremiumRateBlocked,
            ApiError::RecipientOptedOut { .. } => ErrorCode::RecipientOptedOut,
            ApiError::AiRepliesOff { .. } => ErrorCode::AiRepliesOff,
            ApiError::TestModeOnly => ErrorCode::TestModeOnly,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::DuplicateRequest { .. } | ApiError::RequestInProgress => {
                ErrorCode::DuplicateRequest
            }
            ApiError::InvalidState { .. } => ErrorCode::InvalidState,
            ApiError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            ApiError::PayloadTooLarge => ErrorCode::PayloadTooLarge,
            ApiError::RequestTimeout { .. } => ErrorCode::RequestTimeout,
            ApiError::InvalidPhoneNumber { .. } => ErrorCode::InvalidPhoneNumber,
            ApiError::ContentTooLong { .. } => ErrorCode::ContentTooLong,
            ApiError::Validation { .. } => ErrorCode::ValidationFailed,
            ApiError::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            ApiError::DailyQuotaExceeded { .. } => ErrorCode::DailyQuotaExceeded,
            ApiError::NewAccountLimit { .. } => ErrorCode::NewAccountLimit,
            ApiError::RateLimited { .. } => ErrorCode::RateLimited,
            ApiError::NoDeviceAvailable { .. } => ErrorCode::NoDeviceAvailable,
            ApiError::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            ApiError::BadRequest(_) => ErrorCode::BadRequest,
            ApiError::NotReady | ApiError::LeasesNotRenewed => ErrorCode::NotReady,
            ApiError::DatabaseUnavailable => ErrorCode::DatabaseUnavailable,
            ApiError::StorageFull => ErrorCode::StorageFull,
            ApiError::Internal(_) => ErrorCode::InternalError,
        }
    }

    fn data(&self) -> Value {
        match self {
            ApiError::InvalidJson {
                field: Some(field), ..
            } => json!({ "field": field }),
            ApiError::PremiumRateBlocked { field }
            | ApiError::RecipientOptedOut { field }
            | ApiError::AiRepliesOff { field }
            | ApiError::InvalidPhoneNumber { field }
            | ApiError::Validation { field, .. } => json!({ "field": field }),
            ApiError::DuplicateRequest { id, .. } => json!({ "id": id }),
            ApiError::InvalidState { status, .. } => json!({ "status": status }),
            ApiError::AlreadyExists { id, .. } => json!({ "id": id }),
            ApiError::ContentTooLong {
                field,
                segments,
                encoding,
            } => json!({ "field": field, "segments": segments, "encoding": encoding }),
            ApiError::QuotaExceeded { quota, limit } => {
                json!({ "quota": quota.as_str(), "limit": limit })
            }
            ApiError::DailyQuotaExceeded {
                quota,
                limit,
                resets_at,
                ..
            } => json!({ "quota": quota.as_str(), "limit": limit, "resets_at": resets_at }),
            ApiError::NewAccountLimit {
                limit,
                window_ends_at,
            } => json!({ "limit": limit, "window_ends_at": window_ends_at }),
            ApiError::NoDeviceAvailable { field, .. } => json!({ "field": field }),
            ApiError::NotReady => json!({ "database": "unavailable" }),
            ApiError::LeasesNotRenewed => json!({ "database": "ok", "leases": "not_renewed" }),
            _ => json!({}),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound => ApiError::NotFound("resource"),
            StoreError::Unavailable(cause) => {
                tracing::warn!(%cause, "database unavailable");
                ApiError::DatabaseUnavailable
            }
            StoreError::StorageFull(cause) => {
                tracing::warn!(%cause, "database storage full");
                ApiError::StorageFull
            }
            StoreError::QuotaExceeded(quota) => ApiError::QuotaExceeded {
                quota: quota.quota,
                limit: quota.limit,
            },
            other => ApiError::internal(other),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.error_code().status()
    }

    fn error_response(&self) -> HttpResponse {
        let message = match self {
            ApiError::Internal(cause) => {
                // The cause goes to the log once, here; the body says nothing internal.
                tracing::error!(error = %cause_chain(cause.as_ref()), "internal error");
                self.to_string()
            }
            other => other.to_string(),
        };
        let mut response = HttpResponse::build(self.status_code());
        if let ApiError::RateLimited { retry_after_secs }
        | ApiError::DailyQuotaExceeded {
            retry_after_secs, ..
        } = self
        {
            response.insert_header((header::RETRY_AFTER, HeaderValue::from(*retry_after_secs)));
        }
        if let ApiError::DatabaseUnavailable = self {
            response.insert_header((
                header::RETRY_AFTER,
                HeaderValue::from(DATABASE_RETRY_AFTER_SECS),
            ));
        }
        if let ApiError::RequestTimeout { .. } = self {
            // The rest of the body may still be on its way: the connection cannot carry
            // another request.
            response.force_close();
        }
        response.json(json!({
            "status": "error",
            "message": message,
            "data": self.data(),
            "error_code": self.code(),
        }))
    }
}

/// What was being done when `cause` happened: the outer link of an internal error's chain.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
struct Context {
    what: &'static str,
    #[source]
    cause: BoxError,
}

/// An error and its sources, outermost first, joined by `": "` (what the log shows of a 500).
pub fn cause_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // A wrapper that prints its source (`#[error(transparent)]`, "…: {0}") would repeat it.
        if !chain.ends_with(&text) {
            chain.push_str(": ");
            chain.push_str(&text);
        }
        source = cause.source();
    }
    chain
}

/// The success envelope around `data`.
pub fn success(status: StatusCode, message: &str, data: impl serde::Serialize) -> HttpResponse {
    /// The success envelope, serialized straight from the handler's data.
    #[derive(serde::Serialize)]
    struct Envelope<'a, T> {
        status: &'static str,
        message: &'a str,
        data: T,
    }
    HttpResponse::build(status).json(Envelope {
        status: "success",
        message,
        data,
    })
}

/// Last line of defence: an error response that some layer produced without the envelope
/// (an extractor or protocol error inside actix) is rewritten into it, keeping its status.
pub fn envelope_fallback<B>(
    res: actix_web::dev::ServiceResponse<B>,
) -> actix_web::Result<actix_web::middleware::ErrorHandlerResponse<B>> {
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return Ok(actix_web::middleware::ErrorHandlerResponse::Response(
            res.map_into_left_body(),
        ));
    }
    let status = res.status();
    let code = ErrorCode::for_status(status);
    let message = status
        .canonical_reason()
        .unwrap_or("request failed")
        .to_string();
    let body = HttpResponse::build(status).json(json!({
        "status": "error",
        "message": message,
        "data": {},
        "error_code": code.as_str(),
    }));
    let (req, _) = res.into_parts();
    Ok(actix_web::middleware::ErrorHandlerResponse::Response(
        actix_web::dev::ServiceResponse::new(req, body).map_into_right_body(),
    ))
}

/// Query strings that do not parse (bad percent-encoding) answer 422 with the envelope.
pub fn query_error(
    err: actix_web::error::QueryPayloadError,
    _: &actix_web::HttpRequest,
) -> actix_web::Error {
    ApiError::validation("query", format!("the query string is not valid: {err}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_once_and_serializes_as_its_name() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::iter() {
            assert!(seen.insert(code.as_str()), "{code:?} named twice");
            assert_eq!(
                serde_json::to_value(code).ok(),
                Some(Value::String(code.as_str().to_string()))
            );
        }
    }

    /// docs/api.md "Errors" lists every code with its status, and no code the enum lacks.
    #[test]
    fn the_docs_error_table_is_the_enum() {
        let docs = include_str!("../docs/api.md");
        let section = docs
            .split("\n## Errors\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap_or_default();
        let documented: Vec<(String, String)> = section
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let status = cells.get(1)?;
                status.parse::<u16>().ok()?;
                Some((status.to_string(), cells.get(2)?.to_string()))
            })
            .collect();
        assert!(!documented.is_empty(), "no error table under ## Errors");
        for code in ErrorCode::iter() {
            let rows: Vec<_> = documented
                .iter()
                .filter(|(_, c)| c == code.as_str())
                .collect();
            assert_eq!(rows.len(), 1, "{} is not documented once", code.as_str());
            assert_eq!(rows[0].0, code.status().as_u16().to_string(), "{code:?}");
        }
        for (_, documented_code) in &documented {
            assert!(
                ErrorCode::iter().any(|code| code.as_str() == documented_code),
                "docs/api.md documents {documented_code}, which ErrorCode lacks"
            );
        }
    }

    #[test]
    fn an_unhandled_status_gets_a_code_that_exists() {
        assert_eq!(
            ErrorCode::for_status(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
            ErrorCode::BadRequest
        );
        assert_eq!(
            ErrorCode::for_status(StatusCode::REQUEST_TIMEOUT),
            ErrorCode::RequestTimeout
        );
        assert_eq!(
            ErrorCode::for_status(StatusCode::BAD_GATEWAY),
            ErrorCode::InternalError
        );
    }

    /// A store failure behind a 500 keeps its whole chain for the log; the body says nothing
    /// internal.
    #[test]
    fn an_internal_error_keeps_its_cause_and_answers_nothing_of_it() {
        #[derive(Debug, thiserror::Error)]
        #[error("the pool is closed")]
        struct PoolClosed;
        #[derive(Debug, thiserror::Error)]
        #[error("reading the phone")]
        struct Reading(#[source] PoolClosed);

        let err = ApiError::internal(Reading(PoolClosed));
        assert_eq!(err.to_string(), "internal error");
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("reading the phone"));
        if let ApiError::Internal(cause) = &err {
            assert_eq!(
                cause_chain(cause.as_ref()),
                "reading the phone: the pool is closed"
            );
        }
        assert_eq!(err.status_code(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = actix_web::body::to_bytes(err.error_response().into_body());
        let body = futures_util::FutureExt::now_or_never(body).and_then(Result::ok);
        let body: Option<Value> = body.and_then(|b| serde_json::from_slice(&b).ok());
        assert_eq!(
            body,
            Some(json!({
                "status": "error",
                "message": "internal error",
                "data": {},
                "error_code": "internal_error",
            }))
        );
    }

    #[test]
    fn a_context_leads_the_chain() {
        let err = ApiError::internal_context("signing key not sealed", "bad key length");
        let Some(cause) = std::error::Error::source(&err) else {
            panic!("no cause kept");
        };
        assert_eq!(cause_chain(cause), "signing key not sealed: bad key length");
    }

    #[test]
    fn a_message_is_a_cause_too() {
        let err = ApiError::internal("the writer is gone");
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("the writer is gone"));
    }

    #[test]
    fn a_transparent_wrapper_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("disk full")]
        struct DiskFull;
        #[derive(Debug, thiserror::Error)]
        #[error(transparent)]
        struct Store(#[from] DiskFull);

        assert_eq!(cause_chain(&Store(DiskFull)), "disk full");
    }

    #[test]
    fn an_error_answers_with_its_code_status_and_envelope() {
        let err = ApiError::validation("to_number", "bad");
        assert_eq!(err.status_code(), ErrorCode::ValidationFailed.status());
        assert_eq!(err.status_code(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            ApiError::MissingApiKey.status_code(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            ApiError::RateLimited {
                retry_after_secs: 1
            }
            .code(),
            "rate_limited"
        );
    }
}
