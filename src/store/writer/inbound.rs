//! Inbound messages inside the writer's transaction: stored once per (phone, ref), with the
//! opt-out keyword they carry applied in the same transaction; and the AI drafts that answer
//! them.

use sea_orm::DatabaseTransaction;

use super::task::Batch;
use super::{Change, NewMessage, rows};
use crate::domain::ai::DraftStatus;
use crate::domain::change::ChangeKind;
use crate::domain::phone_number::PhoneNumber;
use crate::domain::status::MessageStatus;
use crate::store::StoreError;
use crate::store::ai::NewDraft;
use crate::store::contacts::{self, ContactKey};
use crate::store::messages::Message;
use crate::store::scoped::Scope;

/// Store an inbound message once per (phone, ref).
#[derive(Debug, Clone)]
pub(super) struct Inbound {
    pub(super) message: NewMessage,
    pub(super) scope: Scope,
}

/// The answer to storing an inbound message.
#[derive(Debug, Clone)]
pub enum InboundOutcome {
    Stored(Box<Message>),
    /// The phone reported this ref before; nothing was stored.
    Repeat,
}

/// Stages an inbound message unless its (phone, ref) was stored before or earlier in the batch.
pub(super) async fn inbound(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    request: &Inbound,
    now: i64,
) -> Result<InboundOutcome, StoreError> {
    let (new, scope) = (&request.message, request.scope);
    if let (Some(device), Some(reference)) = (new.device_id, &new.inbound_ref) {
        let key = (device, reference.clone());
        if batch.inbound_refs.contains(&key) {
            return Ok(InboundOutcome::Repeat);
        }
        if batch.stored_refs.contains(&key) {
            return Ok(InboundOutcome::Repeat);
        }
        batch.inbound_refs.insert(key);
    }
    // Opt-out keywords take effect in the same transaction as the message they arrive in.
    if let Some(keyword) = crate::domain::keywords::classify(&new.content)
        && PhoneNumber::parse(&new.from_number).is_ok()
    {
        crate::store::contacts::apply_keyword(txn, scope, &new.from_number, keyword, now).await?;
        // A sender who stops texts or AI replies gets none of its pending drafts; the sends
        // and drafts later in this batch see its new consent.
        if keyword != crate::domain::keywords::Keyword::OptIn {
            crate::store::ai::discard_pending_from(txn, scope, &new.from_number, now).await?;
        }
        let key = ContactKey {
            scope,
            phone_number: new.from_number.clone(),
        };
        let consent = contacts::consent(txn, &key).await?;
        batch.restricted.insert(key, consent);
    }
    let message = rows::to_message(new, scope, now);
    batch.rows.push(rows::to_row(&message, new));
    batch.events.push(rows::event_row(
        message.id,
        ChangeKind::Received,
        MessageStatus::Delivered,
        now,
        None,
    ));
    batch.changes.push(Change {
        kind: ChangeKind::Received,
        message: message.clone(),
    });
    Ok(InboundOutcome::Stored(Box::new(message)))
}

/// Stores an AI draft unless its sender has opted out or turned AI replies off (false then);
/// a pending one publishes a change (its `ai.draft.created` event).
pub(super) async fn draft(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    draft: &NewDraft,
    now: i64,
) -> Result<bool, StoreError> {
    let consent = batch.consent(draft.message.scope(), &draft.message.from_number);
    if !consent.allows_ai_replies() {
        return Ok(false);
    }
    crate::store::ai::insert(txn, draft, now).await?;
    if draft.status == DraftStatus::Pending {
        batch.changes.push(Change {
            kind: ChangeKind::AiDraft,
            message: draft.message.clone(),
        });
    }
    Ok(true)
}
