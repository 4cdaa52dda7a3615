//! Errors of the client API in the shape SMSGate clients read: `{"message": …}` with
//! `Content-Type: application/json` exactly and the upstream statuses (docs/compat.md, Errors).

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};

use crate::error::{ApiError, BoxError, cause_chain};
use crate::store::StoreError;

/// An error answered to a client of the SMSGate-compatible API.
#[derive(Debug)]
pub struct ClientError {
    status: StatusCode,
    message: String,
    /// `Retry-After` seconds, for 429 answers.
    retry_after_secs: Option<u64>,
}

impl ClientError {
    /// An error with any status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ClientError {
        ClientError {
            status,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// 400: the request is not valid.
    pub fn bad_request(message: impl Into<String>) -> ClientError {
        ClientError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 401: no credentials, or not an API key in force.
    pub fn unauthorized(message: impl Into<String>) -> ClientError {
        ClientError::new(StatusCode::UNAUTHORIZED, message)
    }

    /// 403: refused for this recipient or workspace.
    pub fn forbidden(message: impl Into<String>) -> ClientError {
        ClientError::new(StatusCode::FORBIDDEN, message)
    }

    /// 404: unknown id or route.
    pub fn not_found(message: impl Into<String>) -> ClientError {
        ClientError::new(StatusCode::NOT_FOUND, message)
    }

    /// 409: conflicts with what is stored.
    pub fn conflict(message: impl Into<String>) -> ClientError {
        ClientError::new(StatusCode::CONFLICT, message)
    }

    /// 429 with `Retry-After`.
    pub fn too_many_requests(message: impl Into<String>, retry_after_secs: u64) -> ClientError {
        ClientError {
            retry_after_secs: Some(retry_after_secs.max(1)),
            ..ClientError::new(StatusCode::TOO_MANY_REQUESTS, message)
        }
    }

    /// 501: an upstream route smsgw does not serve.
    pub fn not_implemented(message: impl Into<String>) -> ClientError {
        ClientError::new(StatusCode::NOT_IMPLEMENTED, message)
    }

    /// 503: the server cannot take the request now.
    pub fn unavailable(message: impl Into<String>) -> ClientError {
        ClientError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 500; the cause and its chain go to the log, the body says nothing internal.
    pub fn internal(cause: impl Into<BoxError>) -> ClientError {
        let cause: BoxError = cause.into();
        tracing::error!(error = %cause_chain(cause.as_ref()), "client API: internal error");
        ClientError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
    }

    /// The message of the body.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ResponseError for ClientError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        if let Some(secs) = self.retry_after_secs {
            response.insert_header((header::RETRY_AFTER, HeaderValue::from(secs)));
        }
        response.json(serde_json::json!({ "message": self.message }))
    }
}

impl From<StoreError> for ClientError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound => ClientError::not_found("not found"),
            other => ClientError::internal(other),
        }
    }
}

/// The shared key checks answer in smsgw's terms; here they keep their status and text.
impl From<ApiError> for ClientError {
    fn from(err: ApiError) -> Self {
        match err {
            ApiError::RateLimited { retry_after_secs } => {
                ClientError::too_many_requests(err.to_string(), retry_after_secs)
            }
            ApiError::Internal(cause) => ClientError::internal(cause),
            other => ClientError::new(other.error_code().status(), other.to_string()),
        }
    }
}
