//! `smsgw backup` and `smsgw restore` of a SQLite database (docs/deploy.md, "Backups"): a
//! consistent snapshot of a running server's database, and putting one back while no server
//! holds the database. PostgreSQL is backed up with its own tools (`pg_dump`), as the same
//! section says.
//!
//! A snapshot is SQLite's `VACUUM INTO`: it reads the database in one read transaction, so it
//! holds exactly the transactions committed before it began (everything the server had
//! acknowledged then) while the server goes on writing (WAL readers do not block the writer).
//! A copy of the file would not: it can catch a page half written, and it misses the WAL.

use std::path::{Path, PathBuf};

use sea_orm::ConnectionTrait;

use crate::config::Settings;
use crate::secrets::default_key_file;
use crate::single_node::{SingleNodeError, SingleNodeLock, sqlite_file};
use crate::store::{self, StoreError};

/// Why a backup or a restore did nothing.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "backup and restore take a SQLite database; for PostgreSQL use pg_dump and pg_restore (docs/deploy.md, \"Backups\")"
    )]
    NotSqlite,
    #[error("no database at {0}")]
    NoDatabase(String),
    #[error("{0} exists already; a backup never overwrites a file: name a new one")]
    TargetExists(String),
    #[error("{path} is not a backup of an smsgw database: {reason}")]
    NotABackup { path: String, reason: String },
    #[error(
        "a running smsgw server holds {0}: stop it before restoring (a restore under a running server would be overwritten or corrupted)"
    )]
    ServerRunning(String),
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("{action} {path}: {error}")]
    Io {
        action: &'static str,
        path: String,
        error: std::io::Error,
    },
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BackupError {
    let path = path.display().to_string();
    move |error| BackupError::Io {
        action,
        path,
        error,
    }
}

/// Where the secrets key the database's sealed secrets need lives, in words: a backup is
/// useless without it, and it is never written into one.
pub fn key_location(settings: &Settings) -> String {
    if settings.secrets.key.is_some() {
        "the secrets.key setting (SMSGW_SECRETS__KEY) you configured".to_string()
    } else {
        let path = match &settings.secrets.key_file {
            Some(path) => PathBuf::from(path),
            None => default_key_file(&settings.database.url),
        };
        format!("the key file {}", path.display())
    }
}

/// What a backup wrote.
pub struct BackupDone {
    pub path: PathBuf,
    pub bytes: u64,
}

/// Writes a consistent snapshot of the settings' SQLite database to `to`, which must not exist;
/// the server may be running and writing meanwhile.
pub async fn backup(settings: &Settings, to: &Path) -> Result<BackupDone, BackupError> {
    let file = sqlite_file(&settings.database.url).ok_or(BackupError::NotSqlite)?;
    if !Path::new(file).exists() {
        return Err(BackupError::NoDatabase(file.to_string()));
    }
    if to.exists() {
        return Err(BackupError::TargetExists(to.display().to_string()));
    }
    let db = store::connect(&settings.database.url, 1).await?;
    // The newer-schema check reads only; a backup of any schema this build knows is fine.
    store::pending_migrations(&db).await?;
    let target = to.display().to_string().replace('\'', "''");
    let written = db
        .execute_unprepared(&format!("VACUUM INTO '{target}'"))
        .await
        .map_err(StoreError::from);
    let _ = db.close().await;
    written?;
    let bytes = std::fs::metadata(to).map_err(io("cannot read", to))?.len();
    Ok(BackupDone {
        path: to.to_path_buf(),
        bytes,
    })
}

/// What a restore did.
pub struct RestoreDone {
    pub database: String,
    /// Where the database the restore replaced was moved (None when there was none).
    pub replaced: Option<PathBuf>,
}

/// Puts the backup `from` in place of the settings' SQLite database, while holding the lock a
/// serving node holds, so no server runs on the database during it and none was running
/// before it. A database already there is kept beside it (`<db>.before-restore-<time>`), with
/// its WAL files, never deleted.
pub async fn restore(settings: &Settings, from: &Path) -> Result<RestoreDone, BackupError> {
    let file = sqlite_file(&settings.database.url).ok_or(BackupError::NotSqlite)?;
    check_backup(from).await?;
    let _lock = match SingleNodeLock::take(&settings.database.url).await {
        Ok(lock) => lock,
        Err(SingleNodeError::AlreadyServing(path)) => {
            return Err(BackupError::ServerRunning(path));
        }
        Err(SingleNodeError::LockFile(e)) => return Err(BackupError::Store(e)),
    };
    let database = Path::new(file);
    // The copy is written beside the database and renamed over it: a restore cut short leaves
    // the old database as it was.
    let staged = PathBuf::from(format!("{file}.restoring"));
    std::fs::copy(from, &staged).map_err(io("cannot copy the backup to", &staged))?;
    std::fs::File::open(&staged)
        .and_then(|f| f.sync_all())
        .map_err(io("cannot sync", &staged))?;
    let mut replaced = None;
    if database.exists() {
        let aside = PathBuf::from(format!(
            "{file}.before-restore-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
        ));
        std::fs::rename(database, &aside).map_err(io("cannot move aside", database))?;
        replaced = Some(aside);
    }
    // The old database's WAL belongs to it: left in place it would be replayed into the
    // restored file.
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{file}{suffix}"));
        if side.exists() {
            let moved = match &replaced {
                Some(aside) => PathBuf::from(format!("{}{suffix}", aside.display())),
                None => PathBuf::from(format!("{file}{suffix}.stale")),
            };
            std::fs::rename(&side, &moved).map_err(io("cannot move aside", &side))?;
        }
    }
    std::fs::rename(&staged, database).map_err(io("cannot rename into place", &staged))?;
    Ok(RestoreDone {
        database: file.to_string(),
        replaced,
    })
}

/// A backup must be a SQLite database whose schema is smsgw's, of this build or older.
async fn check_backup(from: &Path) -> Result<(), BackupError> {
    let not_a_backup = |reason: String| BackupError::NotABackup {
        path: from.display().to_string(),
        reason,
    };
    if !from.is_file() {
        return Err(not_a_backup("no such file".into()));
    }
    let url = format!("sqlite://{}?mode=ro", from.display());
    let db = sea_orm::Database::connect(&url)
        .await
        .map_err(|e| not_a_backup(e.to_string()))?;
    let manager = migration::SchemaManager::new(&db);
    let known = manager.has_table("seaql_migrations").await;
    let checked = match known {
        Ok(true) => store::pending_migrations(&db).await.map(|_| ()),
        Ok(false) => {
            let _ = db.close().await;
            return Err(not_a_backup("it has no smsgw schema".into()));
        }
        Err(e) => {
            let _ = db.close().await;
            return Err(not_a_backup(e.to_string()));
        }
    };
    let _ = db.close().await;
    checked.map_err(BackupError::from)
}
