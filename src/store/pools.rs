//! Sender pools (docs/api.md, "Pools"): a named set of phones (lines) of one workspace and
//! mode, its lines in the order given, and the sticky line of each recipient
//! (`pool_recipients`), which is kept apart from messages so it outlives their retention.
//!
//! A pool's name is unique per scope by a unique index: two creates racing on one name make
//! one `Conflict`. The sticky rows of sends and reroutes are written by the writer in the
//! message's own transaction ([`stick`]), an inbound SMS's too ([`inbound_sticky`]).

use std::collections::{HashMap, HashSet};

use entity::{messages, phones, pool_phones, pool_recipients, pools};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, Set,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::{Message, Position};
use super::scoped::{Scope, find_in_scope};
use crate::domain::status::{MessageStatus, Mode};

/// Most phones in one pool (docs/api.md, "Pools").
pub const MAX_POOL_PHONES: usize = 100;

/// A stored pool with its lines, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRecord {
    pub id: Uuid,
    pub scope: Scope,
    pub name: String,
    pub phone_ids: Vec<Uuid>,
    pub created_at: i64,
}

impl PoolRecord {
    fn of(row: pools::Model, phone_ids: Vec<Uuid>) -> PoolRecord {
        PoolRecord {
            id: row.id,
            scope: Scope {
                workspace_id: row.workspace_id.into(),
                mode: Mode::from_test_flag(row.test_mode),
            },
            name: row.name,
            phone_ids,
            created_at: row.created_at,
        }
    }
}

/// One line of a pool as the choice of a sender sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLine {
    pub phone_id: Uuid,
    pub phone_number: String,
}

/// A sticky row to write: `to_number` of `pool_id` goes out from `phone_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sticky {
    pub pool_id: Uuid,
    pub to_number: String,
    pub phone_id: Uuid,
}

/// Which of `ids` are phones of `scope`.
pub async fn phones_in_scope(
    db: &DatabaseConnection,
    scope: Scope,
    ids: &[Uuid],
) -> Result<HashSet<Uuid>, StoreError> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let rows = phones::Entity::find()
        .filter(scope.of::<phones::Entity>())
        .filter(phones::Column::Id.is_in(ids.iter().copied()))
        .all(db)
        .await?;
    Ok(rows.into_iter().map(|p| p.id).collect())
}

/// Creates a pool of `phone_ids` (already checked to be phones of `scope`, distinct);
/// `Conflict` when `scope` has a pool of that name.
pub async fn create(
    db: &DatabaseConnection,
    scope: Scope,
    name: String,
    phone_ids: Vec<Uuid>,
    now: i64,
) -> Result<PoolRecord, StoreError> {
    let txn = super::begin_write(db).await?;
    let row = pools::ActiveModel {
        id: Set(Uuid::now_v7()),
        workspace_id: Set(scope.workspace_id.as_uuid()),
        test_mode: Set(scope.mode.is_test()),
        name: Set(name),
        created_at: Set(now),
    };
    let row = pools::Entity::insert(row)
        .exec_with_returning(&txn)
        .await
        .map_err(StoreError::from)?;
    set_phones(&txn, row.id, &phone_ids).await?;
    txn.commit().await?;
    Ok(PoolRecord::of(row, phone_ids))
}

