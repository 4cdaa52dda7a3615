//! A fired phone alert event (`phone.offline`, …) and its data as it was when it fired; its
//! webhook deliveries name it by id.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "phone_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub phone_id: Uuid,
    /// The event's name (`phone.offline`).
    pub event: String,
    /// JSON `{phone_id, phone_number, name, since, health}`.
    pub data: String,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
