//! Webhook endpoints: CRUD, signing keys sealed at rest, and the in-memory subscription index
//! the writer's commit hook consults. Deliveries and attempts are in `delivery`.
//!
//! The commit hook (`actors::webhook_endpoint::WebhookFanout`) matches each batch's changes
//! against [`Subscriptions`] (enabled endpoints by workspace and mode, with their events and
//! phone numbers; an `smsgate` endpoint's event names mapped to the kinds they fire on) and the
//! writer inserts one `pending` delivery per match in the batch's transaction. On SQLite (one
//! node) the index is the in-memory one the API refreshes before it answers, so the hook costs
//! no query; on PostgreSQL, where other nodes change endpoints too, the writer reads the
//! batch's endpoints in the transaction instead ([`Subscriptions::read_for`]).
//!
//! An attempt's outcome is recorded through the same group-commit writer (`AttemptRecorder`):
//! the attempt row and the delivery's new state are written in the writer's transaction with
//! whatever else it batches, so SQLite keeps a single writer.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use entity::{webhook_attempts, webhook_deliveries, webhook_endpoints};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, DatabaseTransaction, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, QuerySelect, Set,
};
use uuid::Uuid;

use super::StoreError;
use super::change::Change;
use super::cluster::Lease;
use super::messages::{Message, Position};
use super::scoped::Scope;
use super::scoped::find_in_scope;
use crate::domain::ids::{EndpointId, WorkspaceId};
use crate::domain::quota::CountQuota;
use crate::domain::secrets::{self, SecretBox};
use crate::domain::status::{Direction, Mode};
use crate::domain::webhook_event::{EventKind, WebhookFormat, event_for_change};

/// Rows per multi-row INSERT (SQLite binds at most 32,766 parameters per statement).
const ROWS_PER_INSERT: usize = 512;

/// A delivery's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending,
    Succeeded,
    Failed,
}

impl DeliveryState {
    /// The stable name in storage and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Succeeded => "succeeded",
            DeliveryState::Failed => "failed",
        }
    }
}

/// A webhook endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRecord {
    pub id: EndpointId,
    pub workspace_id: WorkspaceId,
    pub mode: Mode,
    pub url: String,
    pub events: Vec<String>,
    /// E.164 numbers; empty: every phone.
    pub phone_numbers: Vec<String>,
    pub enabled: bool,
    /// The signing key as stored: sealed under the secrets key (`domain::secrets`, the
    /// endpoint's id as context). Only the delivering actor opens it.
    pub sealed_signing_key: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// The body format; `events` are names of this format.
    pub format: WebhookFormat,
    /// The id an SMSGate client knows the endpoint by (SMSGate format only).
    pub external_id: Option<String>,
    /// The phone (`deviceId`) an SMSGate endpoint is limited to, as the client gave it.
    pub device_id: Option<String>,
}

impl From<webhook_endpoints::Model> for EndpointRecord {
    fn from(m: webhook_endpoints::Model) -> Self {
        EndpointRecord {
            id: m.id.into(),
            workspace_id: m.workspace_id.into(),
            mode: Mode::from_test_flag(m.test_mode),
            url: m.url,
            events: serde_json::from_str(&m.events).unwrap_or_default(),
            phone_numbers: serde_json::from_str(&m.phone_numbers).unwrap_or_default(),
            enabled: m.enabled,
            sealed_signing_key: m.signing_key,
            created_at: m.created_at,
            updated_at: m.updated_at,
            format: WebhookFormat::parse(&m.format),
            external_id: m.external_id,
            device_id: m.device_id,
        }
    }
}

/// A validated endpoint to create.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    /// Chosen by the caller: the sealed signing key is bound to it.
    pub id: EndpointId,
    pub url: String,
    pub events: Vec<String>,
    pub phone_numbers: Vec<String>,
    pub enabled: bool,
    /// Sealed with `SecretBox::seal(key, id)`.
    pub sealed_signing_key: String,
    pub format: WebhookFormat,
    pub external_id: Option<String>,
    pub device_id: Option<String>,
}

