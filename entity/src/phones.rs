//! A paired phone; its device token is stored as a SHA-256 hash.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "phones")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub test_mode: bool,
    pub phone_number: String,
    pub name: Option<String>,
    #[sea_orm(unique)]
    pub token_hash: String,
    /// None: the server's configured default.
    pub pace_per_minute: Option<i32>,
    #[sea_orm(column_name = "pace_per_30_minutes")]
    pub pace_per_30_minutes: Option<i32>,
    /// The override's cap per 24 hours; None: no daily cap (read only with the override).
    pub pace_per_day: Option<i32>,
    /// The override's jitter in seconds; None: 0 (read only with the override).
    pub jitter_seconds: Option<i32>,
    pub created_at: i64,
    pub last_seen_at: Option<i64>,
    /// A SIM line: the phone (device) whose token and connection carry it; None otherwise.
    pub device_phone_id: Option<Uuid>,
    /// A SIM line's slot, 1–3; None on a device.
    pub sim_slot: Option<i16>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
