//! A cluster node: one `smsgw serve` process that registered itself at start and heartbeats.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "cluster_nodes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The address other nodes and operators reach it at (`cluster.advertise_address`).
    pub address: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
    /// Set by a graceful stop, before its leases are handed back.
    pub stopping: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
