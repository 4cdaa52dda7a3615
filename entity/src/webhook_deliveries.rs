//! One event to deliver to one endpoint: its state and when the next attempt is due.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub event: String,
    pub event_id: Uuid,
    pub message_id: Uuid,
    /// pending, succeeded or failed.
    pub state: String,
    /// Attempts made so far.
    pub attempts: i32,
    /// When the next attempt is due (pending only).
    pub next_attempt_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
