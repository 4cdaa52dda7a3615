//! A phone (line) of a sender pool; a phone may be in several pools.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "pool_phones")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub pool_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub phone_id: Uuid,
    /// The phone's place in the pool's `phone_ids`, from 0.
    pub position: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
