//! Builds the application: database, migrations, writer, actors, HTTP server.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use actix::{Actor, Addr};
use actix_web::dev::Server;
use actix_web::{App, HttpServer, web};
use sea_orm::DatabaseConnection;

use crate::actors::Deps;
use crate::actors::registry::Registry;
use crate::actors::retention::Retention;
use crate::actors::webhook_endpoint::{WebhookDeps, WebhookFanout};
use crate::actors::webhook_target::{SharedResolver, SystemResolver};
use crate::api::{self, AppState};
use crate::clock::{SharedClock, SystemClock};
use crate::config::Settings;
use crate::store::webhooks::{AttemptRecorder, Subscriptions};
use crate::store::writer::{Change, Writer};
use crate::store::{self, StoreError, workspaces};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {bind}: {source}")]
    Bind {
        bind: String,
        source: std::io::Error,
    },
}

/// Runs `future` to completion on a fresh actix System and tears the System down inside a
/// fallback Tokio context.
///
/// actix's runtime drops its local task set (every actor and spawned future still pending)
/// outside any Tokio context. A pending database call that holds a pooled sqlx connection then
/// panics in its destructor ("this functionality requires a Tokio context"), and a second such
/// panic during that unwind aborts the process. The fallback context gives those destructors a
/// runtime to hand their connection to; it is never driven, and is dropped last.
pub fn block_on_system<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    let fallback = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _context = fallback.enter();
    let output = actix_web::rt::System::new().block_on(future);
    Ok(output)
}

/// Selects ring as the process's TLS crypto provider (outbound HTTPS of webhooks and clients).
/// Idempotent: later calls keep the provider already installed.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Keys of the `default` workspace created on an empty database, shown once.
#[derive(Debug, Clone)]
pub struct InitialKeys {
    pub workspace_id: uuid::Uuid,
    pub live_key: String,
    pub test_key: String,
}

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
    /// Held so the retention job lives as long as the server.
    _retention: Addr<Retention>,
    /// Registered in `build`, before the address is announced: a SIGTERM that arrives any time
    /// after that is handled gracefully (the default action would kill the process).
    signals: ShutdownSignals,
}

impl Application {
    /// Connects, migrates, creates the default workspace on an empty database, starts the
    /// writer and the registry once, and binds the listener (port 0 picks a free port).
    pub async fn build(settings: Settings) -> Result<Application, StartupError> {
        Application::build_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// [`Application::build`] with an injected clock.
    pub async fn build_with_clock(
        settings: Settings,
        clock: SharedClock,
    ) -> Result<Application, StartupError> {
        let hooks = Hooks {
            clock: Some(clock),
            resolver: None,
        };
        Application::build_with(settings, hooks).await
    }

    /// [`Application::build`] with injected parts (clock, webhook name resolution).
    pub async fn build_with(settings: Settings, hooks: Hooks) -> Result<Application, StartupError> {
        let clock = hooks.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let resolver = hooks.resolver.unwrap_or_else(|| Arc::new(SystemResolver));
        install_crypto_provider();
        crate::domain::phone_number::warm_up();
        let settings = Arc::new(settings);
        let db = store::connect(&settings.database.url, settings.database.max_connections).await?;
        store::migrate(&db).await?;
        let initial_keys = if workspaces::count(&db).await? == 0 {
            let created = workspaces::create(&db, "default", clock.now_ms()).await?;
            Some(InitialKeys {
                workspace_id: created.workspace.id,
                live_key: created.live_key,
                test_key: created.test_key,
            })
        } else {
            None
        };
        if settings.webhooks.allow_insecure_targets {
            tracing::warn!(
                "webhooks.allow_insecure_targets is on: http:// and private targets are allowed (development only)"
            );
        }
        crate::telemetry::metrics_handle();
        let listener: Arc<dyn Fn(Vec<Change>) + Send + Sync> = Arc::new(|changes: Vec<Change>| {
            for change in changes {
                metrics::counter!(crate::telemetry::names::MESSAGE_TRANSITIONS, "kind" => change.kind)
                    .increment(1);
                tracing::debug!(message_id = %change.message.id, kind = change.kind, "message changed");
            }
        });
        let subscriptions = Arc::new(Subscriptions::load(&db).await?);
        let fanout = Arc::new(WebhookFanout::new(subscriptions.clone()));
        let writer =
            Writer::start_with_hook(db.clone(), clock.clone(), listener, Some(fanout.clone()));
        let webhooks = WebhookDeps {
            resolver: resolver.clone(),
            recorder: AttemptRecorder::new(writer.clone()),
            subscriptions: subscriptions.clone(),
        };
        let deps = Deps {
            db: db.clone(),
            writer: writer.clone(),
            clock: clock.clone(),
            settings: settings.clone(),
            webhooks,
        };
        let retention = actix::Supervisor::start({
            let deps = deps.clone();
            move |_| Retention::new(deps.clone())
        });
        let registry = Registry::new(deps).start();
        fanout.attach(registry.clone());
        let webhook_api = web::Data::new(api::webhooks::WebhookApi {
            resolver,
            subscriptions,
        });
        let state = web::Data::new(AppState::new(
            db.clone(),
            writer,
            registry.clone(),
            settings.clone(),
            clock,
        ));
        let tcp =
            TcpListener::bind(&settings.server.bind).map_err(|source| StartupError::Bind {
                bind: settings.server.bind.clone(),
                source,
            })?;
        let address = tcp.local_addr().map_err(|source| StartupError::Bind {
            bind: settings.server.bind.clone(),
            source,
        })?;
        let mut server = HttpServer::new(move || {
            App::new()
                .wrap(actix_web::middleware::from_fn(
                    crate::telemetry::observe_request,
                ))
                .app_data(state.clone())
                .app_data(webhook_api.clone())
                .configure(api::configure)
                .configure(crate::portal::routes)
                .default_service(web::to(api::not_found))
        })
        .listen(tcp)
        .map_err(|source| StartupError::Bind {
            bind: settings.server.bind.clone(),
            source,
        })?
        // Signals are handled by `run_until_stopped`, which closes phone sessions first.
        .disable_signals()
        .shutdown_timeout(8);
        if settings.server.workers > 0 {
            server = server.workers(settings.server.workers);
        }
        Ok(Application {
            signals: ShutdownSignals::listen(),
            address,
            server: server.run(),
            initial_keys,
            db,
            registry,
            _retention: retention,
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
        let signals = self.signals;
        let handle = self.server.handle();
        let registry = self.registry.clone();
        actix_web::rt::spawn(async move {
            signals.recv().await;
            tracing::info!("shutdown requested: closing phone sessions and finishing requests");
            let _ = registry.send(crate::actors::registry::Shutdown).await;
            handle.stop(true).await;
        });
        self.server.await
    }
}

/// SIGTERM and SIGINT listeners, registered when created.
struct ShutdownSignals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl ShutdownSignals {
    fn listen() -> ShutdownSignals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let streams = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            ShutdownSignals { streams }
        }
        #[cfg(not(unix))]
        {
            ShutdownSignals {}
        }
    }

    /// Resolves at the first SIGTERM or SIGINT.
    async fn recv(self) {
        #[cfg(unix)]
        {
            match self.streams {
                Some((mut term, mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
