//! An AI reply draft to one inbound message.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "ai_drafts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub test_mode: bool,
    /// The inbound message it answers.
    pub message_id: Uuid,
    /// The contact who wrote.
    pub from_number: String,
    /// The number it arrived on; the reply goes from it.
    pub to_number: String,
    pub content: String,
    /// pending, sent, discarded.
    pub status: String,
    pub sent_message_id: Option<Uuid>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
