//! Webhook endpoints created through the SMSGate-compatible client API (docs/api.md,
//! Webhooks): the body format they are delivered in (`smsgw` or `smsgate`), the id the client
//! knows them by (unique per workspace and mode) and the phone (`deviceId`) they were limited
//! to, echoed back as given.

use crate::ddl::{add_columns, drop_columns, drop_index, unique_index};
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{string, string_null};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        add_columns(
            manager,
            WebhookEndpoints::Table,
            [
                string(WebhookEndpoints::Format).default("smsgw").to_owned(),
                string_null(WebhookEndpoints::ExternalId),
                string_null(WebhookEndpoints::DeviceId),
            ],
        )
        .await?;
        manager
            .create_index(unique_index(
                "idx_webhook_endpoints_external_id",
                WebhookEndpoints::Table,
                [
                    WebhookEndpoints::WorkspaceId,
                    WebhookEndpoints::TestMode,
                    WebhookEndpoints::ExternalId,
                ],
            ))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_index(
            manager,
            "idx_webhook_endpoints_external_id",
            WebhookEndpoints::Table,
        )
        .await?;
        drop_columns(
            manager,
            WebhookEndpoints::Table,
            [
                WebhookEndpoints::DeviceId,
                WebhookEndpoints::ExternalId,
                WebhookEndpoints::Format,
            ],
        )
        .await
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
