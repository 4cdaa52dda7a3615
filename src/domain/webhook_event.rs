//! Webhook event kinds (docs/api.md, Webhooks) and which message change fires which event;
//! the body formats of an endpoint and the event names of the SMSGate format.

use strum::IntoEnumIterator;

use crate::domain::change::ChangeKind;
use crate::domain::status::MessageStatus;

/// Every event kind an endpoint may subscribe to; its name is the `event` of a delivery.
/// Declared in the order docs/api.md lists them (`iter` and `list` follow it).
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
    /// A phone offline longer than `phones.offline_alert_after` (once per outage).
    #[strum(serialize = "phone.offline")]
    PhoneOffline,
    /// A phone back online after a `phone.offline`.
    #[strum(serialize = "phone.online")]
    PhoneOnline,
    /// A phone's battery at or below 15 % and not charging (once per discharge).
    #[strum(serialize = "phone.low_battery")]
    PhoneLowBattery,
    /// The stall watchdog marked a phone stalled.
    #[strum(serialize = "phone.stalled")]
    PhoneStalled,
}

impl EventKind {
    /// The wire name (`message.sent`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// True for the alert events of a phone, whose body carries `data` about the phone
    /// instead of a message (docs/api.md, "Phone health").
    pub fn is_phone_event(self) -> bool {
        matches!(
            self,
            EventKind::PhoneOffline
                | EventKind::PhoneOnline
                | EventKind::PhoneLowBattery
                | EventKind::PhoneStalled
        )
    }

    /// Every kind's name, comma-separated (for error messages).
    pub fn list() -> String {
        names_of::<EventKind>()
    }
}

/// The names of every variant of a strum-named enum, comma-separated, in declaration order.
fn names_of<E: strum::IntoEnumIterator + Into<&'static str>>() -> String {
    E::iter().map(Into::into).collect::<Vec<&str>>().join(", ")
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

/// The body shape (and signature) an endpoint is delivered in (docs/api.md, Webhooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum WebhookFormat {
    /// smsgw's own body and signature.
    Smsgw,
    /// The body and signature of the SMSGate app (endpoints created through the client API).
    Smsgate,
}

impl WebhookFormat {
    /// The stored name (`smsgw`, `smsgate`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The stored name read back; an unknown one is smsgw's own format.
    pub fn parse(name: &str) -> WebhookFormat {
        name.parse().unwrap_or(WebhookFormat::Smsgw)
    }

    /// The `event` of a delivery of `kind` in this format, None when the format has no such
    /// event (an SMSGate endpoint never receives `ai.draft.created`).
    pub fn event_name(self, kind: EventKind) -> Option<&'static str> {
        match self {
            WebhookFormat::Smsgw => Some(kind.as_str()),
            WebhookFormat::Smsgate => SmsGateEvent::iter()
                .find(|e| e.fires_on() == Some(kind))
                .map(SmsGateEvent::as_str),
        }
    }

    /// The smsgw kind an event name subscribes to in this format: None for a name the format
    /// accepts but never fires (SMSGate's `system:ping`, `mms:received`, …).
    pub fn kind_of(self, name: &str) -> Option<EventKind> {
        match self {
            WebhookFormat::Smsgw => name.parse().ok(),
            WebhookFormat::Smsgate => name.parse::<SmsGateEvent>().ok()?.fires_on(),
        }
    }

    /// True for an event name an endpoint of this format may subscribe to.
    pub fn accepts(self, name: &str) -> bool {
        match self {
            WebhookFormat::Smsgw => is_event_kind(name),
            WebhookFormat::Smsgate => name.parse::<SmsGateEvent>().is_ok(),
        }
    }
}

