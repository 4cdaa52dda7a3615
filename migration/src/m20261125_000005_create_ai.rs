//! AI reply drafts (docs/api.md, AI reply drafts): the settings of each workspace and mode,
//! and the drafts.

use crate::ddl::{drop_tables, index, unique_index};
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
                    .table(AiSettings::Table)
                    .col(uuid(AiSettings::WorkspaceId))
                    .col(boolean(AiSettings::TestMode))
                    .col(boolean(AiSettings::Enabled))
                    // draft or auto.
                    .col(string(AiSettings::Mode))
                    .col(text(AiSettings::Instructions))
                    // JSON array of {keywords: [string], reply: string}.
                    .col(text(AiSettings::Rules))
                    .col(big_integer(AiSettings::UpdatedAt))
                    .primary_key(
                        Index::create()
                            .col(AiSettings::WorkspaceId)
                            .col(AiSettings::TestMode),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AiDrafts::Table)
                    .col(pk_uuid(AiDrafts::Id))
                    .col(uuid(AiDrafts::WorkspaceId))
                    .col(boolean(AiDrafts::TestMode))
                    // The inbound message it answers.
                    .col(uuid(AiDrafts::MessageId))
                    .col(string(AiDrafts::FromNumber))
                    .col(string(AiDrafts::ToNumber))
                    .col(text(AiDrafts::Content))
                    // pending, sent, discarded.
                    .col(string(AiDrafts::Status))
                    .col(uuid_null(AiDrafts::SentMessageId))
                    .col(big_integer(AiDrafts::CreatedAt))
                    .col(big_integer(AiDrafts::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        // One draft per inbound message; the webhook body finds it by the message.
        manager
            .create_index(unique_index(
                "uq_ai_drafts_message",
                AiDrafts::Table,
                [AiDrafts::MessageId],
            ))
            .await?;
        manager
            .create_index(index(
                "idx_ai_drafts_listing",
                AiDrafts::Table,
                [
                    AiDrafts::WorkspaceId,
                    AiDrafts::TestMode,
                    AiDrafts::CreatedAt,
                    AiDrafts::Id,
                ],
            ))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_tables(
            manager,
            [AiDrafts::Table.into_iden(), AiSettings::Table.into_iden()],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum AiSettings {
    Table,
    WorkspaceId,
    TestMode,
    Enabled,
    Mode,
    Instructions,
    Rules,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum AiDrafts {
    Table,
    Id,
    WorkspaceId,
    TestMode,
    MessageId,
    FromNumber,
    ToNumber,
    Content,
    Status,
    SentMessageId,
    CreatedAt,
    UpdatedAt,
}
