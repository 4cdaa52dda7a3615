//! Webhook endpoints, their deliveries (one per event and endpoint, with the retry schedule's
//! next_attempt_at) and every delivery attempt.
//!
//! Timestamps are integer milliseconds since the Unix epoch, like the core tables.

use crate::ddl::{drop_tables, index};
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(WebhookEndpoints::Table)
                    .col(pk_uuid(WebhookEndpoints::Id))
                    .col(uuid(WebhookEndpoints::WorkspaceId))
                    .col(boolean(WebhookEndpoints::TestMode))
                    .col(text(WebhookEndpoints::Url))
                    .col(text(WebhookEndpoints::Events))
                    .col(text(WebhookEndpoints::PhoneNumbers))
                    .col(boolean(WebhookEndpoints::Enabled))
                    .col(string(WebhookEndpoints::SigningKey))
                    .col(big_integer(WebhookEndpoints::CreatedAt))
                    .col(big_integer(WebhookEndpoints::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "idx_webhook_endpoints_scope",
                WebhookEndpoints::Table,
                [
                    WebhookEndpoints::WorkspaceId,
                    WebhookEndpoints::TestMode,
                    WebhookEndpoints::CreatedAt,
                ],
            ))
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .col(pk_uuid(WebhookDeliveries::Id))
                    .col(uuid(WebhookDeliveries::EndpointId))
                    .col(string(WebhookDeliveries::Event))
                    .col(uuid(WebhookDeliveries::EventId))
                    .col(uuid(WebhookDeliveries::MessageId))
                    .col(string(WebhookDeliveries::State))
                    .col(integer(WebhookDeliveries::Attempts))
                    .col(big_integer_null(WebhookDeliveries::NextAttemptAt))
                    .col(big_integer(WebhookDeliveries::CreatedAt))
                    .col(big_integer(WebhookDeliveries::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "idx_webhook_deliveries_pending",
                WebhookDeliveries::Table,
                [WebhookDeliveries::State, WebhookDeliveries::EndpointId],
            ))
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookAttempts::Table)
                    .col(pk_uuid(WebhookAttempts::Id))
                    .col(uuid(WebhookAttempts::DeliveryId))
                    .col(uuid(WebhookAttempts::EndpointId))
                    .col(string(WebhookAttempts::Event))
                    .col(uuid(WebhookAttempts::EventId))
                    .col(uuid(WebhookAttempts::MessageId))
                    .col(integer(WebhookAttempts::Attempt))
                    .col(integer_null(WebhookAttempts::StatusCode))
                    .col(string_null(WebhookAttempts::Error))
                    .col(text_null(WebhookAttempts::ErrorDetail))
                    .col(big_integer(WebhookAttempts::DurationMs))
                    .col(big_integer(WebhookAttempts::AttemptedAt))
                    .col(big_integer_null(WebhookAttempts::NextAttemptAt))
                    .col(string(WebhookAttempts::State))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "idx_webhook_attempts_endpoint",
                WebhookAttempts::Table,
                [
                    WebhookAttempts::EndpointId,
                    WebhookAttempts::AttemptedAt,
                    WebhookAttempts::Id,
                ],
            ))
            .await?;
        manager
            .create_index(index(
                "idx_webhook_attempts_delivery",
                WebhookAttempts::Table,
                [WebhookAttempts::DeliveryId],
            ))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_tables(
            manager,
            [
                WebhookAttempts::Table.into_iden(),
                WebhookDeliveries::Table.into_iden(),
                WebhookEndpoints::Table.into_iden(),
            ],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum WebhookEndpoints {
    Table,
    Id,
    WorkspaceId,
    TestMode,
    Url,
    Events,
    PhoneNumbers,
    Enabled,
    SigningKey,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    EndpointId,
    Event,
    EventId,
    MessageId,
    State,
    Attempts,
    NextAttemptAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookAttempts {
    Table,
    Id,
    DeliveryId,
    EndpointId,
    Event,
    EventId,
    MessageId,
    Attempt,
    StatusCode,
    Error,
    ErrorDetail,
    DurationMs,
    AttemptedAt,
    NextAttemptAt,
    State,
}
