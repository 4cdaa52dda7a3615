//! Webhook event kinds (docs/api.md, Webhooks) and which message change fires which event.

use crate::domain::change::ChangeKind;
use crate::domain::status::MessageStatus;

/// Every event kind an endpoint may subscribe to.
pub const EVENT_KINDS: &[&str] = &[
    MESSAGE_RECEIVED,
    MESSAGE_SENT,
    MESSAGE_DELIVERED,
    MESSAGE_FAILED,
    AI_DRAFT_CREATED,
];

pub const MESSAGE_RECEIVED: &str = "message.received";
pub const MESSAGE_SENT: &str = "message.sent";
pub const MESSAGE_DELIVERED: &str = "message.delivered";
pub const MESSAGE_FAILED: &str = "message.failed";
pub const AI_DRAFT_CREATED: &str = "ai.draft.created";

/// True for a kind of [`EVENT_KINDS`].
pub fn is_event_kind(kind: &str) -> bool {
    EVENT_KINDS.contains(&kind)
}

/// The event a committed message change fires, if any: `sent`, `delivered`, `failed` and
/// `expired` (outbound), `received` (inbound) and a pending AI draft.
/// Queued, requeued and retention changes fire nothing.
pub fn event_for_change(kind: ChangeKind) -> Option<&'static str> {
    match kind {
        ChangeKind::Moved(MessageStatus::Sent) => Some(MESSAGE_SENT),
        ChangeKind::Moved(MessageStatus::Delivered) => Some(MESSAGE_DELIVERED),
        // docs/api.md, Webhooks: an expired message (never handed to a phone in time) fires
        // message.failed too.
        ChangeKind::Moved(MessageStatus::Failed | MessageStatus::Expired) => Some(MESSAGE_FAILED),
        ChangeKind::Received => Some(MESSAGE_RECEIVED),
        ChangeKind::AiDraft => Some(AI_DRAFT_CREATED),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_map_to_events() {
        let moved = ChangeKind::Moved;
        assert_eq!(
            event_for_change(moved(MessageStatus::Sent)),
            Some("message.sent")
        );
        assert_eq!(
            event_for_change(ChangeKind::Received),
            Some("message.received")
        );
        assert_eq!(event_for_change(moved(MessageStatus::Queued)), None);
        assert_eq!(
            event_for_change(moved(MessageStatus::Expired)),
            Some("message.failed")
        );
        assert_eq!(event_for_change(ChangeKind::AttemptFailed), None);
        assert_eq!(
            event_for_change(ChangeKind::AiDraft),
            Some("ai.draft.created")
        );
        assert!(is_event_kind("ai.draft.created"));
        assert!(!is_event_kind("message.bounced"));
    }
}
