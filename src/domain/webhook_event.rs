//! Webhook event kinds (docs/api.md, Webhooks) and which message change fires which event.

use crate::domain::change::ChangeKind;
use crate::domain::status::MessageStatus;

/// Every event kind an endpoint may subscribe to; its name is the `event` of a delivery.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::EnumIter,
    strum::EnumString,
)]
pub enum EventKind {
    #[strum(serialize = "message.received")]
    MessageReceived,
    #[strum(serialize = "message.sent")]
    MessageSent,
    #[strum(serialize = "message.delivered")]
    MessageDelivered,
    #[strum(serialize = "message.failed")]
    MessageFailed,
    #[strum(serialize = "ai.draft.created")]
    AiDraftCreated,
}

impl EventKind {
    /// The wire name (`message.sent`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Every kind, in the order docs/api.md lists them.
    pub fn iter() -> impl Iterator<Item = EventKind> {
        <EventKind as strum::IntoEnumIterator>::iter()
    }

    /// Every kind's name, comma-separated (for error messages).
    pub fn list() -> String {
        EventKind::iter()
            .map(EventKind::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// True for the name of an [`EventKind`].
pub fn is_event_kind(kind: &str) -> bool {
    kind.parse::<EventKind>().is_ok()
}

/// The event a committed message change fires, if any: `sent`, `delivered`, `failed` and
/// `expired` (outbound), `received` (inbound) and a pending AI draft.
/// Queued, requeued and retention changes fire nothing.
pub fn event_for_change(kind: ChangeKind) -> Option<EventKind> {
    match kind {
        ChangeKind::Moved(MessageStatus::Sent) => Some(EventKind::MessageSent),
        ChangeKind::Moved(MessageStatus::Delivered) => Some(EventKind::MessageDelivered),
        // docs/api.md, Webhooks: an expired message (never handed to a phone in time) fires
        // message.failed too.
        ChangeKind::Moved(MessageStatus::Failed | MessageStatus::Expired) => {
            Some(EventKind::MessageFailed)
        }
        ChangeKind::Received => Some(EventKind::MessageReceived),
        ChangeKind::AiDraft => Some(EventKind::AiDraftCreated),
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
            event_for_change(moved(MessageStatus::Sent)).map(EventKind::as_str),
            Some("message.sent")
        );
        assert_eq!(
            event_for_change(ChangeKind::Received).map(EventKind::as_str),
            Some("message.received")
        );
        assert_eq!(event_for_change(moved(MessageStatus::Queued)), None);
        assert_eq!(
            event_for_change(moved(MessageStatus::Expired)).map(EventKind::as_str),
            Some("message.failed")
        );
        assert_eq!(event_for_change(ChangeKind::AttemptFailed), None);
        assert_eq!(
            event_for_change(ChangeKind::AiDraft).map(EventKind::as_str),
            Some("ai.draft.created")
        );
        assert!(is_event_kind("ai.draft.created"));
        assert!(!is_event_kind("message.bounced"));
        assert_eq!(
            EventKind::list(),
            "message.received, message.sent, message.delivered, message.failed, ai.draft.created"
        );
    }
}
