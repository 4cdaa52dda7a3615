//! Paired phones: pairing, listing, pace overrides, unpairing and device tokens; SIM lines
//! (docs/api.md, "Phones"), which are phones carried by another phone's token and connection.

use entity::phones;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, DatabaseConnection, EntityTrait, IntoActiveModel,
    QueryFilter, Set,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::Position;
use super::scoped::Scope;
use super::scoped::find_in_scope;
use crate::domain::ids::WorkspaceId;
use crate::domain::pace::Pace;
use crate::domain::quota::CountQuota;
use crate::domain::sim_slot::SimSlot;
use crate::domain::status::Mode;

/// A paired phone.
#[derive(Debug, Clone, PartialEq)]
pub struct PhoneRecord {
    pub id: Uuid,
    pub workspace_id: WorkspaceId,
    pub mode: Mode,
    pub phone_number: String,
    pub name: Option<String>,
    /// Per-phone override; None follows the server default.
    pub pace: Option<Pace>,
    pub created_at: i64,
    pub last_seen_at: Option<i64>,
    /// A SIM line: its device and slot; None for a device (one-line or not).
    pub line: Option<Line>,
}

/// Where a SIM line lives: the phone whose device token and connection carry it, and the
/// SIM slot it sends from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    pub device_phone_id: Uuid,
    pub sim_slot: SimSlot,
}

/// What a new phone is: a device, with the hash of its device token, or a SIM line of one.
#[derive(Debug, Clone)]
pub enum Pairing {
    Device { token_hash: String },
    Line(Line),
}

/// The `token_hash` stored for a line, which has no token: unique, not secret, and never a
/// SHA-256 hex (it has a colon), so no presented token can match it.
fn line_placeholder(id: Uuid) -> String {
    format!("line:{id}")
}

impl PhoneRecord {
    /// The scope the phone belongs to.
    pub fn scope(&self) -> Scope {
        Scope {
            workspace_id: self.workspace_id,
            mode: self.mode,
        }
    }
}

impl From<phones::Model> for PhoneRecord {
    fn from(m: phones::Model) -> Self {
        let pace = pace_of(&m);
        PhoneRecord {
            id: m.id,
            workspace_id: m.workspace_id.into(),
            mode: Mode::from_test_flag(m.test_mode),
            phone_number: m.phone_number,
            name: m.name,
            pace,
            created_at: m.created_at,
            last_seen_at: m.last_seen_at,
            line: match (m.device_phone_id, m.sim_slot) {
                (Some(device_phone_id), Some(slot)) => {
                    SimSlot::parse(i64::from(slot)).ok().map(|sim_slot| Line {
                        device_phone_id,
                        sim_slot,
                    })
                }
                _ => None,
            },
        }
    }
}

/// The phone's pace override: set when both window columns are; its daily cap and jitter
/// ride along (null: none, 0). A stored value the rules refuse drops the override.
fn pace_of(m: &phones::Model) -> Option<Pace> {
    let (Some(per_minute), Some(per_30)) = (m.pace_per_minute, m.pace_per_30_minutes) else {
        return None;
    };
    let count = |value: i32| u32::try_from(value).unwrap_or(0);
    Pace::new(count(per_minute), count(per_30))
        .and_then(|pace| pace.with_per_day(m.pace_per_day.map(count)))
        .and_then(|pace| pace.with_jitter_seconds(m.jitter_seconds.map_or(0, count)))
        .ok()
}

/// Writes a pace override (None: clears it) into its four columns.
fn set_pace_columns(active: &mut phones::ActiveModel, pace: Option<Pace>) {
    let column = |value: u32| Some(i32::try_from(value).unwrap_or(i32::MAX));
    active.pace_per_minute = Set(pace.and_then(|p| column(p.per_minute)));
    active.pace_per_30_minutes = Set(pace.and_then(|p| column(p.per_30_minutes)));
    active.pace_per_day = Set(pace.and_then(|p| p.per_day).and_then(column));
    active.jitter_seconds = Set(pace.and_then(|p| column(p.jitter_seconds)));
}