/// Validated changes of an endpoint; None leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct EndpointChanges {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub phone_numbers: Option<Vec<String>>,
    pub enabled: Option<bool>,
    /// A new signing key, sealed with `SecretBox::seal(key, id)`.
    pub sealed_signing_key: Option<String>,
    /// The phone an SMSGate endpoint is limited to (`Some(None)`: every phone).
    pub device_id: Option<Option<String>>,
}

fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".into())
}

/// Stores a new endpoint; `QuotaExceeded` when the scope already has `quota` endpoints.
#[tracing::instrument(skip_all)]
pub async fn create(
    db: &DatabaseConnection,
    scope: Scope,
    new: NewEndpoint,
    quota: CountQuota,
    now_ms: i64,
) -> Result<EndpointRecord, StoreError> {
    let row = webhook_endpoints::ActiveModel {
        id: Set(new.id.as_uuid()),
        workspace_id: Set(scope.workspace_id.as_uuid()),
        test_mode: Set(scope.mode.is_test()),
        url: Set(new.url),
        events: Set(json_list(&new.events)),
        phone_numbers: Set(json_list(&new.phone_numbers)),
        enabled: Set(new.enabled),
        signing_key: Set(new.sealed_signing_key),
        created_at: Set(now_ms),
        updated_at: Set(now_ms),
        format: Set(new.format.as_str().to_string()),
        external_id: Set(new.external_id),
        device_id: Set(new.device_id),
    };
    Ok(super::quotas::insert_counted(db, scope, quota, row)
        .await?
        .into())
}

/// One endpoint of this scope.
pub async fn get(
    db: &DatabaseConnection,
    scope: Scope,
    id: EndpointId,
) -> Result<EndpointRecord, StoreError> {
    let row = find_in_scope::<webhook_endpoints::Entity>(db, scope, id.as_uuid()).await?;
    Ok(row.into())
}

/// An endpoint by id regardless of scope (the endpoint actor's own record).
pub async fn find(
    db: &DatabaseConnection,
    id: EndpointId,
) -> Result<Option<EndpointRecord>, StoreError> {
    Ok(webhook_endpoints::Entity::find_by_id(id.as_uuid())
        .one(db)
        .await?
        .map(EndpointRecord::from))
}

/// Every endpoint (the subscription index at start-up).
pub async fn all(db: &DatabaseConnection) -> Result<Vec<EndpointRecord>, StoreError> {
    super::rows_as(db, webhook_endpoints::Entity::find()).await
}

/// Newest first by (created_at, id), after `after`.
pub async fn list(
    db: &DatabaseConnection,
    scope: Scope,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<EndpointRecord>, bool), StoreError> {
    super::newest_first(
        db,
        webhook_endpoints::Entity::find().filter(scope.of::<webhook_endpoints::Entity>()),
        (
            webhook_endpoints::Column::CreatedAt,
            webhook_endpoints::Column::Id,
        ),
        after,
        limit,
    )
    .await
}

/// Applies `changes` to an endpoint of this scope.
pub async fn update(
    db: &DatabaseConnection,
    scope: Scope,
    id: EndpointId,
    changes: EndpointChanges,
    now_ms: i64,
) -> Result<EndpointRecord, StoreError> {
    let mut active = find_in_scope::<webhook_endpoints::Entity>(db, scope, id.as_uuid())
        .await?
        .into_active_model();
    if let Some(url) = changes.url {
        active.url = Set(url);
    }
    if let Some(events) = changes.events {
        active.events = Set(json_list(&events));
    }
    if let Some(numbers) = changes.phone_numbers {
        active.phone_numbers = Set(json_list(&numbers));
    }
    if let Some(enabled) = changes.enabled {
        active.enabled = Set(enabled);
    }
    if let Some(key) = changes.sealed_signing_key {
        active.signing_key = Set(key);
    }
    if let Some(device_id) = changes.device_id {
        active.device_id = Set(device_id);
    }
    active.updated_at = Set(now_ms);
    Ok(active.update(db).await?.into())
}

