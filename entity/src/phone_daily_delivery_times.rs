//! Deliveries per phone, UTC day and bucket of the time from hand-over to delivery (a
//! histogram; the buckets are the server's `domain::delivery_time`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "phone_daily_delivery_times")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub phone_id: Uuid,
    /// Days since 1970-01-01, UTC.
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: i32,
    #[sea_orm(primary_key, auto_increment = false)]
    pub bucket: i32,
    pub delivered: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
