//! Contacts and their tags (opt-out state, AI reply switch), plus the message indexes that keep
//! the retention job's batched scans cheap.

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
            .create_index(
                Index::create()
                    .name("uq_contacts_number")
                    .table(Contacts::Table)
                    .col(Contacts::WorkspaceId)
                    .col(Contacts::TestMode)
                    .col(Contacts::PhoneNumber)
                    .unique()
                    .to_owned(),
            )
            .await?;
        // Listing newest first by (created_at, id).
        manager
            .create_index(
                Index::create()
                    .name("idx_contacts_listing")
                    .table(Contacts::Table)
                    .col(Contacts::WorkspaceId)
                    .col(Contacts::TestMode)
                    .col(Contacts::CreatedAt)
                    .col(Contacts::Id)
                    .to_owned(),
            )
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
            .create_index(
                Index::create()
                    .name("idx_contact_tags_tag")
                    .table(ContactTags::Table)
                    .col(ContactTags::WorkspaceId)
                    .col(ContactTags::TestMode)
                    .col(ContactTags::Tag)
                    .col(ContactTags::ContactId)
                    .to_owned(),
            )
            .await?;
        // Retention: outbound content after sent_at, inbound content after receipt, and
        // records after reaching a terminal status (updated_at is when they reached it).
        manager
            .create_index(
                Index::create()
                    .name("idx_messages_retention_sent")
                    .table(Messages::Table)
                    .col(Messages::ContentRemovedAt)
                    .col(Messages::SentAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_messages_retention_received")
                    .table(Messages::Table)
                    .col(Messages::Direction)
                    .col(Messages::ContentRemovedAt)
                    .col(Messages::CreatedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_messages_status_updated")
                    .table(Messages::Table)
                    .col(Messages::Status)
                    .col(Messages::UpdatedAt)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for name in [
            "idx_messages_status_updated",
            "idx_messages_retention_received",
            "idx_messages_retention_sent",
        ] {
            manager
                .drop_index(Index::drop().name(name).table(Messages::Table).to_owned())
                .await?;
        }
        for table in [ContactTags::Table.into_iden(), Contacts::Table.into_iden()] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
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
