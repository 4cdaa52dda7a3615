//! Wire conventions of the client API (docs/compat.md, Conventions): timestamps out with
//! exactly three fractional digits and `Z`, timestamps in with or without an offset (none
//! means UTC), JSON replies with `Content-Type: application/json` exactly.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

/// `2026-11-25T10:00:00.250Z` for a stored millisecond value.
pub fn timestamp(ms: i64) -> String {
    crate::clock::from_ms(ms).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Reads an RFC 3339 timestamp; one without an offset (what Python's naive `datetime`
/// gives) is read as UTC. `None` for anything else.
pub fn parse_timestamp(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .map(|naive| naive.and_utc())
}

/// `text` as one URL path segment: unreserved characters as they are, every other byte
/// percent-encoded (a client message id may hold any character).
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A JSON reply (`serde_json` writes `[]` for an empty `Vec`, never `null`).
pub fn json(status: StatusCode, body: impl serde::Serialize) -> HttpResponse {
    HttpResponse::build(status).json(body)
}

/// A JSON body read with smsgw's limits (2 MiB, `server.body_timeout`) and refused as the
/// clients expect: 400 `{message}` for text that is not JSON of the expected shape, 413 for
/// a body over the limit.
pub struct ClientJson<T>(pub T);

impl<T: serde::de::DeserializeOwned + 'static> actix_web::FromRequest for ClientJson<T> {
    type Error = super::error::ClientError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(
        req: &actix_web::HttpRequest,
        payload: &mut actix_web::dev::Payload,
    ) -> Self::Future {
        let body = crate::api::read_body(req, payload);
        Box::pin(async move {
            let body = body.await?;
            let deserializer = &mut serde_json::Deserializer::from_slice(&body);
            let value: T = serde_path_to_error::deserialize(&mut *deserializer).map_err(|err| {
                let path = err.path().to_string();
                let inner = err.into_inner();
                let message = if inner.is_syntax() || inner.is_eof() || path == "." {
                    format!("the request body is not valid JSON: {inner}")
                } else {
                    format!("{path}: {inner}")
                };
                super::error::ClientError::bad_request(message)
            })?;
            deserializer.end().map_err(|err| {
                super::error::ClientError::bad_request(format!(
                    "the request body is not valid JSON: {err}"
                ))
            })?;
            Ok(ClientJson(value))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_three_fractional_digits_and_z() {
        assert_eq!(timestamp(1_764_064_800_250), "2025-11-25T10:00:00.250Z");
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(path_segment("order-1_a.b~"), "order-1_a.b~");
        assert_eq!(path_segment("a b/ü"), "a%20b%2F%C3%BC");
    }

    #[test]
    fn naive_and_offset_timestamps_are_read() {
        let utc = parse_timestamp("2030-01-01T00:00:00").map(|t| t.timestamp());
        assert_eq!(utc, Some(1_893_456_000));
        let offset = parse_timestamp("2030-01-01T03:00:00+03:00").map(|t| t.timestamp());
        assert_eq!(offset, Some(1_893_456_000));
        let fraction = parse_timestamp("2030-01-01T00:00:00.5Z").map(|t| t.timestamp_millis());
        assert_eq!(fraction, Some(1_893_456_000_500));
        assert_eq!(parse_timestamp("invalid"), None);
        assert_eq!(parse_timestamp(""), None);
    }
}
