//! What a message change is called (the kind of its timeline entry and of the change the
//! writer publishes) and why a message failed: each name written once, here.

use crate::domain::status::MessageStatus;

/// The kind of a message's timeline entry, and of the change published for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// The message reached this status (recorded under the status's own name).
    Moved(MessageStatus),
    /// A phone reported a failed attempt and the message is queued for another one.
    AttemptFailed,
    /// An inbound message was stored.
    Received,
    /// A queued message moved to another phone with the same number (timeline only).
    Rerouted,
    /// Retention removed the message's content (timeline only).
    ContentRemoved,
    /// A pending AI draft was stored for an inbound message (the change carries that message).
    AiDraft,
}

impl ChangeKind {
    /// The storage name (`message_events.kind`) and metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Moved(status) => status.as_str(),
            ChangeKind::AttemptFailed => "attempt_failed",
            ChangeKind::Received => "received",
            ChangeKind::Rerouted => "rerouted",
            ChangeKind::ContentRemoved => "content_removed",
            ChangeKind::AiDraft => "ai_draft",
        }
    }
}

impl From<MessageStatus> for ChangeKind {
    fn from(status: MessageStatus) -> ChangeKind {
        ChangeKind::Moved(status)
    }
}

/// Why a message failed or expired (`failure_reason`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// Its phone was unpaired before sending it.
    PhoneUnpaired,
    /// It was not handed to a phone before `expires_at`.
    Expired,
    /// The error its phone reported, as the phone worded it.
    Reported(String),
}

impl FailureReason {
    /// The storage and wire name (`failure_reason`).
    pub fn as_str(&self) -> &str {
        match self {
            FailureReason::PhoneUnpaired => "phone_unpaired",
            FailureReason::Expired => "expired",
            FailureReason::Reported(error) => error,
        }
    }

    /// The reason a stored `failure_reason` names: the server's own reasons by their names,
    /// anything else a phone's words. A phone that reported exactly `expired` reads back as
    /// [`FailureReason::Expired`], which stores and prints the same text.
    pub fn from_stored(text: String) -> FailureReason {
        match text.as_str() {
            "phone_unpaired" => FailureReason::PhoneUnpaired,
            "expired" => FailureReason::Expired,
            _ => FailureReason::Reported(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_is_named_after_its_status() {
        for status in MessageStatus::ALL {
            assert_eq!(ChangeKind::from(status).as_str(), status.as_str());
        }
        assert_eq!(ChangeKind::AttemptFailed.as_str(), "attempt_failed");
        assert_eq!(ChangeKind::AiDraft.as_str(), "ai_draft");
    }

    #[test]
    fn a_stored_reason_reads_back_as_it_was_written() {
        for reason in [
            FailureReason::PhoneUnpaired,
            FailureReason::Expired,
            FailureReason::Reported("no signal".into()),
            FailureReason::Reported(String::new()),
        ] {
            assert_eq!(
                FailureReason::from_stored(reason.as_str().to_string()),
                reason
            );
        }
        assert_eq!(
            FailureReason::from_stored("expired".into()).as_str(),
            "expired"
        );
    }

    #[test]
    fn a_reported_error_is_stored_as_worded() {
        assert_eq!(FailureReason::PhoneUnpaired.as_str(), "phone_unpaired");
        assert_eq!(FailureReason::Expired.as_str(), "expired");
        assert_eq!(
            FailureReason::Reported("RESULT_ERROR_NO_SERVICE".into()).as_str(),
            "RESULT_ERROR_NO_SERVICE"
        );
    }

    proptest::proptest! {
        /// Whatever text is stored, reading it back stores and prints the same text.
        #[test]
        fn any_stored_text_reads_back_as_itself(text in ".*") {
            let reason = FailureReason::from_stored(text.clone());
            proptest::prop_assert_eq!(reason.as_str(), text.as_str());
        }
    }
}