/// Deletes an endpoint with its deliveries and attempts.
pub async fn delete(
    db: &DatabaseConnection,
    scope: Scope,
    id: EndpointId,
) -> Result<(), StoreError> {
    let txn = super::begin_write(db).await?;
    let delete = webhook_endpoints::Entity::delete_many()
        .filter(webhook_endpoints::Column::Id.eq(id))
        .filter(scope.of::<webhook_endpoints::Entity>());
    super::delete_found(&txn, delete).await?;
    webhook_deliveries::Entity::delete_many()
        .filter(webhook_deliveries::Column::EndpointId.eq(id))
        .exec(&txn)
        .await?;
    webhook_attempts::Entity::delete_many()
        .filter(webhook_attempts::Column::EndpointId.eq(id))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(())
}

/// Deletes up to `limit` deliveries that finished (succeeded, or failed for good) at or
/// before `cutoff_ms`, with their attempts: retention of the deliveries log (docs/api.md,
/// "Retention"). Pending deliveries are never touched. Returns how many were deleted.
pub async fn delete_finished_batch(
    db: &DatabaseConnection,
    cutoff_ms: i64,
    limit: u64,
) -> Result<u64, StoreError> {
    let finished = [DeliveryState::Succeeded, DeliveryState::Failed].map(DeliveryState::as_str);
    let ids: Vec<Uuid> = webhook_deliveries::Entity::find()
        .select_only()
        .column(webhook_deliveries::Column::Id)
        .filter(webhook_deliveries::Column::State.is_in(finished))
        .filter(webhook_deliveries::Column::UpdatedAt.lte(cutoff_ms))
        .limit(limit)
        .into_tuple()
        .all(db)
        .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    let txn = super::begin_write(db).await?;
    webhook_attempts::Entity::delete_many()
        .filter(webhook_attempts::Column::DeliveryId.is_in(ids.iter().copied()))
        .exec(&txn)
        .await?;
    // Still finished: a delivery cannot leave those states, but the guard costs nothing.
    let deleted = webhook_deliveries::Entity::delete_many()
        .filter(webhook_deliveries::Column::Id.is_in(ids))
        .filter(webhook_deliveries::Column::State.is_in(finished))
        .exec(&txn)
        .await?
        .rows_affected;
    txn.commit().await?;
    Ok(deleted)
}

/// The endpoint an SMSGate client knows by `external_id` in this scope.
pub async fn find_external(
    db: &DatabaseConnection,
    scope: Scope,
    external_id: &str,
) -> Result<Option<EndpointRecord>, StoreError> {
    Ok(webhook_endpoints::Entity::find()
        .filter(scope.of::<webhook_endpoints::Entity>())
        .filter(webhook_endpoints::Column::ExternalId.eq(external_id))
        .one(db)
        .await?
        .map(EndpointRecord::from))
}

/// The SMSGate-format endpoints of this scope, oldest first, at most `limit`.
pub async fn list_format(
    db: &DatabaseConnection,
    scope: Scope,
    format: WebhookFormat,
    limit: u64,
) -> Result<Vec<EndpointRecord>, StoreError> {
    let query = webhook_endpoints::Entity::find()
        .filter(scope.of::<webhook_endpoints::Entity>())
        .filter(webhook_endpoints::Column::Format.eq(format.as_str()))
        .order_by_asc(webhook_endpoints::Column::CreatedAt)
        .order_by_asc(webhook_endpoints::Column::Id)
        .limit(limit);
    super::rows_as(db, query).await
}

/// What [`seal_signing_keys`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealReport {
    /// Clear values (from before encryption at rest) now sealed.
    pub sealed: u64,
    /// Sealed values opened (and, on rotation, sealed again under the new key).
    pub opened: u64,
}

