//! The current alert episode of each kind of each phone: open while `ended_at` is null,
//! alerted once `alerted_at` is set.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "phone_alerts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub phone_id: Uuid,
    /// offline, low_battery or stalled.
    #[sea_orm(primary_key, auto_increment = false)]
    pub kind: String,
    pub since: i64,
    pub ended_at: Option<i64>,
    pub alerted_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
