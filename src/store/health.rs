//! Phone health and alert episodes (docs/api.md, "Phone health"): the latest facts each device
//! reported (`phone_health`, merged field by field in one upsert, so two reports racing on two
//! nodes each keep what the other left out), and the current episode of each alert kind of
//! each phone (`phone_alerts`). Opening, ending and alerting an episode are conditional
//! updates: whichever node or restart gets there first does it, the others change nothing, so
//! an episode alerts once.

use std::collections::HashMap;

use entity::{phone_alerts, phone_events, phone_health};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, IdenStatic, QueryFilter, QuerySelect, Set,
};
use uuid::Uuid;

use super::StoreError;
use crate::domain::health::{AlertKind, HealthReport, Network, PhoneHealth, SimCard};

fn read(row: phone_health::Model) -> Result<PhoneHealth, StoreError> {
    let corrupt =
        |column, value: String| StoreError::corrupt("phone_health", column, row.phone_id, value);
    Ok(PhoneHealth {
        battery_percent: row
            .battery_percent
            .map(|b| u8::try_from(b).map_err(|_| corrupt("battery_percent", b.to_string())))
            .transpose()?,
        charging: row.charging,
        network: row
            .network
            .as_deref()
            .map(|n| {
                n.parse::<Network>()
                    .map_err(|_| corrupt("network", n.to_string()))
            })
            .transpose()?,
        sims: row
            .sims
            .as_deref()
            .map(|s| {
                serde_json::from_str::<Vec<SimCard>>(s).map_err(|_| corrupt("sims", s.to_string()))
            })
            .transpose()?,
        reported_at: row.reported_at,
    })
}

/// Stores `report` of device `phone_id` over what it reported before, and answers the result.
#[tracing::instrument(skip_all, fields(phone_id = %phone_id))]
pub async fn record(
    db: &DatabaseConnection,
    phone_id: Uuid,
    report: HealthReport,
    now_ms: i64,
) -> Result<PhoneHealth, StoreError> {
    let sims = report
        .sims
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|err| StoreError::corrupt("phone_health", "sims", phone_id, err.to_string()))?;
    let row = phone_health::ActiveModel {
        phone_id: Set(phone_id),
        battery_percent: Set(report.battery_percent.map(i32::from)),
        charging: Set(report.charging),
        network: Set(report.network.map(|n| n.as_str().to_string())),
        sims: Set(sims),
        reported_at: Set(now_ms),
    };
    let mut on_conflict = OnConflict::column(phone_health::Column::PhoneId);
    // What the report leaves out (null) keeps its stored value: the same text on SQLite and
    // PostgreSQL.
    for column in [
        phone_health::Column::BatteryPercent,
        phone_health::Column::Charging,
        phone_health::Column::Network,
        phone_health::Column::Sims,
    ] {
        let name = column.as_str();
        on_conflict.value(
            column,
            Expr::cust(format!("COALESCE(excluded.{name}, phone_health.{name})")),
        );
    }
    on_conflict.update_column(phone_health::Column::ReportedAt);
    phone_health::Entity::insert(row)
        .on_conflict(on_conflict)
        .exec(db)
        .await?;
    let stored = phone_health::Entity::find_by_id(phone_id).one(db).await?;
    match stored {
        Some(row) => read(row),
        None => Ok(report.merged_over(None, now_ms)),
    }
}

/// The health of each of these devices that reported any.
pub async fn of(
    db: &DatabaseConnection,
    phone_ids: &[Uuid],
) -> Result<HashMap<Uuid, PhoneHealth>, StoreError> {
    if phone_ids.is_empty() {
        return Ok(HashMap::new());
    }
    phone_health::Entity::find()
        .filter(phone_health::Column::PhoneId.is_in(phone_ids.iter().copied()))
        .all(db)
        .await?
        .into_iter()
        .map(|row| Ok((row.phone_id, read(row)?)))
        .collect()
}

/// An open alert episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenAlert {
    pub kind: AlertKind,
    /// When the episode began (ms).
    pub since: i64,
    /// Whether its webhook fired.
    pub alerted: bool,
}

