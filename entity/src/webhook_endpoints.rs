//! A webhook endpoint: where events are posted, which ones, and the signing key.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub test_mode: bool,
    pub url: String,
    /// JSON array of event kinds.
    pub events: String,
    /// JSON array of E.164 numbers; empty: every phone.
    pub phone_numbers: String,
    pub enabled: bool,
    pub signing_key: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// The body format: smsgw or smsgate.
    pub format: String,
    /// The id an SMSGate client knows the endpoint by (unique per workspace and mode).
    pub external_id: Option<String>,
    /// The phone (`deviceId`) an SMSGate endpoint was limited to, as given.
    pub device_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
