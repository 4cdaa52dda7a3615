//! The writer's statements: grouped status UPDATEs (and the planner trick they need), reroute,
//! the multi-row INSERTs of a batch, and the reads its rules make. No rule is decided here.

use std::collections::{HashMap, HashSet};

use entity::{message_events, messages};
use sea_orm::sea_query::{Expr, ExprTrait, Func};
use sea_orm::{
    ColumnTrait, Condition, DatabaseTransaction, EntityTrait, PaginatorTrait, QueryFilter,
    QuerySelect, Set,
};
use uuid::Uuid;

use super::accept::NewWorkspaceLimit;
use super::transition::{Reroute, Transition};
use crate::domain::ids::WorkspaceId;
use crate::domain::status::{Direction, MessageStatus};
use crate::store::StoreError;
use crate::store::messages::Message;
use crate::store::pools;
use crate::store::scoped::Scope;

/// Most rows per multi-row INSERT (SQLite binds at most 32,766 parameters per statement); a
/// power of two, see [`crate::store::shaped_chunks`].
const ROWS_PER_INSERT: usize = 256;

/// Most (phone, ref) pairs one [`stored_refs`] query names.
const REFS_PER_QUERY: usize = 200;

/// Inserts message rows and timeline entries (multi-row INSERTs in shaped chunks), and the
/// sticky line of each pooled message's recipient (docs/api.md, "Pools"), in the same commit.
pub(super) async fn insert_rows(
    txn: &DatabaseTransaction,
    rows: &[messages::ActiveModel],
    events: &[message_events::ActiveModel],
) -> Result<(), StoreError> {
    for chunk in crate::store::shaped_chunks(rows, ROWS_PER_INSERT) {
        messages::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(txn)
            .await?;
    }
    let mut sticky = Vec::new();
    let mut inbound = Vec::new();
    let mut now = 0;
    for row in rows {
        let (Set(Some(phone_id)), Set(at)) = (&row.device_id, &row.created_at) else {
            continue;
        };
        now = Ord::max(now, *at);
        match (
            &row.pool_id,
            &row.direction,
            &row.from_number,
            &row.to_number,
        ) {
            (Set(Some(pool_id)), _, _, Set(to_number)) => sticky.push(pools::Sticky {
                pool_id: *pool_id,
                to_number: to_number.clone(),
                phone_id: *phone_id,
            }),
            // An SMS that reached a line: its sender sticks to it in the line's pools.
            (_, Set(direction), Set(from_number), _)
                if direction == Direction::Inbound.as_str() =>
            {
                inbound.push((*phone_id, from_number.clone()));
            }
            _ => {}
        }
    }
    sticky.extend(pools::inbound_sticky(txn, &inbound).await?);
    if !sticky.is_empty() {
        pools::stick(txn, &sticky, now).await?;
    }
    for chunk in crate::store::shaped_chunks(events, ROWS_PER_INSERT * 4) {
        message_events::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// The message stored under this request_id in `scope`, if any.
pub(super) async fn find_request_id<C: sea_orm::ConnectionTrait>(
    conn: &C,
    scope: Scope,
    request_id: &str,
) -> Result<Option<Uuid>, StoreError> {
    Ok(messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .filter(scope.of::<messages::Entity>())
        .filter(messages::Column::RequestId.eq(request_id))
        .into_tuple()
        .one(conn)
        .await?)
}

/// Live outbound messages of the workspace's first window: the messages accepted then, plus
/// every recipient of the campaigns launched then (counted at launch, so their messages are
/// not counted again).
pub(super) async fn count_new_workspace_messages(
    txn: &DatabaseTransaction,
    workspace_id: WorkspaceId,
    limit: NewWorkspaceLimit,
) -> Result<u64, StoreError> {
    let messages = messages::Entity::find()
        .filter(messages::Column::WorkspaceId.eq(workspace_id))
        .filter(messages::Column::TestMode.eq(false))
        .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()))
        .filter(messages::Column::CampaignId.is_null())
        .filter(messages::Column::CreatedAt.gte(limit.window_starts_at))
        .filter(messages::Column::CreatedAt.lt(limit.window_ends_at))
        .count(txn)
        .await?;
    let campaigns = crate::store::campaigns::launched_recipients(
        txn,
        workspace_id,
        limit.window_starts_at,
        limit.window_ends_at,
    )
    .await?;
    Ok(messages + campaigns)
}

