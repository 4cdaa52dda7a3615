//! Delivery by line (docs/api.md, "Phone stats"): per phone (a SIM line is a phone) and UTC
//! day, the messages sent, delivered and failed, the failures by reason and a histogram of the
//! times from hand-over to delivery (`phone_daily_stats`, `phone_daily_failures`,
//! `phone_daily_delivery_times`). Added to in batches by `actors::daily_stats`, read by
//! primary-key range of one phone, forgotten with the phone.

use std::collections::{BTreeMap, HashMap, HashSet};

use entity::{message_events, phone_daily_delivery_times, phone_daily_failures, phone_daily_stats};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, IdenStatic, QueryFilter, QueryOrder, QuerySelect,
    Set, TransactionTrait,
};
use uuid::Uuid;

use super::StoreError;
use crate::domain::change::ChangeKind;
use crate::domain::delivery_time::DeliveryTimes;
use crate::domain::status::MessageStatus;

/// Characters of a failure reason kept: a phone words its errors freely, and a reason is part
/// of a key.
pub const REASON_CHARS: usize = 100;
/// (day, reason) rows one read of failures returns at most, most frequent first: the rest
/// still count in `failed`, unnamed.
pub const MAX_REASON_ROWS: u64 = 1_000;
/// Rows per statement of [`add`], and ids per `IN (…)` list.
const ROWS_PER_STATEMENT: usize = 500;

/// The figures of one phone's day.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineDay {
    pub sent: u64,
    pub delivered: u64,
    pub failed: u64,
    /// Failures by reason (cut to [`REASON_CHARS`]); a failure without a reason is in `failed`
    /// only.
    pub failures: HashMap<String, u64>,
    /// Times from hand-over to delivery of the deliveries whose hand-over was found.
    pub times: DeliveryTimes,
}

impl LineDay {
    /// Adds `other` to these figures.
    pub fn add(&mut self, other: &LineDay) {
        self.sent += other.sent;
        self.delivered += other.delivered;
        self.failed += other.failed;
        for (reason, n) in &other.failures {
            *self.failures.entry(reason.clone()).or_default() += n;
        }
        self.times.merge(&other.times);
    }

    /// Counts one failure for `reason`.
    pub fn add_failure(&mut self, reason: Option<&str>) {
        self.failed += 1;
        if let Some(reason) = reason {
            *self.failures.entry(reason_key(reason)).or_default() += 1;
        }
    }
}

/// A failure reason as stored: its first [`REASON_CHARS`] characters.
pub fn reason_key(reason: &str) -> String {
    reason.chars().take(REASON_CHARS).collect()
}

