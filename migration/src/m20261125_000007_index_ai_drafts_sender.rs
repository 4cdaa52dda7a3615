//! Adds `idx_ai_drafts_sender (workspace_id, test_mode, from_number, status)`: a STOP or STOP AI
//! discards the sender's pending drafts inside the writer's inbound transaction, which must not
//! scan every draft of the workspace (docs/api.md "AI reply drafts").

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("idx_ai_drafts_sender")
                    .table(AiDrafts::Table)
                    .col(AiDrafts::WorkspaceId)
                    .col(AiDrafts::TestMode)
                    .col(AiDrafts::FromNumber)
                    .col(AiDrafts::Status)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_ai_drafts_sender")
                    .table(AiDrafts::Table)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum AiDrafts {
    Table,
    WorkspaceId,
    TestMode,
    FromNumber,
    Status,
}
