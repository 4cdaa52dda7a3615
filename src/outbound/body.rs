//! What a delivery's body is built from and the body itself.

use std::collections::HashMap;

use uuid::Uuid;

use crate::clock::format_ms;
use crate::domain::webhook_event::EventKind;
use crate::store::ai::Draft;
use crate::store::messages;
use crate::store::webhooks::{self, PendingDelivery};

/// What a delivery's body is built from: the message's current record and, for
/// `ai.draft.created`, the draft.
#[derive(Debug, Clone)]
pub struct Subject {
    pub message: messages::Message,
    pub draft: Option<Draft>,
}

/// The subjects of a batch of deliveries, by message id: messages removed by retention are
/// absent; drafts are read only for `drafted` (the messages of `ai.draft.created` deliveries).
pub async fn subjects(
    db: &sea_orm::DatabaseConnection,
    ids: &[Uuid],
    drafted: &[Uuid],
) -> Result<HashMap<Uuid, Subject>, crate::store::StoreError> {
    let messages = webhooks::messages_by_id(db, ids).await?;
    let mut drafts = if drafted.is_empty() {
        HashMap::new()
    } else {
        crate::store::ai::drafts_by_message(db, drafted).await?
    };
    Ok(messages
        .into_iter()
        .map(|(id, message)| {
            let draft = drafts.remove(&id);
            (id, Subject { message, draft })
        })
        .collect())
}

/// The JSON body of one attempt, rebuilt from the current message record (the whole record,
/// as the API shows it, docs/api.md, Messages).
pub fn payload<'a>(delivery: &'a PendingDelivery, subject: &'a Subject) -> Payload<'a> {
    Payload {
        event: &delivery.event,
        event_id: delivery.event_id,
        message: subject.message.view(),
        timestamp: format_ms(delivery.created_at),
        draft: subject
            .draft
            .as_ref()
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
