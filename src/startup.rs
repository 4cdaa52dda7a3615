//! Builds the application, wiring only (zero2prod's `Application::build`, then `port` and
//! `run_until_stopped`): settings → database and migrations → secrets key → single-node lock →
//! listener → cluster → writer → actors (`startup::actors`) → HTTP server → first workspace.
//! Each step's work lives in its own module: `secrets`, `single_node`, `cluster`,
//! `change_router`, `server::{http, tls, signals}`.

use std::net::SocketAddr;
use std::sync::Arc;

use actix::{Actor, Addr};
use actix_web::dev::Server;
use actix_web::web;
use sea_orm::DatabaseConnection;

use crate::actors::Deps;
use crate::actors::campaign::Campaigns;
use crate::actors::daily_stats::DailyStats;
use crate::actors::registry::Registry;
use crate::actors::retention::Retention;
use crate::actors::webhook_endpoint::{
    DeliveryBudgets, WebhookDeps, WebhookEndpoints, WebhookFanout,
};
use crate::api::{self, AppState};
use crate::change_router::ChangeRouter;
use crate::clock::{SharedClock, SystemClock};
use crate::cluster::Cluster;
use crate::config::Settings;
use crate::live_events::LiveEvents;
use crate::outbound::target::{SharedResolver, SystemResolver};
use crate::server::signals::ShutdownSignals;
use crate::server::{http, tls};
use crate::single_node::SingleNodeLock;
use crate::store;
use crate::store::webhooks::Subscriptions;
use crate::store::writer::{AttemptRecorder, MessageQuotas, Writer};

mod actors;
mod error;
mod first_run;
mod runtime;
mod shutdown;

pub use error::StartupError;
pub use first_run::{FIRST_WORKSPACE, InitialKeys};
pub use runtime::{block_on_system, install_crypto_provider};

/// What tests and harnesses may inject instead of the real thing.
#[derive(Clone, Default)]
pub struct Hooks {
    /// The wall clock; the system clock when None.
    pub clock: Option<SharedClock>,
    /// Name resolution of webhook targets; the system resolver when None.
    pub resolver: Option<SharedResolver>,
}

/// A built, not yet running, server.
pub struct Application {
    address: SocketAddr,
    server: Server,
    /// Set when this start created the `default` workspace.
    pub initial_keys: Option<InitialKeys>,
    pub db: DatabaseConnection,
    pub registry: Addr<Registry>,
    /// The webhook endpoints' supervisor.
    pub webhooks: Addr<WebhookEndpoints>,
    /// The campaigns' supervisor; stopped with the registry.
    pub campaigns: Addr<Campaigns>,
    /// Held so the retention job lives as long as the server.
    _retention: Addr<Retention>,
    /// Phone sessions still running; a stop waits for their close frames.
    sessions: Arc<crate::actors::phone_session::LiveSessions>,
    /// This node in the cluster (PostgreSQL); None on SQLite.
    pub cluster: Option<Cluster>,
    /// The SQLite database file's lock, held for the node's life.
    _single_node: Option<SingleNodeLock>,
    /// Registered in `build`, before the address is announced: a SIGTERM that arrives any time
    /// after that is handled gracefully (the default action would kill the process).
    signals: ShutdownSignals,
}

impl Application {
    /// Reads the TLS files, connects, migrates, starts the writer and the registry once, binds
    /// the listener (port 0 picks a free port), and only then creates the `default` workspace
    /// on an empty database: a start that fails leaves no keys nobody saw.
    pub async fn build(settings: Settings) -> Result<Application, StartupError> {
        Application::build_with(settings, Hooks::default()).await
    }

