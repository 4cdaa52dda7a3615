//! `daily_stats`: per workspace, mode and UTC day, the messages that were sent, delivered,
//! failed and received (docs/api.md, "Statistics"). Message records live a day after they end,
//! so a week of counts cannot come from them; one row per day keeps the figures and every read
//! a primary-key range.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, boolean, integer};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(DailyStats::Table)
                    .col(ColumnDef::new(DailyStats::WorkspaceId).uuid().not_null())
                    .col(boolean(DailyStats::TestMode))
                    .col(integer(DailyStats::Day))
                    .col(big_integer(DailyStats::Sent).default(0))
                    .col(big_integer(DailyStats::Delivered).default(0))
                    .col(big_integer(DailyStats::Failed).default(0))
                    .col(big_integer(DailyStats::Received).default(0))
                    .primary_key(
                        Index::create()
                            .col(DailyStats::WorkspaceId)
                            .col(DailyStats::TestMode)
                            .col(DailyStats::Day),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(DailyStats::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum DailyStats {
    Table,
    WorkspaceId,
    TestMode,
    /// Days since 1970-01-01, UTC.
    Day,
    Sent,
    Delivered,
    Failed,
    Received,
}
