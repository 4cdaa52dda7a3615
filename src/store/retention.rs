//! Message retention: content emptied after `retention.content_after`, records and their
//! timeline deleted after `retention.record_after`, in small batches so no statement holds the
//! database (SQLite's single write lock especially) for long.
//!
//! These writes bypass the group-commit writer on purpose: they publish no change, so no
//! webhook fires for them.

use entity::{message_events, messages};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QuerySelect, Set};
use uuid::Uuid;

use super::StoreError;
use crate::domain::change::ChangeKind;
use crate::domain::status::{Direction, MessageStatus};

/// Rows touched per statement (and per transaction).
pub const RETENTION_BATCH: u64 = 500;

/// Statuses after which an outbound message never changes again; inbound messages are
/// stored `delivered`, with `updated_at` = receipt.
const TERMINAL: [MessageStatus; 4] = [
    MessageStatus::Delivered,
    MessageStatus::Failed,
    MessageStatus::Expired,
    MessageStatus::Canceled,
];

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepCounts {
    pub contents_removed: u64,
    pub records_deleted: u64,
    /// Finished webhook deliveries deleted, with their attempts.
    pub deliveries_deleted: u64,
}

fn terminal() -> Vec<&'static str> {
    TERMINAL.iter().map(|s| s.as_str()).collect()
}

/// Empties the content of up to [`RETENTION_BATCH`] messages sent (outbound) or received
/// (inbound) at or before `cutoff_ms`, recording a `content_removed` timeline entry for each.
/// Returns how many were emptied.
#[tracing::instrument(skip_all)]
pub async fn remove_contents_batch(
    db: &DatabaseConnection,
    cutoff_ms: i64,
    now_ms: i64,
) -> Result<u64, StoreError> {
    // Two scans, each matching one index: outbound by (content_removed_at, sent_at), inbound
    // by (direction, content_removed_at, created_at).
    let mut ids: Vec<Uuid> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .filter(messages::Column::ContentRemovedAt.is_null())
        .filter(messages::Column::SentAt.lte(cutoff_ms))
        .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()))
        .limit(RETENTION_BATCH)
        .into_tuple()
        .all(db)
        .await?;
    let room = RETENTION_BATCH.saturating_sub(ids.len() as u64);
    if room > 0 {
        let inbound: Vec<Uuid> = messages::Entity::find()
            .select_only()
            .column(messages::Column::Id)
            .filter(messages::Column::Direction.eq(Direction::Inbound.as_str()))
            .filter(messages::Column::ContentRemovedAt.is_null())
            .filter(messages::Column::CreatedAt.lte(cutoff_ms))
            .limit(room)
            .into_tuple()
            .all(db)
            .await?;
        ids.extend(inbound);
    }
    if ids.is_empty() {
        return Ok(0);
    }
    let txn = super::begin_write(db).await?;
    let rows = messages::Entity::update_many()
        .col_expr(messages::Column::Content, Expr::value(""))
        .col_expr(messages::Column::ContentRemovedAt, Expr::value(now_ms))
        .filter(messages::Column::Id.is_in(ids))
        .filter(messages::Column::ContentRemovedAt.is_null())
        .exec_with_returning(&txn)
        .await?;
    let events: Vec<message_events::ActiveModel> = rows
        .iter()
        .map(|row| message_events::ActiveModel {
            message_id: Set(row.id),
            kind: Set(ChangeKind::ContentRemoved.as_str().to_string()),
            status: Set(row.status.clone()),
            at: Set(now_ms),
            detail: Set(None),
            ..Default::default()
        })
        .collect();
    if !events.is_empty() {
        message_events::Entity::insert_many(events)
            .exec_without_returning(&txn)
            .await?;
    }
    txn.commit().await?;
    Ok(rows.len() as u64)
}

/// Deletes up to [`RETENTION_BATCH`] messages that reached a terminal status (inbound: were
/// received) at or before `cutoff_ms`, with their timelines. Queued and in-flight messages are
/// never touched. Returns how many were deleted.
#[tracing::instrument(skip_all)]
pub async fn delete_records_batch(
    db: &DatabaseConnection,
    cutoff_ms: i64,
) -> Result<u64, StoreError> {
    let rows: Vec<(Uuid, String, Option<Uuid>, Option<String>)> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .column(messages::Column::Status)
        .column(messages::Column::CampaignId)
        .column(messages::Column::FailureReason)
        .filter(messages::Column::Status.is_in(terminal()))
        .filter(messages::Column::UpdatedAt.lte(cutoff_ms))
        .limit(RETENTION_BATCH)
        .into_tuple()
        .all(db)
        .await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = rows.iter().map(|(id, ..)| *id).collect();
    // A campaign's recipient keeps its message's final status once the message is gone.
    let of_campaigns: Vec<(Uuid, MessageStatus, Option<String>)> = rows
        .iter()
        .filter(|(_, _, campaign, _)| campaign.is_some())
        .filter_map(|(id, status, _, reason)| {
            MessageStatus::parse(status).map(|s| (*id, s, reason.clone()))
        })
        .collect();
    let txn = super::begin_write(db).await?;
    super::campaigns::keep_final_status(&txn, &of_campaigns).await?;
    message_events::Entity::delete_many()
        .filter(message_events::Column::MessageId.is_in(ids.iter().copied()))
        .exec(&txn)
        .await?;
    let deleted = messages::Entity::delete_many()
        .filter(messages::Column::Id.is_in(ids))
        .filter(messages::Column::Status.is_in(terminal()))
        .exec(&txn)
        .await?
        .rows_affected;
    txn.commit().await?;
    Ok(deleted)
}