/// When each of these messages was last handed to a phone (their latest `sending` timeline
/// entry), for the ones that have one. Indexed by message; one statement per
/// [`ROWS_PER_STATEMENT`] ids.
pub async fn handed_over_at(
    db: &DatabaseConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, i64>, StoreError> {
    let mut found = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(ROWS_PER_STATEMENT) {
        let rows: Vec<(Uuid, Option<i64>)> = message_events::Entity::find()
            .select_only()
            .column(message_events::Column::MessageId)
            .column_as(message_events::Column::At.max(), "at")
            .filter(message_events::Column::MessageId.is_in(chunk.iter().copied()))
            .filter(
                message_events::Column::Kind.eq(ChangeKind::Moved(MessageStatus::Sending).as_str()),
            )
            .group_by(message_events::Column::MessageId)
            .into_tuple()
            .all(db)
            .await?;
        found.extend(rows.into_iter().filter_map(|(id, at)| Some((id, at?))));
    }
    Ok(found)
}

/// Which of these phones still exist: counts of a phone deleted meanwhile are dropped rather
/// than written for nobody.
pub async fn existing(db: &DatabaseConnection, ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError> {
    let mut found = HashSet::with_capacity(ids.len());
    for chunk in ids.chunks(ROWS_PER_STATEMENT) {
        let rows: Vec<Uuid> = entity::phones::Entity::find()
            .select_only()
            .column(entity::phones::Column::Id)
            .filter(entity::phones::Column::Id.is_in(chunk.iter().copied()))
            .into_tuple()
            .all(db)
            .await?;
        found.extend(rows);
    }
    Ok(found)
}

/// `table.column + excluded.column` for each column: the stored count plus the one proposed,
/// the same text on SQLite and PostgreSQL.
fn adding<C: IdenStatic + Copy + sea_orm::sea_query::IntoIden>(
    table: &str,
    keys: Vec<C>,
    counts: &[C],
) -> OnConflict {
    let mut on_conflict = OnConflict::columns(keys);
    for column in counts {
        let name = column.as_str();
        on_conflict.value(
            *column,
            Expr::cust(format!("{table}.{name} + excluded.{name}")),
        );
    }
    on_conflict
}

/// Adds figures to their phones' days (rows created at zero when missing), in one
/// transaction: a failed write adds nothing, so trying it again counts nothing twice.
#[tracing::instrument(skip_all, fields(rows = figures.len()))]
pub async fn add(
    db: &DatabaseConnection,
    figures: &[(Uuid, i32, LineDay)],
) -> Result<(), StoreError> {
    if figures.is_empty() {
        return Ok(());
    }
    let txn = db.begin().await?;
    use phone_daily_delivery_times as times;
    use phone_daily_failures as failures;
    use phone_daily_stats as stats;
    let counts: Vec<stats::ActiveModel> = figures
        .iter()
        .map(|(phone, day, f)| stats::ActiveModel {
            phone_id: Set(*phone),
            day: Set(*day),
            sent: Set(f.sent as i64),
            delivered: Set(f.delivered as i64),
            failed: Set(f.failed as i64),
        })
        .collect();
    let on_counts = adding(
        "phone_daily_stats",
        vec![stats::Column::PhoneId, stats::Column::Day],
        &[
            stats::Column::Sent,
            stats::Column::Delivered,
            stats::Column::Failed,
        ],
    );
    for chunk in counts.chunks(ROWS_PER_STATEMENT) {
        stats::Entity::insert_many(chunk.to_vec())
            .on_conflict(on_counts.clone())
            .exec(&txn)
            .await?;
    }
    let reasons: Vec<failures::ActiveModel> = figures
        .iter()
        .flat_map(|(phone, day, f)| {
            f.failures.iter().map(|(reason, n)| failures::ActiveModel {
                phone_id: Set(*phone),
                day: Set(*day),
                reason: Set(reason.clone()),
                failed: Set(*n as i64),
            })
        })
        .collect();
    let on_reasons = adding(
        "phone_daily_failures",
        vec![
            failures::Column::PhoneId,
            failures::Column::Day,
            failures::Column::Reason,
        ],
        &[failures::Column::Failed],
    );
    for chunk in reasons.chunks(ROWS_PER_STATEMENT) {
        failures::Entity::insert_many(chunk.to_vec())
            .on_conflict(on_reasons.clone())
            .exec(&txn)
            .await?;
    }
    let buckets: Vec<times::ActiveModel> = figures
        .iter()
        .flat_map(|(phone, day, f)| {
            f.times.buckets().map(|(bucket, n)| times::ActiveModel {
                phone_id: Set(*phone),
                day: Set(*day),
                bucket: Set(bucket),
                delivered: Set(n as i64),
            })
        })
        .collect();
    let on_buckets = adding(
        "phone_daily_delivery_times",
        vec![
            times::Column::PhoneId,
            times::Column::Day,
            times::Column::Bucket,
        ],
        &[times::Column::Delivered],
    );
    for chunk in buckets.chunks(ROWS_PER_STATEMENT) {
        times::Entity::insert_many(chunk.to_vec())
            .on_conflict(on_buckets.clone())
            .exec(&txn)
            .await?;
    }
    txn.commit().await?;
    Ok(())
}

/// The figures of the days `first..=last` of a phone that have any: three primary-key ranges,
/// the failures at most [`MAX_REASON_ROWS`] rows (most frequent first).
#[tracing::instrument(skip_all, fields(phone_id = %phone))]
pub async fn days(
    db: &DatabaseConnection,
    phone: Uuid,
    first: i32,
    last: i32,
) -> Result<BTreeMap<i32, LineDay>, StoreError> {
    use phone_daily_delivery_times as times;
    use phone_daily_failures as failures;
    use phone_daily_stats as stats;
    let mut out: BTreeMap<i32, LineDay> = BTreeMap::new();
    for row in stats::Entity::find()
        .filter(stats::Column::PhoneId.eq(phone))
        .filter(stats::Column::Day.between(first, last))
        .all(db)
        .await?
    {
        let day = out.entry(row.day).or_default();
        day.sent = u64::try_from(row.sent).unwrap_or(0);
        day.delivered = u64::try_from(row.delivered).unwrap_or(0);
        day.failed = u64::try_from(row.failed).unwrap_or(0);
    }
    for row in failures::Entity::find()
        .filter(failures::Column::PhoneId.eq(phone))
        .filter(failures::Column::Day.between(first, last))
        .order_by_desc(failures::Column::Failed)
        .order_by_asc(failures::Column::Reason)
        .limit(MAX_REASON_ROWS)
        .all(db)
        .await?
    {
        out.entry(row.day)
            .or_default()
            .failures
            .insert(row.reason, u64::try_from(row.failed).unwrap_or(0));
    }
    for row in times::Entity::find()
        .filter(times::Column::PhoneId.eq(phone))
        .filter(times::Column::Day.between(first, last))
        .all(db)
        .await?
    {
        out.entry(row.day)
            .or_default()
            .times
            .add(row.bucket, u64::try_from(row.delivered).unwrap_or(0));
    }
    Ok(out)
}

/// Deletes every figure of these phones (unpaired: docs/api.md, "Phone stats").
#[tracing::instrument(skip_all, fields(phones = phones.len()))]
pub async fn forget(db: &DatabaseConnection, phones: &[Uuid]) -> Result<(), StoreError> {
    phone_daily_stats::Entity::delete_many()
        .filter(phone_daily_stats::Column::PhoneId.is_in(phones.iter().copied()))
        .exec(db)
        .await?;
    phone_daily_failures::Entity::delete_many()
        .filter(phone_daily_failures::Column::PhoneId.is_in(phones.iter().copied()))
        .exec(db)
        .await?;
    phone_daily_delivery_times::Entity::delete_many()
        .filter(phone_daily_delivery_times::Column::PhoneId.is_in(phones.iter().copied()))
        .exec(db)
        .await?;
    Ok(())
}
