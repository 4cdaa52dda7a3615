//! SeaORM entities of smsgw: one module per table, primitive column types only.
//!
//! Timestamps are `i64` milliseconds since the Unix epoch; ids are UUIDs. Mapping to domain
//! types happens in the server's `store` layer.

pub mod ai_drafts;
pub mod ai_settings;
pub mod api_key_generation;
pub mod api_keys;
pub mod campaign_recipients;
pub mod campaigns;
pub mod cluster_nodes;
pub mod contact_tags;
pub mod contacts;
pub mod daily_stats;
pub mod idempotency_keys;
pub mod leases;
pub mod message_events;
pub mod messages;
pub mod phone_alerts;
pub mod phone_daily_delivery_times;
pub mod phone_daily_failures;
pub mod phone_daily_stats;
pub mod phone_events;
pub mod phone_health;
pub mod phones;
pub mod pool_phones;
pub mod pool_recipients;
pub mod pools;
pub mod webhook_attempts;
pub mod webhook_deliveries;
pub mod webhook_endpoints;
pub mod workspace_settings;
pub mod workspaces;