/// Replaces the pool's lines.
async fn set_phones(
    txn: &impl ConnectionTrait,
    pool_id: Uuid,
    phone_ids: &[Uuid],
) -> Result<(), StoreError> {
    pool_phones::Entity::delete_many()
        .filter(pool_phones::Column::PoolId.eq(pool_id))
        .exec(txn)
        .await?;
    let rows: Vec<pool_phones::ActiveModel> = phone_ids
        .iter()
        .enumerate()
        .map(|(i, id)| pool_phones::ActiveModel {
            pool_id: Set(pool_id),
            phone_id: Set(*id),
            position: Set(i32::try_from(i).unwrap_or(i32::MAX)),
        })
        .collect();
    if !rows.is_empty() {
        pool_phones::Entity::insert_many(rows)
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// The phone ids of each of `pool_ids`, in their order.
async fn phones_of(
    db: &impl ConnectionTrait,
    pool_ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<Uuid>>, StoreError> {
    let mut of: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    if pool_ids.is_empty() {
        return Ok(of);
    }
    let rows = pool_phones::Entity::find()
        .filter(pool_phones::Column::PoolId.is_in(pool_ids.iter().copied()))
        .order_by_asc(pool_phones::Column::Position)
        .all(db)
        .await?;
    for row in rows {
        of.entry(row.pool_id).or_default().push(row.phone_id);
    }
    Ok(of)
}

/// The pool `id` of `scope`.
pub async fn get(
    db: &DatabaseConnection,
    scope: Scope,
    id: Uuid,
) -> Result<PoolRecord, StoreError> {
    let row = find_in_scope::<pools::Entity>(db, scope, id).await?;
    let mut phones = phones_of(db, &[row.id]).await?;
    let ids = phones.remove(&row.id).unwrap_or_default();
    Ok(PoolRecord::of(row, ids))
}

/// The pool of `scope` named `name`.
pub async fn by_name(
    db: &DatabaseConnection,
    scope: Scope,
    name: &str,
) -> Result<PoolRecord, StoreError> {
    let row = pools::Entity::find()
        .filter(scope.of::<pools::Entity>())
        .filter(pools::Column::Name.eq(name))
        .one(db)
        .await?
        .ok_or(StoreError::NotFound)?;
    let mut phones = phones_of(db, &[row.id]).await?;
    let ids = phones.remove(&row.id).unwrap_or_default();
    Ok(PoolRecord::of(row, ids))
}

/// A page of the pools of `scope`, newest first.
pub async fn list(
    db: &DatabaseConnection,
    scope: Scope,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<PoolRecord>, bool), StoreError> {
    let (rows, has_more): (Vec<pools::Model>, bool) = super::newest_first(
        db,
        pools::Entity::find().filter(scope.of::<pools::Entity>()),
        (pools::Column::CreatedAt, pools::Column::Id),
        after,
        limit,
    )
    .await?;
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let mut phones = phones_of(db, &ids).await?;
    let records = rows
        .into_iter()
        .map(|row| {
            let ids = phones.remove(&row.id).unwrap_or_default();
            PoolRecord::of(row, ids)
        })
        .collect();
    Ok((records, has_more))
}

/// Renames the pool and/or replaces its lines; `Conflict` when the new name is taken.
pub async fn update(
    db: &DatabaseConnection,
    scope: Scope,
    id: Uuid,
    name: Option<String>,
    phone_ids: Option<Vec<Uuid>>,
) -> Result<PoolRecord, StoreError> {
    let txn = super::begin_write(db).await?;
    let mut row = find_in_scope::<pools::Entity>(&txn, scope, id).await?;
    if let Some(name) = name {
        let mut active: pools::ActiveModel = row.clone().into();
        active.name = Set(name);
        row = pools::Entity::update(active).exec(&txn).await?;
    }
    if let Some(ids) = &phone_ids {
        set_phones(&txn, id, ids).await?;
        // A recipient stuck to a line that left the pool chooses again.
        pool_recipients::Entity::delete_many()
            .filter(pool_recipients::Column::PoolId.eq(id))
            .filter(pool_recipients::Column::PhoneId.is_not_in(ids.iter().copied()))
            .exec(&txn)
            .await?;
    }
    let mut phones = phones_of(&txn, &[id]).await?;
    txn.commit().await?;
    Ok(PoolRecord::of(row, phones.remove(&id).unwrap_or_default()))
}

/// Deletes the pool, its lines and its sticky rows; messages keep their `pool_id`.
pub async fn delete(db: &DatabaseConnection, scope: Scope, id: Uuid) -> Result<(), StoreError> {
    let txn = super::begin_write(db).await?;
    let delete = pools::Entity::delete_many()
        .filter(pools::Column::Id.eq(id))
        .filter(scope.of::<pools::Entity>());
    super::delete_found(&txn, delete).await?;
    pool_phones::Entity::delete_many()
        .filter(pool_phones::Column::PoolId.eq(id))
        .exec(&txn)
        .await?;
    pool_recipients::Entity::delete_many()
        .filter(pool_recipients::Column::PoolId.eq(id))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(())
}

/// Takes the phones `phone_ids` (a phone being deleted, and its SIM lines) out of every pool,
/// in the deleting transaction.
pub(crate) async fn forget_phones(
    txn: &impl ConnectionTrait,
    phone_ids: &[Uuid],
) -> Result<(), StoreError> {
    if phone_ids.is_empty() {
        return Ok(());
    }
    pool_phones::Entity::delete_many()
        .filter(pool_phones::Column::PhoneId.is_in(phone_ids.iter().copied()))
        .exec(txn)
        .await?;
    pool_recipients::Entity::delete_many()
        .filter(pool_recipients::Column::PhoneId.is_in(phone_ids.iter().copied()))
        .exec(txn)
        .await?;
    Ok(())
}

/// The lines of the pool `pool_id`, in its order, with their numbers.
pub async fn lines(db: &DatabaseConnection, pool_id: Uuid) -> Result<Vec<PoolLine>, StoreError> {
    let ids = phones_of(db, &[pool_id])
        .await?
        .remove(&pool_id)
        .unwrap_or_default();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let numbers: HashMap<Uuid, String> = phones::Entity::find()
        .filter(phones::Column::Id.is_in(ids.iter().copied()))
        .all(db)
        .await?
        .into_iter()
        .map(|p| (p.id, p.phone_number))
        .collect();
    Ok(ids
        .into_iter()
        .filter_map(|id| {
            numbers.get(&id).map(|n| PoolLine {
                phone_id: id,
                phone_number: n.clone(),
            })
        })
        .collect())
}

/// The sticky line of each of `to_numbers` in the pool that has one.
pub async fn sticky(
    db: &DatabaseConnection,
    pool_id: Uuid,
    to_numbers: &[String],
) -> Result<HashMap<String, Uuid>, StoreError> {
    let mut found = HashMap::new();
    for chunk in to_numbers.chunks(500) {
        let rows = pool_recipients::Entity::find()
            .filter(pool_recipients::Column::PoolId.eq(pool_id))
            .filter(pool_recipients::Column::ToNumber.is_in(chunk.iter().cloned()))
            .all(db)
            .await?;
        found.extend(rows.into_iter().map(|r| (r.to_number, r.phone_id)));
    }
    Ok(found)
}

/// Writes sticky rows (the last of each pool and recipient wins), inside the caller's
/// transaction: the writer's, with the messages they come from.
pub(crate) async fn stick(
    txn: &impl ConnectionTrait,
    rows: &[Sticky],
    now: i64,
) -> Result<(), StoreError> {
    // One row per key: PostgreSQL refuses an upsert that touches a row twice.
    let mut last: HashMap<(Uuid, &str), Uuid> = HashMap::new();
    for row in rows {
        last.insert((row.pool_id, row.to_number.as_str()), row.phone_id);
    }
    let mut rows: Vec<pool_recipients::ActiveModel> = last
        .into_iter()
        .map(
            |((pool_id, to_number), phone_id)| pool_recipients::ActiveModel {
                pool_id: Set(pool_id),
                to_number: Set(to_number.to_string()),
                phone_id: Set(phone_id),
                updated_at: Set(now),
            },
        )
        .collect();
    while !rows.is_empty() {
        let rest = rows.split_off(rows.len().min(256));
        let chunk = std::mem::replace(&mut rows, rest);
        pool_recipients::Entity::insert_many(chunk)
            .on_conflict(
                OnConflict::columns([
                    pool_recipients::Column::PoolId,
                    pool_recipients::Column::ToNumber,
                ])
                .update_columns([
                    pool_recipients::Column::PhoneId,
                    pool_recipients::Column::UpdatedAt,
                ])
                .to_owned(),
            )
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// The sticky rows of SMS received: each `(line, sender)` sticks the sender to the line in
/// every pool of that line (docs/api.md, "Pools"). One query for the batch.
pub(crate) async fn inbound_sticky(
    txn: &impl ConnectionTrait,
    received: &[(Uuid, String)],
) -> Result<Vec<Sticky>, StoreError> {
    if received.is_empty() {
        return Ok(Vec::new());
    }
    let mut pools_of: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    let lines: HashSet<Uuid> = received.iter().map(|(line, _)| *line).collect();
    for row in pool_phones::Entity::find()
        .filter(pool_phones::Column::PhoneId.is_in(lines))
        .all(txn)
        .await?
    {
        pools_of.entry(row.phone_id).or_default().push(row.pool_id);
    }
    Ok(received
        .iter()
        .flat_map(|(line, from)| {
            pools_of
                .get(line)
                .into_iter()
                .flatten()
                .map(move |pool_id| Sticky {
                    pool_id: *pool_id,
                    to_number: from.clone(),
                    phone_id: *line,
                })
        })
        .collect())
}

/// Up to `limit` lines that have queued pooled messages waiting (the failover sweep's
/// candidates, docs/api.md "Pools").
pub async fn lines_with_pooled_queue(
    db: &DatabaseConnection,
    limit: u64,
) -> Result<Vec<Uuid>, StoreError> {
    use sea_orm::QuerySelect;
    let rows: Vec<Option<Uuid>> = messages::Entity::find()
        .select_only()
        .column(messages::Column::DeviceId)
        .distinct()
        .filter(messages::Column::Status.eq(MessageStatus::Queued.as_str()))
        .filter(messages::Column::PoolId.is_not_null())
        .filter(messages::Column::Pinned.eq(false))
        .filter(messages::Column::DeviceId.is_not_null())
        .limit(limit)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows.into_iter().flatten().collect())
}

/// Up to `limit` queued pooled messages waiting on the line `phone_id`, oldest first.
pub async fn pooled_waiting_on(
    db: &DatabaseConnection,
    phone_id: Uuid,
    limit: u64,
) -> Result<Vec<Message>, StoreError> {
    use sea_orm::QuerySelect;
    let query = messages::Entity::find()
        .filter(messages::Column::Status.eq(MessageStatus::Queued.as_str()))
        .filter(messages::Column::PoolId.is_not_null())
        .filter(messages::Column::Pinned.eq(false))
        .filter(messages::Column::DeviceId.eq(phone_id))
        .order_by_asc(messages::Column::CreatedAt)
        .limit(limit);
    super::rows_as(db, query).await
}