    /// [`Application::build`] with injected parts (clock, webhook name resolution).
    pub async fn build_with(settings: Settings, hooks: Hooks) -> Result<Application, StartupError> {
        let clock = hooks.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let resolver = hooks.resolver.unwrap_or_else(|| Arc::new(SystemResolver));
        install_crypto_provider();
        http::warn_without_public_url(&settings);
        // Before the database: a bad TLS file must not leave a database (and keys) behind.
        let tls = settings.server.tls.as_ref().map(tls::load).transpose()?;
        crate::domain::phone_number::warm_up();
        let settings = Arc::new(settings);
        let db_options = store::DbOptions {
            url: settings.database.url.clone(),
            max_connections: settings.database.max_connections,
            acquire_timeout: settings.database.acquire_timeout,
            max_size: settings.database.max_size,
        };
        let db = store::connect_with(&db_options).await?;
        store::migrate(&db).await?;
        let secrets = Arc::new(crate::secrets::unlock(&db, &settings).await?);
        // SQLite runs one node: taken once the configuration and the secrets key proved usable,
        // before this node writes anything of its own or serves.
        let single_node = SingleNodeLock::take(&settings.database.url).await?;
        if settings.webhooks.allow_insecure_targets {
            tracing::warn!(
                "webhooks.allow_insecure_targets is on: http:// and private targets are allowed (development only)"
            );
        }
        let (tcp, address) = http::bind(&settings).map_err(|e| bind_error(&settings, e))?;
        let cluster = Cluster::join_if_shared(&db, &settings, address).await?;
        crate::telemetry::set_node(
            cluster
                .as_ref()
                .map_or_else(uuid::Uuid::new_v4, Cluster::node),
        );
        crate::telemetry::metrics_handle();
        let live = Arc::new(LiveEvents::default());
        // Day counts start before the writer: its change listener sends to them from the first
        // commit on. Campaigns and the AI responder attach in `actors::start`.
        let router = ChangeRouter::new(
            DailyStats::new(db.clone()).start().recipient(),
            live.clone(),
        );
        let subscriptions = Arc::new(Subscriptions::load(&db).await?);
        let fanout = Arc::new(WebhookFanout::new(subscriptions.clone()));
        let quotas = MessageQuotas::of(&settings.quotas);
        let writer = Writer::connect(
            &db_options,
            clock.clone(),
            router.listener(),
            Some(fanout.clone()),
            quotas,
        )
        .await?;
        let webhooks = WebhookDeps {
            resolver: resolver.clone(),
            recorder: AttemptRecorder::new(writer.clone()),
            subscriptions: subscriptions.clone(),
            secrets: secrets.clone(),
            budgets: Arc::new(DeliveryBudgets::new(&settings.quotas)),
        };
        let deps = Deps {
            db: db.clone(),
            writer: writer.clone(),
            clock: clock.clone(),
            settings: settings.clone(),
            webhooks,
            live: live.clone(),
            cluster: cluster.clone(),
        };
        let actors = actors::start(deps, &router, &fanout);
        let webhook_api = web::Data::new(api::webhooks::WebhookApi {
            endpoints: actors.webhooks.clone(),
            resolver,
            subscriptions,
            secrets,
        });
        let mut state = AppState::new(
            db.clone(),
            writer,
            actors.registry.clone(),
            actors.campaigns.clone(),
            settings.clone(),
            clock.clone(),
        );
        state.live = live;
        state.cluster = cluster.clone();
        let state = web::Data::new(state);
        let sessions = state.sessions.clone();
        let server = http::serve(tcp, address, &settings, tls, state, webhook_api)
            .map_err(|e| bind_error(&settings, e))?;
        let initial_keys = first_run::create_first_workspace(&db, clock.now_ms()).await?;
        Ok(Application {
            signals: ShutdownSignals::listen(),
            address,
            server,
            initial_keys,
            db,
            registry: actors.registry,
            webhooks: actors.webhooks,
            campaigns: actors.campaigns,
            _retention: actors.retention,
            sessions,
            cluster,
            _single_node: single_node,
        })
    }

    /// The address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// A handle that can stop the server gracefully.
    pub fn handle(&self) -> actix_web::dev::ServerHandle {
        self.server.handle()
    }

    /// Serves until stopped. SIGTERM or SIGINT stop it gracefully: phone sessions are closed
    /// with 1001 "going away", the listener stops accepting, in-flight requests finish (each is
    /// answered only after its write committed), then the server returns. Nothing accepted is
    /// lost: queues live in the database and are rebuilt at the next start.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        actix_web::rt::spawn(shutdown::on_signal(
            self.signals,
            self.server.handle(),
            self.registry.clone(),
            self.webhooks.clone(),
            self.campaigns.clone(),
            self.sessions.clone(),
            self.cluster.clone(),
        ));
        self.server.await
    }
}

/// `server.bind` could not be listened on.
fn bind_error(settings: &Settings, source: std::io::Error) -> StartupError {
    StartupError::Bind {
        bind: settings.server.bind.clone(),
        source,
    }
}
