//! A campaign: one text template sent to many recipients at the pace of its phone.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "campaigns")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub test_mode: bool,
    pub name: String,
    pub from_number: String,
    pub body: String,
    /// draft, scheduled, running, paused, completed, canceled.
    pub status: String,
    pub scheduled_for: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub launched_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// Recipients to send: the skipped ones are not counted.
    pub total: i32,
    pub skipped_opted_out: i32,
    pub skipped_premium_rate: i32,
    /// Recipient rows stored (skipped ones included): what the `campaign_recipients` quota sums.
    pub recipient_count: i32,
    /// Why the campaign paused itself (`daily_quota_exceeded`); null otherwise.
    pub paused_reason: Option<String>,
    /// The sender pool it sends from (its `from_number` is then empty); null otherwise.
    pub pool_id: Option<Uuid>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
