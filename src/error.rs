//! The API's one error type: every failure a client can see, rendered as the envelope with a
//! stable `error_code` (docs/api.md, Errors).

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde_json::{Value, json};

use crate::domain::quota::Quota;
use crate::store::StoreError;

/// The `error_code` of every error answer: the codes of docs/api.md, Errors, plus `method_not_allowed` and
/// `bad_request` of the HTTP layer and the opt-out refusals `recipient_opted_out` and
/// `ai_replies_off` (docs/api.md "Errors"). Each code has exactly one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
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
}

impl ErrorCode {
    /// Every code, in HTTP status order.
    pub const ALL: [ErrorCode; 24] = [
        ErrorCode::InvalidJson,
        ErrorCode::BadRequest,
        ErrorCode::MissingApiKey,
        ErrorCode::InvalidApiKey,
        ErrorCode::PremiumRateBlocked,
        ErrorCode::RecipientOptedOut,
        ErrorCode::AiRepliesOff,
        ErrorCode::TestModeOnly,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::RequestTimeout,
        ErrorCode::DuplicateRequest,
        ErrorCode::InvalidState,
        ErrorCode::AlreadyExists,
        ErrorCode::PayloadTooLarge,
        ErrorCode::InvalidPhoneNumber,
        ErrorCode::ContentTooLong,
        ErrorCode::ValidationFailed,
        ErrorCode::QuotaExceeded,
        ErrorCode::NewAccountLimit,
        ErrorCode::DailyQuotaExceeded,
        ErrorCode::RateLimited,
        ErrorCode::NoDeviceAvailable,
        ErrorCode::InternalError,
    ];

    /// The code as it appears in `error_code`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::MissingApiKey => "missing_api_key",
            ErrorCode::InvalidApiKey => "invalid_api_key",
            ErrorCode::PremiumRateBlocked => "premium_rate_blocked",
            ErrorCode::RecipientOptedOut => "recipient_opted_out",
            ErrorCode::AiRepliesOff => "ai_replies_off",
            ErrorCode::TestModeOnly => "test_mode_only",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::DuplicateRequest => "duplicate_request",
            ErrorCode::InvalidState => "invalid_state",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::InvalidPhoneNumber => "invalid_phone_number",
            ErrorCode::ContentTooLong => "content_too_long",
            ErrorCode::ValidationFailed => "validation_failed",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::NewAccountLimit => "new_account_limit",
            ErrorCode::DailyQuotaExceeded => "daily_quota_exceeded",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::NoDeviceAvailable => "no_device_available",
            ErrorCode::InternalError => "internal_error",
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
            ErrorCode::NoDeviceAvailable => StatusCode::SERVICE_UNAVAILABLE,
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
    #[error("request_id was already used; the original message is returned in data.id")]
    DuplicateRequest { id: uuid::Uuid },
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
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// A validation error naming the offending field.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::Validation {
            field: field.into(),
            message: message.into(),
        }
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
            ApiError::DuplicateRequest { .. } => ErrorCode::DuplicateRequest,
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
            ApiError::DuplicateRequest { id } => json!({ "id": id }),
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
            _ => json!({}),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound => ApiError::NotFound("resource"),
            StoreError::QuotaExceeded(quota) => ApiError::QuotaExceeded {
                quota: quota.quota,
                limit: quota.limit,
            },
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.error_code().status()
    }

    fn error_response(&self) -> HttpResponse {
        let message = match self {
            ApiError::Internal(detail) => {
                // The cause goes to the log once, here; the body says nothing internal.
                tracing::error!(error = %detail, "internal error");
                "internal error".to_string()
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
    let code = match status.as_u16() {
        400 => "bad_request",
        401 => "invalid_api_key",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        413 => "payload_too_large",
        415 => "invalid_json",
        s if s >= 500 => "internal_error",
        _ => "request_failed",
    };
    let message = status
        .canonical_reason()
        .unwrap_or("request failed")
        .to_string();
    let body = HttpResponse::build(status).json(json!({
        "status": "error",
        "message": message,
        "data": {},
        "error_code": code,
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
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{code:?} twice in ALL");
            assert_eq!(
                serde_json::to_value(code).ok(),
                Some(Value::String(code.as_str().to_string()))
            );
        }
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
