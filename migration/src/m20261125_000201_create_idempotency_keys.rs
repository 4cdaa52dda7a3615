//! `idempotency_keys`: the `request_id` of a create that is not a message (campaigns, contacts,
//! phones, webhook endpoints; docs/api.md, "Idempotent creates"). The primary key makes a
//! reservation exact under concurrency: of two requests with one `request_id`, one inserts
//! the row and the other finds it. `resource_id` is null while the first request is running.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, boolean, string, string_len, uuid_null};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(IdempotencyKeys::Table)
                    .col(
                        ColumnDef::new(IdempotencyKeys::WorkspaceId)
                            .uuid()
                            .not_null(),
                    )
                    .col(boolean(IdempotencyKeys::TestMode))
                    .col(string_len(IdempotencyKeys::Operation, 32))
                    .col(string(IdempotencyKeys::RequestId))
                    .col(uuid_null(IdempotencyKeys::ResourceId))
                    .col(big_integer(IdempotencyKeys::CreatedAt))
                    .primary_key(
                        Index::create()
                            .col(IdempotencyKeys::WorkspaceId)
                            .col(IdempotencyKeys::TestMode)
                            .col(IdempotencyKeys::Operation)
                            .col(IdempotencyKeys::RequestId),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(IdempotencyKeys::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum IdempotencyKeys {
    Table,
    WorkspaceId,
    TestMode,
    Operation,
    RequestId,
    ResourceId,
    CreatedAt,
}
