//! Messages failed per phone, UTC day and failure reason.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "phone_daily_failures")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub phone_id: Uuid,
    /// Days since 1970-01-01, UTC.
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: i32,
    /// The message's `failure_reason`, cut to 100 characters.
    #[sea_orm(primary_key, auto_increment = false)]
    pub reason: String,
    pub failed: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
