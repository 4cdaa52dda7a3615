//! What a phone's status report on a message leads to: move it on, retry it, fail it for good,
//! ignore a stale report, or refuse a report on a message this phone was never handed
//! (`docs/api.md`, "Phone WebSocket" and "Messages").
//!
//! Pure: the Phone actor reads the message, asks [`decide`], and performs the write.

use super::status::MessageStatus;

/// A phone's report on an outbound message it was handed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusReport {
    Sent,
    Delivered,
    /// The attempt failed; `reason` is the phone's error text.
    Failed {
        reason: String,
    },
}

impl StatusReport {
    /// The status a `sent` or `delivered` report moves the message to. It is tried first as one
    /// guarded write, whose guard is the rule of [`decide`] (only a message handed to this
    /// phone, from a status the move is allowed from), so the common path reads nothing. None
    /// for a failure, which depends on the attempt count and needs the message first.
    pub fn moves_to(&self) -> Option<MessageStatus> {
        match self {
            StatusReport::Sent => Some(MessageStatus::Sent),
            StatusReport::Delivered => Some(MessageStatus::Delivered),
            StatusReport::Failed { .. } => None,
        }
    }
}

/// The message a report names, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportedMessage {
    pub status: MessageStatus,
    pub send_attempts: u32,
    /// Outbound (a phone sends it), not received.
    pub outbound: bool,
    /// Assigned to the reporting phone (always true for a test-mode phone, which has no id).
    pub on_this_phone: bool,
}

/// What a report leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportDecision {
    /// Move the message to `sent` or `delivered`.
    Advance(MessageStatus),
    /// Attempt `attempt` of `max_attempts` failed and attempts are left: queue it again.
    RetryLater {
        attempt: u32,
        max_attempts: u32,
        reason: String,
    },
    /// Attempt `attempt` of `max_attempts` failed and it was the last: the message fails.
    FailedFinal {
        attempt: u32,
        max_attempts: u32,
        reason: String,
    },
    /// A stale or backwards report (a late report of an earlier attempt, a message already
    /// settled): acknowledged, nothing changes.
    Ignore,
    /// No message by that id was handed to this phone: the report is refused.
    NotYours,
}

impl ReportDecision {
    /// The timeline detail of a failed attempt.
    pub fn failure_detail(&self) -> Option<String> {
        match self {
            ReportDecision::RetryLater {
                attempt,
                max_attempts,
                reason,
            } => Some(format!(
                "attempt {attempt} of {max_attempts} failed: {reason}; queued again"
            )),
            ReportDecision::FailedFinal {
                attempt,
                max_attempts,
                reason,
            } => Some(format!(
                "attempt {attempt} of {max_attempts} failed: {reason}"
            )),
            _ => None,
        }
    }
}

