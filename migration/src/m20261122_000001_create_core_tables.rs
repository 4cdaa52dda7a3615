//! Workspaces, API keys, phones, messages and their event timeline.
//!
//! Timestamps are integer milliseconds since the Unix epoch: the same type, ordering and
//! precision on SQLite and PostgreSQL.

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
                    .table(Workspaces::Table)
                    .col(pk_uuid(Workspaces::Id))
                    .col(string(Workspaces::Name))
                    .col(big_integer(Workspaces::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ApiKeys::Table)
                    .col(pk_uuid(ApiKeys::Id))
                    .col(uuid(ApiKeys::WorkspaceId))
                    .col(boolean(ApiKeys::TestMode))
                    .col(string_uniq(ApiKeys::KeyHash))
                    .col(string(ApiKeys::KeyPrefix))
                    .col(big_integer(ApiKeys::CreatedAt))
                    .col(big_integer_null(ApiKeys::RevokedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Phones::Table)
                    .col(pk_uuid(Phones::Id))
                    .col(uuid(Phones::WorkspaceId))
                    .col(boolean(Phones::TestMode))
                    .col(string(Phones::PhoneNumber))
                    .col(string_null(Phones::Name))
                    .col(string_uniq(Phones::TokenHash))
                    .col(integer_null(Phones::PacePerMinute))
                    .col(integer_null(Phones::PacePer30Minutes))
                    .col(big_integer(Phones::CreatedAt))
                    .col(big_integer_null(Phones::LastSeenAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "idx_phones_workspace_number",
                Phones::Table,
                [Phones::WorkspaceId, Phones::TestMode, Phones::PhoneNumber],
            ))
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Messages::Table)
                    .col(pk_uuid(Messages::Id))
                    .col(uuid(Messages::WorkspaceId))
                    .col(boolean(Messages::TestMode))
                    .col(string(Messages::Direction))
                    .col(string(Messages::Status))
                    .col(small_integer(Messages::Priority))
                    .col(string(Messages::FromNumber))
                    .col(string(Messages::ToNumber))
                    .col(text(Messages::Content))
                    .col(integer(Messages::Segments))
                    .col(string(Messages::Encoding))
                    .col(uuid_null(Messages::DeviceId))
                    .col(boolean(Messages::Pinned))
                    .col(uuid_null(Messages::CampaignId))
                    .col(string_null(Messages::RequestId))
                    .col(string_null(Messages::InboundRef))
                    .col(big_integer_null(Messages::ScheduledFor))
                    .col(big_integer(Messages::ExpiresAt))
                    .col(big_integer(Messages::CreatedAt))
                    .col(big_integer(Messages::UpdatedAt))
                    .col(big_integer_null(Messages::SentAt))
                    .col(big_integer_null(Messages::DeliveredAt))
                    .col(big_integer_null(Messages::FailedAt))
                    .col(string_null(Messages::FailureReason))
                    .col(integer(Messages::SendAttempts))
                    .col(big_integer_null(Messages::ContentRemovedAt))
                    .to_owned(),
            )
            .await?;
        // Idempotency is enforced by the database, not by check-then-insert.
        // NULL request_ids are distinct on both backends, so only keyed sends are constrained.
        manager
            .create_index(unique_index(
                "uq_messages_request_id",
                Messages::Table,
                [
                    Messages::WorkspaceId,
                    Messages::TestMode,
                    Messages::RequestId,
                ],
            ))
            .await?;
        // Listing newest first by (created_at, id) within a workspace and mode.
        manager
            .create_index(index(
                "idx_messages_listing",
                Messages::Table,
                [
                    Messages::WorkspaceId,
                    Messages::TestMode,
                    Messages::CreatedAt,
                    Messages::Id,
                ],
            ))
            .await?;
        // Queue rebuild, expiry and retention scan by status.
        manager
            .create_index(index(
                "idx_messages_status",
                Messages::Table,
                [Messages::Status],
            ))
            .await?;
        // A phone's inbound report is stored once per (phone, ref).
        manager
            .create_index(unique_index(
                "uq_messages_inbound_ref",
                Messages::Table,
                [Messages::DeviceId, Messages::InboundRef],
            ))
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(MessageEvents::Table)
                    .col(big_pk_auto(MessageEvents::Id))
                    .col(uuid(MessageEvents::MessageId))
                    .col(string(MessageEvents::Kind))
                    .col(string(MessageEvents::Status))
                    .col(big_integer(MessageEvents::At))
                    .col(text_null(MessageEvents::Detail))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "idx_message_events_message",
                MessageEvents::Table,
                [MessageEvents::MessageId],
            ))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_tables(
            manager,
            [
                MessageEvents::Table.into_iden(),
                Messages::Table.into_iden(),
                Phones::Table.into_iden(),
                ApiKeys::Table.into_iden(),
                Workspaces::Table.into_iden(),
            ],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Workspaces {
    Table,
    Id,
    Name,
    CreatedAt,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    Id,
    WorkspaceId,
    TestMode,
    KeyHash,
    KeyPrefix,
    CreatedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum Phones {
    Table,
    Id,
    WorkspaceId,
    TestMode,
    PhoneNumber,
    Name,
    TokenHash,
    PacePerMinute,
    #[sea_orm(iden = "pace_per_30_minutes")]
    PacePer30Minutes,
    CreatedAt,
    LastSeenAt,
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    Id,
    WorkspaceId,
    TestMode,
    Direction,
    Status,
    Priority,
    FromNumber,
    ToNumber,
    Content,
    Segments,
    Encoding,
    DeviceId,
    Pinned,
    CampaignId,
    RequestId,
    InboundRef,
    ScheduledFor,
    ExpiresAt,
    CreatedAt,
    UpdatedAt,
    SentAt,
    DeliveredAt,
    FailedAt,
    FailureReason,
    SendAttempts,
    ContentRemovedAt,
}

#[derive(DeriveIden)]
enum MessageEvents {
    Table,
    Id,
    MessageId,
    Kind,
    Status,
    At,
    Detail,
}
