//! Builds the application: database, migrations, writer, actors, HTTP server.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use actix::{Actor, Addr};
use std::time::Duration;

use actix_http::{HttpService, KeepAlive};
use actix_service::{fn_service, map_config};
use actix_web::dev::{AppConfig, Server};
use actix_web::{App, web};
use sea_orm::DatabaseConnection;
use secrecy::ExposeSecret;

use crate::actors::Deps;
use crate::actors::ai::{AiResponder, Received};
use crate::actors::campaign::{CampaignChange, CampaignChanges, Campaigns};
use crate::actors::cluster::Cluster;
use crate::actors::daily_stats::{Counted, DailyStats};
use crate::actors::live_events::{LiveEvent, LiveEvents, LiveMessageStatus};
use crate::actors::registry::Registry;
use crate::actors::retention::Retention;
use crate::actors::webhook_endpoint::{DeliveryBudgets, WebhookDeps, WebhookFanout};
use crate::actors::webhook_target::{SharedResolver, SystemResolver};
use crate::api::{self, AppState};
use crate::clock::{SharedClock, SystemClock};
use crate::config::Settings;
use crate::domain::change::ChangeKind;
use crate::domain::secrets::SecretBox;
use crate::store::scoped::Scope;
use crate::store::webhooks::{AttemptRecorder, Subscriptions};
use crate::store::writer::{Change, MessageQuotas, Writer};
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
    /// The secrets key could not be read, created or used (the message names its source).
    #[error("{0}")]
    Secrets(String),
    #[error("server.tls: {0}")]
    Tls(String),
    /// Another process serves this SQLite database (it runs one node; several need PostgreSQL).
    #[error(
        "another smsgw node is already serving the SQLite database {0}; SQLite runs a single node (several nodes need PostgreSQL, docs/deploy.md)"
    )]
    AlreadyServing(String),
}

/// Where the secrets key comes from (docs/api.md, "Secrets at rest").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretsKeySource {
    /// `secrets.key` (`SMSGW_SECRETS__KEY`).
    Setting,
    /// A key file: `secrets.key_file`, or the default one.
    File(std::path::PathBuf),
}

impl std::fmt::Display for SecretsKeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretsKeySource::Setting => f.write_str("secrets.key (SMSGW_SECRETS__KEY)"),
            SecretsKeySource::File(path) => write!(f, "the key file {}", path.display()),
        }
    }
}

/// The database file of a SQLite URL (None for PostgreSQL and in-memory databases).
pub fn sqlite_file(database_url: &str) -> Option<&str> {
    database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or_default())
        .filter(|path| !path.is_empty() && !path.starts_with(":memory:"))
}

/// The exclusive lock a node holds for its whole life on `<SQLite database file>.lock`: an OS
/// file lock (`flock`), released by the kernel when the process ends however it ends, so a
/// kill -9 leaves nothing behind. A file of its own, never the database file: closing any
/// descriptor of the database file drops every POSIX (`fcntl`) lock this process holds on it,
/// SQLite's included, which can corrupt the database (sqlite.org, "How To Corrupt An SQLite
/// Database File", 2.2).
pub struct SingleNodeLock {
    _file: std::fs::File,
}

impl SingleNodeLock {
    /// Takes the lock of the SQLite database of `database_url` (None on PostgreSQL). A lock
    /// another node holds is waited for up to [`SINGLE_NODE_LOCK_WAIT`] (a node of this
    /// process restarting hands it over), then refused.
    pub async fn take(database_url: &str) -> Result<Option<SingleNodeLock>, StartupError> {
        let Some(path) = sqlite_file(database_url) else {
            return Ok(None);
        };
        let lock_path = format!("{path}.lock");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| {
                StartupError::Store(StoreError::Busy(format!("cannot open {lock_path}: {e}")))
            })?;
        let deadline = tokio::time::Instant::now() + SINGLE_NODE_LOCK_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(SingleNodeLock { _file: file })),
                Err(std::fs::TryLockError::WouldBlock)
                    if tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(StartupError::AlreadyServing(path.to_string()));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(StartupError::Store(StoreError::Busy(format!(
                        "cannot lock {lock_path}: {e}"
                    ))));
                }
            }
        }
    }
}

