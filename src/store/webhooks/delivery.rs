//! Deliveries and attempts: pending deliveries for the endpoint actors, manual retries, and the
//! group-commit recorder of attempts.

use super::*;

/// A delivery still to attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingDelivery {
    pub id: Uuid,
    pub endpoint_id: EndpointId,
    pub event: String,
    pub event_id: Uuid,
    pub message_id: Uuid,
    /// Attempts made so far.
    pub attempts: u32,
    pub next_attempt_at: i64,
    /// When the event happened (the payload's timestamp).
    pub created_at: i64,
}

impl From<webhook_deliveries::Model> for PendingDelivery {
    fn from(m: webhook_deliveries::Model) -> Self {
        PendingDelivery {
            id: m.id,
            endpoint_id: m.endpoint_id.into(),
            event: m.event,
            event_id: m.event_id,
            message_id: m.message_id,
            attempts: u32::try_from(m.attempts).unwrap_or(0),
            next_attempt_at: m.next_attempt_at.unwrap_or(m.created_at),
            created_at: m.created_at,
        }
    }
}

/// The current records of these messages (the bodies of a batch of attempts); messages
/// removed by retention are absent.
pub async fn messages_by_id(
    db: &DatabaseConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Message>, StoreError> {
    let mut found = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(crate::store::IDS_PER_STATEMENT) {
        let rows = entity::messages::Entity::find()
            .filter(entity::messages::Column::Id.is_in(crate::store::id_list(chunk)))
            .all(db)
            .await?;
        for row in rows {
            found.insert(row.id, Message::try_from(row)?);
        }
    }
    Ok(found)
}

/// Inserts new deliveries inside the writer's transaction.
pub async fn insert_deliveries(
    txn: &DatabaseTransaction,
    deliveries: &[PendingDelivery],
) -> Result<(), StoreError> {
    for chunk in crate::store::shaped_chunks(deliveries, ROWS_PER_INSERT) {
        let rows = chunk.iter().map(|d| webhook_deliveries::ActiveModel {
            id: Set(d.id),
            endpoint_id: Set(d.endpoint_id.as_uuid()),
            event: Set(d.event.clone()),
            event_id: Set(d.event_id),
            message_id: Set(d.message_id),
            state: Set(DeliveryState::Pending.as_str().to_string()),
            attempts: Set(i32::try_from(d.attempts).unwrap_or(i32::MAX)),
            next_attempt_at: Set(Some(d.next_attempt_at)),
            created_at: Set(d.created_at),
            updated_at: Set(d.created_at),
        });
        webhook_deliveries::Entity::insert_many(rows)
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// The pending deliveries of one endpoint (its actor's queue after a start).
pub async fn pending_for(
    db: &DatabaseConnection,
    endpoint_id: EndpointId,
) -> Result<Vec<PendingDelivery>, StoreError> {
    pending_of(db, endpoint_id, None).await
}

/// The pending deliveries of one endpoint, soonest due first: all of them (its actor's queue
/// after a start), or those among `ids` (by primary key: what another node stored and named).
pub async fn pending_of(
    db: &DatabaseConnection,
    endpoint_id: EndpointId,
    ids: Option<&[Uuid]>,
) -> Result<Vec<PendingDelivery>, StoreError> {
    let mut query = webhook_deliveries::Entity::find()
        .filter(webhook_deliveries::Column::State.eq(DeliveryState::Pending.as_str()))
        .filter(webhook_deliveries::Column::EndpointId.eq(endpoint_id));
    if let Some(ids) = ids {
        query = query.filter(webhook_deliveries::Column::Id.is_in(crate::store::id_list(ids)));
    }
    let query = query.order_by_asc(webhook_deliveries::Column::NextAttemptAt);
    crate::store::rows_as(db, query).await
}

/// Endpoints that have pending deliveries (their actors start with the registry).
pub async fn endpoints_with_pending(
    db: &DatabaseConnection,
) -> Result<Vec<EndpointId>, StoreError> {
    let ids: Vec<Uuid> = webhook_deliveries::Entity::find()
        .select_only()
        .column(webhook_deliveries::Column::EndpointId)
        .distinct()
        .filter(webhook_deliveries::Column::State.eq(DeliveryState::Pending.as_str()))
        .into_tuple()
        .all(db)
        .await?;
    Ok(ids.into_iter().map(EndpointId::from).collect())
}

/// Makes a delivery of this endpoint due now (manual retry); `id` may name the delivery or
/// one of its attempts. A finished delivery becomes pending again for one more attempt.
pub async fn retry_now(
    db: &DatabaseConnection,
    endpoint_id: EndpointId,
    id: Uuid,
    now_ms: i64,
) -> Result<PendingDelivery, StoreError> {
    let delivery_id = match webhook_deliveries::Entity::find_by_id(id)
        .filter(webhook_deliveries::Column::EndpointId.eq(endpoint_id))
        .one(db)
        .await?
    {
        Some(d) => d.id,
        None => {
            webhook_attempts::Entity::find_by_id(id)
                .filter(webhook_attempts::Column::EndpointId.eq(endpoint_id))
                .one(db)
                .await?
                .ok_or(StoreError::NotFound)?
                .delivery_id
        }
    };
    let model = webhook_deliveries::Entity::update_many()
        .col_expr(
            webhook_deliveries::Column::State,
            Expr::value(DeliveryState::Pending.as_str()),
        )
        .col_expr(
            webhook_deliveries::Column::NextAttemptAt,
            Expr::value(now_ms),
        )
        .col_expr(webhook_deliveries::Column::UpdatedAt, Expr::value(now_ms))
        .filter(webhook_deliveries::Column::Id.eq(delivery_id))
        .exec_with_returning(db)
        .await?
        .into_iter()
        .next()
        .ok_or(StoreError::NotFound)?;
    Ok(model.into())
}

/// The outcome of one attempt, to record.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub delivery: PendingDelivery,
    /// This attempt's number (from 1).
    pub attempt: u32,
    pub status_code: Option<u16>,
    pub error: Option<&'static str>,
    pub error_detail: Option<String>,
    pub duration_ms: i64,
    pub attempted_at: i64,
    /// Set when another attempt is scheduled.
    pub next_attempt_at: Option<i64>,
    pub state: DeliveryState,
    /// The endpoint's lease the attempt was made under (a cluster node): recorded only while
    /// the lease is still held with this fence. None on a single node.
    pub lease: Option<Lease>,
}

/// What became of a recorded attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The attempt row and the delivery's new state were written.
    Written,
    /// The delivery had moved on (deleted, or this attempt number was recorded already).
    MovedOn,
    /// The endpoint's lease moved to another node (or expired): nothing was written, and the
    /// actor that made the attempt no longer owns the endpoint.
    LeaseLost,
}

/// A recorded attempt as the deliveries log shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    pub id: Uuid,
    pub delivery_id: Uuid,
    pub event: String,
    pub event_id: Uuid,
    pub message_id: Uuid,
    pub attempt: u32,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub error_detail: Option<String>,
    pub duration_ms: i64,
    pub attempted_at: i64,
    pub next_attempt_at: Option<i64>,
    pub state: String,
}

