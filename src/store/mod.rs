//! Persistence: SeaORM queries per aggregate, and the group-commit writer.
//!
//! The store never calls up into actors or the API. Rows are mapped to the types the layers
//! above use here, so entities stay inside this module tree.
//!
//! # Shared pieces
//!
//! - **Scope**: [`scoped`] says once which tables belong to a workspace and mode (`Scoped`,
//!   implemented with `scoped!`): `Scope::of::<E>()` is the one condition that keeps a read or
//!   write inside the caller's scope, `find_in_scope::<E>()` the one "this row of this scope,
//!   or not found".
//! - **Reads**: `rows_as` reads rows as the store's record type; [`newest_first`] is the keyset
//!   page of every cursor-paged list (by (created_at, id), `limit + 1` rows).
//! - **Counted creates**: phones, webhook endpoints and contacts are not written by the
//!   writer; [`quotas`] counts them in the creating transaction after locking the workspace
//!   (`begin_counted`, `insert_counted`). A contact's row for a create and an import alike is
//!   built by `ContactFields::into_new_row`.
//! - **Writes that must wait for SQLite's lock**: [`begin_write`] (`BEGIN IMMEDIATE`) and
//!   [`retry_busy`].
//! - **Statement shapes**: `id_list` pads an id list to a power of two and `shaped_chunks` cuts
//!   multi-row INSERTs into power-of-two chunks, so sqlx's per-connection statement cache keeps
//!   a handful of texts (docs/performance.md, "Statements keep their shape").
//!
//! # SQLite set-up
//!
//! [`connect`] opens WAL mode with a busy timeout and a row buffer of 1,024 rows (sqlx's 50
//! made the worker thread wait for the writer row by row). The group-commit writer has a
//! connection of its own (`connect_writer`), which never checkpoints inside a commit: the
//! WAL is copied back by `start_checkpoints` on yet another connection. SQLite allocates
//! through mimalloc and keeps no allocation statistics (`sqlite_memory`, set once before the
//! first connection). docs/performance.md, "The write path (SQLite)", has the measurements.

pub mod ai;
pub mod campaigns;
pub mod change;
pub mod client_groups;
pub mod cluster;
pub mod contacts;
pub mod conversations;
pub mod health;
pub mod idempotency;
pub mod messages;
mod paging;
pub mod phone_stats;
pub mod phones;
pub mod pools;
pub mod quotas;
pub mod retention;
pub mod scoped;
pub mod settings;
mod sqlite_memory;
pub mod stats;
pub mod webhooks;
pub mod workspaces;
pub mod writer;

use std::time::Duration;

pub use paging::newest_first;

use migration::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::SqliteSynchronous;
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, DeleteMany, EntityTrait, Select, SqlErr, SqliteTransactionMode, TransactionOptions,
    TransactionTrait,
};

/// A storage failure, classified once.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A unique constraint refused the write.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("the writer is not running")]
    WriterGone,
    /// SQLite could not get its lock in time ("database is locked"); worth retrying.
    #[error("database busy: {0}")]
    Busy(String),
    /// A stored-count quota would be passed; nothing was written.
    #[error("the {} quota ({}) is reached", .0.quota.as_str(), .0.limit)]
    QuotaExceeded(crate::domain::quota::CountQuota),
    #[error("database error: {0}")]
    Db(DbErr),
    /// A stored secret does not open under the secrets key (docs/api.md, "Secrets at rest").
    #[error("the signing key of webhook endpoint {endpoint_id}: {error}")]
    Secret {
        endpoint_id: crate::domain::ids::EndpointId,
        error: crate::domain::secrets::SecretsError,
    },
    /// A secret of a workspace's client-API settings does not open under the secrets key.
    #[error("a secret of the client settings of workspace {workspace_id}: {error}")]
    SettingsSecret {
        workspace_id: crate::domain::ids::WorkspaceId,
        error: crate::domain::secrets::SecretsError,
    },
    /// A stored row holds a value this build cannot read (a status outside its enum, say): the
    /// row is reported, never read as a guess.
    #[error("corrupt row: {table}.{column} of {row} holds {value:?}")]
    CorruptRow {
        table: &'static str,
        column: &'static str,
        /// The row's id.
        row: String,
        value: String,
    },
    /// The database was migrated by a newer smsgw: its schema has migrations this build does
    /// not know, so this build could misread it (docs/deploy.md, "Upgrades").
    #[error(
        "the database was migrated by a newer smsgw (migrations unknown to this build: {}); run that version or a newer one, or restore a backup taken before the upgrade",
        .0.join(", ")
    )]
    NewerSchema(Vec<String>),
    /// The database cannot be reached (PostgreSQL down, its connections cut, no connection in
    /// time): nothing was written; worth retrying once it is back (docs/api.md, "Errors").
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// SQLite's file reached `database.max_size` or the disk is full (`SQLITE_FULL`; on
    /// PostgreSQL, "disk full"): nothing was written (docs/deploy.md, "Bad days").
    #[error("the database's storage is full: {0}")]
    StorageFull(String),
}