/// Checks every stored signing key (the endpoints' and the client-API settings' secrets)
/// against the secrets key `current` and seals the clear ones (from before encryption at
/// rest), in one transaction. With `rotate_to`, every key is sealed
/// again under that key instead (`smsgw secrets rotate`). A value `current` does not open
/// fails the whole step, naming the endpoint, and changes nothing.
#[tracing::instrument(skip_all)]
pub async fn seal_signing_keys(
    db: &DatabaseConnection,
    current: &SecretBox,
    rotate_to: Option<&SecretBox>,
) -> Result<SealReport, StoreError> {
    let txn = super::begin_write(db).await?;
    let rows = webhook_endpoints::Entity::find().all(&txn).await?;
    let target = rotate_to.unwrap_or(current);
    let mut report = SealReport::default();
    for row in rows {
        let context = row.id.as_bytes().to_vec();
        let clear = if secrets::is_sealed(&row.signing_key) {
            report.opened += 1;
            let clear =
                current
                    .open(&row.signing_key, &context)
                    .map_err(|error| StoreError::Secret {
                        endpoint_id: row.id.into(),
                        error,
                    })?;
            if rotate_to.is_none() {
                continue;
            }
            clear
        } else {
            report.sealed += 1;
            row.signing_key.clone()
        };
        let sealed = target
            .seal(&clear, &context)
            .map_err(|error| StoreError::Secret {
                endpoint_id: row.id.into(),
                error,
            })?;
        let mut active = row.into_active_model();
        active.signing_key = Set(sealed);
        active.update(&txn).await?;
    }
    // The client-API settings' secrets (docs/compat.md, Settings) go with them.
    report.opened += super::settings::reseal(&txn, current, rotate_to).await?;
    txn.commit().await?;
    Ok(report)
}

/// What the fan-out needs to know of an endpoint.
#[derive(Debug, Clone)]
struct Subscription {
    endpoint_id: EndpointId,
    format: WebhookFormat,
    /// The smsgw kinds its events fire on (an SMSGate event that never fires adds none).
    kinds: Vec<EventKind>,
    phone_numbers: Vec<String>,
}

impl Subscription {
    fn wants(&self, kind: EventKind, phone: &str) -> bool {
        self.kinds.contains(&kind)
            && (self.phone_numbers.is_empty() || self.phone_numbers.iter().any(|n| n == phone))
    }
}

/// The enabled endpoints per scope (workspace and mode), kept in memory so the writer's commit
/// hook matches changes without a query. Refreshed by the API on create/update/delete.
#[derive(Debug, Default)]
pub struct Subscriptions {
    by_scope: RwLock<HashMap<Scope, Vec<Subscription>>>,
}

impl Subscriptions {
    /// Loads every enabled endpoint.
    pub async fn load(db: &DatabaseConnection) -> Result<Subscriptions, StoreError> {
        let subscriptions = Subscriptions::default();
        for endpoint in all(db).await? {
            subscriptions.upsert(&endpoint);
        }
        Ok(subscriptions)
    }

    /// The enabled endpoints of the workspaces whose `changes` fire an event, read inside
    /// `txn`: on a database several nodes share, another node may have created, changed or
    /// deleted one a moment ago, and its notice may not have reached this node's index yet
    /// (docs/architecture.md, "Cluster"). Empty, without a query, when no change fires
    /// an event.
    pub async fn read_for(
        txn: &DatabaseTransaction,
        changes: &[Change],
    ) -> Result<Subscriptions, StoreError> {
        let subscriptions = Subscriptions::default();
        let mut workspaces: Vec<Uuid> = changes
            .iter()
            .filter(|c| event_for_change(c.kind).is_some())
            .map(|c| c.message.workspace_id.as_uuid())
            .collect();
        workspaces.sort_unstable();
        workspaces.dedup();
        if workspaces.is_empty() {
            return Ok(subscriptions);
        }
        let rows = webhook_endpoints::Entity::find()
            .filter(webhook_endpoints::Column::WorkspaceId.is_in(workspaces))
            .filter(webhook_endpoints::Column::Enabled.eq(true))
            .all(txn)
            .await?;
        for row in rows {
            subscriptions.upsert(&EndpointRecord::from(row));
        }
        Ok(subscriptions)
    }