/// Which of `refs` (phone, inbound ref) are stored already: one query per chunk, each pair an
/// `OR` term the (device_id, inbound_ref) unique index answers.
pub(super) async fn stored_refs(
    txn: &DatabaseTransaction,
    refs: &[(Uuid, &str)],
) -> Result<HashSet<(Uuid, String)>, StoreError> {
    let mut stored = HashSet::new();
    for chunk in refs.chunks(REFS_PER_QUERY) {
        let mut any = Condition::any();
        for (device, reference) in chunk {
            any = any.add(
                Condition::all()
                    .add(messages::Column::DeviceId.eq(*device))
                    .add(messages::Column::InboundRef.eq(*reference)),
            );
        }
        let found: Vec<(Option<Uuid>, Option<String>)> = messages::Entity::find()
            .select_only()
            .column(messages::Column::DeviceId)
            .column(messages::Column::InboundRef)
            .filter(any)
            .into_tuple()
            .all(txn)
            .await?;
        stored.extend(
            found
                .into_iter()
                .filter_map(|(device, reference)| device.zip(reference)),
        );
    }
    Ok(stored)
}

/// What a move's UPDATE sets and checks besides the message id and its phone: moves with equal
/// keys share one statement (the phone, which differs between moves of one batch, is matched
/// per id inside it).
#[derive(PartialEq)]
pub(super) struct UpdateKey<'a> {
    to: MessageStatus,
    expects_device: bool,
    reported: bool,
    sets_device: bool,
    count_attempt: bool,
    failure_reason: Option<&'a str>,
}

impl UpdateKey<'_> {
    pub(super) fn of(t: &Transition) -> UpdateKey<'_> {
        UpdateKey {
            to: t.to,
            expects_device: t.expect_device.is_some(),
            reported: t.reported,
            sets_device: t.set_device.is_some(),
            count_attempt: t.count_attempt,
            failure_reason: t.failure_reason.as_ref().map(|r| r.as_str()),
        }
    }
}

/// Applies a group of moves with one [`UpdateKey`] in one `UPDATE … RETURNING`; the messages
/// it moved, by id.
pub(super) async fn apply_group(
    txn: &DatabaseTransaction,
    group: &[&Transition],
    now: i64,
) -> Result<HashMap<Uuid, Message>, StoreError> {
    let ids: Vec<Uuid> = group.iter().map(|t| t.id).collect();
    let ids = crate::store::id_list(&ids);
    move_statement(group, &ids, now)
        .exec_with_returning(txn)
        .await?
        .into_iter()
        .map(|row| {
            let message = Message::try_from(row)?;
            Ok((message.id, message))
        })
        .collect()
}

/// The phone of each move, as one value when they all share it, else
/// `CASE WHEN id = ? THEN ? … END` with as many arms as `ids` (padded like it by repeating the
/// first arm, so the statement keeps one of a handful of shapes).
fn device_by_id(
    group: &[&Transition],
    ids: &[Uuid],
    device: impl Fn(&Transition) -> Option<Uuid>,
) -> Expr {
    let first = device(group[0]);
    if group.iter().all(|t| device(t) == first) {
        return Expr::value(first);
    }
    let mut case = sea_orm::sea_query::CaseStatement::new();
    let padding = std::iter::repeat_n(group[0], ids.len().saturating_sub(group.len()));
    for t in group.iter().copied().chain(padding) {
        case = case.case(messages::Column::Id.eq(t.id), Expr::value(device(t)));
    }
    case.finally(Expr::value(Option::<Uuid>::None)).into()
}