impl StoreError {
    /// [`StoreError::CorruptRow`]: `column` of the row `row` of `table` holds `value`.
    pub(crate) fn corrupt(
        table: &'static str,
        column: &'static str,
        row: impl std::fmt::Display,
        value: impl Into<String>,
    ) -> StoreError {
        StoreError::CorruptRow {
            table,
            column,
            row: row.to_string(),
            value: value.into(),
        }
    }
}

/// A row type whose mapping cannot fail reads through [`rows_as`] like one whose can.
impl From<std::convert::Infallible> for StoreError {
    fn from(never: std::convert::Infallible) -> StoreError {
        match never {}
    }
}

impl From<DbErr> for StoreError {
    fn from(err: DbErr) -> Self {
        if let Some(SqlErr::UniqueConstraintViolation(detail)) = err.sql_err() {
            return StoreError::Conflict(detail);
        }
        let text = err.to_string();
        if text.contains("database is locked") {
            StoreError::Busy(text)
        } else if is_storage_full(&err) {
            StoreError::StorageFull(text)
        } else if is_unavailable(&err) {
            StoreError::Unavailable(text)
        } else {
            StoreError::Db(err)
        }
    }
}

/// The sqlx error under a SeaORM one, when there is one.
fn sqlx_error(err: &DbErr) -> Option<&sea_orm::sqlx::Error> {
    match err {
        DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e))
        | DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e))
        | DbErr::Query(sea_orm::RuntimeErr::SqlxError(e)) => Some(e.as_ref()),
        _ => None,
    }
}

/// PostgreSQL broke a lock cycle by failing this statement (40P01): worth repeating.
pub(crate) fn is_deadlock(err: &StoreError) -> bool {
    match err {
        StoreError::Db(db) => matches!(
            sqlx_error(db),
            Some(sea_orm::sqlx::Error::Database(e)) if e.code().as_deref() == Some("40P01")
        ),
        _ => false,
    }
}

/// SQLite's `SQLITE_FULL` (13: the file reached `max_page_count`, or the disk is full) and
/// PostgreSQL's `disk_full` (53100).
fn is_storage_full(err: &DbErr) -> bool {
    match sqlx_error(err) {
        Some(sea_orm::sqlx::Error::Database(db)) => {
            matches!(db.code().as_deref(), Some("13") | Some("53100"))
        }
        _ => false,
    }
}

/// The database cannot be reached: no connection in time, a connection refused, reset or
/// closed under a query, or PostgreSQL shutting down (57P01..57P03) or out of connections.
fn is_unavailable(err: &DbErr) -> bool {
    use sea_orm::sqlx::Error as Sqlx;
    if let DbErr::ConnectionAcquire(_) = err {
        return true;
    }
    match sqlx_error(err) {
        Some(Sqlx::Io(_) | Sqlx::PoolTimedOut | Sqlx::PoolClosed | Sqlx::WorkerCrashed) => true,
        Some(Sqlx::Tls(_)) => true,
        Some(Sqlx::Database(db)) => matches!(
            db.code().as_deref(),
            Some(
                "57P01"
                    | "57P02"
                    | "57P03"
                    | "53300"
                    | "08000"
                    | "08003"
                    | "08006"
                    | "08001"
                    | "08004"
            )
        ),
        Some(Sqlx::Protocol(text)) => text.contains("connection") || text.contains("closed"),
        _ => false,
    }
}