/// How long a start waits for another node's lock on the SQLite file before refusing.
const SINGLE_NODE_LOCK_WAIT: Duration = Duration::from_secs(2);

/// The key file used when neither `secrets.key` nor `secrets.key_file` is set: beside the
/// SQLite database file (`<db file>.key`), else `smsgw.secrets.key` in the working directory
/// (PostgreSQL, or an in-memory SQLite database).
pub fn default_key_file(database_url: &str) -> std::path::PathBuf {
    match sqlite_file(database_url) {
        Some(path) => std::path::PathBuf::from(format!("{path}.key")),
        None => std::path::PathBuf::from("smsgw.secrets.key"),
    }
}

/// Reads the secrets key from the settings, or from its key file, which is created (mode 0600,
/// a new random key) when it does not exist yet.
pub fn load_secrets_key(
    settings: &Settings,
) -> Result<(SecretBox, SecretsKeySource), StartupError> {
    if let Some(key) = &settings.secrets.key {
        let secret_box = SecretBox::from_base64(key.expose_secret())
            .map_err(|e| StartupError::Secrets(format!("secrets.key (SMSGW_SECRETS__KEY): {e}")))?;
        return Ok((secret_box, SecretsKeySource::Setting));
    }
    let path = match &settings.secrets.key_file {
        Some(path) => std::path::PathBuf::from(path),
        None => default_key_file(&settings.database.url),
    };
    let source = SecretsKeySource::File(path.clone());
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => create_key_file(&path)
            .map_err(|e| StartupError::Secrets(format!("cannot create {source}: {e}")))?,
        // Not text: the file holds raw bytes where base64 text of them is expected.
        Err(err) if err.kind() == std::io::ErrorKind::InvalidData => {
            return Err(StartupError::Secrets(format!(
                "{source} is not text: it must hold standard base64 of 32 bytes (openssl rand -base64 32), not the bytes themselves"
            )));
        }
        Err(err) => {
            return Err(StartupError::Secrets(format!(
                "cannot read {source}: {err}"
            )));
        }
    };
    let secret_box = SecretBox::from_base64(&text)
        .map_err(|e| StartupError::Secrets(format!("{source}: {e}")))?;
    Ok((secret_box, source))
}

