//! The test harness: `spawn_app` starts the real server on port 0 with a fresh database
//! (SQLite file in a temp dir, or a fresh PostgreSQL database when `SMSGW_TEST_DATABASE_URL`
//! is set); the submodules hold what a test talks to it with.

#![allow(dead_code)]

mod api;
pub mod db_proxy;
mod fake_phone;
mod tls;
mod webhook_receiver;

pub use api::*;
pub use fake_phone::FakePhone;
pub use tls::SelfSigned;
pub use webhook_receiver::{Received, WebhookReceiver};

use std::sync::Arc;
use std::time::Duration;

use awc::Client;
use sea_orm::{ConnectionTrait, Database};
use serde_json::Value;
use smsgw::config::Settings;
use smsgw::outbound::target::StaticResolver;
use smsgw::startup::{Application, Hooks};
use uuid::Uuid;

/// The secrets key of PostgreSQL test servers (SQLite ones generate a key file beside the
/// database, as a first start does).
pub const POSTGRES_SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// True when the PostgreSQL variant of each test should run.
pub fn postgres_enabled() -> bool {
    std::env::var("SMSGW_TEST_DATABASE_URL").is_ok_and(|v| !v.is_empty())
}

/// Runs a test body on an actix System the way the server binary does (see
/// [`smsgw::startup::block_on_system`]): actors still querying when the test ends are dropped
/// without a panic.
/// The PostgreSQL test databases this test created are dropped when it ends, passed or
/// failed, once its System and the servers on it are gone.
pub fn run<F: std::future::Future>(test: F) -> F::Output {
    let _drop_databases = DropTestDatabases;
    smsgw::startup::block_on_system(test).expect("test runtime starts")
}

/// Runs a test that needs PostgreSQL (several nodes on one database, or the PostgreSQL
/// variant of a test). Such a test is `#[ignore = "needs SMSGW_TEST_DATABASE_URL
/// (PostgreSQL)"]`, so a plain `cargo test` lists it as ignored; `-- --include-ignored` runs
/// it, and then a missing `SMSGW_TEST_DATABASE_URL` fails it rather than passing unrun.
pub fn run_on_postgres<F: std::future::Future>(test: F) -> F::Output {
    assert!(
        postgres_enabled(),
        "this test needs PostgreSQL: set SMSGW_TEST_DATABASE_URL (README, \"Development\")"
    );
    run(test)
}

thread_local! {
    /// The PostgreSQL databases [`fresh_database`] created on this thread (a test's thread):
    /// the administrative URL and the name of each.
    static CREATED_DATABASES: std::cell::RefCell<Vec<(String, String)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Drops this thread's test databases when dropped (in [`run`], after the test's System has
/// stopped, so no server of the test still uses them).
struct DropTestDatabases;

impl Drop for DropTestDatabases {
    fn drop(&mut self) {
        let created = CREATED_DATABASES.with_borrow_mut(std::mem::take);
        if created.is_empty() {
            return;
        }
        // A thread of its own with its own runtime: this may run while a panic unwinds out of
        // the test's runtime. FORCE ends connections a child process or writer thread kept.
        let dropping = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for dropping test databases");
            runtime.block_on(async {
                for (admin_url, name) in created {
                    // Quiet: a forced drop is often over sqlx's slow-statement threshold.
                    let mut options = sea_orm::ConnectOptions::new(admin_url);
                    options.sqlx_logging(false);
                    let Ok(admin) = Database::connect(options).await else {
                        continue;
                    };
                    if let Err(e) = admin
                        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await
                    {
                        eprintln!("test database {name} not dropped: {e}");
                    }
                    let _ = admin.close().await;
                }
            });
        });
        let _ = dropping.join();
    }
}

/// Generates, for each async fn taking a [`Backend`], a module with a SQLite test and a
/// PostgreSQL test (the latter ignored unless run with `--include-ignored`, and then it
/// needs `SMSGW_TEST_DATABASE_URL`; see [`run_on_postgres`]).
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn sqlite() {
                    $crate::helpers::run(super::$name($crate::helpers::Backend::Sqlite))
                }
                #[test]
                #[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
                fn postgres() {
                    $crate::helpers::run_on_postgres(super::$name(
                        $crate::helpers::Backend::Postgres,
                    ))
                }
            }
        )*
    };
}

/// The keys and workspace a [`TestApp`] signs in with.
struct Keys {
    live_key: String,
    test_key: String,
    workspace_id: Uuid,
}

