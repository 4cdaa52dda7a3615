//! Rows that belong to one workspace and mode: the one condition that keeps every read and
//! write inside its [`Scope`], and the lookup of one such row by id.

use entity::{
    ai_drafts, api_keys, campaigns, contact_tags, contacts, daily_stats, idempotency_keys,
    messages, phones, pools, webhook_endpoints,
};
use sea_orm::{ColumnTrait, Condition, ConnectionTrait, EntityTrait, PrimaryKeyTrait, QueryFilter};
use uuid::Uuid;

use super::StoreError;
use crate::domain::ids::WorkspaceId;
use crate::domain::status::Mode;

/// Scope of every read: a workspace in one mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scope {
    pub workspace_id: WorkspaceId,
    pub mode: Mode,
}

impl Scope {
    /// The messages of this scope.
    pub(crate) fn condition(self) -> Condition {
        self.of::<messages::Entity>()
    }
}

/// An entity whose rows each belong to one workspace and mode, through its `workspace_id` and
/// `test_mode` columns.
pub(crate) trait Scoped: EntityTrait {
    /// The `workspace_id` column.
    const WORKSPACE_ID: Self::Column;
    /// The `test_mode` column.
    const TEST_MODE: Self::Column;
}

/// Implements [`Scoped`] for entity modules whose columns are named `WorkspaceId` and
/// `TestMode`, as every scoped table's are.
macro_rules! scoped {
    ($($table:ident),+ $(,)?) => {$(
        impl Scoped for $table::Entity {
            const WORKSPACE_ID: Self::Column = $table::Column::WorkspaceId;
            const TEST_MODE: Self::Column = $table::Column::TestMode;
        }
    )+};
}

scoped!(
    ai_drafts,
    api_keys,
    campaigns,
    contact_tags,
    contacts,
    daily_stats,
    idempotency_keys,
    messages,
    phones,
    pools,
    webhook_endpoints,
);

impl Scope {
    /// The rows of `E` in this scope.
    pub(crate) fn of<E: Scoped>(self) -> Condition {
        Condition::all()
            .add(E::WORKSPACE_ID.eq(self.workspace_id))
            .add(E::TEST_MODE.eq(self.mode.is_test()))
    }
}

/// The row `id` of `E` in `scope`; `NotFound` when there is none, or it is another scope's.
pub(crate) async fn find_in_scope<E>(
    conn: &impl ConnectionTrait,
    scope: Scope,
    id: Uuid,
) -> Result<E::Model, StoreError>
where
    E: Scoped,
    Uuid: Into<<E::PrimaryKey as PrimaryKeyTrait>::ValueType>,
{
    E::find_by_id(id)
        .filter(scope.of::<E>())
        .one(conn)
        .await?
        .ok_or(StoreError::NotFound)
}
