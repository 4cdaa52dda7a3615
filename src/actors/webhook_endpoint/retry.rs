//! What an attempt's answer leads to, decided without I/O or a clock read: the delivery's
//! next state and the time of its next attempt (docs/api.md, Webhooks, "Retries"), and the
//! `outcome` label of `smsgw_webhook_attempts_total`.

use std::time::Duration;

use crate::outbound::target::AttemptError;
use crate::store::webhooks::DeliveryState;
use crate::telemetry::WebhookOutcome;

/// What follows an attempt: the delivery's state and, while pending, when it is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    pub state: DeliveryState,
    pub next_attempt_at: Option<i64>,
}

/// Decides what follows attempt number `attempt_no` (1-based) answered with `status_code` /
/// `error` at `now_ms`: a 2xx succeeds; a 5xx or a retryable transport error is tried again
/// after the schedule's delay for that attempt, or fails when the schedule is spent; anything
/// else fails at once.
pub fn decide(
    status_code: Option<u16>,
    error: Option<AttemptError>,
    attempt_no: u32,
    schedule: &[Duration],
    now_ms: i64,
) -> Next {
    let retryable = match (status_code, error) {
        (Some(code), None) if (200..300).contains(&code) => {
            return Next {
                state: DeliveryState::Succeeded,
                next_attempt_at: None,
            };
        }
        (Some(code), _) if code >= 500 => true,
        (_, Some(error)) => error.is_retryable(),
        _ => false,
    };
    let delay = retryable
        .then(|| schedule.get(usize::try_from(attempt_no.saturating_sub(1)).unwrap_or(usize::MAX)))
        .flatten();
    match delay {
        Some(delay) => Next {
            state: DeliveryState::Pending,
            next_attempt_at: Some(
                now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)),
            ),
        },
        None => Next {
            state: DeliveryState::Failed,
            next_attempt_at: None,
        },
    }
}

/// The `outcome` label of an attempt.
pub fn metric_outcome(status_code: Option<u16>, error: Option<AttemptError>) -> WebhookOutcome {
    match (status_code, error) {
        (Some(code), _) if code >= 500 => WebhookOutcome::ServerError,
        (Some(code), None) if (200..300).contains(&code) => WebhookOutcome::Success,
        (Some(_), _) => WebhookOutcome::Rejected,
        (None, Some(AttemptError::Timeout)) => WebhookOutcome::Timeout,
        (None, Some(AttemptError::BlockedAddress | AttemptError::InvalidUrl)) => {
            WebhookOutcome::Blocked
        }
        (None, Some(AttemptError::MessageDeleted)) => WebhookOutcome::MessageDeleted,
        (None, _) => WebhookOutcome::ConnectionError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> Vec<Duration> {
        vec![Duration::from_secs(60), Duration::from_secs(300)]
    }

    fn pending_at(at: i64) -> Next {
        Next {
            state: DeliveryState::Pending,
            next_attempt_at: Some(at),
        }
    }

    const FAILED: Next = Next {
        state: DeliveryState::Failed,
        next_attempt_at: None,
    };

    #[test]
    fn a_2xx_succeeds_whatever_the_attempt() {
        for code in [200, 204, 299] {
            let next = decide(Some(code), None, 9, &schedule(), 1_000);
            assert_eq!(next.state, DeliveryState::Succeeded);
            assert_eq!(next.next_attempt_at, None);
        }
    }

    #[test]
    fn a_5xx_or_a_transport_error_waits_the_schedule_then_fails() {
        let s = schedule();
        let e5 = Some(AttemptError::HttpStatus);
        assert_eq!(decide(Some(503), e5, 1, &s, 1_000), pending_at(61_000));
        assert_eq!(decide(Some(500), e5, 2, &s, 1_000), pending_at(301_000));
        assert_eq!(decide(Some(500), e5, 3, &s, 1_000), FAILED);
        for error in [
            AttemptError::Dns,
            AttemptError::Connect,
            AttemptError::Tls,
            AttemptError::Timeout,
        ] {
            assert_eq!(decide(None, Some(error), 1, &s, 0), pending_at(60_000));
            assert_eq!(decide(None, Some(error), 3, &s, 0), FAILED);
        }
    }

    #[test]
    fn a_4xx_a_redirect_or_a_blocked_target_fails_at_once() {
        let s = schedule();
        assert_eq!(
            decide(Some(404), Some(AttemptError::HttpStatus), 1, &s, 0),
            FAILED
        );
        assert_eq!(
            decide(Some(302), Some(AttemptError::Redirect), 1, &s, 0),
            FAILED
        );
        for error in [
            AttemptError::BlockedAddress,
            AttemptError::InvalidUrl,
            AttemptError::MessageDeleted,
        ] {
            assert_eq!(decide(None, Some(error), 1, &s, 0), FAILED);
        }
    }

    #[test]
    fn an_empty_schedule_never_retries() {
        assert_eq!(decide(Some(500), None, 1, &[], 0), FAILED);
    }

    #[test]
    fn outcome_labels_follow_the_answer() {
        assert_eq!(metric_outcome(Some(200), None), WebhookOutcome::Success);
        assert_eq!(
            metric_outcome(Some(502), Some(AttemptError::HttpStatus)),
            WebhookOutcome::ServerError
        );
        assert_eq!(
            metric_outcome(Some(410), Some(AttemptError::HttpStatus)),
            WebhookOutcome::Rejected
        );
        assert_eq!(
            metric_outcome(None, Some(AttemptError::Timeout)),
            WebhookOutcome::Timeout
        );
        assert_eq!(
            metric_outcome(None, Some(AttemptError::InvalidUrl)),
            WebhookOutcome::Blocked
        );
        assert_eq!(
            metric_outcome(None, Some(AttemptError::MessageDeleted)),
            WebhookOutcome::MessageDeleted
        );
        assert_eq!(
            metric_outcome(None, Some(AttemptError::Dns)),
            WebhookOutcome::ConnectionError
        );
    }
}
