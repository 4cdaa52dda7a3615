//! Workspaces and their API keys: creation, listing, revocation, and the key generation that
//! tells every server process a key was revoked (docs/api.md, "API keys").

use entity::{api_key_generation, api_keys, workspaces};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::Position;
use super::scoped::Scope;
use crate::domain::ids::WorkspaceId;
use crate::domain::keys;
use crate::domain::status::Mode;

/// The id of the one row of `api_key_generation`.
const GENERATION_ROW: i32 = 1;

/// A workspace as the layers above see it.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub id: WorkspaceId,
    pub name: String,
    /// Its own default country (ISO 3166-1 alpha-2); None: the server's default.
    pub default_country: Option<String>,
    pub created_at: i64,
}

impl From<workspaces::Model> for Workspace {
    fn from(row: workspaces::Model) -> Workspace {
        Workspace {
            id: row.id.into(),
            name: row.name,
            default_country: row.default_country,
            created_at: row.created_at,
        }
    }
}

/// A change to a workspace's settings: `None` leaves a field as it is; `Some(None)` clears
/// the default country.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceChange {
    pub name: Option<String>,
    pub default_country: Option<Option<String>>,
}

/// One workspace by id.
pub async fn get(db: &DatabaseConnection, id: WorkspaceId) -> Result<Workspace, StoreError> {
    workspaces::Entity::find_by_id(id.as_uuid())
        .one(db)
        .await?
        .map(Workspace::from)
        .ok_or(StoreError::NotFound)
}

/// Applies `change` to a workspace and answers it as stored.
#[tracing::instrument(skip_all, fields(workspace_id = %id))]
pub async fn update(
    db: &DatabaseConnection,
    id: WorkspaceId,
    change: WorkspaceChange,
) -> Result<Workspace, StoreError> {
    let txn = super::begin_write(db).await?;
    let row = workspaces::Entity::find_by_id(id.as_uuid())
        .one(&txn)
        .await?
        .ok_or(StoreError::NotFound)?;
    let mut active: workspaces::ActiveModel = row.into();
    if let Some(name) = change.name {
        active.name = Set(name);
    }
    if let Some(country) = change.default_country {
        active.default_country = Set(country);
    }
    let row = active.update(&txn).await?;
    txn.commit().await?;
    Ok(row.into())
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
    pub workspace_id: WorkspaceId,
    pub workspace_created_at: i64,
    pub mode: Mode,
}

/// An API key as listings show it: never the secret nor its hash.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    pub id: Uuid,
    pub mode: Mode,
    /// The first 12 characters of the secret (`sk_live_` and 4 more).
    pub prefix: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

impl From<api_keys::Model> for KeyRecord {
    fn from(key: api_keys::Model) -> KeyRecord {
        KeyRecord {
            id: key.id,
            mode: Mode::from_test_flag(key.test_mode),
            prefix: key.key_prefix,
            created_at: key.created_at,
            revoked_at: key.revoked_at,
        }
    }
}

/// A freshly issued key: the secret, shown once, and its record.
#[derive(Debug, Clone)]
pub struct IssuedKey {
    pub secret: String,
    pub record: KeyRecord,
}

/// What a revocation did.
#[derive(Debug, Clone)]
pub struct Revoked {
    pub record: KeyRecord,
    /// False when the key had been revoked before (its `revoked_at` is the first revocation's).
    pub newly: bool,
}

/// Number of workspaces (an empty database gets the `default` one at first start).
pub async fn count(db: &DatabaseConnection) -> Result<u64, StoreError> {
    Ok(workspaces::Entity::find().count(db).await?)
}

/// A workspace as `smsgw workspace list` shows it: with its count of unrevoked keys per mode.
#[derive(Debug, Clone)]
pub struct WorkspaceSummary {
    pub workspace: Workspace,
    pub live_keys: u64,
    pub test_keys: u64,
}

