//! Conversations: the messages of a scope grouped by the number on the other side (an outbound
//! message's `to_number`, an inbound one's `from_number`; docs/api.md, "Conversations"). Read
//! only; there is no conversation table. The list is built from the scope's newest
//! [`SCAN_LIMIT`] messages, read by the listing index, so a request's work is bounded whatever
//! the history (records live 24 hours after they end; see Retention).

use std::collections::HashMap;

use entity::{ai_drafts, contacts, messages};
use sea_orm::sea_query::{Expr, ExprTrait, IntoCondition};
use sea_orm::{
    ColumnTrait, Condition, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::{Message, Position};
use super::scoped::Scope;
use crate::domain::ai::DraftStatus;
use crate::domain::status::Direction;

/// Messages a conversation list is built from at most, newest first.
pub const SCAN_LIMIT: u64 = 5_000;
/// Numbers per `IN` list.
const NUMBERS_PER_LOOKUP: usize = 500;

/// One counterpart's conversation, as the scan found it.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The number on the other side (E.164, or a sender id such as a short code).
    pub number: String,
    /// The newest message's id and time.
    pub last_message_id: Uuid,
    pub last_activity_at: i64,
    /// Inbound messages from the number among those scanned.
    pub inbound_count: u64,
}

/// The scope's conversations, newest activity first (ties by number), from its newest
/// [`SCAN_LIMIT`] messages.
#[tracing::instrument(skip_all)]
pub async fn summaries(db: &DatabaseConnection, scope: Scope) -> Result<Vec<Summary>, StoreError> {
    let rows: Vec<(Uuid, String, String, String, i64)> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .column(messages::Column::Direction)
        .column(messages::Column::FromNumber)
        .column(messages::Column::ToNumber)
        .column(messages::Column::CreatedAt)
        .filter(scope.condition())
        .order_by_desc(messages::Column::CreatedAt)
        .order_by_desc(messages::Column::Id)
        .limit(SCAN_LIMIT)
        .into_tuple()
        .all(db)
        .await?;
    let mut order: Vec<Summary> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (id, direction, from, to, created_at) in rows {
        let inbound = direction == Direction::Inbound.as_str();
        let number = if inbound { from } else { to };
        let at = match index.get(&number) {
            Some(&at) => at,
            None => {
                index.insert(number.clone(), order.len());
                order.push(Summary {
                    number,
                    last_message_id: id,
                    last_activity_at: created_at,
                    inbound_count: 0,
                });
                order.len() - 1
            }
        };
        if inbound {
            order[at].inbound_count += 1;
        }
    }
    // Rows came newest first, so each summary's first row is its newest; ties by number keep
    // the order (and so the cursor) total.
    order.sort_by(|a, b| {
        b.last_activity_at
            .cmp(&a.last_activity_at)
            .then_with(|| a.number.cmp(&b.number))
    });
    Ok(order)
}

/// Messages by id, in no particular order.
pub async fn messages_by_id(
    db: &DatabaseConnection,
    scope: Scope,
    ids: &[Uuid],
) -> Result<Vec<Message>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let query = messages::Entity::find()
        .filter(scope.condition())
        .filter(messages::Column::Id.is_in(ids.iter().copied()));
    super::rows_as(db, query).await
}

/// A contact as a conversation names it.
#[derive(Debug, Clone)]
pub struct ContactName {
    pub id: Uuid,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
}

impl ContactName {
    /// First and last name joined; None when the contact has neither.
    pub fn display(&self) -> Option<String> {
        let parts: Vec<&str> = [self.first_name.as_deref(), self.last_name.as_deref()]
            .into_iter()
            .flatten()
            .filter(|p| !p.trim().is_empty())
            .collect();
        (!parts.is_empty()).then(|| parts.join(" "))
    }
}

