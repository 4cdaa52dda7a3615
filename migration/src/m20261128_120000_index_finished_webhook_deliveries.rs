//! Finished webhook deliveries and their attempts are removed by retention once
//! `retention.record_after` has passed since they finished (docs/api.md, "Retention"): an
//! index on (state, updated_at) keeps that sweep's scan to the rows it deletes.

use crate::ddl::index;
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const NAME: &str = "idx_webhook_deliveries_finished";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(index(
                NAME,
                WebhookDeliveries::Table,
                [WebhookDeliveries::State, WebhookDeliveries::UpdatedAt],
            ))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(NAME)
                    .table(WebhookDeliveries::Table)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    State,
    UpdatedAt,
}