/// The UPDATE of a group of moves with one [`UpdateKey`] (their target status, guards and
/// columns), applied to each of `ids`. A delivery fills `sent_at` when no `sent` came first.
fn move_statement(
    group: &[&Transition],
    ids: &[Uuid],
    now: i64,
) -> sea_orm::UpdateMany<messages::Entity> {
    let t = group[0];
    let from: Vec<&str> = t.to.allowed_from().iter().map(|s| s.as_str()).collect();
    let mut guard = Condition::all().add(messages::Column::Status.is_in(from));
    if t.expect_device.is_some() {
        let expected = device_by_id(group, ids, |t| t.expect_device);
        guard = guard.add(Expr::col(messages::Column::DeviceId).eq(expected));
    }
    if t.reported {
        guard = guard
            .add(messages::Column::Direction.eq(Direction::Outbound.as_str()))
            .add(messages::Column::SendAttempts.gt(0));
    }
    // The guards sit inside a CASE so no index on them can be picked over the primary key:
    // given `id IN (…)` and `device_id = ?` side by side, SQLite's planner chose the
    // (device_id, inbound_ref) index and scanned every message of the phone.
    let mut update = messages::Entity::update_many()
        .col_expr(messages::Column::Status, Expr::value(t.to.as_str()))
        .col_expr(messages::Column::UpdatedAt, Expr::value(now))
        .filter(messages::Column::Id.is_in(ids.iter().copied()))
        .filter(guarded(guard));
    if t.set_device.is_some() {
        update = update.col_expr(
            messages::Column::DeviceId,
            device_by_id(group, ids, |t| t.set_device),
        );
    }
    if t.count_attempt {
        update = update.col_expr(
            messages::Column::SendAttempts,
            Expr::col(messages::Column::SendAttempts).add(1),
        );
    }
    match t.to {
        MessageStatus::Sent => {
            update = update.col_expr(messages::Column::SentAt, Expr::value(now));
        }
        MessageStatus::Delivered => {
            update = update
                .col_expr(messages::Column::DeliveredAt, Expr::value(now))
                .col_expr(
                    messages::Column::SentAt,
                    Expr::from(Func::coalesce([
                        Expr::col(messages::Column::SentAt),
                        Expr::value(now),
                    ])),
                );
        }
        MessageStatus::Failed | MessageStatus::Expired => {
            update = update.col_expr(messages::Column::FailedAt, Expr::value(now));
        }
        _ => {}
    }
    if let Some(reason) = &t.failure_reason {
        update = update.col_expr(
            messages::Column::FailureReason,
            Expr::value(reason.as_str().to_string()),
        );
    }
    update
}

/// `CASE WHEN guard THEN TRUE ELSE FALSE END = TRUE`: the guard as an opaque expression.
fn guarded(guard: Condition) -> Expr {
    let case: Expr = Expr::case(guard, true).finally(false).into();
    case.eq(true)
}

/// Whether the message's timeline has a `sent` entry.
pub(super) async fn has_sent_entry(
    txn: &DatabaseTransaction,
    message_id: Uuid,
) -> Result<bool, StoreError> {
    let recorded = message_events::Entity::find()
        .filter(message_events::Column::MessageId.eq(message_id))
        .filter(message_events::Column::Kind.eq(MessageStatus::Sent.as_str()))
        .count(txn)
        .await?;
    Ok(recorded > 0)
}

/// Reassigns a queued, unpinned message from one phone to the other; the message after it.
/// A move to another number (`to_number`) applies only to a pooled message, and its
/// recipient's sticky line follows it.
pub(super) async fn reroute(
    txn: &DatabaseTransaction,
    r: &Reroute,
    now: i64,
) -> Result<Option<Message>, StoreError> {
    let mut update = messages::Entity::update_many()
        .col_expr(messages::Column::DeviceId, Expr::value(r.to_device))
        .col_expr(messages::Column::UpdatedAt, Expr::value(now))
        .filter(messages::Column::Id.eq(r.id))
        .filter(messages::Column::Status.eq(MessageStatus::Queued.as_str()))
        .filter(messages::Column::DeviceId.eq(r.from_device))
        .filter(messages::Column::Pinned.eq(false));
    if let Some(to_number) = &r.to_number {
        update = update
            .col_expr(messages::Column::FromNumber, Expr::value(to_number.clone()))
            .filter(messages::Column::PoolId.is_not_null());
    }
    let moved = update
        .exec_with_returning(txn)
        .await?
        .into_iter()
        .next()
        .map(Message::try_from)
        .transpose()?;
    if let Some(Message {
        pool_id: Some(pool_id),
        to_number,
        ..
    }) = &moved
    {
        let sticky = pools::Sticky {
            pool_id: *pool_id,
            to_number: to_number.clone(),
            phone_id: r.to_device,
        };
        pools::stick(txn, &[sticky], now).await?;
    }
    Ok(moved)
}