    /// Adds or replaces an endpoint (a disabled one is removed).
    pub fn upsert(&self, endpoint: &EndpointRecord) {
        self.remove(endpoint.id);
        if !endpoint.enabled {
            return;
        }
        if let Ok(mut map) = self.by_scope.write() {
            let scope = Scope {
                workspace_id: endpoint.workspace_id,
                mode: endpoint.mode,
            };
            let format = endpoint.format;
            map.entry(scope).or_default().push(Subscription {
                endpoint_id: endpoint.id,
                format,
                kinds: endpoint
                    .events
                    .iter()
                    .filter_map(|name| format.kind_of(name))
                    .collect(),
                phone_numbers: endpoint.phone_numbers.clone(),
            });
        }
    }

    /// Forgets an endpoint.
    pub fn remove(&self, endpoint_id: EndpointId) {
        if let Ok(mut map) = self.by_scope.write() {
            for subs in map.values_mut() {
                subs.retain(|s| s.endpoint_id != endpoint_id);
            }
            map.retain(|_, subs| !subs.is_empty());
        }
    }

    /// One pending delivery of a phone's alert event (`subject`: its `phone_events` row) per
    /// endpoint of `scope` subscribed to `kind` and, when it lists numbers, listing the
    /// phone's. SMSGate-format endpoints have no such events.
    pub fn deliveries_for_phone(
        &self,
        scope: Scope,
        kind: EventKind,
        phone_number: &str,
        subject: Uuid,
        now_ms: i64,
    ) -> Vec<PendingDelivery> {
        let Ok(map) = self.by_scope.read() else {
            return Vec::new();
        };
        let Some(subs) = map.get(&scope) else {
            return Vec::new();
        };
        subs.iter()
            .filter(|s| s.wants(kind, phone_number))
            .filter_map(|sub| {
                Some(PendingDelivery {
                    id: Uuid::now_v7(),
                    endpoint_id: sub.endpoint_id,
                    event: sub.format.event_name(kind)?.to_string(),
                    event_id: Uuid::new_v4(),
                    message_id: subject,
                    attempts: 0,
                    next_attempt_at: now_ms,
                    created_at: now_ms,
                })
            })
            .collect()
    }

    /// One pending delivery per subscribed endpoint for every change that fires an event:
    /// same workspace and mode, subscribed to the event, and listing the phone's number
    /// (from_number outbound, to_number inbound) when it lists numbers. The delivery's `event`
    /// is the name of the endpoint's format (`message.sent`, `sms:sent`).
    pub fn deliveries_for(&self, changes: &[Change], now_ms: i64) -> Vec<PendingDelivery> {
        let Ok(map) = self.by_scope.read() else {
            return Vec::new();
        };
        if map.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for change in changes {
            let Some(event) = event_for_change(change.kind) else {
                continue;
            };
            let message = &change.message;
            let scope = Scope {
                workspace_id: message.workspace_id,
                mode: message.mode,
            };
            let Some(subs) = map.get(&scope) else {
                continue;
            };
            let phone = match message.direction {
                Direction::Outbound => &message.from_number,
                Direction::Inbound => &message.to_number,
            };
            for sub in subs.iter().filter(|s| s.wants(event, phone)) {
                let Some(name) = sub.format.event_name(event) else {
                    continue;
                };
                out.push(PendingDelivery {
                    id: Uuid::now_v7(),
                    endpoint_id: sub.endpoint_id,
                    event: name.to_string(),
                    event_id: Uuid::new_v4(),
                    message_id: message.id,
                    attempts: 0,
                    next_attempt_at: now_ms,
                    created_at: now_ms,
                });
            }
        }
        out
    }
}

mod delivery;
pub use delivery::*;
