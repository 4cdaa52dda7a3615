//! The client-API settings of each workspace and mode (docs/compat.md, Settings): the checked
//! document, and its two secrets sealed under the secrets key in their own columns. The SMSGate
//! webhook signing key is generated here the first time one is needed.

use entity::workspace_settings;
use sea_orm::{ActiveModelTrait, DatabaseConnection, DatabaseTransaction, EntityTrait, Set};
use serde_json::{Map, Value};

use super::StoreError;
use super::scoped::Scope;
use crate::domain::client_settings::{SecretChange, SettingsBody};
use crate::domain::secrets::{self, SecretBox, SecretsError};
use crate::domain::signing;

/// A secret of the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingsSecret {
    SigningKey,
    Passphrase,
}

impl SettingsSecret {
    /// The context a value is sealed for: the workspace, the mode and the field, so a sealed
    /// value copied to another row or column does not open.
    pub fn context(self, scope: Scope) -> Vec<u8> {
        let field = match self {
            SettingsSecret::SigningKey => "webhooks.signing_key",
            SettingsSecret::Passphrase => "encryption.passphrase",
        };
        format!(
            "workspace_settings:{}:{}:{field}",
            scope.workspace_id,
            scope.mode.as_str()
        )
        .into_bytes()
    }
}

/// The settings of one scope as stored (an empty document when none were ever set).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredSettings {
    /// Snake_case sections without the secrets.
    pub document: Map<String, Value>,
    pub sealed_signing_key: Option<String>,
    pub sealed_passphrase: Option<String>,
}

impl From<workspace_settings::Model> for StoredSettings {
    fn from(m: workspace_settings::Model) -> Self {
        let document = match serde_json::from_str(&m.document) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        StoredSettings {
            document,
            sealed_signing_key: m.signing_key,
            sealed_passphrase: m.passphrase,
        }
    }
}

async fn read<C: sea_orm::ConnectionTrait>(
    db: &C,
    scope: Scope,
) -> Result<Option<workspace_settings::Model>, StoreError> {
    Ok(
        workspace_settings::Entity::find_by_id((
            scope.workspace_id.as_uuid(),
            scope.mode.is_test(),
        ))
        .one(db)
        .await?,
    )
}

/// The settings of this scope.
pub async fn get(db: &DatabaseConnection, scope: Scope) -> Result<StoredSettings, StoreError> {
    Ok(read(db, scope)
        .await?
        .map(StoredSettings::from)
        .unwrap_or_default())
}

fn sealed(
    secrets: &SecretBox,
    scope: Scope,
    which: SettingsSecret,
    change: &SecretChange,
    current: Option<String>,
) -> Result<Option<String>, StoreError> {
    match change {
        SecretChange::Keep => Ok(current),
        SecretChange::Remove => Ok(None),
        SecretChange::Set(clear) => secrets
            .seal(clear, &which.context(scope))
            .map(Some)
            .map_err(|error| StoreError::SettingsSecret {
                workspace_id: scope.workspace_id,
                error,
            }),
    }
}

async fn write(
    txn: &DatabaseTransaction,
    scope: Scope,
    exists: bool,
    settings: &StoredSettings,
    now_ms: i64,
) -> Result<(), StoreError> {
    let model = workspace_settings::ActiveModel {
        workspace_id: Set(scope.workspace_id.as_uuid()),
        test_mode: Set(scope.mode.is_test()),
        document: Set(Value::Object(settings.document.clone()).to_string()),
        signing_key: Set(settings.sealed_signing_key.clone()),
        passphrase: Set(settings.sealed_passphrase.clone()),
        updated_at: Set(now_ms),
    };
    if exists {
        model.update(txn).await?;
    } else {
        model.insert(txn).await?;
    }
    Ok(())
}

