//! One recipient of a campaign, with the text rendered for it and, once queued, its message.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "campaign_recipients")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub campaign_id: Uuid,
    /// Order in the campaign, from 0.
    pub position: i32,
    pub to_number: String,
    pub content: String,
    pub segments: i32,
    pub encoding: String,
    /// pending, queued, skipped, failed, canceled; once queued the live status is the
    /// message's (copied here before retention removes the message).
    pub status: String,
    pub message_id: Option<Uuid>,
    pub skip_reason: Option<String>,
    pub failure_reason: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