impl TestApp {
    /// Runs the built `app` in the background and keeps what a test talks to it with.
    fn started(
        app: Application,
        keys: Keys,
        settings: Settings,
        resolver: Arc<StaticResolver>,
        dir: Option<tempfile::TempDir>,
    ) -> TestApp {
        let address = format!("http://{}", app.address());
        let handle = app.handle();
        let (registry, webhooks, campaigns) = (
            app.registry.clone(),
            app.webhooks.clone(),
            app.campaigns.clone(),
        );
        actix_web::rt::spawn(app.run_until_stopped());
        TestApp {
            address,
            live_key: keys.live_key,
            test_key: keys.test_key,
            workspace_id: keys.workspace_id,
            database_url: settings.database.url.clone(),
            settings,
            client: Client::builder().timeout(Duration::from_secs(30)).finish(),
            handle,
            registry,
            webhooks,
            campaigns,
            resolver,
            _dir: dir,
        }
    }
}

/// A running server and what a test needs to talk to it.
pub struct TestApp {
    pub address: String,
    pub live_key: String,
    pub test_key: String,
    pub workspace_id: Uuid,
    pub database_url: String,
    pub settings: Settings,
    pub client: Client,
    handle: actix_web::dev::ServerHandle,
    registry: actix::Addr<smsgw::actors::registry::Registry>,
    webhooks: actix::Addr<smsgw::actors::webhook_endpoint::WebhookEndpoints>,
    campaigns: actix::Addr<smsgw::actors::campaign::Campaigns>,
    /// Name resolution of webhook targets: a fixed table, so no DNS query leaves the machine.
    pub resolver: Arc<StaticResolver>,
    _dir: Option<tempfile::TempDir>,
}

/// Settings every test starts from: port 0, fast test mode, no API throttling, quiet logs.
pub fn test_settings() -> Settings {
    let mut s = Settings::default();
    s.server.bind = "127.0.0.1:0".into();
    s.server.workers = 2;
    s.test_mode.deliver_after = Duration::from_millis(20);
    s.limits.api_per_second = 0;
    s.log.level = "warn".into();
    s
}

pub async fn fresh_database(backend: Backend) -> (String, Option<tempfile::TempDir>) {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("smsgw.db").display()
            );
            (url, Some(dir))
        }
        Backend::Postgres => {
            let base = std::env::var("SMSGW_TEST_DATABASE_URL").expect("SMSGW_TEST_DATABASE_URL");
            let admin = Database::connect(&base)
                .await
                .expect("connect to PostgreSQL");
            let now = chrono::Utc::now().timestamp();
            static LEFTOVERS_DROPPED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if !LEFTOVERS_DROPPED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                drop_stale_databases(&admin, now).await;
            }
            let name = format!("smsgw_t_{now}_{}", Uuid::new_v4().simple());
            admin
                .execute_unprepared(&format!("CREATE DATABASE {name}"))
                .await
                .expect("create test database");
            CREATED_DATABASES.with_borrow_mut(|created| created.push((base.clone(), name.clone())));
            let _ = admin.close().await;
            let url = match base.rsplit_once('/') {
                Some((prefix, _)) => format!("{prefix}/{name}"),
                None => panic!("SMSGW_TEST_DATABASE_URL must end with /database"),
            };
            (url, None)
        }
    }
}

/// Test databases older than an hour belong to runs that ended without dropping them (killed,
/// or from before tests dropped their own): the first test of a run drops them.
async fn drop_stale_databases(admin: &sea_orm::DatabaseConnection, now: i64) {
    let rows = admin
        .query_all_raw(sea_orm::Statement::from_string(
            admin.get_database_backend(),
            "SELECT datname FROM pg_database WHERE datname LIKE 'smsgw_t_%'".to_string(),
        ))
        .await
        .unwrap_or_default();
    for row in rows {
        let Ok(name) = row.try_get::<String>("", "datname") else {
            continue;
        };
        let created: i64 = name
            .split('_')
            .nth(2)
            .and_then(|t| t.parse().ok())
            .unwrap_or(now);
        if now - created > 3600 {
            let _ = admin
                .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
    }
}

/// Runs the `smsgw` binary with `args` and extra environment, off the test's runtime: the
/// server under test runs on that runtime, and blocking it (for example while the writer holds
/// SQLite's write lock) would make the CLI wait for a lock nobody can release.
pub async fn run_cli(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_smsgw"))
            .args(&args)
            .envs(env)
            .output()
    })
    .await
    .expect("cli task joined")
    .expect("cli runs")
}

