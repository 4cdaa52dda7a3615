//! The API's side of the send use case (`crate::send`): who sends for a caller, and the error
//! docs/api.md, Messages, names for a refused send. Every `/v1` operation that sends (messages,
//! AI reply drafts) and the SMSGate client API go through here, so a refusal reads the same
//! wherever it happens.

use super::Caller;
use crate::clock::format_ms;
use crate::domain::quota::CountQuota;
use crate::error::ApiError;
use crate::send::{SendError, Sender};

/// Who sends, for the send use case: the caller's scope and its workspace's age (the use
/// case resolves the new-workspace limit from it).
pub fn sender(caller: &Caller) -> Sender {
    Sender {
        scope: caller.scope(),
        workspace_created_at: Some(caller.workspace_created_at),
    }
}

/// The error docs/api.md, Messages, names for a refused send; `recipient_field` names the
/// request field of the `index`-th recipient given.
pub fn send_error(err: SendError, recipient_field: impl Fn(usize) -> String) -> ApiError {
    match err {
        SendError::PremiumRate { index } => ApiError::PremiumRateBlocked {
            field: recipient_field(index),
        },
        SendError::UnknownDevice => {
            ApiError::validation("device_id", "device_id is not one of your phones")
        }
        SendError::NumberMismatch => ApiError::validation(
            "device_id",
            "device_id belongs to a phone with another number than from_number",
        ),
        SendError::NoDevice { number, pinned } => ApiError::NoDeviceAvailable {
            field: if pinned { "device_id" } else { "from_number" },
            number: number.into_string(),
        },
        SendError::UnknownPool => ApiError::validation(
            "from_pool",
            "from_pool must be the id or name of a pool of this workspace and mode",
        ),
        SendError::NoPoolLine(pool) => ApiError::NoDeviceAvailable {
            field: "from_pool",
            number: format!("a line of pool {pool}"),
        },
        SendError::OptedOut { index } => ApiError::RecipientOptedOut {
            field: recipient_field(index),
        },
        SendError::AiRepliesOff => ApiError::AiRepliesOff {
            field: recipient_field(0),
        },
        SendError::Duplicate(id) => ApiError::DuplicateRequest {
            id: id.as_uuid(),
            what: "message",
        },
        SendError::LimitReached {
            limit,
            window_ends_at,
        } => ApiError::NewAccountLimit {
            limit,
            window_ends_at: format_ms(window_ends_at),
        },
        SendError::QuotaExceeded {
            quota,
            resets_at,
            retry_after_secs,
        } => quota_exceeded(quota, resets_at, retry_after_secs),
        SendError::DraftNotPending(Some(status)) => ApiError::InvalidState {
            message: format!("only a pending draft can be sent; this one is {status}"),
            status: status.as_str().to_string(),
        },
        SendError::DraftNotPending(None) => ApiError::NotFound("draft"),
        SendError::Store(err) => err.into(),
        unavailable @ SendError::Unavailable(_) => ApiError::internal(unavailable),
    }
}

/// The error of a message quota: a daily one (429, until `resets_at`) or a count (422).
fn quota_exceeded(quota: CountQuota, resets_at: Option<i64>, retry_after_secs: u64) -> ApiError {
    match resets_at {
        Some(at) => ApiError::DailyQuotaExceeded {
            quota: quota.quota,
            limit: quota.limit,
            resets_at: format_ms(at),
            retry_after_secs,
        },
        None => ApiError::QuotaExceeded {
            quota: quota.quota,
            limit: quota.limit,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::phone_number::PhoneNumber;
    use crate::domain::quota::Quota;
    use crate::error::ErrorCode;

    fn bulk_field(index: usize) -> String {
        format!("to_numbers[{index}]")
    }

    #[test]
    fn a_refused_recipient_is_named_by_its_index() {
        let err = send_error(SendError::OptedOut { index: 2 }, bulk_field);
        assert!(matches!(
            err,
            ApiError::RecipientOptedOut { ref field } if field == "to_numbers[2]"
        ));
        let err = send_error(SendError::PremiumRate { index: 0 }, bulk_field);
        assert_eq!(err.error_code(), ErrorCode::PremiumRateBlocked);
    }

    #[test]
    fn no_phone_names_the_field_that_chose_it() {
        let no_device = |pinned| SendError::NoDevice {
            number: PhoneNumber::parse("+14155550100").unwrap(),
            pinned,
        };
        for (pinned, named) in [(true, "device_id"), (false, "from_number")] {
            let err = send_error(no_device(pinned), bulk_field);
            assert!(matches!(
                err,
                ApiError::NoDeviceAvailable { field, ref number }
                    if field == named && number == "+14155550100"
            ));
        }
    }

    #[test]
    fn a_message_quota_is_daily_when_it_resets() {
        let quota = CountQuota {
            quota: Quota::TestMessagesPerDay,
            limit: 10,
        };
        let daily = SendError::QuotaExceeded {
            quota,
            resets_at: Some(0),
            retry_after_secs: 60,
        };
        assert_eq!(
            send_error(daily, bulk_field).error_code(),
            ErrorCode::DailyQuotaExceeded
        );
        let count = SendError::QuotaExceeded {
            quota,
            resets_at: None,
            retry_after_secs: 0,
        };
        assert_eq!(
            send_error(count, bulk_field).error_code(),
            ErrorCode::QuotaExceeded
        );
    }
}
