//! The settings of one workspace and mode set through the SMSGate-compatible client API
//! (docs/api.md, "Client API settings"): the validated document without its secrets, and the
//! SMSGate webhook signing key, sealed like every stored signing key.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, boolean, string_null, text, uuid};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(WorkspaceSettings::Table)
                    .col(uuid(WorkspaceSettings::WorkspaceId))
                    .col(boolean(WorkspaceSettings::TestMode))
                    // JSON object of snake_case sections, secrets left out.
                    .col(text(WorkspaceSettings::Document))
                    // Sealed under the secrets key; NULL: generated when first needed.
                    .col(string_null(WorkspaceSettings::SigningKey))
                    // Sealed under the secrets key; NULL: none set.
                    .col(string_null(WorkspaceSettings::Passphrase))
                    .col(big_integer(WorkspaceSettings::UpdatedAt))
                    .primary_key(
                        Index::create()
                            .col(WorkspaceSettings::WorkspaceId)
                            .col(WorkspaceSettings::TestMode),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(WorkspaceSettings::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum WorkspaceSettings {
    Table,
    WorkspaceId,
    TestMode,
    Document,
    SigningKey,
    Passphrase,
    UpdatedAt,
}
