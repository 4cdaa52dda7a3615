//! The quota check of the stores that create counted things (phones, webhook endpoints,
//! contacts): a count bounded by the limit, inside the creating transaction, after the
//! workspace is locked, so concurrent creates cannot both take the last place.

use sea_orm::sea_query::{Expr, SelectStatement};
use sea_orm::{
    ActiveModelBehavior, ActiveModelTrait, ConnectionTrait, DatabaseConnection,
    DatabaseTransaction, DbBackend, EntityTrait, IntoActiveModel, QueryFilter, QuerySelect,
    QueryTrait, Select, Statement,
};

use super::StoreError;
use super::scoped::Scope;
use super::scoped::Scoped;
use crate::domain::ids::WorkspaceId;
use crate::domain::quota::CountQuota;

/// Serializes the quota-checked creates of one workspace until `txn` ends. SQLite needs
/// nothing: a write transaction starts IMMEDIATE there, so writers already take turns. On
/// PostgreSQL the workspace's row is locked.
pub(super) async fn lock_workspace(
    txn: &DatabaseTransaction,
    workspace_id: WorkspaceId,
) -> Result<(), StoreError> {
    if txn.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    txn.query_one_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT id FROM workspaces WHERE id = $1 FOR UPDATE",
        [workspace_id.into()],
    ))
    .await?;
    Ok(())
}

/// Starts a write transaction holding the workspace's lock: [`super::begin_write`], then
/// [`lock_workspace`].
pub(super) async fn begin_locked(
    db: &DatabaseConnection,
    workspace_id: WorkspaceId,
) -> Result<DatabaseTransaction, StoreError> {
    let txn = super::begin_write(db).await?;
    lock_workspace(&txn, workspace_id).await?;
    Ok(txn)
}

/// Starts the transaction of a create of one counted row of `E`: [`begin_locked`], then
/// [`ensure_room`] for one more next to the scope's rows of `E`; `QuotaExceeded` when there is
/// none.
pub(super) async fn begin_counted<E: Scoped>(
    db: &DatabaseConnection,
    scope: Scope,
    quota: CountQuota,
) -> Result<DatabaseTransaction, StoreError> {
    let txn = begin_locked(db, scope.workspace_id).await?;
    ensure_room(&txn, quota, E::find().filter(scope.of::<E>()), 1).await?;
    Ok(txn)
}

/// Inserts `row`, a counted row of `scope`, in a transaction of its own ([`begin_counted`]);
/// `QuotaExceeded`, with nothing written, when the scope already has `quota` such rows.
pub(super) async fn insert_counted<A>(
    db: &DatabaseConnection,
    scope: Scope,
    quota: CountQuota,
    row: A,
) -> Result<<A::Entity as EntityTrait>::Model, StoreError>
where
    A: ActiveModelTrait + ActiveModelBehavior + Send,
    A::Entity: Scoped,
    <A::Entity as EntityTrait>::Model: IntoActiveModel<A>,
{
    let txn = begin_counted::<A::Entity>(db, scope, quota).await?;
    let model = row.insert(&txn).await?;
    txn.commit().await?;
    Ok(model)
}

/// `Ok` when `adding` more rows fit next to the rows `stored` selects (the scope's rows);
/// the count reads at most `limit` rows. Call after [`lock_workspace`].
pub(super) async fn ensure_room<E: EntityTrait>(
    txn: &DatabaseTransaction,
    quota: CountQuota,
    stored: Select<E>,
    adding: u64,
) -> Result<(), StoreError> {
    if quota.limit == 0 || adding == 0 {
        return Ok(());
    }
    let counted = bounded_count(txn, stored, u64::from(quota.limit)).await?;
    if quota.allows(counted, adding) {
        Ok(())
    } else {
        Err(StoreError::QuotaExceeded(quota))
    }
}

/// How many rows `rows` selects, reading at most `bound` of them (an index-only scan where an
/// index covers the filter): `SELECT COUNT(*) FROM (SELECT 1 … LIMIT bound)`.
pub(super) async fn bounded_count<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    rows: Select<E>,
    bound: u64,
) -> Result<u64, StoreError> {
    let inner = rows
        .select_only()
        .expr(Expr::cust("1"))
        .limit(bound)
        .into_query();
    let query = SelectStatement::new()
        .expr(Expr::cust("COUNT(*) AS counted"))
        .from_subquery(inner, "bounded")
        .to_owned();
    let counted = match conn.query_one(&query).await? {
        Some(row) => row.try_get::<i64>("", "counted")?,
        None => 0,
    };
    Ok(u64::try_from(counted).unwrap_or(0))
}
