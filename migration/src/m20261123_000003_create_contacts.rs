//! Contacts and their tags (opt-out state, AI reply switch), plus the message indexes that keep
//! the retention job's batched scans cheap.

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
                    .table(Contacts::Table)
                    .col(pk_uuid(Contacts::Id))
                    .col(uuid(Contacts::WorkspaceId))
                    .col(boolean(Contacts::TestMode))
                    .col(string(Contacts::PhoneNumber))
                    .col(string_null(Contacts::FirstName))
                    .col(string_null(Contacts::LastName))
                    .col(string_null(Contacts::Email))
                    // A JSON object of string to string.
                    .col(text(Contacts::CustomFields))
                    .col(boolean(Contacts::OptedOut))
                    .col(big_integer_null(Contacts::OptedOutAt))
                    .col(boolean(Contacts::AiReplies))
                    .col(big_integer(Contacts::CreatedAt))
                    .col(big_integer(Contacts::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        // One contact per number in a workspace and mode; the upserts of keywords and imports
        // use it as their conflict target.
        manager
            .create_index(unique_index(
                "uq_contacts_number",
                Contacts::Table,
                [
                    Contacts::WorkspaceId,
                    Contacts::TestMode,
                    Contacts::PhoneNumber,
                ],
            ))
            .await?;
        // Listing newest first by (created_at, id).
        manager
            .create_index(index(
                "idx_contacts_listing",
                Contacts::Table,
                [
                    Contacts::WorkspaceId,
                    Contacts::TestMode,
                    Contacts::CreatedAt,
                    Contacts::Id,
                ],
            ))
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ContactTags::Table)
                    .col(uuid(ContactTags::ContactId))
                    .col(uuid(ContactTags::WorkspaceId))
                    .col(boolean(ContactTags::TestMode))
                    .col(string(ContactTags::Tag))
                    .primary_key(
                        Index::create()
                            .col(ContactTags::ContactId)
                            .col(ContactTags::Tag),
                    )
                    .to_owned(),
            )
            .await?;
        // `?tag=` filters and campaign expansion by tag.
        manager
            .create_index(index(
                "idx_contact_tags_tag",
                ContactTags::Table,
                [
                    ContactTags::WorkspaceId,
                    ContactTags::TestMode,
                    ContactTags::Tag,
                    ContactTags::ContactId,
                ],
            ))
            .await?;
        // Retention: outbound content after sent_at, inbound content after receipt, and
        // records after reaching a terminal status (updated_at is when they reached it).
        manager
            .create_index(index(
                "idx_messages_retention_sent",
                Messages::Table,
                [Messages::ContentRemovedAt, Messages::SentAt],
            ))
            .await?;
        manager
            .create_index(index(
                "idx_messages_retention_received",
                Messages::Table,
                [
                    Messages::Direction,
                    Messages::ContentRemovedAt,
                    Messages::CreatedAt,
                ],
            ))
            .await?;
        manager
            .create_index(index(
                "idx_messages_status_updated",
                Messages::Table,
                [Messages::Status, Messages::UpdatedAt],
            ))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for name in [
            "idx_messages_status_updated",
            "idx_messages_retention_received",
            "idx_messages_retention_sent",
        ] {
            drop_index(manager, name, Messages::Table).await?;
        }
        drop_tables(
            manager,
            [ContactTags::Table.into_iden(), Contacts::Table.into_iden()],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Contacts {
    Table,
    Id,
    WorkspaceId,
    TestMode,
    PhoneNumber,
    FirstName,
    LastName,
    Email,
    CustomFields,
    OptedOut,
    OptedOutAt,
    AiReplies,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ContactTags {
    Table,
    ContactId,
    WorkspaceId,
    TestMode,
    Tag,
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    Direction,
    Status,
    CreatedAt,
    UpdatedAt,
    SentAt,
    ContentRemovedAt,
}
