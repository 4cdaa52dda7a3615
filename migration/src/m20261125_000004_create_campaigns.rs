//! Campaigns and their recipients (docs/api.md, Campaigns), plus the index that finds a campaign's
//! messages.

use crate::ddl::{drop_index, drop_tables, index, unique_index};
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
                    .table(Campaigns::Table)
                    .col(pk_uuid(Campaigns::Id))
                    .col(uuid(Campaigns::WorkspaceId))
                    .col(boolean(Campaigns::TestMode))
                    .col(string(Campaigns::Name))
                    .col(string(Campaigns::FromNumber))
                    .col(text(Campaigns::Body))
                    // draft, scheduled, running, paused, completed, canceled.
                    .col(string(Campaigns::Status))
                    .col(big_integer_null(Campaigns::ScheduledFor))
                    .col(big_integer(Campaigns::CreatedAt))
                    .col(big_integer(Campaigns::UpdatedAt))
                    // When it was launched: the new-workspace limit counts its recipients then.
                    .col(big_integer_null(Campaigns::LaunchedAt))
                    .col(big_integer_null(Campaigns::StartedAt))
                    .col(big_integer_null(Campaigns::FinishedAt))
                    // Recipients to send (skipped ones excluded) and the two skip counts.
                    .col(integer(Campaigns::Total))
                    .col(integer(Campaigns::SkippedOptedOut))
                    .col(integer(Campaigns::SkippedPremiumRate))
                    .to_owned(),
            )
            .await?;
        // Listing newest first by (created_at, id).
        manager
            .create_index(index(
                "idx_campaigns_listing",
                Campaigns::Table,
                [
                    Campaigns::WorkspaceId,
                    Campaigns::TestMode,
                    Campaigns::CreatedAt,
                    Campaigns::Id,
                ],
            ))
            .await?;
        // Start-up finds the running and scheduled ones.
        manager
            .create_index(index(
                "idx_campaigns_status",
                Campaigns::Table,
                [Campaigns::Status],
            ))
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(CampaignRecipients::Table)
                    .col(pk_uuid(CampaignRecipients::Id))
                    .col(uuid(CampaignRecipients::CampaignId))
                    // Order of the recipient in the campaign, from 0.
                    .col(integer(CampaignRecipients::Position))
                    .col(string(CampaignRecipients::ToNumber))
                    // The text rendered for this recipient at creation.
                    .col(text(CampaignRecipients::Content))
                    .col(integer(CampaignRecipients::Segments))
                    .col(string(CampaignRecipients::Encoding))
                    // pending, queued, skipped, failed, canceled; once queued, the live status
                    // is its message's (copied here before retention removes the message).
                    .col(string(CampaignRecipients::Status))
                    .col(uuid_null(CampaignRecipients::MessageId))
                    .col(string_null(CampaignRecipients::SkipReason))
                    .col(string_null(CampaignRecipients::FailureReason))
                    .to_owned(),
            )
            .await?;
        // Feeding reads the first pending recipients; listing pages by position.
        manager
            .create_index(index(
                "idx_campaign_recipients_order",
                CampaignRecipients::Table,
                [
                    CampaignRecipients::CampaignId,
                    CampaignRecipients::Status,
                    CampaignRecipients::Position,
                ],
            ))
            .await?;
        manager
            .create_index(unique_index(
                "uq_campaign_recipients_position",
                CampaignRecipients::Table,
                [CampaignRecipients::CampaignId, CampaignRecipients::Position],
            ))
            .await?;
        // Retention copies a message's final status to its recipient before removing it.
        manager
            .create_index(index(
                "idx_campaign_recipients_message",
                CampaignRecipients::Table,
                [CampaignRecipients::MessageId],
            ))
            .await?;
        // A campaign's open messages (restart, pause, cancel, counts). Partial: only campaign
        // messages are in it, so the inserts and status moves of every other message (the send
        // hot path) do not maintain it. `campaign_id = ?` implies the condition, so both
        // databases use it for those queries.
        manager
            .create_index(
                index(
                    "idx_messages_campaign",
                    Messages::Table,
                    [Messages::CampaignId, Messages::Status],
                )
                .and_where(Expr::col(Messages::CampaignId).is_not_null())
                .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_index(manager, "idx_messages_campaign", Messages::Table).await?;
        drop_tables(
            manager,
            [
                CampaignRecipients::Table.into_iden(),
                Campaigns::Table.into_iden(),
            ],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Campaigns {
    Table,
    Id,
    WorkspaceId,
    TestMode,
    Name,
    FromNumber,
    Body,
    Status,
    ScheduledFor,
    CreatedAt,
    UpdatedAt,
    LaunchedAt,
    StartedAt,
    FinishedAt,
    Total,
    SkippedOptedOut,
    SkippedPremiumRate,
}

#[derive(DeriveIden)]
enum CampaignRecipients {
    Table,
    Id,
    CampaignId,
    Position,
    ToNumber,
    Content,
    Segments,
    Encoding,
    Status,
    MessageId,
    SkipReason,
    FailureReason,
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    CampaignId,
    Status,
}
