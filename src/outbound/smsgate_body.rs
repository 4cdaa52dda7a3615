//! The body of a delivery to an SMSGate-format endpoint (docs/compat.md, Webhooks): the shape
//! the SMSGate app posts, `{id, webhookId, event, deviceId, payload}`, one per recipient
//! message, built from the message's current record.

use serde::Serialize;
use uuid::Uuid;

use crate::clock::from_ms;
use crate::domain::status::MessageStatus;
use crate::domain::webhook_event::SmsGateEvent;
use crate::store::messages::Message;
use crate::store::webhooks::{EndpointRecord, PendingDelivery};

/// A timestamp as the app writes it: RFC 3339, exactly 3 fractional digits, `Z`.
fn timestamp(ms: i64) -> String {
    from_ms(ms).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    /// The delivery's event id: the same on every retry, so a receiver can drop repeats.
    id: String,
    webhook_id: String,
    event: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    payload: Payload<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Payload<'a> {
    message_id: String,
    phone_number: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    recipient: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sender: Option<&'a str>,
    /// The SIM slot a client-API message asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    sim_number: Option<u8>,
    /// `sms:received` only: the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parts_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    received_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sent_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivered_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// The id an SMSGate client knows `message` by: its group's id when it was sent through the
/// client API, else its smsgw id.
fn message_id(message: &Message) -> String {
    match message.group_id() {
        Some(group_id) => group_id.to_string(),
        None => message.id.to_string(),
    }
}

/// The serialized body of one attempt; None for an event the format never delivers.
pub fn body(
    endpoint: &EndpointRecord,
    delivery: &PendingDelivery,
    message: &Message,
) -> Option<Result<Vec<u8>, serde_json::Error>> {
    let event: SmsGateEvent = delivery.event.parse().ok()?;
    // When the event happened, if the record has lost it (a later state): when it was fired.
    let at = |stamp: Option<i64>| Some(timestamp(stamp.unwrap_or(delivery.created_at)));
    let outbound = Payload {
        message_id: message_id(message),
        phone_number: &message.to_number,
        recipient: Some(&message.to_number),
        sender: Some(&message.from_number),
        sim_number: message.client.as_ref().and_then(|c| c.sim_number),
        message: None,
        parts_count: None,
        received_at: None,
        sent_at: None,
        delivered_at: None,
        failed_at: None,
        reason: None,
    };
    let payload = match event {
        SmsGateEvent::SmsReceived => Payload {
            phone_number: &message.from_number,
            recipient: Some(&message.to_number),
            sender: Some(&message.from_number),
            message: Some(&message.content),
            received_at: at(Some(message.created_at)),
            ..outbound
        },
        SmsGateEvent::SmsSent => Payload {
            parts_count: Some(message.segments),
            sent_at: at(message.sent_at),
            ..outbound
        },
        SmsGateEvent::SmsDelivered => Payload {
            delivered_at: at(message.delivered_at),
            ..outbound
        },
        SmsGateEvent::SmsFailed => Payload {
            failed_at: at(message.failed_at),
            reason: Some(message.failure_reason.as_ref().map_or(
                match message.status {
                    expired @ MessageStatus::Expired => expired.as_str(),
                    _ => MessageStatus::Failed.as_str(),
                },
                |reason| reason.as_str(),
            )),
            ..outbound
        },
        _ => return None,
    };
    let body = Body {
        id: delivery.event_id.to_string(),
        webhook_id: endpoint
            .external_id
            .clone()
            .unwrap_or_else(|| endpoint.id.to_string()),
        event: &delivery.event,
        device_id: message.device_id.map(|id: Uuid| id.to_string()),
        payload,
    };
    Some(serde_json::to_vec(&body))
}