/// A workspace `smsgw workspace create` made, as it printed it.
pub struct CliWorkspace {
    pub id: String,
    pub live_key: String,
    pub test_key: String,
}

/// Creates a workspace named `name` with the CLI on the app's database (while it runs).
pub async fn create_workspace_with_cli(app: &TestApp, name: &str) -> CliWorkspace {
    let db_env = [("SMSGW_DATABASE__URL", app.database_url.as_str())];
    let output = run_cli(&["workspace", "create", "--name", name], &db_env).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let field = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("a {prefix:?} line in {stdout}"))
            .to_string()
    };
    CliWorkspace {
        id: field("workspace: "),
        live_key: field("live key: "),
        test_key: field("test key: "),
    }
}

/// Starts the app on a fresh database with [`test_settings`].
pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_| {}).await
}

/// Starts the app on a fresh database, after `configure` adjusts the settings.
pub async fn spawn_app_with(backend: Backend, configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_with_resolver(backend, Arc::new(StaticResolver::new()), configure).await
}

/// Starts the app with every phone's default pace: at most `per_minute` sends in any minute
/// and `per_30_minutes` in any 30 minutes.
pub async fn spawn_paced(backend: Backend, per_minute: u32, per_30_minutes: u32) -> TestApp {
    spawn_app_with(backend, |s| {
        s.pace.per_minute = per_minute;
        s.pace.per_30_minutes = per_30_minutes;
    })
    .await
}

/// [`spawn_app_with`] with the table webhook target names resolve through.
pub async fn spawn_app_with_resolver(
    backend: Backend,
    resolver: Arc<StaticResolver>,
    configure: impl FnOnce(&mut Settings),
) -> TestApp {
    spawn_app_with_hooks(backend, resolver, None, configure).await
}

/// A wall clock the test moves (`smsgw::clock::Clock`): the system clock plus an offset, so
/// stored times can cross a UTC midnight without waiting for one. Timers still run on tokio
/// time; only timestamps move.
#[derive(Debug, Default)]
pub struct TestClock {
    offset_ms: std::sync::atomic::AtomicI64,
}

impl TestClock {
    /// From now on the clock reads `at_ms` (and runs on from there).
    pub fn set_ms(&self, at_ms: i64) {
        let system = chrono::Utc::now().timestamp_millis();
        self.offset_ms
            .store(at_ms - system, std::sync::atomic::Ordering::SeqCst);
    }

    /// Moves the clock `by` forward.
    pub fn advance(&self, by: Duration) {
        self.offset_ms.fetch_add(
            i64::try_from(by.as_millis()).unwrap(),
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}

impl smsgw::clock::Clock for TestClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now()
            + chrono::Duration::milliseconds(
                self.offset_ms.load(std::sync::atomic::Ordering::SeqCst),
            )
    }
}

/// [`spawn_app_with`] on the clock `clock`.
pub async fn spawn_app_with_clock(
    backend: Backend,
    clock: Arc<TestClock>,
    configure: impl FnOnce(&mut Settings),
) -> TestApp {
    spawn_app_with_hooks(
        backend,
        Arc::new(StaticResolver::new()),
        Some(clock),
        configure,
    )
    .await
}

/// Starts the app with these hooks (a resolver, and a clock when given).
async fn spawn_app_with_hooks(
    backend: Backend,
    resolver: Arc<StaticResolver>,
    clock: Option<Arc<TestClock>>,
    configure: impl FnOnce(&mut Settings),
) -> TestApp {
    smsgw::telemetry::init(smsgw::config::LogFormat::Human, "warn");
    let (url, dir) = fresh_database(backend).await;
    let mut settings = test_settings();
    settings.database.url = url.clone();
    if backend == Backend::Postgres {
        // No database file to put the key file beside: a key as a deployment would set it.
        settings.secrets.key = Some(POSTGRES_SECRETS_KEY.into());
    }
    configure(&mut settings);
    let mut hooks = hooks_for(&resolver);
    if let Some(clock) = clock {
        hooks.clock = Some(clock);
    }
    let app = Application::build_with(settings.clone(), hooks)
        .await
        .expect("application starts");
    let keys = app
        .initial_keys
        .clone()
        .expect("an empty database gets keys");
    let keys = Keys {
        live_key: keys.live_key,
        test_key: keys.test_key,
        workspace_id: keys.workspace_id.as_uuid(),
    };
    TestApp::started(app, keys, settings, resolver, dir)
}

