//! Message statuses, directions, queue classes and the transitions allowed between statuses.

use serde::Serialize;

/// Where a message is in its life (docs/api.md, Messages); terminal: delivered, failed,
/// expired, canceled.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    /// Accepted; also while held for scheduled_for.
    Queued,
    /// Handed to a phone, not yet confirmed.
    Sending,
    Sent,
    Delivered,
    Failed,
    Expired,
    /// A queued message cancelled by its owner or its campaign.
    Canceled,
}

impl MessageStatus {
    /// Every status, for validation messages and metrics.
    pub const ALL: [MessageStatus; 7] = [
        MessageStatus::Queued,
        MessageStatus::Sending,
        MessageStatus::Sent,
        MessageStatus::Delivered,
        MessageStatus::Failed,
        MessageStatus::Expired,
        MessageStatus::Canceled,
    ];

    /// The wire and storage name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Queued => "queued",
            MessageStatus::Sending => "sending",
            MessageStatus::Sent => "sent",
            MessageStatus::Delivered => "delivered",
            MessageStatus::Failed => "failed",
            MessageStatus::Expired => "expired",
            MessageStatus::Canceled => "canceled",
        }
    }

    /// Parses a wire or storage name.
    pub fn parse(text: &str) -> Option<MessageStatus> {
        MessageStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// No transition leaves a terminal status.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            MessageStatus::Delivered
                | MessageStatus::Failed
                | MessageStatus::Expired
                | MessageStatus::Canceled
        )
    }

    /// The statuses a message may be in for a move to `self` to be allowed.
    ///
    /// `sending → queued` is the return of a message whose phone disconnected or whose attempt
    /// failed with attempts left. `queued → sent/delivered` is a late report of an attempt made
    /// before such a return (the phone dedupes by id and does not send twice).
    /// `sending → delivered` covers a phone whose `sent` report was lost; `sent → failed` a
    /// carrier that reports failure after the radio sent.
    pub fn allowed_from(self) -> &'static [MessageStatus] {
        use MessageStatus::*;
        match self {
            Queued => &[Sending],
            Sending => &[Queued],
            Sent => &[Sending, Queued],
            Delivered => &[Sending, Sent, Queued],
            Failed => &[Queued, Sending, Sent],
            Expired => &[Queued],
            Canceled => &[Queued],
        }
    }

    /// Whether `from → self` is allowed.
    pub fn can_follow(self, from: MessageStatus) -> bool {
        self.allowed_from().contains(&from)
    }
}

impl std::fmt::Display for MessageStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Outbound (sent by a phone) or inbound (received by a phone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Outbound,
    Inbound,
}

impl Direction {
    /// The wire and storage name.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Outbound => "outbound",
            Direction::Inbound => "inbound",
        }
    }

    /// Parses a wire or storage name.
    pub fn parse(text: &str) -> Option<Direction> {
        match text {
            "outbound" => Some(Direction::Outbound),
            "inbound" => Some(Direction::Inbound),
            _ => None,
        }
    }
}

/// A phone's queue is served class by class, FIFO inside a class (docs/api.md, Messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueueClass {
    /// Single sends and AI draft replies.
    Single = 0,
    Bulk = 1,
    Campaign = 2,
}

impl QueueClass {
    /// The stored number of the class.
    pub fn as_i16(self) -> i16 {
        self as i16
    }

    /// Reads a stored class; unknown values sort last.
    pub fn from_i16(value: i16) -> QueueClass {
        match value {
            0 => QueueClass::Single,
            1 => QueueClass::Bulk,
            _ => QueueClass::Campaign,
        }
    }

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueClass::Single => "single",
            QueueClass::Bulk => "bulk",
            QueueClass::Campaign => "campaign",
        }
    }
}

/// API key and resource mode: every resource belongs to exactly one. Its names (`live`, `test`)
/// are derived once for the wire (serde), storage and logs (strum) and the CLI (`--mode`, clap).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    strum::IntoStaticStr,
    strum::EnumString,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Mode {
    Live,
    Test,
}

impl Mode {
    /// True for test mode (the storage flag).
    pub fn is_test(self) -> bool {
        self == Mode::Test
    }

    /// The mode of a stored flag.
    pub fn from_test_flag(test_mode: bool) -> Mode {
        if test_mode { Mode::Test } else { Mode::Live }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parses `live` or `test`.
    pub fn parse(text: &str) -> Option<Mode> {
        text.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_is_named_live_or_test_everywhere() {
        use clap::ValueEnum;
        for (mode, name) in [(Mode::Live, "live"), (Mode::Test, "test")] {
            assert_eq!(mode.as_str(), name);
            assert_eq!(Mode::parse(name), Some(mode));
            assert_eq!(
                serde_json::to_value(mode).ok(),
                Some(serde_json::json!(name))
            );
            assert_eq!(Mode::from_str(name, false).ok(), Some(mode));
        }
        assert_eq!(Mode::parse("Live"), None);
    }

    #[test]
    fn terminal_statuses_have_no_way_out() {
        for to in MessageStatus::ALL {
            for from in MessageStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
                assert!(!to.can_follow(from), "{from} -> {to} must be refused");
            }
        }
    }

    #[test]
    fn statuses_round_trip() {
        for s in MessageStatus::ALL {
            assert_eq!(MessageStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(MessageStatus::parse("QUEUED"), None);
    }

    #[test]
    fn only_queued_messages_expire_or_cancel() {
        assert!(MessageStatus::Expired.can_follow(MessageStatus::Queued));
        assert!(!MessageStatus::Expired.can_follow(MessageStatus::Sending));
        assert!(MessageStatus::Canceled.can_follow(MessageStatus::Queued));
        assert!(!MessageStatus::Canceled.can_follow(MessageStatus::Sent));
    }
}
