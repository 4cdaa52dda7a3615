//! The first start: on a database without any workspace, the `default` workspace and its
//! keys, created once the server is about to serve so a failed start leaves no keys nobody saw.

use sea_orm::DatabaseConnection;

use crate::store::{StoreError, workspaces};

/// Keys of the `default` workspace created on an empty database, shown once.
#[derive(Debug, Clone)]
pub struct InitialKeys {
    pub workspace_id: crate::domain::ids::WorkspaceId,
    pub live_key: String,
    pub test_key: String,
}

/// Creates the `default` workspace and its keys when the database has no workspace yet (the
/// first start that got as far as serving); None otherwise.
pub(super) async fn create_first_workspace(
    db: &DatabaseConnection,
    now_ms: i64,
) -> Result<Option<InitialKeys>, StoreError> {
    if workspaces::count(db).await? > 0 {
        return Ok(None);
    }
    let created = workspaces::create(db, FIRST_WORKSPACE, now_ms).await?;
    Ok(Some(InitialKeys {
        workspace_id: created.workspace.id,
        live_key: created.live_key,
        test_key: created.test_key,
    }))
}

/// The name of the workspace the first start creates.
pub const FIRST_WORKSPACE: &str = "default";
