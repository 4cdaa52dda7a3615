//! The latest health a device reported: battery, charging, network and SIM cards.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "phone_health")]
pub struct Model {
    /// The device (a phone with a token; its SIM lines share its row).
    #[sea_orm(primary_key, auto_increment = false)]
    pub phone_id: Uuid,
    pub battery_percent: Option<i32>,
    pub charging: Option<bool>,
    /// wifi, cellular, ethernet, none or unknown.
    pub network: Option<String>,
    /// JSON array of `{slot, carrier, phone_number}`.
    pub sims: Option<String>,
    pub reported_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
