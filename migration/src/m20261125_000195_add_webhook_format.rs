//! Webhook endpoints created through the SMSGate-compatible client API (docs/api.md,
//! Webhooks): the body format they are delivered in (`smsgw` or `smsgate`), the id the client
//! knows them by (unique per workspace and mode) and the phone (`deviceId`) they were limited
//! to, echoed back as given.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{string, string_null};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite alters one column per statement.
        manager
            .alter_table(
                Table::alter()
                    .table(WebhookEndpoints::Table)
                    .add_column(string(WebhookEndpoints::Format).default("smsgw"))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(WebhookEndpoints::Table)
                    .add_column(string_null(WebhookEndpoints::ExternalId))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(WebhookEndpoints::Table)
                    .add_column(string_null(WebhookEndpoints::DeviceId))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_endpoints_external_id")
                    .table(WebhookEndpoints::Table)
                    .col(WebhookEndpoints::WorkspaceId)
                    .col(WebhookEndpoints::TestMode)
                    .col(WebhookEndpoints::ExternalId)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_webhook_endpoints_external_id")
                    .table(WebhookEndpoints::Table)
                    .to_owned(),
            )
            .await?;
        for column in [
            WebhookEndpoints::DeviceId,
            WebhookEndpoints::ExternalId,
            WebhookEndpoints::Format,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(WebhookEndpoints::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum WebhookEndpoints {
    Table,
    WorkspaceId,
    TestMode,
    Format,
    ExternalId,
    DeviceId,
}