/// Every event an SMSGate client may subscribe to (docs/compat.md, Webhooks). Only the four
/// `sms:` events with an smsgw counterpart are ever delivered; the rest are accepted and never
/// fired (smsgw has no such event, or the app alone produces it).
/// Declared in the order docs/compat.md lists them (`iter` and `list` follow it).
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
pub enum SmsGateEvent {
    #[strum(serialize = "sms:received")]
    SmsReceived,
    #[strum(serialize = "sms:data-received")]
    SmsDataReceived,
    #[strum(serialize = "sms:sent")]
    SmsSent,
    #[strum(serialize = "sms:delivered")]
    SmsDelivered,
    #[strum(serialize = "sms:failed")]
    SmsFailed,
    #[strum(serialize = "sms:cancelled")]
    SmsCancelled,
    #[strum(serialize = "system:ping")]
    SystemPing,
    #[strum(serialize = "mms:received")]
    MmsReceived,
    #[strum(serialize = "mms:downloaded")]
    MmsDownloaded,
    #[strum(serialize = "app:started")]
    AppStarted,
    #[strum(serialize = "sms:batch:received")]
    SmsBatchReceived,
    #[strum(serialize = "sms:batch:data-received")]
    SmsBatchDataReceived,
    #[strum(serialize = "mms:batch:received")]
    MmsBatchReceived,
    #[strum(serialize = "mms:batch:downloaded")]
    MmsBatchDownloaded,
}

impl SmsGateEvent {
    /// The wire name (`sms:sent`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Every name, comma-separated (for error messages).
    pub fn list() -> String {
        names_of::<SmsGateEvent>()
    }

    /// The smsgw event this one is delivered for, None when it never fires.
    pub fn fires_on(self) -> Option<EventKind> {
        match self {
            SmsGateEvent::SmsReceived => Some(EventKind::MessageReceived),
            SmsGateEvent::SmsSent => Some(EventKind::MessageSent),
            SmsGateEvent::SmsDelivered => Some(EventKind::MessageDelivered),
            SmsGateEvent::SmsFailed => Some(EventKind::MessageFailed),
            _ => None,
        }
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
            "message.received, message.sent, message.delivered, message.failed, ai.draft.created, \
             phone.offline, phone.online, phone.low_battery, phone.stalled"
        );
        assert!(EventKind::PhoneStalled.is_phone_event());
        assert!(!EventKind::MessageSent.is_phone_event());
        // No SMSGate-format endpoint gets a phone alert.
        assert_eq!(
            WebhookFormat::Smsgate.event_name(EventKind::PhoneOffline),
            None
        );
    }

    #[test]
    fn smsgate_events_map_to_four_kinds_and_back() {
        let smsgate = WebhookFormat::Smsgate;
        assert_eq!(smsgate.kind_of("sms:sent"), Some(EventKind::MessageSent));
        assert_eq!(
            smsgate.event_name(EventKind::MessageFailed),
            Some("sms:failed")
        );
        assert_eq!(
            smsgate.event_name(EventKind::MessageReceived),
            Some("sms:received")
        );
        assert_eq!(smsgate.event_name(EventKind::AiDraftCreated), None);
        for never in [
            "system:ping",
            "mms:received",
            "sms:batch:received",
            "sms:cancelled",
        ] {
            assert!(smsgate.accepts(never), "{never}");
            assert_eq!(smsgate.kind_of(never), None, "{never}");
        }
        assert!(!smsgate.accepts("message.sent"));
        assert!(!smsgate.accepts("invalid:event"));
        assert!(!WebhookFormat::Smsgw.accepts("sms:sent"));
        assert_eq!(
            WebhookFormat::Smsgw.event_name(EventKind::MessageSent),
            Some("message.sent")
        );
        assert_eq!(WebhookFormat::parse("smsgate"), WebhookFormat::Smsgate);
        assert_eq!(WebhookFormat::parse("smsgw"), WebhookFormat::Smsgw);
        let fired: Vec<_> = SmsGateEvent::iter()
            .filter_map(SmsGateEvent::fires_on)
            .collect();
        assert_eq!(fired.len(), 4);
    }
}