/// Writes a new key file readable by its owner only; when another process created it first,
/// its key is used.
fn create_key_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            let key = SecretBox::generate_key();
            file.write_all(format!("{key}\n").as_bytes())?;
            file.sync_all()?;
            tracing::warn!(path = %path.display(), "generated a new secrets key; keep this file (and back it up) or webhook signing keys cannot be read");
            Ok(key)
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::read_to_string(path)
        }
        Err(err) => Err(err),
    }
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
    pub workspace_id: crate::domain::ids::WorkspaceId,
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
        warn_without_public_url(&settings);
        // Before the database: a bad TLS file must not leave a database (and keys) behind.
        let tls = settings.server.tls.as_ref().map(load_tls).transpose()?;
        crate::domain::phone_number::warm_up();
        let settings = Arc::new(settings);
        let db = store::connect(&settings.database.url, settings.database.max_connections).await?;
        store::migrate(&db).await?;
        let (secrets, secrets_source) = load_secrets_key(&settings)?;
        let sealed = store::webhooks::seal_signing_keys(&db, &secrets, None)
            .await
            .map_err(|e| match e {
                StoreError::Secret { .. } | StoreError::SettingsSecret { .. } => {
                    StartupError::Secrets(format!(
                        "{e}; is {secrets_source} the key they were sealed with?"
                    ))
                }
                other => StartupError::Store(other),
            })?;
        if sealed.sealed > 0 {
            tracing::info!(
                count = sealed.sealed,
                "sealed webhook signing keys stored in clear"
            );
        }
        let secrets = Arc::new(secrets);
        // SQLite runs one node: taken once the configuration and the secrets key proved usable,
        // before this node writes anything of its own or serves.
        let single_node = SingleNodeLock::take(&settings.database.url).await?;
        if settings.webhooks.allow_insecure_targets {
            tracing::warn!(
                "webhooks.allow_insecure_targets is on: http:// and private targets are allowed (development only)"
            );
        }
        let tcp =
            TcpListener::bind(&settings.server.bind).map_err(|source| StartupError::Bind {
                bind: settings.server.bind.clone(),
                source,
            })?;
        let address = tcp.local_addr().map_err(|source| StartupError::Bind {
            bind: settings.server.bind.clone(),
            source,
        })?;
        // Every node on PostgreSQL joins the cluster; a single node on SQLite does no cluster
        // work at all (docs/architecture.md, "Cluster").
        let cluster = if store::is_sqlite(&db) {
            None
        } else {
            let advertised = settings
                .cluster
                .advertise_address
                .clone()
                .unwrap_or_else(|| address.to_string());
            Some(
                Cluster::join(
                    db.clone(),
                    &settings.database.url,
                    advertised,
                    settings.cluster.clone(),
                )
                .await?,
            )
        };
        crate::telemetry::set_node(
            cluster
                .as_ref()
                .map_or_else(uuid::Uuid::new_v4, Cluster::node),
        );
        crate::telemetry::metrics_handle();
        // The supervisors start after the writer; the listener learns their addresses then.
        let campaign_watch: Arc<std::sync::OnceLock<Addr<Campaigns>>> = Arc::default();
        let ai_watch: Arc<std::sync::OnceLock<Addr<AiResponder>>> = Arc::default();
        let live = Arc::new(LiveEvents::default());
        let daily_stats = DailyStats::new(db.clone()).start();
        let listener: Arc<dyn Fn(Vec<Change>) + Send + Sync> = Arc::new({
            let (campaign_watch, ai_watch) = (campaign_watch.clone(), ai_watch.clone());
            let live = live.clone();
            move |changes: Vec<Change>| {
                let counted = Counted::of(&changes);
                if !counted.counts.is_empty() {
                    daily_stats.do_send(counted);
                }
                let mut of_campaigns = Vec::new();
                let mut received = Vec::new();
                live.publish(
                    changes
                        .iter()
                        .filter(|c| c.kind != ChangeKind::AiDraft)
                        .map(|change| {
                            let message = &change.message;
                            let status = LiveMessageStatus {
                                id: message.id,
                                status: message.status,
                                direction: message.direction,
                            };
                            let scope = Scope {
                                workspace_id: message.workspace_id,
                                mode: message.mode,
                            };
                            (scope, LiveEvent::MessageStatus(status))
                        }),
                );
                for change in changes {
                    if change.kind == ChangeKind::AiDraft {
                        continue;
                    }
                    metrics::counter!(crate::telemetry::names::MESSAGE_TRANSITIONS, "kind" => change.kind.as_str())
                        .increment(1);
                    tracing::debug!(message_id = %change.message.id, kind = change.kind.as_str(), "message changed");
                    if let Some(campaign) = change.message.campaign_id {
                        crate::telemetry::count_campaign_message(change.kind);
                        of_campaigns.push(CampaignChange {
                            campaign,
                            message: change.message.id.into(),
                            status: change.message.status,
                        });
                    }
                    if change.kind == ChangeKind::Received {
                        received.push(change.message);
                    }
                }
                if !of_campaigns.is_empty()
                    && let Some(campaigns) = campaign_watch.get()
                {
                    campaigns.do_send(CampaignChanges(of_campaigns));
                }
                if !received.is_empty()
                    && let Some(ai) = ai_watch.get()
                {
                    ai.do_send(Received(received));
                }
            }
        });
        let subscriptions = Arc::new(Subscriptions::load(&db).await?);
        let fanout = Arc::new(WebhookFanout::new(subscriptions.clone()));
        let writer = Writer::connect(
            &settings.database.url,
            clock.clone(),
            listener,
            Some(fanout.clone()),
            MessageQuotas::of(&settings.quotas),
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
        let retention = actix::Supervisor::start({
            let deps = deps.clone();
            move |_| Retention::new(deps.clone())
        });
        let (deps_for_ai, deps_for_campaigns) = (deps.clone(), deps.clone());
        let registry = Registry::new(deps).start();
        fanout.attach(registry.clone());
        let send_deps = crate::send::SendDeps {
            writer: writer.clone(),
            registry: registry.clone(),
            clock: clock.clone(),
            settings: settings.clone(),
        };
        let feeder = crate::send::campaign_feeder(send_deps.clone(), db.clone());
        let campaigns = Campaigns::new(deps_for_campaigns, feeder).start();
        let _ = campaign_watch.set(campaigns.clone());
        let ai = actix::Supervisor::start({
            let (deps, send) = (deps_for_ai, crate::send::auto_replies(send_deps));
            move |_| AiResponder::new(deps.clone(), send.clone())
        });
        let _ = ai_watch.set(ai);
        let webhook_api = web::Data::new(api::webhooks::WebhookApi {
            resolver,
            subscriptions,
            secrets,
        });
        let mut state = AppState::new(
            db.clone(),
            writer,
            registry.clone(),
            campaigns.clone(),
            settings.clone(),
            clock.clone(),
        );
        state.live = live;
        state.cluster = cluster.clone();
        let state = web::Data::new(state);
        let sessions = state.sessions.clone();
        let server = http_server(tcp, address, &settings, tls, state, webhook_api)?;
        let initial_keys = create_first_workspace(&db, clock.now_ms()).await?;
        Ok(Application {
            signals: ShutdownSignals::listen(),
            address,
            server,
            initial_keys,
            db,
            registry,
            campaigns,
            _retention: retention,
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
        let signals = self.signals;
        let handle = self.server.handle();
        let registry = self.registry.clone();
        let campaigns = self.campaigns.clone();
        let sessions = self.sessions.clone();
        let cluster = self.cluster.clone();
        actix_web::rt::spawn(async move {
            signals.recv().await;
            tracing::info!("shutdown requested: closing phone sessions and finishing requests");
            if let Some(cluster) = &cluster {
                // Other nodes take the phones, campaigns, endpoints and sweeps over at once.
                cluster.hand_back().await;
            }
            // No new connections from here on (phones told to go away would reconnect at once).
            handle.pause().await;
            let _ = registry.send(crate::actors::registry::Shutdown).await;
            let _ = campaigns.send(crate::actors::campaign::StopAll).await;
            // Sessions are not connections the HTTP server waits for: let them send their
            // 1001 close frames (each waits at most 1 s for the phone's answer) first.
            if !sessions.ended_within(SESSIONS_CLOSE_WITHIN).await {
                tracing::warn!(
                    left = sessions.count(),
                    "phone sessions still open at shutdown"
                );
            }
            handle.stop(true).await;
        });
        self.server.await
    }
}

/// Creates the `default` workspace and its keys when the database has no workspace yet (the
/// first start that got as far as serving); None otherwise.
async fn create_first_workspace(
    db: &DatabaseConnection,
    now_ms: i64,
) -> Result<Option<InitialKeys>, StartupError> {
    if workspaces::count(db).await? > 0 {
        return Ok(None);
    }
    let created = workspaces::create(db, FIRST_WORKSPACE, now_ms).await?;
    Ok(Some(InitialKeys {
        workspace_id: created.workspace.id,
        live_key: created.live_key,
        test_key: created.test_key,
    }))
}

/// The name of the workspace the first start creates.
pub const FIRST_WORKSPACE: &str = "default";

/// The HTTP server: the actix-web application, plus actix-http's upgrade hook for WebSocket
/// upgrades, which hands the phone's bare connection to [`api::phone_ws::upgrade`] (an upgrade
/// served by actix-web itself keeps 16 KiB of buffers per connection for its life). Everything
/// else is what `actix_web::HttpServer` would build: same timeouts, graceful stop that closes
/// idle keep-alive connections, signals left to [`Application::run_until_stopped`].
fn http_server(
    tcp: TcpListener,
    address: SocketAddr,
    settings: &Settings,
    tls: Option<rustls::ServerConfig>,
    state: web::Data<AppState>,
    webhook_api: web::Data<api::webhooks::WebhookApi>,
) -> Result<Server, StartupError> {
    let mut builder = Server::build()
        .disable_signals()
        .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS);
    if settings.server.workers > 0 {
        builder = builder.workers(settings.server.workers);
    }
    let stopping = builder.graceful_shutdown_signal();
    // The same service over plain TCP or TLS; only the last step differs.
    macro_rules! service {
        ($finish:ident $(, $config:expr)?) => {
            move || {
            let (state, webhook_api, stopping) =
                (state.clone(), webhook_api.clone(), stopping.clone());
            let upgrade_state = state.clone();
            let app = App::new()
                .wrap(actix_web::middleware::from_fn(
                    crate::telemetry::observe_request,
                ))
                .app_data(state)
                .app_data(webhook_api)
                .configure(api::configure)
                .configure(crate::portal::routes)
                .default_service(web::to(api::not_found));
            HttpService::build()
                // Small writes (a 202, a phone's frame) leave at once instead of waiting for
                // the peer's delayed ACK (up to 40 ms on Linux) behind Nagle's algorithm.
                .tcp_nodelay(true)
                .keep_alive(KeepAlive::default())
                .client_request_timeout(Duration::from_secs(5))
                .client_disconnect_timeout(Duration::from_secs(1))
                .local_addr(address)
                .graceful_shutdown_signal(move || {
                    let stopping = stopping.clone();
                    async move { stopping.notified().await }
                })
                .upgrade(fn_service(move |(req, framed)| {
                    api::phone_ws::upgrade(upgrade_state.clone(), req, framed)
                }))
                .finish(map_config(app, |_| AppConfig::default()))
                .$finish($($config.clone())?)
            }
        };
    }
    match tls {
        // actix-http offers HTTP/2 and HTTP/1.1 by ALPN; of HTTP/2's limits it exposes only the
        // flow-control windows, so the h2 crate's defaults apply (docs/api.md, "HTTPS").
        Some(config) => builder.listen("smsgw-https", tcp, service!(rustls_0_23, config)),
        None => builder.listen("smsgw-http", tcp, service!(tcp)),
    }
    .map(|builder| builder.run())
    .map_err(|source| StartupError::Bind {
        bind: settings.server.bind.clone(),
        source,
    })
}

