//! Sender pools (docs/api.md, "Pools"): `pools` are named sets of phones (lines) of one
//! workspace and mode, names unique per scope by a unique index; `pool_phones` lists each
//! pool's lines in the order given (a phone may be in several pools); `pool_recipients` is the
//! sticky choice, the line of a pool a recipient last exchanged SMS with, kept apart from
//! messages so it outlives their retention (docs/api.md, "Retention"). `messages.pool_id`
//! names the pool a message was sent through: only those may move to another line;
//! `campaigns.pool_id` the pool a campaign sends from (its `from_number` is then empty).

use crate::ddl::{add_columns, drop_columns, drop_tables, index, unique_index};
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{
    big_integer, boolean, integer, string, string_len, uuid, uuid_null,
};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Pools::Table)
                    .col(uuid(Pools::Id).primary_key())
                    .col(uuid(Pools::WorkspaceId))
                    .col(boolean(Pools::TestMode))
                    .col(string_len(Pools::Name, 120))
                    .col(big_integer(Pools::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(unique_index(
                "idx_pools_scope_name",
                Pools::Table,
                [Pools::WorkspaceId, Pools::TestMode, Pools::Name],
            ))
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PoolPhones::Table)
                    .col(uuid(PoolPhones::PoolId))
                    .col(uuid(PoolPhones::PhoneId))
                    // The place of the phone in the pool's `phone_ids`, from 0.
                    .col(integer(PoolPhones::Position))
                    .primary_key(
                        Index::create()
                            .col(PoolPhones::PoolId)
                            .col(PoolPhones::PhoneId),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "idx_pool_phones_phone",
                PoolPhones::Table,
                [PoolPhones::PhoneId],
            ))
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PoolRecipients::Table)
                    .col(uuid(PoolRecipients::PoolId))
                    .col(string(PoolRecipients::ToNumber))
                    .col(uuid(PoolRecipients::PhoneId))
                    .col(big_integer(PoolRecipients::UpdatedAt))
                    .primary_key(
                        Index::create()
                            .col(PoolRecipients::PoolId)
                            .col(PoolRecipients::ToNumber),
                    )
                    .to_owned(),
            )
            .await?;
        add_columns(manager, Messages::Table, [uuid_null(Messages::PoolId)]).await?;
        // The failover sweep reads the pooled messages still queued, by line, every second:
        // a partial index holds only those rows, so it costs nothing without pools. The same
        // statement on SQLite and PostgreSQL (sea-query's index builder has no WHERE).
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE INDEX idx_messages_pooled_queued ON messages (device_id, created_at) \
                 WHERE status = 'queued' AND pool_id IS NOT NULL",
            )
            .await?;
        add_columns(manager, Campaigns::Table, [uuid_null(Campaigns::PoolId)]).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_columns(manager, Campaigns::Table, [Campaigns::PoolId]).await?;
        manager
            .get_connection()
            .execute_unprepared("DROP INDEX idx_messages_pooled_queued")
            .await?;
        drop_columns(manager, Messages::Table, [Messages::PoolId]).await?;
        drop_tables(
            manager,
            [
                PoolRecipients::Table.into_iden(),
                PoolPhones::Table.into_iden(),
                Pools::Table.into_iden(),
            ],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Pools {
    Table,
    Id,
    WorkspaceId,
    TestMode,
    Name,
    CreatedAt,
}

#[derive(DeriveIden)]
enum PoolPhones {
    Table,
    PoolId,
    PhoneId,
    Position,
}

#[derive(DeriveIden)]
enum PoolRecipients {
    Table,
    PoolId,
    ToNumber,
    PhoneId,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    PoolId,
}

#[derive(DeriveIden)]
enum Campaigns {
    Table,
    PoolId,
}
