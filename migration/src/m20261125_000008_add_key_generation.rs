//! The API key generation: one row whose counter every revocation raises in the same
//! transaction, so each server process can learn cheaply that a key was revoked (by the API of
//! another process or by `smsgw key revoke`) and drop its key cache; and an index to list a
//! workspace's keys.

use crate::ddl::{drop_index, index};
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, integer};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ApiKeyGeneration::Table)
                    .col(integer(ApiKeyGeneration::Id).primary_key())
                    .col(big_integer(ApiKeyGeneration::Generation))
                    .to_owned(),
            )
            .await?;
        manager
            .get_connection()
            .execute_unprepared("INSERT INTO api_key_generation (id, generation) VALUES (1, 0)")
            .await?;
        manager
            .create_index(index(
                "idx_api_keys_workspace",
                ApiKeys::Table,
                [ApiKeys::WorkspaceId, ApiKeys::CreatedAt],
            ))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_index(manager, "idx_api_keys_workspace", ApiKeys::Table).await?;
        manager
            .drop_table(Table::drop().table(ApiKeyGeneration::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ApiKeyGeneration {
    Table,
    Id,
    Generation,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    WorkspaceId,
    CreatedAt,
}
