//! A lease: which node owns a live thing (a phone, a campaign, a webhook endpoint, a sweep)
//! until `expires_at`, with the fencing number of that ownership.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "leases")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub kind: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    pub node_id: Uuid,
    /// Raised by every acquisition by another node (or after expiry).
    pub fence: i64,
    /// Milliseconds since the Unix epoch, on the database's clock.
    pub expires_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
