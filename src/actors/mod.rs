//! Live state and timers: the registry, one actor per phone, phone sessions, the test-mode
//! simulator. The database is the truth; every actor rebuilds itself from it.

pub mod ai;
pub mod campaign;
pub mod daily_stats;
pub mod device_link;
pub mod link;
pub mod phone;
pub mod phone_session;
pub mod registry;
pub mod retention;
pub mod simulator;
pub mod webhook_endpoint;

use std::sync::Arc;

use sea_orm::DatabaseConnection;

use crate::clock::SharedClock;
use crate::config::Settings;
use crate::store::writer::Writer;

/// What every actor needs from the outside world.
#[derive(Clone)]
pub struct Deps {
    pub db: DatabaseConnection,
    pub writer: Writer,
    pub clock: SharedClock,
    pub settings: Arc<Settings>,
    pub webhooks: webhook_endpoint::WebhookDeps,
    /// The portal's live event streams (`GET /v1/events/stream`).
    pub live: Arc<crate::live_events::LiveEvents>,
    /// This node in a cluster (PostgreSQL); None for a single node on SQLite, which does no
    /// cluster work at all.
    pub cluster: Option<crate::cluster::Cluster>,
}
