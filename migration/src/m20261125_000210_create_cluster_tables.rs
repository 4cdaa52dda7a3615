//! Cluster coordination (several `smsgw serve` nodes on one PostgreSQL database): the nodes
//! that registered themselves, and the leases that give one node at a time the ownership of a
//! phone, a campaign, a webhook endpoint or a sweep. Each lease carries a fencing number raised
//! by every acquisition, so a write made under a lease that moved on can be refused. Created on
//! SQLite as well (one schema), where a single node never uses them.

use crate::ddl::{drop_tables, index};
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, boolean, string, uuid};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ClusterNodes::Table)
                    .col(uuid(ClusterNodes::Id).primary_key())
                    .col(string(ClusterNodes::Address))
                    .col(big_integer(ClusterNodes::StartedAt))
                    .col(big_integer(ClusterNodes::HeartbeatAt))
                    .col(boolean(ClusterNodes::Stopping))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Leases::Table)
                    .col(string(Leases::Kind))
                    .col(string(Leases::Key))
                    .col(uuid(Leases::NodeId))
                    .col(big_integer(Leases::Fence))
                    .col(big_integer(Leases::ExpiresAt))
                    .primary_key(Index::create().col(Leases::Kind).col(Leases::Key))
                    .to_owned(),
            )
            .await?;
        // Renewal and hand-back touch every lease of one node.
        manager
            .create_index(index("idx_leases_node", Leases::Table, [Leases::NodeId]))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_tables(
            manager,
            [Leases::Table.into_iden(), ClusterNodes::Table.into_iden()],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum ClusterNodes {
    Table,
    Id,
    Address,
    StartedAt,
    HeartbeatAt,
    Stopping,
}

#[derive(DeriveIden)]
enum Leases {
    Table,
    Kind,
    Key,
    NodeId,
    Fence,
    ExpiresAt,
}
