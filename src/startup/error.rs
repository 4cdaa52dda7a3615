//! Why a server could not start: each step's own error, with the message it had before.

use crate::secrets::SecretsKeyError;
use crate::server::tls::TlsError;
use crate::single_node::SingleNodeError;
use crate::store::StoreError;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {bind}: {source}")]
    Bind {
        bind: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Secrets(#[from] SecretsKeyError),
    #[error("server.tls: {0}")]
    Tls(#[from] TlsError),
    /// Another node serves this SQLite database, or its lock file is unusable.
    #[error(transparent)]
    SingleNode(#[from] SingleNodeError),
}