/// Pairs a new phone; the token hash is all that is kept of a device's token, and a line gets
/// a placeholder. `QuotaExceeded` when the scope already has `quota` phones (lines count);
/// `Conflict` when the line's slot is taken on its device.
#[tracing::instrument(skip_all)]
pub async fn create(
    db: &DatabaseConnection,
    scope: Scope,
    phone_number: &str,
    name: Option<String>,
    pairing: Pairing,
    quota: CountQuota,
    now_ms: i64,
) -> Result<PhoneRecord, StoreError> {
    let id = Uuid::now_v7();
    let (token_hash, line) = match pairing {
        Pairing::Device { token_hash } => (token_hash, None),
        Pairing::Line(line) => (line_placeholder(id), Some(line)),
    };
    let row = phones::ActiveModel {
        id: Set(id),
        workspace_id: Set(scope.workspace_id.as_uuid()),
        test_mode: Set(scope.mode.is_test()),
        phone_number: Set(phone_number.to_string()),
        name: Set(name),
        token_hash: Set(token_hash),
        pace_per_minute: Set(None),
        pace_per_30_minutes: Set(None),
        pace_per_day: Set(None),
        jitter_seconds: Set(None),
        created_at: Set(now_ms),
        last_seen_at: Set(None),
        device_phone_id: Set(line.map(|l| l.device_phone_id)),
        sim_slot: Set(line.map(|l| i16::from(l.sim_slot.get()))),
    };
    Ok(super::quotas::insert_counted(db, scope, quota, row)
        .await?
        .into())
}

/// One phone of this scope.
pub async fn get(
    db: &DatabaseConnection,
    scope: Scope,
    id: Uuid,
) -> Result<PhoneRecord, StoreError> {
    Ok(find_in_scope::<phones::Entity>(db, scope, id).await?.into())
}

/// The phone `id`, whatever its workspace (a change another node announced).
pub async fn by_id(db: &DatabaseConnection, id: Uuid) -> Result<Option<PhoneRecord>, StoreError> {
    Ok(phones::Entity::find_by_id(id)
        .one(db)
        .await?
        .map(PhoneRecord::from))
}

/// Newest first by (created_at, id), after `after`.
pub async fn list(
    db: &DatabaseConnection,
    scope: Scope,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<PhoneRecord>, bool), StoreError> {
    super::newest_first(
        db,
        phones::Entity::find().filter(scope.of::<phones::Entity>()),
        (phones::Column::CreatedAt, phones::Column::Id),
        after,
        limit,
    )
    .await
}

/// Every paired phone (the registry's start-up index).
pub async fn all(db: &DatabaseConnection) -> Result<Vec<PhoneRecord>, StoreError> {
    super::rows_as(db, phones::Entity::find()).await
}

/// Changes the name and/or the pace override (`Some(None)` clears the override).
pub async fn update(
    db: &DatabaseConnection,
    scope: Scope,
    id: Uuid,
    name: Option<Option<String>>,
    pace: Option<Option<Pace>>,
) -> Result<PhoneRecord, StoreError> {
    let mut active = find_in_scope::<phones::Entity>(db, scope, id)
        .await?
        .into_active_model();
    if let Some(name) = name {
        active.name = Set(name);
    }
    if let Some(pace) = pace {
        set_pace_columns(&mut active, pace);
    }
    Ok(active.update(db).await?.into())
}

/// Unpairs a phone, and the SIM lines of a device with it, with their pool places, health and
/// alert episodes (one transaction), then forgets their daily figures (`store::phone_stats`).
pub async fn delete(db: &DatabaseConnection, scope: Scope, id: Uuid) -> Result<(), StoreError> {
    let txn = super::begin_write(db).await?;
    let gone = Condition::any()
        .add(phones::Column::Id.eq(id))
        .add(phones::Column::DevicePhoneId.eq(id));
    // A deleted phone (and each of its SIM lines) leaves its pools (docs/api.md, "Pools").
    let ids: Vec<Uuid> = phones::Entity::find()
        .filter(gone.clone())
        .filter(scope.of::<phones::Entity>())
        .all(&txn)
        .await?
        .into_iter()
        .map(|p| p.id)
        .collect();
    // The phones first: an episode being opened meanwhile holds the phone's row (see
    // `store::health::open_episode`), so it is either deleted below or never written.
    let delete = phones::Entity::delete_many()
        .filter(gone)
        .filter(scope.of::<phones::Entity>());
    super::delete_found(&txn, delete).await?;
    super::pools::forget_phones(&txn, &ids).await?;
    // Its health and alert episodes go too (docs/api.md, "Phone health"); the events already
    // fired stay with their deliveries until retention.
    entity::phone_health::Entity::delete_many()
        .filter(entity::phone_health::Column::PhoneId.is_in(ids.clone()))
        .exec(&txn)
        .await?;
    entity::phone_alerts::Entity::delete_many()
        .filter(entity::phone_alerts::Column::PhoneId.is_in(ids.clone()))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    // Their figures go with them (docs/api.md, "Phone stats").
    super::phone_stats::forget(db, &ids).await
}

