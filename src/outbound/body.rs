//! What a delivery's body is built from and the body itself.

use std::collections::HashMap;

use uuid::Uuid;

use crate::clock::format_ms;
use crate::domain::webhook_event::EventKind;
use crate::store::ai::Draft;
use crate::store::messages;
use crate::store::webhooks::{self, PendingDelivery};

/// What a delivery's body is built from: a message event's current message record (and, for
/// `ai.draft.created`, the draft), or a phone alert event's data as it fired.
#[derive(Debug, Clone)]
pub enum Subject {
    Message {
        message: Box<messages::Message>,
        draft: Option<Draft>,
    },
    /// `{phone_id, phone_number, name, since, health}` (docs/api.md, "Phone health").
    Phone { data: serde_json::Value },
}

/// The subjects of a batch of deliveries, by subject id: messages removed by retention are
/// absent; drafts are read only for `drafted` (the messages of `ai.draft.created` deliveries);
/// `phone_events` are the subjects of phone alert deliveries.
pub async fn subjects(
    db: &sea_orm::DatabaseConnection,
    ids: &[Uuid],
    drafted: &[Uuid],
    phone_events: &[Uuid],
) -> Result<HashMap<Uuid, Subject>, crate::store::StoreError> {
    let messages = webhooks::messages_by_id(db, ids).await?;
    let mut drafts = if drafted.is_empty() {
        HashMap::new()
    } else {
        crate::store::ai::drafts_by_message(db, drafted).await?
    };
    let mut found: HashMap<Uuid, Subject> = messages
        .into_iter()
        .map(|(id, message)| {
            let draft = drafts.remove(&id);
            (
                id,
                Subject::Message {
                    message: Box::new(message),
                    draft,
                },
            )
        })
        .collect();
    if !phone_events.is_empty() {
        for (id, data) in crate::store::health::events_by_id(db, phone_events).await? {
            found.insert(id, Subject::Phone { data });
        }
    }
    Ok(found)
}

/// The body of a phone alert event (docs/api.md, "Phone health"), signed like any other.
#[derive(Debug, serde::Serialize)]
pub struct PhonePayload<'a> {
    event: &'a str,
    event_id: Uuid,
    data: &'a serde_json::Value,
    timestamp: String,
}

/// The JSON body of one attempt of a phone alert event.
pub fn phone_payload<'a>(
    delivery: &'a PendingDelivery,
    data: &'a serde_json::Value,
) -> PhonePayload<'a> {
    PhonePayload {
        event: &delivery.event,
        event_id: delivery.event_id,
        data,
        timestamp: format_ms(delivery.created_at),
    }
}

/// The JSON body of one attempt, rebuilt from the current message record (the whole record,
/// as the API shows it, docs/api.md, Messages).
pub fn payload<'a>(
    delivery: &'a PendingDelivery,
    message: &'a messages::Message,
    draft: Option<&'a Draft>,
) -> Payload<'a> {
    Payload {
        event: &delivery.event,
        event_id: delivery.event_id,
        message: message.view(),
        timestamp: format_ms(delivery.created_at),
        draft: draft
            .filter(|_| delivery.event == EventKind::AiDraftCreated.as_str())
            .map(|d| DraftOut {
                id: d.id,
                content: &d.content,
            }),
    }
}

/// A webhook body (docs/api.md, Webhooks), serialized straight to the bytes that are
/// signed and sent.
#[derive(Debug, serde::Serialize)]
pub struct Payload<'a> {
    event: &'a str,
    event_id: Uuid,
    message: messages::Record<'a>,
    timestamp: String,
    /// Only in `ai.draft.created`.
    #[serde(skip_serializing_if = "Option::is_none")]
    draft: Option<DraftOut<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct DraftOut<'a> {
    id: Uuid,
    content: &'a str,
}
