//! A phone's health and its alert episodes (docs/api.md, "Phone health"):
//!
//! - `phone_health`: the latest facts a device reported (battery, charging, network, SIM
//!   cards), one row per device, replaced field by field as reports arrive; its SIM lines show
//!   their device's row.
//! - `phone_alerts`: the current episode of each alert kind of each phone (`offline`,
//!   `low_battery`, `stalled`), one row per phone and kind. `ended_at` null is an open
//!   episode; `alerted_at` is set by the conditional update that fires its webhook, so an
//!   episode alerts once across restarts and cluster nodes.
//! - `phone_events`: the data of each fired alert event (`phone.offline`, …) as it was when it
//!   fired; its webhook deliveries name the row by id, as a message event names its message.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{
    big_integer, big_integer_null, boolean_null, integer_null, string, string_null, text, text_null,
};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(PhoneHealth::Table)
                    .col(
                        ColumnDef::new(PhoneHealth::PhoneId)
                            .uuid()
                            .not_null()
                            .primary_key(),
                    )
                    .col(integer_null(PhoneHealth::BatteryPercent))
                    .col(boolean_null(PhoneHealth::Charging))
                    .col(string_null(PhoneHealth::Network))
                    .col(text_null(PhoneHealth::Sims))
                    .col(big_integer(PhoneHealth::ReportedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PhoneAlerts::Table)
                    .col(ColumnDef::new(PhoneAlerts::PhoneId).uuid().not_null())
                    .col(string(PhoneAlerts::Kind))
                    .col(big_integer(PhoneAlerts::Since))
                    .col(big_integer_null(PhoneAlerts::EndedAt))
                    .col(big_integer_null(PhoneAlerts::AlertedAt))
                    .primary_key(
                        Index::create()
                            .col(PhoneAlerts::PhoneId)
                            .col(PhoneAlerts::Kind),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PhoneEvents::Table)
                    .col(
                        ColumnDef::new(PhoneEvents::Id)
                            .uuid()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(PhoneEvents::PhoneId).uuid().not_null())
                    .col(string(PhoneEvents::Event))
                    .col(text(PhoneEvents::Data))
                    .col(big_integer(PhoneEvents::CreatedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(PhoneEvents::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(PhoneAlerts::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(PhoneHealth::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum PhoneHealth {
    Table,
    PhoneId,
    BatteryPercent,
    Charging,
    Network,
    /// JSON array of the device's SIM cards.
    Sims,
    ReportedAt,
}

#[derive(DeriveIden)]
enum PhoneAlerts {
    Table,
    PhoneId,
    /// offline, low_battery or stalled.
    Kind,
    /// When the episode began.
    Since,
    EndedAt,
    AlertedAt,
}

#[derive(DeriveIden)]
enum PhoneEvents {
    Table,
    Id,
    PhoneId,
    /// The event's name (`phone.offline`).
    Event,
    /// JSON `{phone_id, phone_number, name, since, health}`.
    Data,
    CreatedAt,
}
