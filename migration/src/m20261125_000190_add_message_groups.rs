//! Message groups of the SMSGate-compatible client API (docs/compat.md, Messages): each smsgw
//! message created through it carries the client's message id (`group_id`, shared by the
//! messages of one request, one per recipient) and the request's SMSGate options handed to
//! SMSGate-app phones (`sim_number`, `sms_priority`, `with_delivery_report`). The group is
//! found and listed through an index on (workspace, mode, group_id, created_at).

use crate::ddl::{add_columns, drop_columns, drop_index, index};
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns = [
            ColumnDef::new(Messages::GroupId).string().null().to_owned(),
            ColumnDef::new(Messages::SimNumber)
                .small_integer()
                .null()
                .to_owned(),
            ColumnDef::new(Messages::SmsPriority)
                .small_integer()
                .null()
                .to_owned(),
            ColumnDef::new(Messages::WithDeliveryReport)
                .boolean()
                .not_null()
                .default(true)
                .to_owned(),
        ];
        add_columns(manager, Messages::Table, columns).await?;
        manager
            .create_index(index(
                "idx_messages_group",
                Messages::Table,
                [
                    Messages::WorkspaceId,
                    Messages::TestMode,
                    Messages::GroupId,
                    Messages::CreatedAt,
                ],
            ))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_index(manager, "idx_messages_group", Messages::Table).await?;
        drop_columns(
            manager,
            Messages::Table,
            [
                Messages::WithDeliveryReport,
                Messages::SmsPriority,
                Messages::SimNumber,
                Messages::GroupId,
            ],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    WorkspaceId,
    TestMode,
    CreatedAt,
    GroupId,
    SimNumber,
    SmsPriority,
    WithDeliveryReport,
}