/// The contacts of these numbers, by number (the contacts' unique (workspace, mode, number)
/// index; `NUMBERS_PER_LOOKUP` per statement).
pub async fn contacts_of(
    db: &DatabaseConnection,
    scope: Scope,
    numbers: &[&str],
) -> Result<HashMap<String, ContactName>, StoreError> {
    let mut found = HashMap::new();
    for chunk in numbers.chunks(NUMBERS_PER_LOOKUP) {
        let rows: Vec<(Uuid, String, Option<String>, Option<String>)> = contacts::Entity::find()
            .select_only()
            .column(contacts::Column::Id)
            .column(contacts::Column::PhoneNumber)
            .column(contacts::Column::FirstName)
            .column(contacts::Column::LastName)
            .filter(scope.of::<contacts::Entity>())
            .filter(contacts::Column::PhoneNumber.is_in(chunk.iter().copied()))
            .into_tuple()
            .all(db)
            .await?;
        for (id, number, first_name, last_name) in rows {
            found.insert(
                number,
                ContactName {
                    id,
                    first_name,
                    last_name,
                },
            );
        }
    }
    Ok(found)
}

/// Pending AI drafts per sender among `numbers` (the drafts' sender index).
pub async fn pending_drafts_of(
    db: &DatabaseConnection,
    scope: Scope,
    numbers: &[&str],
) -> Result<HashMap<String, u64>, StoreError> {
    let mut counts = HashMap::new();
    for chunk in numbers.chunks(NUMBERS_PER_LOOKUP) {
        let rows: Vec<(String, i64)> = ai_drafts::Entity::find()
            .select_only()
            .column(ai_drafts::Column::FromNumber)
            .column_as(ai_drafts::Column::Id.count(), "pending")
            .filter(scope.of::<ai_drafts::Entity>())
            .filter(ai_drafts::Column::FromNumber.is_in(chunk.iter().copied()))
            .filter(ai_drafts::Column::Status.eq(DraftStatus::Pending.as_str()))
            .group_by(ai_drafts::Column::FromNumber)
            .into_tuple()
            .all(db)
            .await?;
        for (number, pending) in rows {
            counts.insert(number, u64::try_from(pending).unwrap_or(0));
        }
    }
    Ok(counts)
}

/// One page of the messages exchanged with `number`, newest first, strictly before `before`;
/// `limit + 1` rows are read to learn whether older ones exist.
pub async fn messages_with(
    db: &DatabaseConnection,
    scope: Scope,
    number: &str,
    before: Option<Position>,
    limit: u64,
) -> Result<(Vec<Message>, bool), StoreError> {
    let exchanged = Condition::any()
        .add(
            Condition::all()
                .add(messages::Column::Direction.eq(Direction::Inbound.as_str()))
                .add(messages::Column::FromNumber.eq(number)),
        )
        .add(
            Condition::all()
                .add(messages::Column::Direction.eq(Direction::Outbound.as_str()))
                .add(messages::Column::ToNumber.eq(number)),
        );
    let mut select = messages::Entity::find()
        .filter(scope.condition())
        .filter(exchanged);
    if let Some(p) = before {
        select = select.filter(
            Condition::any()
                .add(messages::Column::CreatedAt.lt(p.created_at))
                .add(
                    Expr::col(messages::Column::CreatedAt)
                        .eq(p.created_at)
                        .and(Expr::col(messages::Column::Id).lt(p.id))
                        .into_condition(),
                ),
        );
    }
    let mut rows = select
        .order_by_desc(messages::Column::CreatedAt)
        .order_by_desc(messages::Column::Id)
        .limit(limit + 1)
        .all(db)
        .await?;
    let has_more = rows.len() as u64 > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((super::map_rows(rows)?, has_more))
}

/// An AI draft as a conversation shows it beside the message it answers.
#[derive(Debug, Clone)]
pub struct DraftSummary {
    pub id: Uuid,
    pub message_id: Uuid,
    pub status: String,
    pub content: String,
    pub created_at: i64,
}

/// The drafts answering these inbound messages (at most one each).
pub async fn drafts_for(
    db: &DatabaseConnection,
    scope: Scope,
    message_ids: &[Uuid],
) -> Result<Vec<DraftSummary>, StoreError> {
    if message_ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(ai_drafts::Entity::find()
        .filter(scope.of::<ai_drafts::Entity>())
        .filter(ai_drafts::Column::MessageId.is_in(message_ids.iter().copied()))
        .all(db)
        .await?
        .into_iter()
        .map(|d| DraftSummary {
            id: d.id,
            message_id: d.message_id,
            status: d.status,
            content: d.content,
            created_at: d.created_at,
        })
        .collect())
}
