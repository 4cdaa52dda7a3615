//! The sticky line of a pool for one recipient: the phone it last exchanged SMS with. Kept
//! apart from messages, so it outlives their retention.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "pool_recipients")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub pool_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub to_number: String,
    pub phone_id: Uuid,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