/// Applies a checked body: `replace` (PUT) makes it the whole document, else (PATCH) it is
/// merged in. A secret left out of the body is kept either way (GET never shows it, so a
/// read-modify-write round trip must not lose it); `null` removes it.
#[tracing::instrument(skip_all)]
pub async fn apply(
    db: &DatabaseConnection,
    scope: Scope,
    body: &SettingsBody,
    replace: bool,
    secrets: &SecretBox,
    now_ms: i64,
) -> Result<StoredSettings, StoreError> {
    let txn = super::quotas::begin_locked(db, scope.workspace_id).await?;
    let row = read(&txn, scope).await?;
    let exists = row.is_some();
    let mut settings = row.map(StoredSettings::from).unwrap_or_default();
    if replace {
        settings.document = body.document();
    } else {
        body.merge_into(&mut settings.document);
    }
    settings.sealed_signing_key = sealed(
        secrets,
        scope,
        SettingsSecret::SigningKey,
        &body.signing_key,
        settings.sealed_signing_key,
    )?;
    settings.sealed_passphrase = sealed(
        secrets,
        scope,
        SettingsSecret::Passphrase,
        &body.passphrase,
        settings.sealed_passphrase,
    )?;
    write(&txn, scope, exists, &settings, now_ms).await?;
    txn.commit().await?;
    Ok(settings)
}

/// The sealed SMSGate webhook signing key of this scope; one is generated and stored when
/// none is set (docs/compat.md, Webhooks). Open it with [`SettingsSecret::SigningKey`]'s
/// context.
#[tracing::instrument(skip_all)]
pub async fn signing_key(
    db: &DatabaseConnection,
    scope: Scope,
    secrets: &SecretBox,
    now_ms: i64,
) -> Result<String, StoreError> {
    if let Some(key) = read(db, scope).await?.and_then(|m| m.signing_key) {
        return Ok(key);
    }
    let txn = super::quotas::begin_locked(db, scope.workspace_id).await?;
    let row = read(&txn, scope).await?;
    let exists = row.is_some();
    let mut settings = row.map(StoredSettings::from).unwrap_or_default();
    if let Some(key) = settings.sealed_signing_key {
        // Set by another request meanwhile.
        return Ok(key);
    }
    let key = secrets
        .seal(
            &signing::generate_signing_key(),
            &SettingsSecret::SigningKey.context(scope),
        )
        .map_err(|error| StoreError::SettingsSecret {
            workspace_id: scope.workspace_id,
            error,
        })?;
    settings.sealed_signing_key = Some(key.clone());
    write(&txn, scope, exists, &settings, now_ms).await?;
    txn.commit().await?;
    Ok(key)
}

/// Opens (and, with `rotate_to`, seals again under that key) every stored settings secret
/// inside the caller's transaction; part of `store::webhooks::seal_signing_keys`. Returns how
/// many were opened.
pub(super) async fn reseal(
    txn: &DatabaseTransaction,
    current: &SecretBox,
    rotate_to: Option<&SecretBox>,
) -> Result<u64, StoreError> {
    let mut opened = 0;
    for row in workspace_settings::Entity::find().all(txn).await? {
        let scope = Scope {
            workspace_id: row.workspace_id.into(),
            mode: crate::domain::status::Mode::from_test_flag(row.test_mode),
        };
        let fail = |error: SecretsError| StoreError::SettingsSecret {
            workspace_id: row.workspace_id.into(),
            error,
        };
        let mut again = |stored: &Option<String>,
                         which: SettingsSecret|
         -> Result<Option<String>, StoreError> {
            let Some(stored) = stored else {
                return Ok(None);
            };
            let context = which.context(scope);
            let clear = if secrets::is_sealed(stored) {
                opened += 1;
                current.open(stored, &context).map_err(fail)?
            } else {
                stored.clone()
            };
            rotate_to
                .unwrap_or(current)
                .seal(&clear, &context)
                .map(Some)
                .map_err(fail)
        };
        let signing_key = again(&row.signing_key, SettingsSecret::SigningKey)?;
        let passphrase = again(&row.passphrase, SettingsSecret::Passphrase)?;
        if rotate_to.is_some() {
            let model = workspace_settings::ActiveModel {
                workspace_id: Set(row.workspace_id),
                test_mode: Set(row.test_mode),
                signing_key: Set(signing_key),
                passphrase: Set(passphrase),
                ..Default::default()
            };
            model.update(txn).await?;
        }
    }
    Ok(opened)
}
