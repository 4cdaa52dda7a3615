//! Adds `idx_ai_drafts_sender (workspace_id, test_mode, from_number, status)`: a STOP or STOP AI
//! discards the sender's pending drafts inside the writer's inbound transaction, which must not
//! scan every draft of the workspace (docs/api.md "AI reply drafts").

use crate::ddl::{drop_index, index};
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(index(
                "idx_ai_drafts_sender",
                AiDrafts::Table,
                [
                    AiDrafts::WorkspaceId,
                    AiDrafts::TestMode,
                    AiDrafts::FromNumber,
                    AiDrafts::Status,
                ],
            ))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_index(manager, "idx_ai_drafts_sender", AiDrafts::Table).await
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