/// Warns once at start when phones on other machines can reach this server but
/// `server.public_url` is unset: the URLs handed to them then follow each request's `Host`
/// (docs/api.md, "Behind a proxy"). A bind given as a host name is not judged.
fn warn_without_public_url(settings: &Settings) {
    let reachable = settings
        .server
        .bind
        .parse::<SocketAddr>()
        .is_ok_and(|address| !address.ip().is_loopback());
    if settings.server.public_url.is_none() && reachable {
        tracing::warn!(
            bind = %settings.server.bind,
            "server.public_url is unset: pairing and inbound URLs use the Host each request came with; set it to the URL phones reach this server at"
        );
    }
}

/// Reads `server.tls`'s PEM files into a rustls server configuration; a missing, unreadable or
/// mismatched file is a [`StartupError::Tls`] naming it.
fn load_tls(tls: &crate::config::TlsSettings) -> Result<rustls::ServerConfig, StartupError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&tls.cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| StartupError::Tls(format!("cert_file {}: {err}", tls.cert_file)))?;
    if certs.is_empty() {
        return Err(StartupError::Tls(format!(
            "cert_file {}: no certificate in it",
            tls.cert_file
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key_file)
        .map_err(|err| StartupError::Tls(format!("key_file {}: {err}", tls.key_file)))?;
    rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|err| StartupError::Tls(format!("certificate and key do not fit: {err}")))
}

/// How long a stop waits for phone sessions to close before stopping the HTTP server.
const SESSIONS_CLOSE_WITHIN: Duration = Duration::from_secs(2);

/// Seconds the HTTP server gives in-flight requests to finish after a stop.
const SHUTDOWN_TIMEOUT_SECS: u64 = 7;

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_of_raw_bytes_says_it_must_hold_base64() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw.key");
        std::fs::write(&path, [0xffu8, 0xfe, 0x00, 0x80].repeat(8)).unwrap();
        let mut settings = Settings::default();
        settings.secrets.key_file = Some(path.display().to_string());
        let Err(err) = load_secrets_key(&settings) else {
            panic!("raw bytes were accepted as a key");
        };
        let err = err.to_string();
        assert!(err.contains("raw.key") && err.contains("base64"), "{err}");
    }
}
