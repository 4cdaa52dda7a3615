//! The secrets key at rest (docs/api.md, "Secrets at rest"): where it comes from (the
//! `secrets.key` setting or a key file, created on first use), and unlocking the stored
//! webhook signing keys with it at start. The cipher itself is `domain::secrets::SecretBox`.

use std::path::{Path, PathBuf};

use sea_orm::DatabaseConnection;
use secrecy::ExposeSecret;

use crate::config::Settings;
use crate::domain::secrets::{SecretBox, SecretsError};
use crate::single_node::sqlite_file;
use crate::store::{self, StoreError};

/// Where the secrets key comes from (docs/api.md, "Secrets at rest").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretsKeySource {
    /// `secrets.key` (`SMSGW_SECRETS__KEY`).
    Setting,
    /// A key file: `secrets.key_file`, or the default one.
    File(PathBuf),
}

impl std::fmt::Display for SecretsKeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretsKeySource::Setting => f.write_str("secrets.key (SMSGW_SECRETS__KEY)"),
            SecretsKeySource::File(path) => write!(f, "the key file {}", path.display()),
        }
    }
}

/// Why the secrets key could not be read, created or used; each message names its origin.
#[derive(Debug, thiserror::Error)]
pub enum SecretsKeyError {
    /// The key (from `origin`) is not a usable key.
    #[error("{origin}: {error}")]
    Invalid {
        origin: SecretsKeySource,
        error: SecretsError,
    },
    /// The key file holds raw bytes where base64 text of them is expected.
    #[error(
        "{0} is not text: it must hold standard base64 of 32 bytes (openssl rand -base64 32), not the bytes themselves"
    )]
    NotText(SecretsKeySource),
    #[error("cannot create {origin}: {error}")]
    Create {
        origin: SecretsKeySource,
        error: std::io::Error,
    },
    #[error("cannot read {origin}: {error}")]
    Read {
        origin: SecretsKeySource,
        error: std::io::Error,
    },
    /// A stored signing key does not open under the key: most likely not the key they were
    /// sealed with.
    #[error("{error}; is {origin} the key they were sealed with?")]
    WrongKey {
        origin: SecretsKeySource,
        error: StoreError,
    },
    /// The database failed while the stored keys were read or sealed.
    #[error("database: {0}")]
    Store(StoreError),
}

/// The key file used when neither `secrets.key` nor `secrets.key_file` is set: beside the
/// SQLite database file (`<db file>.key`), else `smsgw.secrets.key` in the working directory
/// (PostgreSQL, or an in-memory SQLite database).
pub fn default_key_file(database_url: &str) -> PathBuf {
    match sqlite_file(database_url) {
        Some(path) => PathBuf::from(format!("{path}.key")),
        None => PathBuf::from("smsgw.secrets.key"),
    }
}

/// Reads the secrets key from the settings, or from its key file, which is created (mode 0600,
/// a new random key) when it does not exist yet.
pub fn load_secrets_key(
    settings: &Settings,
) -> Result<(SecretBox, SecretsKeySource), SecretsKeyError> {
    if let Some(key) = &settings.secrets.key {
        let secret_box = SecretBox::from_base64(key.expose_secret()).map_err(|error| {
            SecretsKeyError::Invalid {
                origin: SecretsKeySource::Setting,
                error,
            }
        })?;
        return Ok((secret_box, SecretsKeySource::Setting));
    }
    let path = match &settings.secrets.key_file {
        Some(path) => PathBuf::from(path),
        None => default_key_file(&settings.database.url),
    };
    let origin = SecretsKeySource::File(path.clone());
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            create_key_file(&path).map_err(|error| SecretsKeyError::Create {
                origin: origin.clone(),
                error,
            })?
        }
        Err(err) if err.kind() == std::io::ErrorKind::InvalidData => {
            return Err(SecretsKeyError::NotText(origin));
        }
        Err(error) => return Err(SecretsKeyError::Read { origin, error }),
    };
    match SecretBox::from_base64(&text) {
        Ok(secret_box) => Ok((secret_box, origin)),
        Err(error) => Err(SecretsKeyError::Invalid { origin, error }),
    }
}

/// Loads the secrets key and seals with it any webhook signing key still stored in clear; a
/// stored key that does not open under it refuses the start (it is not the key they were
/// sealed with).
pub async fn unlock(
    db: &DatabaseConnection,
    settings: &Settings,
) -> Result<SecretBox, SecretsKeyError> {
    let (secrets, origin) = load_secrets_key(settings)?;
    let sealed = store::webhooks::seal_signing_keys(db, &secrets, None)
        .await
        .map_err(|error| match error {
            StoreError::Secret { .. } | StoreError::SettingsSecret { .. } => {
                SecretsKeyError::WrongKey { origin, error }
            }
            other => SecretsKeyError::Store(other),
        })?;
    if sealed.sealed > 0 {
        tracing::info!(
            count = sealed.sealed,
            "sealed webhook signing keys stored in clear"
        );
    }
    Ok(secrets)
}

/// Writes a new key file readable by its owner only; when another process created it first,
/// its key is used.
fn create_key_file(path: &Path) -> std::io::Result<String> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            let key = SecretBox::generate_key();
            file.write_all(format!("{key}\n").as_bytes())?;
            file.sync_all()?;
            tracing::warn!(path = %path.display(), "generated a new secrets key; keep this file (and back it up) or webhook signing keys cannot be read");
            Ok(key)
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::read_to_string(path)
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn with_key_file(path: &Path) -> Settings {
        let mut settings = Settings::default();
        settings.secrets.key_file = Some(path.display().to_string());
        settings
    }

    #[test]
    fn a_key_file_of_raw_bytes_says_it_must_hold_base64() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw.key");
        std::fs::write(&path, [0xffu8, 0xfe, 0x00, 0x80].repeat(8)).unwrap();
        let Err(err) = load_secrets_key(&with_key_file(&path)) else {
            panic!("raw bytes were accepted as a key");
        };
        let err = err.to_string();
        assert!(err.contains("raw.key") && err.contains("base64"), "{err}");
    }

    #[test]
    fn a_missing_key_file_is_created_once_and_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.key");
        let settings = with_key_file(&path);
        let (first, origin) = load_secrets_key(&settings).unwrap();
        assert_eq!(origin, SecretsKeySource::File(path.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "readable by its owner only");
        }
        let (again, _) = load_secrets_key(&settings).unwrap();
        let sealed = first.seal("signing key", b"context").unwrap();
        assert_eq!(again.open(&sealed, b"context").unwrap(), "signing key");
    }

    #[test]
    fn the_setting_wins_over_a_key_file_and_is_named_when_bad() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = with_key_file(&dir.path().join("unused.key"));
        settings.secrets.key = Some(secrecy::SecretString::from("not base64 of 32 bytes"));
        let Err(err) = load_secrets_key(&settings) else {
            panic!("a bad key was accepted");
        };
        assert!(
            err.to_string()
                .starts_with("secrets.key (SMSGW_SECRETS__KEY): "),
            "{err}"
        );
        assert!(!dir.path().join("unused.key").exists());
    }

    #[test]
    fn the_default_key_file_sits_beside_the_sqlite_database() {
        assert_eq!(
            default_key_file("sqlite:///var/lib/smsgw/data.db?mode=rwc"),
            PathBuf::from("/var/lib/smsgw/data.db.key")
        );
        assert_eq!(
            default_key_file("postgres://smsgw@db/smsgw"),
            PathBuf::from("smsgw.secrets.key")
        );
        assert_eq!(
            default_key_file("sqlite::memory:"),
            PathBuf::from("smsgw.secrets.key")
        );
    }
}