/// Starts the app on a database that already holds a workspace (a fixture, say) whose keys
/// the caller knows; `settings.database.url` names it.
pub async fn spawn_on_existing(
    settings: Settings,
    live_key: &str,
    test_key: &str,
    workspace_id: Uuid,
) -> TestApp {
    smsgw::telemetry::init(smsgw::config::LogFormat::Human, "warn");
    let resolver = Arc::new(StaticResolver::new());
    let app = Application::build_with(settings.clone(), hooks_for(&resolver))
        .await
        .expect("application starts on the existing database");
    assert!(
        app.initial_keys.is_none(),
        "a database with a workspace gets no new keys"
    );
    let keys = Keys {
        live_key: live_key.to_string(),
        test_key: test_key.to_string(),
        workspace_id,
    };
    TestApp::started(app, keys, settings, resolver, None)
}

fn hooks_for(resolver: &Arc<StaticResolver>) -> Hooks {
    Hooks {
        clock: None,
        resolver: Some(resolver.clone()),
    }
}

impl TestApp {
    /// Stops this server and its actors and starts a new one on the same database, as after a
    /// crash or deploy.
    pub async fn restart(self) -> TestApp {
        self.restart_with(|_| {}).await
    }

    /// [`TestApp::restart`] with adjusted settings.
    pub async fn restart_with(mut self, configure: impl FnOnce(&mut Settings)) -> TestApp {
        self.handle.stop(false).await;
        self.stop_actors().await;
        configure(&mut self.settings);
        let app = Application::build_with(self.settings.clone(), hooks_for(&self.resolver))
            .await
            .expect("application restarts");
        assert!(app.initial_keys.is_none(), "a restart creates no workspace");
        self.address = format!("http://{}", app.address());
        self.handle = app.handle();
        self.registry = app.registry.clone();
        self.webhooks = app.webhooks.clone();
        self.campaigns = app.campaigns.clone();
        actix_web::rt::spawn(app.run_until_stopped());
        self
    }

    /// Starts another node on this app's database (same settings, its own port), as a second
    /// `smsgw serve` behind a load balancer would be (PostgreSQL; docs/architecture.md,
    /// "Cluster"). The keys are this app's.
    pub async fn spawn_peer(&self) -> TestApp {
        self.spawn_peer_with(|_| {}).await
    }

    /// [`TestApp::spawn_peer`] after `configure` adjusts the peer's settings (its database URL
    /// through a proxy, say).
    pub async fn spawn_peer_with(&self, configure: impl FnOnce(&mut Settings)) -> TestApp {
        let mut settings = self.settings.clone();
        configure(&mut settings);
        let app = Application::build_with(settings.clone(), hooks_for(&self.resolver))
            .await
            .expect("peer node starts");
        assert!(app.initial_keys.is_none(), "a peer creates no workspace");
        let keys = Keys {
            live_key: self.live_key.clone(),
            test_key: self.test_key.clone(),
            workspace_id: self.workspace_id,
        };
        TestApp::started(app, keys, settings, self.resolver.clone(), None)
    }

    /// This node's id in the cluster, as `GET /ready` reports it.
    pub async fn node_id(&self) -> Uuid {
        let mut response = self
            .client
            .get(format!("{}/ready", self.address))
            .send()
            .await
            .expect("ready answers");
        let body: Value = response.json().await.expect("ready body");
        body["data"]["node"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("no node id in /ready: {body}"))
    }

    /// Stops this node as a graceful stop does: its registry hands its leases back and stops
    /// its actors, then the HTTP server stops.
    pub async fn stop_gracefully(&self) {
        self.stop_actors().await;
        self.handle.stop(true).await;
    }

    /// Stops this node's actors as a shutdown does: the registry (it hands the node's leases
    /// back), the webhook endpoints' supervisor with its endpoint actors, and the campaigns'
    /// supervisor.
    async fn stop_actors(&self) {
        let _ = self.registry.send(smsgw::actors::registry::Shutdown).await;
        let _ = self
            .webhooks
            .send(smsgw::actors::webhook_endpoint::StopEndpoints)
            .await;
        let _ = self.campaigns.send(smsgw::actors::campaign::StopAll).await;
    }
}
