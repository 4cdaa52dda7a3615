//! Messages sent, delivered and failed per phone (a SIM line is a phone) and UTC day.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "phone_daily_stats")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub phone_id: Uuid,
    /// Days since 1970-01-01, UTC.
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: i32,
    pub sent: i64,
    pub delivered: i64,
    pub failed: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