/// The SIM lines of the device `device_phone_id`, by slot.
pub async fn lines_of(
    db: &DatabaseConnection,
    device_phone_id: Uuid,
) -> Result<Vec<PhoneRecord>, StoreError> {
    use sea_orm::QueryOrder;
    let query = phones::Entity::find()
        .filter(phones::Column::DevicePhoneId.eq(device_phone_id))
        .order_by_asc(phones::Column::SimSlot);
    super::rows_as(db, query).await
}

/// Replaces the device token hash; the old token stops working at once.
pub async fn set_token(
    db: &DatabaseConnection,
    scope: Scope,
    id: Uuid,
    token_hash: String,
) -> Result<PhoneRecord, StoreError> {
    let mut active = find_in_scope::<phones::Entity>(db, scope, id)
        .await?
        .into_active_model();
    active.token_hash = Set(token_hash);
    Ok(active.update(db).await?.into())
}

/// The phone a device token belongs to; never a line (whose placeholder no hash equals).
pub async fn find_by_token(
    db: &DatabaseConnection,
    token_hash: &str,
) -> Result<Option<PhoneRecord>, StoreError> {
    Ok(phones::Entity::find()
        .filter(phones::Column::TokenHash.eq(token_hash))
        .filter(phones::Column::DevicePhoneId.is_null())
        .one(db)
        .await?
        .map(PhoneRecord::from))
}

/// Phones one [`touch`] statement writes.
const TOUCH_BATCH: usize = 100;

/// Records when phones were last heard from, `(phone, at_ms)`, one statement per
/// `TOUCH_BATCH` phones. A stored time is never moved back (a late write of another node
/// that held the phone before, or a clock step back), and unknown phones are skipped.
#[tracing::instrument(skip_all, fields(phones = seen.len()))]
pub async fn touch(db: &DatabaseConnection, seen: &[(Uuid, i64)]) -> Result<(), StoreError> {
    use sea_orm::sea_query::CaseStatement;
    for chunk in seen.chunks(TOUCH_BATCH) {
        let mut latest = CaseStatement::new();
        for (id, at_ms) in chunk {
            let newer = Condition::any()
                .add(phones::Column::LastSeenAt.is_null())
                .add(phones::Column::LastSeenAt.lt(*at_ms));
            latest = latest.case(
                Condition::all().add(phones::Column::Id.eq(*id)).add(newer),
                Expr::value(*at_ms),
            );
        }
        latest = latest.finally(Expr::col(phones::Column::LastSeenAt));
        phones::Entity::update_many()
            .col_expr(phones::Column::LastSeenAt, latest.into())
            .filter(phones::Column::Id.is_in(chunk.iter().map(|(id, _)| *id)))
            .exec(db)
            .await?;
    }
    Ok(())
}

/// Whether this scope has a phone paired with `number` (online or not).
pub async fn has_number(
    db: &DatabaseConnection,
    scope: Scope,
    number: &str,
) -> Result<bool, StoreError> {
    use sea_orm::PaginatorTrait;
    Ok(phones::Entity::find()
        .filter(scope.of::<phones::Entity>())
        .filter(phones::Column::PhoneNumber.eq(number))
        .count(db)
        .await?
        > 0)
}

/// The hash of a phone's current device token (the device API derives the phone's inbound
/// secrets from it, so a token rotation changes them too); None for a line, which has none.
pub async fn token_hash_of(
    db: &DatabaseConnection,
    id: Uuid,
) -> Result<Option<String>, StoreError> {
    Ok(phones::Entity::find_by_id(id)
        .one(db)
        .await?
        .filter(|m| m.device_phone_id.is_none())
        .map(|m| m.token_hash))
}

/// The phones of this scope paired with `number`, oldest first (several phones may share
/// one; the phones' (workspace, number) index).
pub async fn with_number(
    db: &DatabaseConnection,
    scope: Scope,
    number: &str,
) -> Result<Vec<PhoneRecord>, StoreError> {
    use sea_orm::QueryOrder;
    let query = phones::Entity::find()
        .filter(scope.of::<phones::Entity>())
        .filter(phones::Column::PhoneNumber.eq(number))
        .order_by_asc(phones::Column::CreatedAt);
    super::rows_as(db, query).await
}
