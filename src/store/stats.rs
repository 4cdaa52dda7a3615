//! Daily message counts per workspace and mode (`daily_stats`; docs/api.md, "Statistics"):
//! added to in batches by `actors::daily_stats`, read by primary-key range.

use std::collections::HashMap;

use entity::daily_stats;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, IdenStatic, QueryFilter, Set};

use super::StoreError;
use super::scoped::Scope;

/// Milliseconds in a day.
const DAY_MS: i64 = 24 * 3600 * 1000;

/// The UTC day (days since 1970-01-01) of a time in milliseconds.
pub fn day_of(ms: i64) -> i32 {
    i32::try_from(ms.div_euclid(DAY_MS)).unwrap_or(i32::MAX)
}

/// The counts of one day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DayCounts {
    pub sent: u64,
    pub delivered: u64,
    pub failed: u64,
    pub received: u64,
}

impl DayCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: DayCounts) {
        self.sent += other.sent;
        self.delivered += other.delivered;
        self.failed += other.failed;
        self.received += other.received;
    }
}

/// Rows per statement of [`add`].
const ROWS_PER_STATEMENT: usize = 500;

/// Adds counts to their days' rows (created at zero when missing).
#[tracing::instrument(skip_all, fields(rows = counts.len()))]
pub async fn add(
    db: &DatabaseConnection,
    counts: &[(Scope, i32, DayCounts)],
) -> Result<(), StoreError> {
    let rows: Vec<daily_stats::ActiveModel> = counts
        .iter()
        .map(|(scope, day, c)| daily_stats::ActiveModel {
            workspace_id: Set(scope.workspace_id.as_uuid()),
            test_mode: Set(scope.mode.is_test()),
            day: Set(*day),
            sent: Set(c.sent as i64),
            delivered: Set(c.delivered as i64),
            failed: Set(c.failed as i64),
            received: Set(c.received as i64),
        })
        .collect();
    let mut on_conflict = OnConflict::columns([
        daily_stats::Column::WorkspaceId,
        daily_stats::Column::TestMode,
        daily_stats::Column::Day,
    ]);
    // The stored count plus the one proposed (`excluded`): the same text on SQLite and
    // PostgreSQL.
    for column in [
        daily_stats::Column::Sent,
        daily_stats::Column::Delivered,
        daily_stats::Column::Failed,
        daily_stats::Column::Received,
    ] {
        let name = column.as_str();
        on_conflict.value(
            column,
            Expr::cust(format!("daily_stats.{name} + excluded.{name}")),
        );
    }
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        daily_stats::Entity::insert_many(chunk.to_vec())
            .on_conflict(on_conflict.clone())
            .exec(db)
            .await?;
    }
    Ok(())
}

/// The counts of the days `first..=last` of a scope that have any (a primary-key range).
pub async fn days(
    db: &DatabaseConnection,
    scope: Scope,
    first: i32,
    last: i32,
) -> Result<HashMap<i32, DayCounts>, StoreError> {
    Ok(daily_stats::Entity::find()
        .filter(scope.of::<daily_stats::Entity>())
        .filter(daily_stats::Column::Day.between(first, last))
        .all(db)
        .await?
        .into_iter()
        .map(|row| {
            let counts = DayCounts {
                sent: u64::try_from(row.sent).unwrap_or(0),
                delivered: u64::try_from(row.delivered).unwrap_or(0),
                failed: u64::try_from(row.failed).unwrap_or(0),
                received: u64::try_from(row.received).unwrap_or(0),
            };
            (row.day, counts)
        })
        .collect())
}

/// Campaigns of the scope that are `running`.
pub async fn running_campaigns(db: &DatabaseConnection, scope: Scope) -> Result<u64, StoreError> {
    use sea_orm::PaginatorTrait;
    Ok(entity::campaigns::Entity::find()
        .filter(scope.of::<entity::campaigns::Entity>())
        .filter(
            entity::campaigns::Column::Status
                .eq(crate::domain::campaign::CampaignStatus::Running.as_str()),
        )
        .count(db)
        .await?)
}

/// Webhook endpoints of the scope that are failing: disabled, or whose latest delivery attempt
/// got no 2xx answer. One read of the endpoints (at most the `webhook_endpoints` quota) and
/// one indexed read of the newest attempt per endpoint.
pub async fn failing_endpoints(db: &DatabaseConnection, scope: Scope) -> Result<u64, StoreError> {
    use entity::{webhook_attempts, webhook_endpoints};
    use sea_orm::QueryOrder;
    let endpoints = webhook_endpoints::Entity::find()
        .filter(scope.of::<webhook_endpoints::Entity>())
        .all(db)
        .await?;
    let mut failing = 0;
    for endpoint in endpoints {
        if !endpoint.enabled {
            failing += 1;
            continue;
        }
        let latest = webhook_attempts::Entity::find()
            .filter(webhook_attempts::Column::EndpointId.eq(endpoint.id))
            .order_by_desc(webhook_attempts::Column::AttemptedAt)
            .order_by_desc(webhook_attempts::Column::Id)
            .one(db)
            .await?;
        if latest.is_some_and(|a| {
            a.error.is_some() || !a.status_code.is_some_and(|c| (200..300).contains(&c))
        }) {
            failing += 1;
        }
    }
    Ok(failing)
}
