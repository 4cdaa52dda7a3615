//! Webhook event kinds (docs/api.md, Webhooks) and which message change fires which event.

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

/// The writer's change kind of a pending AI draft stored for an inbound message (the change
/// carries that message); it fires [`AI_DRAFT_CREATED`].
pub const DRAFT_CHANGE: &str = "ai_draft";

/// True for a kind of [`EVENT_KINDS`].
pub fn is_event_kind(kind: &str) -> bool {
    EVENT_KINDS.contains(&kind)
}

/// The event a committed message change fires, if any: the writer's change kinds `sent`,
/// `delivered`, `failed` and `expired` (outbound), `received` (inbound) and [`DRAFT_CHANGE`].
/// Queued, requeued and retention changes fire nothing.
pub fn event_for_change(change_kind: &str) -> Option<&'static str> {
    match change_kind {
        "sent" => Some(MESSAGE_SENT),
        "delivered" => Some(MESSAGE_DELIVERED),
        // docs/api.md, Webhooks: an expired message (never handed to a phone in time) fires
        // message.failed too.
        "failed" | "expired" => Some(MESSAGE_FAILED),
        "received" => Some(MESSAGE_RECEIVED),
        DRAFT_CHANGE => Some(AI_DRAFT_CREATED),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_map_to_events() {
        assert_eq!(event_for_change("sent"), Some("message.sent"));
        assert_eq!(event_for_change("received"), Some("message.received"));
        assert_eq!(event_for_change("queued"), None);
        assert_eq!(event_for_change("expired"), Some("message.failed"));
        assert_eq!(event_for_change("attempt_failed"), None);
        assert!(is_event_kind("ai.draft.created"));
        assert!(!is_event_kind("message.bounced"));
    }
}
