//! Workspaces and their API keys.

use entity::{api_keys, workspaces};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter,
    Set,
};
use uuid::Uuid;

use super::StoreError;
use crate::domain::keys;
use crate::domain::status::Mode;

/// A workspace as the layers above see it.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub id: Uuid,
    pub name: String,
    pub created_at: i64,
}

/// A freshly created workspace with its first keys, shown once.
#[derive(Debug, Clone)]
pub struct CreatedWorkspace {
    pub workspace: Workspace,
    pub live_key: String,
    pub test_key: String,
}

/// What an API key grants: a workspace in one mode.
#[derive(Debug, Clone)]
pub struct KeyGrant {
    pub key_id: Uuid,
    pub key_hash: String,
    pub workspace_id: Uuid,
    pub workspace_created_at: i64,
    pub mode: Mode,
}

/// Number of workspaces (an empty database gets the `default` one at first start).
pub async fn count(db: &DatabaseConnection) -> Result<u64, StoreError> {
    Ok(workspaces::Entity::find().count(db).await?)
}

/// Creates a workspace with one live and one test key.
#[tracing::instrument(skip_all, fields(name = %name))]
pub async fn create(
    db: &DatabaseConnection,
    name: &str,
    now_ms: i64,
) -> Result<CreatedWorkspace, StoreError> {
    let txn = super::begin_write(db).await?;
    let workspace = workspaces::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(name.to_string()),
        created_at: Set(now_ms),
    }
    .insert(&txn)
    .await?;
    let live_key = insert_key(&txn, workspace.id, Mode::Live, now_ms).await?;
    let test_key = insert_key(&txn, workspace.id, Mode::Test, now_ms).await?;
    txn.commit().await?;
    Ok(CreatedWorkspace {
        workspace: Workspace {
            id: workspace.id,
            name: workspace.name,
            created_at: workspace.created_at,
        },
        live_key,
        test_key,
    })
}

/// Issues a new key for an existing workspace; returns the secret, shown once.
#[tracing::instrument(skip_all, fields(workspace_id = %workspace_id))]
pub async fn create_key(
    db: &DatabaseConnection,
    workspace_id: Uuid,
    mode: Mode,
    now_ms: i64,
) -> Result<String, StoreError> {
    let txn = super::begin_write(db).await?;
    if workspaces::Entity::find_by_id(workspace_id)
        .one(&txn)
        .await?
        .is_none()
    {
        return Err(StoreError::NotFound);
    }
    let key = insert_key(&txn, workspace_id, mode, now_ms).await?;
    txn.commit().await?;
    Ok(key)
}

async fn insert_key<C: sea_orm::ConnectionTrait>(
    conn: &C,
    workspace_id: Uuid,
    mode: Mode,
    now_ms: i64,
) -> Result<String, StoreError> {
    let secret = keys::generate_api_key(mode);
    api_keys::ActiveModel {
        id: Set(Uuid::now_v7()),
        workspace_id: Set(workspace_id),
        test_mode: Set(mode.is_test()),
        key_hash: Set(keys::hash_secret(&secret)),
        key_prefix: Set(keys::display_prefix(&secret)),
        created_at: Set(now_ms),
        revoked_at: Set(None),
    }
    .insert(conn)
    .await?;
    Ok(secret)
}

/// Finds the live (unrevoked) key with this hash and its workspace.
pub async fn find_key(
    db: &DatabaseConnection,
    key_hash: &str,
) -> Result<Option<KeyGrant>, StoreError> {
    let Some(key) = api_keys::Entity::find()
        .filter(api_keys::Column::KeyHash.eq(key_hash))
        .filter(api_keys::Column::RevokedAt.is_null())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let Some(workspace) = workspaces::Entity::find_by_id(key.workspace_id)
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(KeyGrant {
        key_id: key.id,
        key_hash: key.key_hash,
        workspace_id: workspace.id,
        workspace_created_at: workspace.created_at,
        mode: Mode::from_test_flag(key.test_mode),
    }))
}

/// Creation time of a workspace (for the new-workspace limit).
pub async fn created_at(
    db: &DatabaseConnection,
    workspace_id: Uuid,
) -> Result<Option<i64>, StoreError> {
    Ok(workspaces::Entity::find_by_id(workspace_id)
        .one(db)
        .await?
        .map(|w| w.created_at))
}