impl From<webhook_attempts::Model> for AttemptRow {
    fn from(m: webhook_attempts::Model) -> Self {
        AttemptRow {
            id: m.id,
            delivery_id: m.delivery_id,
            event: m.event,
            event_id: m.event_id,
            message_id: m.message_id,
            attempt: u32::try_from(m.attempt).unwrap_or(0),
            status_code: m.status_code.and_then(|c| u16::try_from(c).ok()),
            error: m.error,
            error_detail: m.error_detail,
            duration_ms: m.duration_ms,
            attempted_at: m.attempted_at,
            next_attempt_at: m.next_attempt_at,
            state: m.state,
        }
    }
}

/// Attempts of one endpoint, newest first by (attempted_at, id), after `after`.
pub async fn list_attempts(
    db: &DatabaseConnection,
    endpoint_id: EndpointId,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<AttemptRow>, bool), StoreError> {
    crate::store::newest_first(
        db,
        webhook_attempts::Entity::find()
            .filter(webhook_attempts::Column::EndpointId.eq(endpoint_id)),
        (
            webhook_attempts::Column::AttemptedAt,
            webhook_attempts::Column::Id,
        ),
        after,
        limit,
    )
    .await
}

/// Moves each delivery to its attempt's outcome, only if no other attempt with that number was
/// recorded first and, for an attempt made under a lease, while that lease is still held with
/// its fence (one `FOR SHARE` read for the batch, `store::cluster::still_held`, so the lease
/// cannot move before the commit). Returns per record what became of it and the attempt row to
/// insert. Records with the same outcome share one `UPDATE … WHERE id IN (…)`, lowest attempt
/// number first; `updated_at` is the commit time.
pub(in crate::store) async fn apply_attempts(
    txn: &DatabaseTransaction,
    records: &[&AttemptRecord],
    now: i64,
) -> Result<Vec<(Recorded, Option<webhook_attempts::ActiveModel>)>, StoreError> {
    type Outcome = (u32, DeliveryState, Option<i64>);
    let fences: Vec<&Lease> = records.iter().filter_map(|r| r.lease.as_ref()).collect();
    let held = if fences.is_empty() {
        HashSet::new()
    } else {
        crate::store::cluster::still_held(txn, &fences).await?
    };
    let lost: Vec<bool> = records
        .iter()
        .map(|r| r.lease.as_ref().is_some_and(|lease| !held.contains(lease)))
        .collect();
    let mut groups: Vec<(Outcome, Vec<usize>)> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if lost[i] {
            tracing::warn!(delivery_id = %r.delivery.id, "attempt not recorded: the endpoint's lease moved to another node");
            continue;
        }
        let key = (r.attempt, r.state, r.next_attempt_at);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    groups.sort_by_key(|((attempt, _, _), _)| *attempt);
    let mut applied = vec![false; records.len()];
    for ((attempt, state, next_attempt_at), members) in groups {
        // The first record of a delivery and attempt number wins; a repeat is refused.
        let mut seen = HashSet::with_capacity(members.len());
        let firsts: Vec<usize> = members
            .into_iter()
            .filter(|&i| seen.insert(records[i].delivery.id))
            .collect();
        let attempts_before = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        for chunk in firsts.chunks(crate::store::IDS_PER_STATEMENT) {
            let ids: Vec<Uuid> = chunk.iter().map(|&i| records[i].delivery.id).collect();
            let moved: HashSet<Uuid> = webhook_deliveries::Entity::update_many()
                .col_expr(
                    webhook_deliveries::Column::State,
                    Expr::value(state.as_str()),
                )
                .col_expr(
                    webhook_deliveries::Column::Attempts,
                    Expr::value(i32::try_from(attempt).unwrap_or(i32::MAX)),
                )
                .col_expr(
                    webhook_deliveries::Column::NextAttemptAt,
                    Expr::value(next_attempt_at),
                )
                .col_expr(webhook_deliveries::Column::UpdatedAt, Expr::value(now))
                .filter(webhook_deliveries::Column::Id.is_in(crate::store::id_list(&ids)))
                .filter(webhook_deliveries::Column::Attempts.eq(attempts_before))
                .exec_with_returning(txn)
                .await?
                .into_iter()
                .map(|row| row.id)
                .collect();
            for &i in chunk {
                applied[i] = moved.contains(&records[i].delivery.id);
            }
        }
    }
    Ok(records
        .iter()
        .zip(applied)
        .zip(lost)
        .map(|((r, applied), lost)| match (lost, applied) {
            (true, _) => (Recorded::LeaseLost, None),
            (false, true) => (Recorded::Written, Some(attempt_row(r))),
            (false, false) => (Recorded::MovedOn, None),
        })
        .collect())
}

fn attempt_row(r: &AttemptRecord) -> webhook_attempts::ActiveModel {
    webhook_attempts::ActiveModel {
        id: Set(Uuid::now_v7()),
        delivery_id: Set(r.delivery.id),
        endpoint_id: Set(r.delivery.endpoint_id.as_uuid()),
        event: Set(r.delivery.event.clone()),
        event_id: Set(r.delivery.event_id),
        message_id: Set(r.delivery.message_id),
        attempt: Set(i32::try_from(r.attempt).unwrap_or(i32::MAX)),
        status_code: Set(r.status_code.map(i32::from)),
        error: Set(r.error.map(str::to_string)),
        error_detail: Set(r.error_detail.clone()),
        duration_ms: Set(r.duration_ms),
        attempted_at: Set(r.attempted_at),
        next_attempt_at: Set(r.next_attempt_at),
        state: Set(r.state.as_str().to_string()),
    }
}

/// Inserts attempt rows in multi-row statements.
pub(in crate::store) async fn insert_attempts(
    txn: &DatabaseTransaction,
    rows: &[webhook_attempts::ActiveModel],
) -> Result<(), StoreError> {
    for chunk in crate::store::shaped_chunks(rows, ROWS_PER_INSERT) {
        webhook_attempts::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}