/// Decides what `report` does to `message` (None: no message by that id), given that a message
/// is sent at most `max_attempts` times.
///
/// Only an outbound message handed to this phone at least once may be reported on. A report
/// never moves a message backwards or out of a terminal status. A failure of the current
/// attempt (`sending`) queues the message again while attempts are left; a late failure of an
/// earlier attempt, arriving while the message waits for its next one (`queued`), is stale. The
/// last attempt's failure, and a carrier's failure after `sent`, fail the message.
pub fn decide(
    report: &StatusReport,
    message: Option<&ReportedMessage>,
    max_attempts: u32,
) -> ReportDecision {
    let Some(message) = message.filter(|m| m.outbound && m.on_this_phone && m.send_attempts > 0)
    else {
        return ReportDecision::NotYours;
    };
    let attempt = message.send_attempts;
    match report {
        StatusReport::Sent | StatusReport::Delivered => match report.moves_to() {
            Some(to) if to.can_follow(message.status) => ReportDecision::Advance(to),
            _ => ReportDecision::Ignore,
        },
        StatusReport::Failed { reason } => {
            let attempts_left = attempt < max_attempts;
            match message.status {
                MessageStatus::Sending if attempts_left => ReportDecision::RetryLater {
                    attempt,
                    max_attempts,
                    reason: reason.clone(),
                },
                MessageStatus::Queued if attempts_left => ReportDecision::Ignore,
                status if MessageStatus::Failed.can_follow(status) => ReportDecision::FailedFinal {
                    attempt,
                    max_attempts,
                    reason: reason.clone(),
                },
                _ => ReportDecision::Ignore,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: u32 = 3;

    fn handed(status: MessageStatus, send_attempts: u32) -> ReportedMessage {
        ReportedMessage {
            status,
            send_attempts,
            outbound: true,
            on_this_phone: true,
        }
    }

    fn failed() -> StatusReport {
        StatusReport::Failed {
            reason: "no signal".into(),
        }
    }

    #[test]
    fn only_a_message_handed_to_this_phone_may_be_reported_on() {
        let sending = handed(MessageStatus::Sending, 1);
        let strangers = [
            None,
            Some(ReportedMessage {
                on_this_phone: false,
                ..sending
            }),
            Some(ReportedMessage {
                outbound: false,
                ..sending
            }),
            Some(handed(MessageStatus::Queued, 0)),
        ];
        for report in [StatusReport::Sent, StatusReport::Delivered, failed()] {
            for message in &strangers {
                assert_eq!(
                    decide(&report, message.as_ref(), MAX),
                    ReportDecision::NotYours
                );
            }
        }
    }

    #[test]
    fn sent_and_delivered_move_forward_only() {
        let cases = [
            (StatusReport::Sent, MessageStatus::Sending, true),
            (StatusReport::Sent, MessageStatus::Queued, true),
            (StatusReport::Sent, MessageStatus::Sent, false),
            (StatusReport::Sent, MessageStatus::Delivered, false),
            (StatusReport::Delivered, MessageStatus::Sending, true),
            (StatusReport::Delivered, MessageStatus::Sent, true),
            (StatusReport::Delivered, MessageStatus::Queued, true),
            (StatusReport::Delivered, MessageStatus::Delivered, false),
            (StatusReport::Delivered, MessageStatus::Failed, false),
            (StatusReport::Sent, MessageStatus::Canceled, false),
        ];
        for (report, status, moves) in cases {
            let expected = if moves {
                ReportDecision::Advance(report.moves_to().unwrap_or(status))
            } else {
                ReportDecision::Ignore
            };
            assert_eq!(
                decide(&report, Some(&handed(status, 1)), MAX),
                expected,
                "{report:?} on {status}"
            );
        }
    }

    #[test]
    fn a_failed_attempt_is_retried_until_the_last() {
        assert_eq!(
            decide(
                &failed(),
                Some(&handed(MessageStatus::Sending, MAX - 1)),
                MAX
            ),
            ReportDecision::RetryLater {
                attempt: MAX - 1,
                max_attempts: MAX,
                reason: "no signal".into()
            }
        );
        let last = decide(&failed(), Some(&handed(MessageStatus::Sending, MAX)), MAX);
        assert_eq!(
            last,
            ReportDecision::FailedFinal {
                attempt: MAX,
                max_attempts: MAX,
                reason: "no signal".into()
            }
        );
        assert_eq!(
            last.failure_detail().as_deref(),
            Some("attempt 3 of 3 failed: no signal")
        );
    }

    #[test]
    fn a_late_failure_of_an_earlier_attempt_is_stale() {
        assert_eq!(
            decide(
                &failed(),
                Some(&handed(MessageStatus::Queued, MAX - 1)),
                MAX
            ),
            ReportDecision::Ignore
        );
        // No attempt is left: the message fails instead of waiting for one.
        assert!(matches!(
            decide(&failed(), Some(&handed(MessageStatus::Queued, MAX)), MAX),
            ReportDecision::FailedFinal { .. }
        ));
    }

    #[test]
    fn a_carrier_failure_after_sent_fails_the_message() {
        assert!(matches!(
            decide(&failed(), Some(&handed(MessageStatus::Sent, 1)), MAX),
            ReportDecision::FailedFinal { attempt: 1, .. }
        ));
    }

    #[test]
    fn a_settled_message_ignores_failures() {
        for status in MessageStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            assert_eq!(
                decide(&failed(), Some(&handed(status, 1)), MAX),
                ReportDecision::Ignore,
                "{status}"
            );
        }
    }

    fn status_strategy() -> impl Strategy<Value = MessageStatus> {
        proptest::sample::select(MessageStatus::ALL.to_vec())
    }

    fn report_strategy() -> impl Strategy<Value = StatusReport> {
        prop_oneof![
            Just(StatusReport::Sent),
            Just(StatusReport::Delivered),
            Just(failed()),
        ]
    }

    proptest! {
        /// Whatever the report, the decision is a move the status rules allow, and a retry
        /// only happens with attempts left.
        #[test]
        fn decisions_respect_the_status_rules(
            report in report_strategy(),
            status in status_strategy(),
            attempts in 0..6_u32,
            max_attempts in 1..5_u32,
        ) {
            let message = handed(status, attempts);
            match decide(&report, Some(&message), max_attempts) {
                ReportDecision::Advance(to) => prop_assert!(to.can_follow(status)),
                ReportDecision::RetryLater { attempt, .. } => {
                    prop_assert!(MessageStatus::Queued.can_follow(status));
                    prop_assert!(attempt < max_attempts);
                }
                ReportDecision::FailedFinal { .. } => {
                    prop_assert!(MessageStatus::Failed.can_follow(status));
                }
                ReportDecision::Ignore => prop_assert!(attempts > 0),
                ReportDecision::NotYours => prop_assert_eq!(attempts, 0),
            }
        }
    }
}
