//! A phone's pace override gains a daily cap and jitter (docs/api.md, "Phones"):
//! `pace_per_day`, at most this many sends in any 24 hours (null: none), and `jitter_seconds`,
//! a random extra wait of up to this many seconds before each hand-over (null: 0). Both are
//! read only when the override itself is set (`pace_per_minute` and `pace_per_30_minutes`).

use crate::ddl::{add_columns, drop_columns};
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::integer_null;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        add_columns(
            manager,
            Phones::Table,
            [
                integer_null(Phones::PacePerDay),
                integer_null(Phones::JitterSeconds),
            ],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_columns(
            manager,
            Phones::Table,
            [Phones::JitterSeconds, Phones::PacePerDay],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Phones {
    Table,
    PacePerDay,
    JitterSeconds,
}