/// Every workspace, oldest first, with its unrevoked keys counted.
pub async fn list(db: &DatabaseConnection) -> Result<Vec<WorkspaceSummary>, StoreError> {
    #[derive(sea_orm::FromQueryResult)]
    struct KeyCount {
        workspace_id: Uuid,
        test_mode: bool,
        keys: i64,
    }
    let counts = api_keys::Entity::find()
        .select_only()
        .column(api_keys::Column::WorkspaceId)
        .column(api_keys::Column::TestMode)
        .column_as(api_keys::Column::Id.count(), "keys")
        .filter(api_keys::Column::RevokedAt.is_null())
        .group_by(api_keys::Column::WorkspaceId)
        .group_by(api_keys::Column::TestMode)
        .into_model::<KeyCount>()
        .all(db)
        .await?
        .into_iter()
        .map(|c| ((c.workspace_id, c.test_mode), c.keys))
        .collect::<std::collections::HashMap<_, _>>();
    let rows = workspaces::Entity::find()
        .order_by_asc(workspaces::Column::CreatedAt)
        .order_by_asc(workspaces::Column::Id)
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let keys_of = |test_mode: bool| {
                counts
                    .get(&(row.id, test_mode))
                    .map_or(0, |keys| u64::try_from(*keys).unwrap_or_default())
            };
            let (live_keys, test_keys) = (keys_of(false), keys_of(true));
            WorkspaceSummary {
                workspace: row.into(),
                live_keys,
                test_keys,
            }
        })
        .collect())
}

/// The workspaces named `name` exactly (names need not be unique), oldest first.
pub async fn find_by_name(
    db: &DatabaseConnection,
    name: &str,
) -> Result<Vec<Workspace>, StoreError> {
    Ok(workspaces::Entity::find()
        .filter(workspaces::Column::Name.eq(name))
        .order_by_asc(workspaces::Column::CreatedAt)
        .order_by_asc(workspaces::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(Workspace::from)
        .collect())
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
        default_country: Set(None),
        created_at: Set(now_ms),
    }
    .insert(&txn)
    .await?;
    let live_key = insert_key(&txn, workspace.id.into(), Mode::Live, now_ms)
        .await?
        .secret;
    let test_key = insert_key(&txn, workspace.id.into(), Mode::Test, now_ms)
        .await?
        .secret;
    txn.commit().await?;
    Ok(CreatedWorkspace {
        workspace: Workspace::from(workspace),
        live_key,
        test_key,
    })
}

/// Issues a new key for an existing workspace; the secret is shown once.
///
/// `QuotaExceeded`, with nothing written, when the workspace already has `quota` unrevoked keys
/// of the mode (checked under the workspace's lock, so concurrent creates cannot both pass).
#[tracing::instrument(skip_all, fields(workspace_id = %workspace_id))]
pub async fn create_key(
    db: &DatabaseConnection,
    workspace_id: WorkspaceId,
    mode: Mode,
    quota: crate::domain::quota::CountQuota,
    now_ms: i64,
) -> Result<IssuedKey, StoreError> {
    let txn = super::quotas::begin_locked(db, workspace_id).await?;
    if workspaces::Entity::find_by_id(workspace_id.as_uuid())
        .one(&txn)
        .await?
        .is_none()
    {
        return Err(StoreError::NotFound);
    }
    let active = api_keys::Entity::find()
        .filter(api_keys::Column::WorkspaceId.eq(workspace_id.as_uuid()))
        .filter(api_keys::Column::TestMode.eq(mode.is_test()))
        .filter(api_keys::Column::RevokedAt.is_null());
    super::quotas::ensure_room(&txn, quota, active, 1).await?;
    let key = insert_key(&txn, workspace_id, mode, now_ms).await?;
    txn.commit().await?;
    Ok(key)
}