/// How long a SQLite connection waits for the write lock before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How a process opens its database: the `[database]` settings (docs/api.md, "Configuration").
#[derive(Debug, Clone)]
pub struct DbOptions {
    pub url: String,
    /// Connections of the read pool (at least 2).
    pub max_connections: u32,
    /// Longest wait for a connection before a query fails as [`StoreError::Unavailable`].
    pub acquire_timeout: Duration,
    /// SQLite: the most the file may grow to, in bytes ([`StoreError::StorageFull`] past it).
    pub max_size: Option<u64>,
}

impl DbOptions {
    /// `url` with the defaults the CLI's one-off commands use.
    pub fn new(url: &str) -> DbOptions {
        DbOptions {
            url: url.to_string(),
            max_connections: 2,
            acquire_timeout: Duration::from_secs(30),
            max_size: None,
        }
    }

    /// SQLite's `max_page_count` for `max_size`: smsgw's files have sqlx's page size, 4096
    /// bytes, which no setting changes. Rounded up; never 0.
    fn max_page_count(&self) -> Option<u64> {
        self.max_size
            .map(|bytes| bytes.div_ceil(SQLITE_PAGE_SIZE).max(1))
    }
}

/// The page size sqlx gives every SQLite file it creates.
const SQLITE_PAGE_SIZE: u64 = 4096;

/// Opens the database with the settings each backend needs: WAL and a busy timeout on SQLite.
pub async fn connect(url: &str, max_connections: u32) -> Result<DatabaseConnection, StoreError> {
    connect_with(&DbOptions {
        max_connections,
        ..DbOptions::new(url)
    })
    .await
}

/// Opens the server's read pool with all of `options`.
pub async fn connect_with(options: &DbOptions) -> Result<DatabaseConnection, StoreError> {
    open(options, options.max_connections.max(2), false).await
}

/// Opens the one connection the group-commit writer keeps for itself ([`writer::Writer::connect`]
/// opens it on the writer's own thread on SQLite).
///
/// Why: from a pool, each batch landed on whichever connection was free. On SQLite every
/// connection has its own page cache, dropped whenever another connection has written since its
/// last transaction, and its own statement cache: each batch began with cold pages and statements
/// to prepare again. One connection keeps both warm (docs/performance.md, "The writer's own
/// connection").
async fn connect_writer(options: &DbOptions) -> Result<DatabaseConnection, StoreError> {
    open(options, 1, true).await
}

/// Starts the WAL checkpoints beside the writer's connection (SQLite; see [`checkpoints`]).
async fn start_checkpoints(url: &str) -> Result<(), StoreError> {
    let checkpointer = open(&DbOptions::new(url), 1, false).await?;
    actix_web::rt::spawn(checkpoints(checkpointer));
    Ok(())
}

/// How often the WAL is copied back into the database file (SQLite).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

/// Copies the WAL back into the database file, on a connection of its own. The writer's
/// connection does not checkpoint (`wal_autocheckpoint = 0`): SQLite would otherwise run one
/// inside the commit that crosses 1,000 pages of WAL, and every request in that batch would
/// wait for it. A PASSIVE checkpoint runs beside the writer's commits.
async fn checkpoints(db: DatabaseConnection) {
    use sea_orm::ConnectionTrait;
    loop {
        tokio::time::sleep(CHECKPOINT_EVERY).await;
        if let Err(err) = db
            .execute_unprepared("PRAGMA wal_checkpoint(PASSIVE)")
            .await
        {
            tracing::warn!(error = %err, "WAL checkpoint failed; retrying");
        }
    }
}

