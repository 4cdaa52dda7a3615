//! Message groups of the SMSGate-compatible client API (docs/compat.md, Messages): each smsgw
//! message created through it carries the client's message id (`group_id`, shared by the
//! messages of one request, one per recipient) and the request's SMSGate options handed to
//! SMSGate-app phones (`sim_number`, `sms_priority`, `with_delivery_report`). The group is
//! found and listed through an index on (workspace, mode, group_id, created_at).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite adds one column per ALTER TABLE.
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
        for mut column in columns {
            manager
                .alter_table(
                    Table::alter()
                        .table(Messages::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("idx_messages_group")
                    .table(Messages::Table)
                    .col(Messages::WorkspaceId)
                    .col(Messages::TestMode)
                    .col(Messages::GroupId)
                    .col(Messages::CreatedAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_messages_group")
                    .table(Messages::Table)
                    .to_owned(),
            )
            .await?;
        for column in [
            Messages::WithDeliveryReport,
            Messages::SmsPriority,
            Messages::SimNumber,
            Messages::GroupId,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Messages::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden, Clone, Copy)]
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
