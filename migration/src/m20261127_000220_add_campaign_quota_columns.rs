//! Campaigns inside the quotas (docs/api.md, "Quotas" and "Campaigns"): `recipient_count`, the
//! recipient rows a campaign stores (skipped ones included), so the `campaign_recipients` quota
//! sums one number per stored campaign instead of counting their recipients; and
//! `paused_reason`, why a campaign paused itself (`daily_quota_exceeded`), null otherwise.

use crate::ddl::{add_columns, drop_columns};
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{integer, string_null};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        add_columns(
            manager,
            Campaigns::Table,
            [
                integer(Campaigns::RecipientCount).default(0).to_owned(),
                string_null(Campaigns::PausedReason),
            ],
        )
        .await?;
        // The campaigns stored before: their recipients, counted once.
        manager
            .get_connection()
            .execute_unprepared(
                "UPDATE campaigns SET recipient_count = (SELECT COUNT(*) FROM campaign_recipients \
                 WHERE campaign_recipients.campaign_id = campaigns.id)",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_columns(
            manager,
            Campaigns::Table,
            [Campaigns::PausedReason, Campaigns::RecipientCount],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Campaigns {
    Table,
    RecipientCount,
    PausedReason,
}
