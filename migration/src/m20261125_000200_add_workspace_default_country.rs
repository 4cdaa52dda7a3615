//! Adds `workspaces.default_country`: the ISO 3166-1 alpha-2 region the portal reads national
//! numbers in (docs/api.md, "Workspace"); null means the server's `portal.default_country`.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::string_len_null;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Workspaces::Table)
                    .add_column(string_len_null(Workspaces::DefaultCountry, 2))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Workspaces::Table)
                    .drop_column(Workspaces::DefaultCountry)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Workspaces {
    Table,
    DefaultCountry,
}
