//! The field parsers every `/v1` resource shares: a number, a text, a phone's id or a
//! timestamp taken from a request field, each failure naming the field (docs/api.md, Errors:
//! `data.field`). They turn request text into domain types and know no resource.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::phone_number::PhoneNumber;
use crate::domain::sms::{ContentError, SmsText};
use crate::error::ApiError;

/// Parses an E.164 number field; 422 `invalid_phone_number` naming `field` otherwise.
pub fn parse_number(text: &str, field: &str) -> Result<PhoneNumber, ApiError> {
    PhoneNumber::parse(text).map_err(|_| ApiError::InvalidPhoneNumber {
        field: field.to_string(),
    })
}

/// Parses message content: 422 `validation_failed` when empty, `content_too_long` beyond
/// 10 segments, naming `field`.
pub fn parse_content(text: String, field: &str) -> Result<SmsText, ApiError> {
    SmsText::parse(text).map_err(|err| match err {
        ContentError::Empty => ApiError::validation(field, format!("{field} must not be empty")),
        ContentError::TooLong { segments, encoding } => ApiError::ContentTooLong {
            field: field.to_string(),
            segments,
            encoding: encoding.as_str(),
        },
    })
}

/// Parses the optional `device_id` of a send: a UUID, or 422 naming `device_id`.
pub fn parse_device_id(text: Option<String>) -> Result<Option<Uuid>, ApiError> {
    text.map(|t| {
        Uuid::parse_str(&t)
            .map_err(|_| ApiError::validation("device_id", "device_id must be a UUID"))
    })
    .transpose()
}

/// Parses an RFC 3339 timestamp with an offset, as UTC; 422 naming `field` otherwise.
pub fn parse_timestamp(text: &str, field: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::validation(
                field,
                format!("{field} must be an ISO 8601 timestamp with an offset"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field a validation error names, if it names one.
    fn field_of(err: &ApiError) -> Option<&str> {
        match err {
            ApiError::InvalidPhoneNumber { field }
            | ApiError::Validation { field, .. }
            | ApiError::ContentTooLong { field, .. } => Some(field),
            _ => None,
        }
    }

    #[test]
    fn a_number_parses_or_names_its_field() {
        let parsed = parse_number("+14155550123", "to_number").map(PhoneNumber::into_string);
        assert_eq!(parsed.ok().as_deref(), Some("+14155550123"));
        let err = parse_number("12", "to_numbers[3]").err();
        assert!(matches!(err, Some(ApiError::InvalidPhoneNumber { .. })));
        assert_eq!(err.as_ref().and_then(field_of), Some("to_numbers[3]"));
    }

    #[test]
    fn content_is_refused_empty_or_beyond_ten_segments() {
        assert!(parse_content("hello".into(), "content").is_ok());
        let empty = parse_content(String::new(), "reply").err();
        assert!(matches!(empty, Some(ApiError::Validation { .. })));
        assert_eq!(empty.as_ref().and_then(field_of), Some("reply"));
        let long = parse_content("a".repeat(160 * 11), "content").err();
        assert!(matches!(
            long,
            Some(ApiError::ContentTooLong {
                encoding: "GSM-7",
                ..
            })
        ));
    }

    #[test]
    fn a_device_id_is_a_uuid_when_given() {
        assert!(matches!(parse_device_id(None), Ok(None)));
        let id = Uuid::new_v4();
        assert_eq!(parse_device_id(Some(id.to_string())).ok(), Some(Some(id)));
        let err = parse_device_id(Some("phone-1".into())).err();
        assert_eq!(err.as_ref().and_then(field_of), Some("device_id"));
    }

    #[test]
    fn a_timestamp_needs_its_offset() {
        let utc = parse_timestamp("2030-01-01T03:00:00+03:00", "scheduled_for");
        assert_eq!(utc.ok().map(|t| t.timestamp()), Some(1_893_456_000));
        let err = parse_timestamp("2030-01-01T00:00:00", "scheduled_for").err();
        assert_eq!(err.as_ref().and_then(field_of), Some("scheduled_for"));
    }
}

/// Who a send names as its sender, before parsing (docs/api.md, Messages and "Pools"):
/// exactly one of `from_number` and `from_pool`.
#[derive(Debug)]
pub enum FromText {
    Number(String),
    Pool(String),
}

/// Longest `from_pool`, in characters (a pool name is at most 120).
const MAX_POOL_KEY_CHARS: usize = 120;

/// Exactly one of `from_number` and `from_pool`: both or neither is 422 `validation_failed`
/// (neither names `from_number`, both `from_pool`).
pub fn from_field(
    from_number: Option<String>,
    from_pool: Option<String>,
) -> Result<FromText, ApiError> {
    match (from_number, from_pool) {
        (Some(number), None) => Ok(FromText::Number(number)),
        (None, Some(pool)) => Ok(FromText::Pool(pool)),
        (None, None) => Err(ApiError::validation(
            "from_number",
            "from_number (or from_pool) is required",
        )),
        (Some(_), Some(_)) => Err(ApiError::validation(
            "from_pool",
            "give from_number or from_pool, not both",
        )),
    }
}

/// The sender a send names: a number (`from_number`) or a pool by id or name (`from_pool`,
/// 1–120 characters, which takes no `device_id`: the pool chooses the line).
pub fn parse_from(
    from: FromText,
    device_id: Option<Uuid>,
) -> Result<crate::send::SendFrom, ApiError> {
    use crate::send::{PoolKey, SendFrom};
    match from {
        FromText::Number(text) => Ok(SendFrom::Number(parse_number(&text, "from_number")?)),
        FromText::Pool(text) => {
            if text.trim().is_empty() || text.chars().count() > MAX_POOL_KEY_CHARS {
                return Err(ApiError::validation(
                    "from_pool",
                    "from_pool must be a pool id or name (1 to 120 characters)",
                ));
            }
            if device_id.is_some() {
                return Err(ApiError::validation(
                    "device_id",
                    "device_id cannot be given with from_pool: the pool chooses the line",
                ));
            }
            Ok(SendFrom::Pool(PoolKey::parse(text)))
        }
    }
}