/// Opens an episode of `kind` for `phone_id` since `since`, unless one is open. True when this
/// call opened it.
#[tracing::instrument(skip_all, fields(phone_id = %phone_id, kind = kind.as_str()))]
pub async fn open_episode(
    db: &DatabaseConnection,
    phone_id: Uuid,
    kind: AlertKind,
    since: i64,
) -> Result<bool, StoreError> {
    // Only for a phone that still exists, checked in the transaction that opens the episode:
    // the phone's row is locked against an unpair meanwhile (PostgreSQL; SQLite's write
    // transactions take turns), which deletes its episodes after the phone.
    let txn = super::begin_write(db).await?;
    let exists = entity::phones::Entity::find_by_id(phone_id)
        .lock_shared()
        .one(&txn)
        .await?
        .is_some();
    if !exists {
        return Ok(false);
    }
    let opened = open_episode_in(&txn, phone_id, kind, since).await?;
    txn.commit().await?;
    Ok(opened)
}

async fn open_episode_in(
    db: &sea_orm::DatabaseTransaction,
    phone_id: Uuid,
    kind: AlertKind,
    since: i64,
) -> Result<bool, StoreError> {
    let inserted = phone_alerts::Entity::insert(phone_alerts::ActiveModel {
        phone_id: Set(phone_id),
        kind: Set(kind.as_str().to_string()),
        since: Set(since),
        ended_at: Set(None),
        alerted_at: Set(None),
    })
    .on_conflict(
        OnConflict::columns([phone_alerts::Column::PhoneId, phone_alerts::Column::Kind])
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    if inserted == 1 {
        return Ok(true);
    }
    // The previous episode ended: this one starts afresh.
    let reopened = phone_alerts::Entity::update_many()
        .col_expr(phone_alerts::Column::Since, Expr::value(since))
        .col_expr(
            phone_alerts::Column::EndedAt,
            Expr::value(Option::<i64>::None),
        )
        .col_expr(
            phone_alerts::Column::AlertedAt,
            Expr::value(Option::<i64>::None),
        )
        .filter(phone_alerts::Column::PhoneId.eq(phone_id))
        .filter(phone_alerts::Column::Kind.eq(kind.as_str()))
        .filter(phone_alerts::Column::EndedAt.is_not_null())
        .exec(db)
        .await?;
    Ok(reopened.rows_affected == 1)
}

/// Ends the open episode of `kind` for `phone_id` at `now_ms`. Some(whether it had alerted)
/// when this call ended it; None when none was open.
#[tracing::instrument(skip_all, fields(phone_id = %phone_id, kind = kind.as_str()))]
pub async fn end_episode(
    db: &DatabaseConnection,
    phone_id: Uuid,
    kind: AlertKind,
    now_ms: i64,
) -> Result<Option<bool>, StoreError> {
    let Some(open) = phone_alerts::Entity::find_by_id((phone_id, kind.as_str().to_string()))
        .one(db)
        .await?
        .filter(|row| row.ended_at.is_none())
    else {
        return Ok(None);
    };
    let ended = phone_alerts::Entity::update_many()
        .col_expr(phone_alerts::Column::EndedAt, Expr::value(now_ms))
        .filter(phone_alerts::Column::PhoneId.eq(phone_id))
        .filter(phone_alerts::Column::Kind.eq(kind.as_str()))
        .filter(phone_alerts::Column::EndedAt.is_null())
        .filter(phone_alerts::Column::Since.eq(open.since))
        .exec(db)
        .await?;
    Ok((ended.rows_affected == 1).then_some(open.alerted_at.is_some()))
}

/// Claims the alert of the open episode of `kind` for `phone_id` that began at or before
/// `began_by`: true for exactly one caller per episode, which then fires its webhook.
#[tracing::instrument(skip_all, fields(phone_id = %phone_id, kind = kind.as_str()))]
pub async fn claim_alert(
    db: &DatabaseConnection,
    phone_id: Uuid,
    kind: AlertKind,
    began_by: i64,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let claimed = phone_alerts::Entity::update_many()
        .col_expr(phone_alerts::Column::AlertedAt, Expr::value(now_ms))
        .filter(phone_alerts::Column::PhoneId.eq(phone_id))
        .filter(phone_alerts::Column::Kind.eq(kind.as_str()))
        .filter(phone_alerts::Column::EndedAt.is_null())
        .filter(phone_alerts::Column::AlertedAt.is_null())
        .filter(phone_alerts::Column::Since.lte(began_by))
        .exec(db)
        .await?;
    Ok(claimed.rows_affected == 1)
}

/// The open episodes of each of these phones that has any.
pub async fn open_alerts(
    db: &DatabaseConnection,
    phone_ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<OpenAlert>>, StoreError> {
    let mut out: HashMap<Uuid, Vec<OpenAlert>> = HashMap::new();
    if phone_ids.is_empty() {
        return Ok(out);
    }
    let rows = phone_alerts::Entity::find()
        .filter(phone_alerts::Column::PhoneId.is_in(phone_ids.iter().copied()))
        .filter(phone_alerts::Column::EndedAt.is_null())
        .all(db)
        .await?;
    for row in rows {
        let kind = row.kind.parse::<AlertKind>().map_err(|_| {
            StoreError::corrupt("phone_alerts", "kind", row.phone_id, row.kind.clone())
        })?;
        out.entry(row.phone_id).or_default().push(OpenAlert {
            kind,
            since: row.since,
            alerted: row.alerted_at.is_some(),
        });
    }
    Ok(out)
}

/// The open episodes of `kind` that have not alerted, began at or before `began_by` (the
/// offline alerts due after a restart or on another node).
pub async fn due_alerts(
    db: &DatabaseConnection,
    kind: AlertKind,
    began_by: i64,
) -> Result<Vec<(Uuid, i64)>, StoreError> {
    Ok(phone_alerts::Entity::find()
        .filter(phone_alerts::Column::Kind.eq(kind.as_str()))
        .filter(phone_alerts::Column::EndedAt.is_null())
        .filter(phone_alerts::Column::AlertedAt.is_null())
        .filter(phone_alerts::Column::Since.lte(began_by))
        .all(db)
        .await?
        .into_iter()
        .map(|row| (row.phone_id, row.since))
        .collect())
}

/// Stores a fired alert event of `phone_id` (its name and data) and its deliveries, in one
/// transaction: the deliveries name the event row as their subject.
#[tracing::instrument(skip_all, fields(phone_id = %phone_id, event = %event))]
pub async fn record_event(
    db: &DatabaseConnection,
    id: Uuid,
    phone_id: Uuid,
    event: &str,
    data: &serde_json::Value,
    deliveries: &[crate::store::webhooks::PendingDelivery],
    now_ms: i64,
) -> Result<(), StoreError> {
    use sea_orm::TransactionTrait;
    let txn = db.begin().await?;
    phone_events::Entity::insert(phone_events::ActiveModel {
        id: Set(id),
        phone_id: Set(phone_id),
        event: Set(event.to_string()),
        data: Set(data.to_string()),
        created_at: Set(now_ms),
    })
    .exec_without_returning(&txn)
    .await?;
    crate::store::webhooks::insert_deliveries(&txn, deliveries).await?;
    txn.commit().await?;
    Ok(())
}

/// The data of these fired alert events (the bodies of a batch of attempts), by id.
pub async fn events_by_id(
    db: &DatabaseConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, serde_json::Value>, StoreError> {
    let mut found = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(crate::store::IDS_PER_STATEMENT) {
        let rows = phone_events::Entity::find()
            .filter(phone_events::Column::Id.is_in(chunk.iter().copied()))
            .all(db)
            .await?;
        for row in rows {
            let data = serde_json::from_str(&row.data).map_err(|_| {
                StoreError::corrupt("phone_events", "data", row.id, row.data.clone())
            })?;
            found.insert(row.id, data);
        }
    }
    Ok(found)
}

/// Deletes up to `batch` fired alert events stored at or before `cutoff_ms` (retention: they
/// live as long as message records, `retention.record_after`). Returns how many.
#[tracing::instrument(skip_all)]
pub async fn delete_events_batch(
    db: &DatabaseConnection,
    cutoff_ms: i64,
    batch: u64,
) -> Result<u64, StoreError> {
    use sea_orm::{QuerySelect, TransactionTrait};
    let ids: Vec<Uuid> = phone_events::Entity::find()
        .select_only()
        .column(phone_events::Column::Id)
        .filter(phone_events::Column::CreatedAt.lte(cutoff_ms))
        .limit(batch)
        .into_tuple()
        .all(db)
        .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    let txn = db.begin().await?;
    let deleted = phone_events::Entity::delete_many()
        .filter(phone_events::Column::Id.is_in(ids))
        .exec(&txn)
        .await?
        .rows_affected;
    txn.commit().await?;
    Ok(deleted)
}
