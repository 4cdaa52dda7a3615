//! SIM lines (docs/api.md, "Phones"): a dual-SIM phone is several phones on one device.
//! `phones.device_phone_id` names the phone (the device) whose device token and connection
//! carry a line, and `phones.sim_slot` is the line's SIM slot (1–3); both are null on a
//! one-line device and on a device itself. The unique index keeps one line per slot of a
//! device (rows with nulls never collide, in SQLite and PostgreSQL alike), and serves the
//! lookup of a device's lines.

use crate::ddl::{add_columns, drop_columns, drop_index, unique_index};
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{small_integer_null, uuid_null};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        add_columns(
            manager,
            Phones::Table,
            [
                uuid_null(Phones::DevicePhoneId),
                small_integer_null(Phones::SimSlot),
            ],
        )
        .await?;
        manager
            .create_index(unique_index(
                "idx_phones_device_slot",
                Phones::Table,
                [Phones::DevicePhoneId, Phones::SimSlot],
            ))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_index(manager, "idx_phones_device_slot", Phones::Table).await?;
        drop_columns(
            manager,
            Phones::Table,
            [Phones::SimSlot, Phones::DevicePhoneId],
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Phones {
    Table,
    DevicePhoneId,
    SimSlot,
}
