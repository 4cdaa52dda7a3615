//! Drops `idx_messages_status (status)`: `idx_messages_status_updated (status, updated_at)`
//! begins with the same column and serves every query by status, while each message insert
//! and status move paid for keeping both (docs/performance.md, "Indexes").

use crate::ddl::{drop_index, index};
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_index(manager, "idx_messages_status", Messages::Table).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(index(
                "idx_messages_status",
                Messages::Table,
                [Messages::Status],
            ))
            .await
    }
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    Status,
}
