//! SQLite runs one node: the lock a node holds on its SQLite database for its whole life, so a
//! second `smsgw serve` on the same file refuses to start (several nodes need PostgreSQL,
//! docs/deploy.md).

use std::time::Duration;

use crate::store::StoreError;

/// How long a start waits for another node's lock on the SQLite file before refusing.
const SINGLE_NODE_LOCK_WAIT: Duration = Duration::from_secs(2);

/// How often a start waiting for the lock tries again.
const SINGLE_NODE_LOCK_RETRY: Duration = Duration::from_millis(50);

/// Why the single-node lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum SingleNodeError {
    /// Another process serves this SQLite database (it runs one node; several need PostgreSQL).
    #[error(
        "another smsgw node is already serving the SQLite database {0}; SQLite runs a single node (several nodes need PostgreSQL, docs/deploy.md)"
    )]
    AlreadyServing(String),
    /// The lock file could not be opened or locked.
    #[error("database: {0}")]
    LockFile(StoreError),
}

/// The database file of a SQLite URL (None for PostgreSQL and in-memory databases).
pub fn sqlite_file(database_url: &str) -> Option<&str> {
    database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or_default())
        .filter(|path| !path.is_empty() && !path.starts_with(":memory:"))
}

/// The exclusive lock a node holds for its whole life on `<SQLite database file>.lock`: an OS
/// file lock (`flock`), released by the kernel when the process ends however it ends, so a
/// kill -9 leaves nothing behind. A file of its own, never the database file: closing any
/// descriptor of the database file drops every POSIX (`fcntl`) lock this process holds on it,
/// SQLite's included, which can corrupt the database (sqlite.org, "How To Corrupt An SQLite
/// Database File", 2.2).
pub struct SingleNodeLock {
    _file: std::fs::File,
}

impl SingleNodeLock {
    /// Takes the lock of the SQLite database of `database_url` (None on PostgreSQL). A lock
    /// another node holds is waited for up to [`SINGLE_NODE_LOCK_WAIT`] (a node of this
    /// process restarting hands it over), then refused.
    pub async fn take(database_url: &str) -> Result<Option<SingleNodeLock>, SingleNodeError> {
        let Some(path) = sqlite_file(database_url) else {
            return Ok(None);
        };
        let lock_path = format!("{path}.lock");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| {
                SingleNodeError::LockFile(StoreError::Busy(format!("cannot open {lock_path}: {e}")))
            })?;
        let deadline = tokio::time::Instant::now() + SINGLE_NODE_LOCK_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(SingleNodeLock { _file: file })),
                Err(std::fs::TryLockError::WouldBlock)
                    if tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(SINGLE_NODE_LOCK_RETRY).await;
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(SingleNodeError::AlreadyServing(path.to_string()));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(SingleNodeError::LockFile(StoreError::Busy(format!(
                        "cannot lock {lock_path}: {e}"
                    ))));
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sqlite_url_with_a_file_names_one() {
        assert_eq!(
            sqlite_file("sqlite://data/smsgw.db?mode=rwc"),
            Some("data/smsgw.db")
        );
        assert_eq!(sqlite_file("sqlite:smsgw.db"), Some("smsgw.db"));
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("sqlite://:memory:?cache=shared"), None);
        assert_eq!(sqlite_file("sqlite://"), None);
        assert_eq!(sqlite_file("postgres://postgres@127.0.0.1/smsgw"), None);
    }

    #[actix_web::test]
    async fn a_second_lock_on_one_file_waits_then_refuses_and_the_first_is_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("smsgw.db").display()
        );
        let first = SingleNodeLock::take(&url).await.unwrap();
        assert!(first.is_some());
        let Err(SingleNodeError::AlreadyServing(path)) = SingleNodeLock::take(&url).await else {
            panic!("a second node took the lock");
        };
        assert!(path.ends_with("smsgw.db"), "{path}");
        drop(first);
        assert!(SingleNodeLock::take(&url).await.unwrap().is_some());
    }

    #[actix_web::test]
    async fn postgresql_takes_no_lock() {
        let lock = SingleNodeLock::take("postgres://postgres@127.0.0.1/smsgw").await;
        assert!(matches!(lock, Ok(None)));
    }
}
