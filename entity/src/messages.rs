//! A message, outbound or inbound.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "messages")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub test_mode: bool,
    pub direction: String,
    pub status: String,
    /// Queue class: 0 single sends and draft replies, 1 bulk, 2 campaign.
    pub priority: i16,
    pub from_number: String,
    pub to_number: String,
    pub content: String,
    pub segments: i32,
    pub encoding: String,
    pub device_id: Option<Uuid>,
    /// True when the caller pinned device_id; false when routing chose it.
    pub pinned: bool,
    pub campaign_id: Option<Uuid>,
    pub request_id: Option<String>,
    pub inbound_ref: Option<String>,
    pub scheduled_for: Option<i64>,
    pub expires_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub sent_at: Option<i64>,
    pub delivered_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub failure_reason: Option<String>,
    pub send_attempts: i32,
    pub content_removed_at: Option<i64>,
    /// The client API's message id (docs/compat.md, Messages), shared by its recipients.
    pub group_id: Option<String>,
    /// SMSGate options of a client API message, handed to SMSGate-app phones.
    pub sim_number: Option<i16>,
    pub sms_priority: Option<i16>,
    pub with_delivery_report: bool,
    /// The sender pool the message was sent through; only such a message moves to another
    /// line of its pool (docs/api.md, "Pools").
    pub pool_id: Option<Uuid>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
