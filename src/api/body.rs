//! Request bodies: `JsonBody` and `OptionalJsonBody` read JSON with the envelope's errors,
//! bounded in size (`MAX_BODY_BYTES`) and in time (`server.body_timeout`); `present` tells a
//! PATCH body's absent field from its explicit null.

use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use futures_util::future::LocalBoxFuture;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::AppState;
use crate::error::ApiError;

/// `deserialize_with` of a PATCH body's nullable field: absent is None (left as it is), an
/// explicit null is Some(None) (cleared).
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Largest accepted request body (docs/api.md, Errors).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Whole-body deadline when no settings are at hand (`server.body_timeout`'s default).
const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// A JSON body parsed with the envelope's errors: 413 over 2 MiB, 400 invalid_json for text
/// that is not JSON or a field of the wrong type (naming the field).
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest for JsonBody<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<JsonBody<T>, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload);
        Box::pin(async move { parse_json(&body.await?).map(JsonBody) })
    }
}

/// A JSON body that may be left out: `None` for an empty (or blank) body, otherwise read and
/// refused exactly like [`JsonBody`].
pub struct OptionalJsonBody<T>(pub Option<T>);

impl<T: DeserializeOwned + 'static> FromRequest for OptionalJsonBody<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<OptionalJsonBody<T>, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload);
        Box::pin(async move {
            let body = body.await?;
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(OptionalJsonBody(None));
            }
            parse_json(&body).map(|value| OptionalJsonBody(Some(value)))
        })
    }
}

/// Reads a request body for JSON parsing with the envelope's errors: 413 over 2 MiB (declared
/// or read), and a multipart body refused unread.
pub(crate) fn read_body(
    req: &HttpRequest,
    payload: &mut Payload,
) -> LocalBoxFuture<'static, Result<web::BytesMut, ApiError>> {
    read_body_up_to(req, payload, MAX_BODY_BYTES)
}

/// [`read_body`] with a smaller cap, `max_bytes` (`PayloadTooLarge` past it, declared or
/// read), under the same `server.body_timeout`: for routes whose bodies are small by nature.
pub(crate) fn read_body_up_to(
    req: &HttpRequest,
    payload: &mut Payload,
    max_bytes: usize,
) -> LocalBoxFuture<'static, Result<web::BytesMut, ApiError>> {
    // docs/api.md, Errors: `invalid_json` is for a body that is not JSON, whatever it was labelled.
    // So a JSON body is read as JSON under any content type (curl's `-d` sends a form type),
    // and only a multipart body, which cannot be JSON, is refused before reading it.
    let content_type_ok = !matches!(
        req.mime_type(),
        Ok(Some(mime)) if mime.type_() == "multipart"
    );
    let declared_too_large = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|len| len > max_bytes);
    // The default applies to an app built without the state (none in the server).
    let body_timeout = req
        .app_data::<web::Data<AppState>>()
        .map_or(DEFAULT_BODY_TIMEOUT, |state| {
            state.settings.server.body_timeout
        });
    let mut payload = payload.take();
    Box::pin(async move {
        if declared_too_large {
            return Err(ApiError::PayloadTooLarge);
        }
        if !content_type_ok {
            return Err(ApiError::InvalidJson {
                message: "the body must be JSON, not multipart".into(),
                field: None,
            });
        }
        let read = async {
            let mut body = web::BytesMut::new();
            use futures_util::StreamExt;
            while let Some(chunk) = payload.next().await {
                let chunk = chunk.map_err(|_| ApiError::InvalidJson {
                    message: "the request body could not be read".into(),
                    field: None,
                })?;
                if body.len() + chunk.len() > max_bytes {
                    return Err(ApiError::PayloadTooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        // A whole-body deadline (docs/api.md "Errors"): a client trickling its body holds a
        // connection and a buffer for no longer than this. actix-http's own request timeout
        // covers the head only.
        let outcome = actix_web::rt::time::timeout(body_timeout, read).await;
        match outcome {
            Ok(body) => body,
            Err(_) => {
                hold_until_closed(payload);
                Err(ApiError::RequestTimeout {
                    secs: body_timeout.as_secs(),
                })
            }
        }
    })
}

/// Longest time an abandoned body is held (see [`hold_until_closed`]), in seconds.
const ABANDONED_BODY_HOLD: Duration = Duration::from_secs(5);

/// Keeps an unfinished body alive, unread, until its connection is gone. actix-http closes a
/// connection whose answer leaves a body unfinished, unless the body was dropped and is
/// chunked: then it reads the rest first, for as long as the client trickles it.
fn hold_until_closed(mut payload: Payload) {
    actix_web::rt::spawn(async move {
        use futures_util::StreamExt;
        let _ = actix_web::rt::time::timeout(ABANDONED_BODY_HOLD, async {
            while let Some(Ok(_)) = payload.next().await {}
        })
        .await;
    });
}

/// Parses JSON, naming the offending field on a type error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let deserializer = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        // A syntax error has no field (serde_path_to_error reports its position as `?`).
        let syntax = inner.is_syntax() || inner.is_eof();
        let known = !(syntax || path == "." || path.is_empty() || path.contains('?'));
        let field = known.then_some(path);
        let message = if syntax {
            format!("the request body is not valid JSON: {inner}")
        } else {
            match &field {
                Some(field) => format!("{field}: {inner}"),
                None => format!("the request body has the wrong shape: {inner}"),
            }
        };
        ApiError::InvalidJson { message, field }
    })?;
    // Only whitespace may follow the value: `{…} xx` is not a JSON text.
    deserializer.end().map_err(|err| ApiError::InvalidJson {
        message: format!("the request body is not valid JSON: {err}"),
        field: None,
    })?;
    Ok(value)
}
