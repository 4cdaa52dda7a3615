//! One delivery attempt: what the endpoint answered (or why nothing was answered).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub delivery_id: Uuid,
    pub endpoint_id: Uuid,
    pub event: String,
    pub event_id: Uuid,
    pub message_id: Uuid,
    /// From 1.
    pub attempt: i32,
    pub status_code: Option<i32>,
    /// dns, connect, tls, timeout, blocked_address, redirect, http_status, message_deleted.
    pub error: Option<String>,
    pub error_detail: Option<String>,
    pub duration_ms: i64,
    pub attempted_at: i64,
    pub next_attempt_at: Option<i64>,
    /// The delivery's state after this attempt.
    pub state: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
