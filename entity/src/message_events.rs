//! One entry of a message's timeline: a status transition.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "message_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub message_id: Uuid,
    pub kind: String,
    pub status: String,
    pub at: i64,
    pub detail: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