async fn insert_key<C: sea_orm::ConnectionTrait>(
    conn: &C,
    workspace_id: WorkspaceId,
    mode: Mode,
    now_ms: i64,
) -> Result<IssuedKey, StoreError> {
    let secret = keys::generate_api_key(mode);
    let model = api_keys::ActiveModel {
        id: Set(Uuid::now_v7()),
        workspace_id: Set(workspace_id.as_uuid()),
        test_mode: Set(mode.is_test()),
        key_hash: Set(keys::hash_secret(&secret)),
        key_prefix: Set(keys::display_prefix(&secret)),
        created_at: Set(now_ms),
        revoked_at: Set(None),
    }
    .insert(conn)
    .await?;
    Ok(IssuedKey {
        secret,
        record: model.into(),
    })
}

/// One page of the keys of a workspace in one mode, newest first, revoked ones included.
pub async fn list_keys(
    db: &DatabaseConnection,
    scope: Scope,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<KeyRecord>, bool), StoreError> {
    super::newest_first(
        db,
        api_keys::Entity::find().filter(scope.of::<api_keys::Entity>()),
        (api_keys::Column::CreatedAt, api_keys::Column::Id),
        after,
        limit,
    )
    .await
}

/// Which key to revoke: by id within a caller's scope (the API), or by its secret (the CLI,
/// for whoever holds a leaked key).
#[derive(Debug, Clone)]
pub enum KeyToRevoke {
    Id { scope: Scope, id: Uuid },
    Hash(String),
}

/// Revokes a key and raises the key generation in the same transaction, so every server
/// process stops accepting it at its next generation check. Revoking a revoked key changes
/// nothing. Unknown (or out of scope): [`StoreError::NotFound`].
#[tracing::instrument(skip_all)]
pub async fn revoke_key(
    db: &DatabaseConnection,
    which: KeyToRevoke,
    now_ms: i64,
) -> Result<Revoked, StoreError> {
    let txn = super::begin_write(db).await?;
    let query = match &which {
        KeyToRevoke::Id { scope, id } => {
            api_keys::Entity::find_by_id(*id).filter(scope.of::<api_keys::Entity>())
        }
        KeyToRevoke::Hash(hash) => {
            api_keys::Entity::find().filter(api_keys::Column::KeyHash.eq(hash))
        }
    };
    let key = query.one(&txn).await?.ok_or(StoreError::NotFound)?;
    if key.revoked_at.is_some() {
        return Ok(Revoked {
            record: key.into(),
            newly: false,
        });
    }
    let mut active: api_keys::ActiveModel = key.into();
    active.revoked_at = Set(Some(now_ms));
    let key = active.update(&txn).await?;
    api_key_generation::Entity::update_many()
        .col_expr(
            api_key_generation::Column::Generation,
            Expr::col(api_key_generation::Column::Generation).add(1),
        )
        .filter(api_key_generation::Column::Id.eq(GENERATION_ROW))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(Revoked {
        record: key.into(),
        newly: true,
    })
}

/// The key generation: raised by every revocation (0 before the first).
pub async fn key_generation(db: &DatabaseConnection) -> Result<i64, StoreError> {
    Ok(api_key_generation::Entity::find_by_id(GENERATION_ROW)
        .one(db)
        .await?
        .map_or(0, |row| row.generation))
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
        workspace_id: workspace.id.into(),
        workspace_created_at: workspace.created_at,
        mode: Mode::from_test_flag(key.test_mode),
    }))
}

/// Whether the key `key_id` exists and is not revoked.
pub async fn key_is_live(db: &DatabaseConnection, key_id: Uuid) -> Result<bool, StoreError> {
    Ok(api_keys::Entity::find_by_id(key_id)
        .filter(api_keys::Column::RevokedAt.is_null())
        .count(db)
        .await?
        > 0)
}

/// Creation time of a workspace (for the new-workspace limit).
pub async fn created_at(
    db: &DatabaseConnection,
    workspace_id: WorkspaceId,
) -> Result<Option<i64>, StoreError> {
    Ok(workspaces::Entity::find_by_id(workspace_id.as_uuid())
        .one(db)
        .await?
        .map(|w| w.created_at))
}