/// A pool of `connections`; `writer` marks the writer's own connection, which on SQLite never
/// checkpoints inside a commit (see [`checkpoints`]).
async fn open(
    db_options: &DbOptions,
    connections: u32,
    writer: bool,
) -> Result<DatabaseConnection, StoreError> {
    sqlite_memory::configure();
    let url = db_options.url.as_str();
    let max_page_count = db_options.max_page_count();
    let mut options = ConnectOptions::new(url.to_string());
    options
        .max_connections(connections)
        .min_connections(1)
        .connect_timeout(db_options.acquire_timeout.min(Duration::from_secs(10)))
        .acquire_timeout(db_options.acquire_timeout)
        .sqlx_logging(false)
        // sqlx pings a pooled connection before every acquire (a round trip to its worker
        // thread on SQLite, to the server on PostgreSQL). A SQLite connection is a local file
        // handle that cannot go stale; PostgreSQL keeps the ping, which finds a connection
        // the server dropped before a query fails on it.
        .test_before_acquire(!DbBackend::Sqlite.is_prefix_of(url))
        .map_sqlx_sqlite_opts(move |opts| {
            // journal_mode is not set per connection: switching it needs an exclusive lock that
            // the busy timeout cannot wait for, so a connection opened while another process
            // writes would fail with "database is locked". WAL is set once below and persists
            // in the file.
            let opts = match max_page_count {
                // Per connection, not stored in the file: every connection of the process
                // (the writer's too) gets it. A write that would grow the file past it fails
                // with SQLITE_FULL and changes nothing.
                Some(pages) => opts.pragma("max_page_count", pages.to_string()),
                None => opts,
            };
            opts
                // NORMAL in WAL mode is durable against process crashes (the OS still holds the
                // log); FULL would also survive power loss at several times the commit cost.
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT)
                // Rows a query's worker thread may hand over before waiting for the reader
                // (sqlx: 50). The writer's grouped UPDATEs return hundreds (docs/performance.md,
                // "sqlx's row buffer and pool ping").
                .row_buffer_size(1024)
                .foreign_keys(false)
                .create_if_missing(true)
                .pragma("wal_autocheckpoint", if writer { "0" } else { "1000" })
        });
    let db = Database::connect(options).await?;
    if is_sqlite(&db) {
        enable_wal(&db).await?;
    }
    Ok(db)
}

/// Puts a SQLite database in WAL mode (readers never block the writer). A no-op when it is
/// already; retried briefly while another process holds the lock.
async fn enable_wal(db: &DatabaseConnection) -> Result<(), StoreError> {
    use sea_orm::ConnectionTrait;
    let mut attempt = 0;
    loop {
        match db.execute_unprepared("PRAGMA journal_mode=WAL").await {
            Ok(_) => return Ok(()),
            Err(err) if attempt < 50 => {
                attempt += 1;
                tracing::debug!(error = %err, "WAL switch waiting for the lock");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// Runs the delete of one resource, filtered by its id and its scope: `NotFound` when it
/// removed nothing (no such id, or another scope's).
async fn delete_found<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    delete: DeleteMany<E>,
) -> Result<(), StoreError> {
    let result = delete.exec(conn).await?;
    if result.rows_affected == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// Starts a transaction that will write. On SQLite it takes the write lock at BEGIN
/// (IMMEDIATE): a deferred transaction that reads first and then writes cannot wait for the
/// lock and fails with "database is locked" when another connection wrote meanwhile.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    if is_sqlite(db) {
        db.begin_with_options(TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        })
        .await
    } else {
        db.begin().await
    }
}

/// Runs `op` again (up to 5 times, backing off) while SQLite answers "database is locked".
pub async fn retry_busy<T, F, Fut>(mut op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut delay = Duration::from_millis(50);
    for _ in 0..5 {
        match op().await {
            Err(StoreError::Busy(detail)) => {
                tracing::warn!(%detail, "database busy; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return other,
        }
    }
    op().await
}

/// Brings the schema up to date; refuses a database a newer build migrated
/// ([`StoreError::NewerSchema`]) before changing anything.
pub async fn migrate(db: &DatabaseConnection) -> Result<(), StoreError> {
    pending_migrations(db).await?;
    Migrator::up(db, None).await?;
    Ok(())
}

/// The names of the migrations this build would apply, oldest first, without applying any
/// (`smsgw migrate --dry-run`); [`StoreError::NewerSchema`] when the database holds
/// migrations this build does not know. Reads only: a fresh database is left untouched.
pub async fn pending_migrations(db: &DatabaseConnection) -> Result<Vec<String>, StoreError> {
    use migration::seaql_migrations;
    let known: Vec<String> = Migrator::migrations()
        .iter()
        .map(|m| m.name().to_string())
        .collect();
    let manager = migration::SchemaManager::new(db);
    let applied: Vec<String> = if manager.has_table("seaql_migrations").await? {
        seaql_migrations::Entity::find()
            .all(db)
            .await?
            .into_iter()
            .map(|row| row.version)
            .collect()
    } else {
        Vec::new()
    };
    let mut unknown: Vec<String> = applied
        .iter()
        .filter(|name| !known.contains(name))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        unknown.sort();
        return Err(StoreError::NewerSchema(unknown));
    }
    Ok(known
        .into_iter()
        .filter(|name| !applied.contains(name))
        .collect())
}

/// Whether the database answers a trivial query (readiness).
pub async fn ping(db: &DatabaseConnection) -> bool {
    db.ping().await.is_ok()
}

/// The rows `query` selects, in its order, each as the store's type of the row; a row that
/// does not map ([`StoreError::CorruptRow`]) fails the read.
pub(crate) async fn rows_as<E, T>(
    conn: &impl ConnectionTrait,
    query: Select<E>,
) -> Result<Vec<T>, StoreError>
where
    E: EntityTrait,
    T: TryFrom<E::Model>,
    StoreError: From<T::Error>,
{
    map_rows(query.all(conn).await?)
}

/// Each of `rows` as the store's type of the row; the first that does not map fails them all.
pub(crate) fn map_rows<M, T>(rows: Vec<M>) -> Result<Vec<T>, StoreError>
where
    T: TryFrom<M>,
    StoreError: From<T::Error>,
{
    rows.into_iter()
        .map(|row| T::try_from(row).map_err(StoreError::from))
        .collect()
}

/// True for SQLite, whose single writer lock shapes how batches are sized.
pub fn is_sqlite(db: &DatabaseConnection) -> bool {
    db.get_database_backend() == DbBackend::Sqlite
}

/// Most ids one grouped statement (`… WHERE id IN (…)`) names; a power of two (see [`id_list`]).
pub(crate) const IDS_PER_STATEMENT: usize = 512;

/// `ids` padded to the next power of two by repeating its first id, so grouped statements come
/// in a handful of shapes (sqlx prepares and caches statements per SQL text, per connection)
/// instead of one new statement to prepare for every batch size.
pub(crate) fn id_list(ids: &[uuid::Uuid]) -> Vec<uuid::Uuid> {
    let mut list = ids.to_vec();
    if let Some(&first) = ids.first() {
        list.resize(ids.len().next_power_of_two(), first);
    }
    list
}

/// `rows` cut into chunks whose lengths are powers of two, largest first, none over `max` (37
/// rows: 32, 4, 1). For multi-row INSERTs, which cannot be padded like [`id_list`]: each row
/// count is its own SQL text, and preparing a new one for every batch cost the SQLite thread a
/// noticeable share of its time; this way a table has a handful of shapes, all cached
/// (docs/performance.md, "Statements keep their shape").
pub(crate) fn shaped_chunks<T>(rows: &[T], max: usize) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let fits = rest.len().min(max.max(1));
        let len = if fits.is_power_of_two() {
            fits
        } else {
            fits.next_power_of_two() / 2
        };
        let (chunk, tail) = rest.split_at(len);
        rest = tail;
        Some(chunk)
    })
}

