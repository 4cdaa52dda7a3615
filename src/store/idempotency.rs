//! `request_id` of the creates that are not sends (campaigns, contacts, phones, webhook
//! endpoints; docs/api.md, "Idempotent creates"). A request reserves its key before it creates
//! anything: the table's primary key lets exactly one of two concurrent requests with one key
//! insert the row, so at most one resource is ever created for it.

use entity::idempotency_keys;
use sea_orm::{ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, Set};
use uuid::Uuid;

use super::StoreError;
use super::scoped::Scope;

/// How long a key is remembered, in milliseconds (a day, as Stripe keeps idempotency keys).
pub const KEY_LIFETIME_MS: i64 = 24 * 3600 * 1000;
/// A reservation whose request never finished (the server stopped mid-request) is given up
/// after this many milliseconds, so the key can be used again.
pub const STALE_RESERVATION_MS: i64 = 60 * 1000;

/// The create a key belongs to; one key may be used once per operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Operation {
    CreateCampaign,
    CreateContact,
    CreatePhone,
    CreateWebhook,
    BulkSend,
}

/// The key of one create.
#[derive(Debug, Clone)]
pub struct IdempotencyKey {
    pub scope: Scope,
    pub operation: Operation,
    pub request_id: String,
}

/// What a reservation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// The key is this request's: create, then [`complete`] (or [`release`] on failure).
    Reserved,
    /// An earlier request with this key created this resource.
    Done(Uuid),
    /// An earlier request with this key is still running.
    Running,
}

fn find(key: &IdempotencyKey) -> sea_orm::Select<idempotency_keys::Entity> {
    let operation: &'static str = key.operation.into();
    idempotency_keys::Entity::find()
        .filter(key.scope.of::<idempotency_keys::Entity>())
        .filter(idempotency_keys::Column::Operation.eq(operation))
        .filter(idempotency_keys::Column::RequestId.eq(key.request_id.as_str()))
}

/// Reserves `key` for this request, or says who has it. A key older than
/// [`KEY_LIFETIME_MS`], or a reservation older than [`STALE_RESERVATION_MS`] that never
/// completed, is taken over.
#[tracing::instrument(skip_all)]
pub async fn reserve(
    db: &DatabaseConnection,
    key: &IdempotencyKey,
    now_ms: i64,
) -> Result<Reservation, StoreError> {
    // Two rounds at most: the second after removing an expired row.
    for _ in 0..2 {
        let operation: &'static str = key.operation.into();
        let inserted = idempotency_keys::ActiveModel {
            workspace_id: Set(key.scope.workspace_id.as_uuid()),
            test_mode: Set(key.scope.mode.is_test()),
            operation: Set(operation.to_string()),
            request_id: Set(key.request_id.clone()),
            resource_id: Set(None),
            created_at: Set(now_ms),
        }
        .insert(db)
        .await
        .map_err(StoreError::from);
        match inserted {
            Ok(_) => return Ok(Reservation::Reserved),
            Err(StoreError::Conflict(_)) => {}
            Err(other) => return Err(other),
        }
        let Some(row) = find(key).one(db).await? else {
            // Released between our insert and this read: try again.
            continue;
        };
        let expired = match row.resource_id {
            Some(_) => now_ms - row.created_at > KEY_LIFETIME_MS,
            None => now_ms - row.created_at > STALE_RESERVATION_MS,
        };
        if !expired {
            return Ok(row
                .resource_id
                .map_or(Reservation::Running, Reservation::Done));
        }
        // Only the row that was read: a concurrent take-over that already replaced it stays.
        idempotency_keys::Entity::delete_many()
            .filter(idempotency_keys::Column::WorkspaceId.eq(row.workspace_id))
            .filter(idempotency_keys::Column::TestMode.eq(row.test_mode))
            .filter(idempotency_keys::Column::Operation.eq(row.operation.as_str()))
            .filter(idempotency_keys::Column::RequestId.eq(row.request_id.as_str()))
            .filter(idempotency_keys::Column::CreatedAt.eq(row.created_at))
            .exec(db)
            .await?;
    }
    Ok(Reservation::Running)
}

/// Records what the reserved key created.
#[tracing::instrument(skip_all)]
pub async fn complete(
    db: &DatabaseConnection,
    key: &IdempotencyKey,
    resource_id: Uuid,
) -> Result<(), StoreError> {
    let operation: &'static str = key.operation.into();
    idempotency_keys::Entity::update_many()
        .col_expr(
            idempotency_keys::Column::ResourceId,
            sea_orm::sea_query::Expr::value(resource_id),
        )
        .filter(key.scope.of::<idempotency_keys::Entity>())
        .filter(idempotency_keys::Column::Operation.eq(operation))
        .filter(idempotency_keys::Column::RequestId.eq(key.request_id.as_str()))
        .exec(db)
        .await?;
    Ok(())
}

/// Gives the reserved key up: the request failed and created nothing, so a retry may use it.
#[tracing::instrument(skip_all)]
pub async fn release(db: &DatabaseConnection, key: &IdempotencyKey) -> Result<(), StoreError> {
    let operation: &'static str = key.operation.into();
    idempotency_keys::Entity::delete_many()
        .filter(key.scope.of::<idempotency_keys::Entity>())
        .filter(idempotency_keys::Column::Operation.eq(operation))
        .filter(idempotency_keys::Column::RequestId.eq(key.request_id.as_str()))
        .filter(idempotency_keys::Column::ResourceId.is_null())
        .exec(db)
        .await?;
    Ok(())
}
