//! Schema migrations of smsgw, applied in order by `smsgw migrate` and at `smsgw serve` start-up.

pub use sea_orm_migration::prelude::*;
/// The table of applied migrations, read by `smsgw migrate --dry-run` and the newer-schema check.
pub use sea_orm_migration::seaql_migrations;

mod ddl;

mod m20261122_000001_create_core_tables;
mod m20261123_000002_create_webhook_tables;
mod m20261123_000003_create_contacts;
mod m20261125_000004_create_campaigns;
mod m20261125_000005_create_ai;
mod m20261125_000006_drop_status_index;
mod m20261125_000007_index_ai_drafts_sender;
mod m20261125_000008_add_key_generation;
mod m20261125_000009_create_queued_index;
mod m20261125_000190_add_message_groups;
mod m20261125_000195_add_webhook_format;
mod m20261125_000196_create_workspace_settings;
mod m20261125_000200_add_workspace_default_country;
mod m20261125_000201_create_idempotency_keys;
mod m20261125_000202_create_daily_stats;
mod m20261125_000210_create_cluster_tables;
mod m20261127_000220_add_campaign_quota_columns;
mod m20261128_000230_add_phone_lines;
mod m20261128_000231_add_pace_per_day;
mod m20261128_100000_create_phone_health;
mod m20261128_100240_create_phone_daily_stats;
mod m20261128_100240_create_pools;
mod m20261128_120000_index_finished_webhook_deliveries;

/// Every migration of the schema, oldest first.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_create_core_tables::Migration),
            Box::new(m20261123_000002_create_webhook_tables::Migration),
            Box::new(m20261123_000003_create_contacts::Migration),
            Box::new(m20261125_000004_create_campaigns::Migration),
            Box::new(m20261125_000005_create_ai::Migration),
            Box::new(m20261125_000006_drop_status_index::Migration),
            Box::new(m20261125_000007_index_ai_drafts_sender::Migration),
            Box::new(m20261125_000008_add_key_generation::Migration),
            Box::new(m20261125_000009_create_queued_index::Migration),
            Box::new(m20261125_000190_add_message_groups::Migration),
            Box::new(m20261125_000195_add_webhook_format::Migration),
            Box::new(m20261125_000196_create_workspace_settings::Migration),
            Box::new(m20261125_000200_add_workspace_default_country::Migration),
            Box::new(m20261125_000201_create_idempotency_keys::Migration),
            Box::new(m20261125_000202_create_daily_stats::Migration),
            Box::new(m20261125_000210_create_cluster_tables::Migration),
            Box::new(m20261127_000220_add_campaign_quota_columns::Migration),
            Box::new(m20261128_000230_add_phone_lines::Migration),
            Box::new(m20261128_000231_add_pace_per_day::Migration),
            Box::new(m20261128_100240_create_phone_daily_stats::Migration),
            Box::new(m20261128_100240_create_pools::Migration),
            Box::new(m20261128_100000_create_phone_health::Migration),
            Box::new(m20261128_120000_index_finished_webhook_deliveries::Migration),
        ]
    }
}