/// The SQL edge of the id types: a query compares a column with a typed id directly
/// (`Column::WorkspaceId.eq(workspace_id)`); the entities keep plain UUIDs.
macro_rules! id_as_value {
    ($($id:ty),*) => {$(
        impl From<$id> for sea_orm::Value {
            fn from(id: $id) -> sea_orm::Value {
                id.as_uuid().into()
            }
        }
    )*};
}
id_as_value!(
    crate::domain::ids::WorkspaceId,
    crate::domain::ids::PhoneId,
    crate::domain::ids::MessageId,
    crate::domain::ids::CampaignId,
    crate::domain::ids::EndpointId,
    crate::domain::ids::ContactId
);

#[cfg(test)]
mod tests {
    use super::shaped_chunks;

    fn lengths(rows: usize, max: usize) -> Vec<usize> {
        let rows: Vec<usize> = (0..rows).collect();
        shaped_chunks(&rows, max).map(<[usize]>::len).collect()
    }

    #[test]
    fn chunks_are_powers_of_two_in_order_and_cover_every_row() {
        assert_eq!(lengths(37, 256), vec![32, 4, 1]);
        assert_eq!(lengths(600, 256), vec![256, 256, 64, 16, 8]);
        assert_eq!(lengths(1, 256), vec![1]);
        assert!(lengths(0, 256).is_empty());
        let rows: Vec<usize> = (0..300).collect();
        let joined: Vec<usize> = shaped_chunks(&rows, 128).flatten().copied().collect();
        assert_eq!(joined, rows);
    }
}
