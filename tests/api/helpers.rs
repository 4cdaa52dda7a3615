//! The test harness: `spawn_app` starts the real server on port 0 with a fresh database
//! (SQLite file in a temp dir, or a fresh PostgreSQL database when `SMSGW_TEST_DATABASE_URL`
//! is set), plus a real WebSocket `FakePhone` and polling helpers with deadlines.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix_codec::Framed;
use awc::ws::{Codec, Frame, Message as WsMessage};
use awc::{BoxedSocket, Client};
use futures_util::{SinkExt, StreamExt};
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use smsgw::actors::webhook_target::StaticResolver;
use smsgw::config::Settings;
use smsgw::domain::protocol::{PhoneFrame, ServerFrame};
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
/// PostgreSQL test (the latter runs when `SMSGW_TEST_DATABASE_URL` is set).
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
                fn postgres() {
                    if $crate::helpers::postgres_enabled() {
                        $crate::helpers::run(super::$name($crate::helpers::Backend::Postgres))
                    }
                }
            }
        )*
    };
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
    /// Name resolution of webhook targets: a fixed table, so no DNS query leaves the machine.
    pub resolver: Arc<StaticResolver>,
    _dir: Option<tempfile::TempDir>,
}

/// A response: HTTP status and the parsed JSON envelope.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub headers: HashMap<String, String>,
}

impl Reply {
    /// The envelope's data.
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }

    /// The envelope's error_code (empty on success).
    pub fn code(&self) -> &str {
        self.body["error_code"].as_str().unwrap_or("")
    }

    /// Asserts the status and returns self, printing the body on mismatch.
    #[track_caller]
    pub fn expect(self, status: u16) -> Reply {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.body
        );
        self
    }

    /// Asserts an error status and code, and that the envelope is well formed.
    #[track_caller]
    pub fn expect_error(self, status: u16, code: &str) -> Reply {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.body
        );
        assert_eq!(self.body["status"], "error", "body: {}", self.body);
        assert_eq!(self.code(), code, "body: {}", self.body);
        assert!(self.body["message"].is_string(), "body: {}", self.body);
        assert!(self.body["data"].is_object(), "body: {}", self.body);
        self
    }
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

/// Starts the app on a fresh database with [`test_settings`].
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

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_| {}).await
}

/// Starts the app on a fresh database, after `configure` adjusts the settings.
pub async fn spawn_app_with(backend: Backend, configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_with_resolver(backend, Arc::new(StaticResolver::new()), configure).await
}

/// [`spawn_app_with`] with the table webhook target names resolve through.
pub async fn spawn_app_with_resolver(
    backend: Backend,
    resolver: Arc<StaticResolver>,
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
    let app = Application::build_with(settings.clone(), hooks_for(&resolver))
        .await
        .expect("application starts");
    let keys = app
        .initial_keys
        .clone()
        .expect("an empty database gets keys");
    let address = format!("http://{}", app.address());
    let handle = app.handle();
    let registry = app.registry.clone();
    actix_web::rt::spawn(app.run_until_stopped());
    TestApp {
        address,
        live_key: keys.live_key,
        test_key: keys.test_key,
        workspace_id: keys.workspace_id.as_uuid(),
        database_url: url,
        settings,
        client: Client::builder().timeout(Duration::from_secs(30)).finish(),
        handle,
        registry,
        resolver,
        _dir: dir,
    }
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
        let _ = self.registry.send(smsgw::actors::registry::Shutdown).await;
        configure(&mut self.settings);
        let app = Application::build_with(self.settings.clone(), hooks_for(&self.resolver))
            .await
            .expect("application restarts");
        assert!(app.initial_keys.is_none(), "a restart creates no workspace");
        self.address = format!("http://{}", app.address());
        self.handle = app.handle();
        self.registry = app.registry.clone();
        actix_web::rt::spawn(app.run_until_stopped());
        self
    }

    /// Starts another node on this app's database (same settings, its own port), as a second
    /// `smsgw serve` behind a load balancer would be (PostgreSQL; docs/architecture.md,
    /// "Cluster"). The keys are this app's.
    pub async fn spawn_peer(&self) -> TestApp {
        let app = Application::build_with(self.settings.clone(), hooks_for(&self.resolver))
            .await
            .expect("peer node starts");
        assert!(app.initial_keys.is_none(), "a peer creates no workspace");
        let handle = app.handle();
        let registry = app.registry.clone();
        let address = format!("http://{}", app.address());
        actix_web::rt::spawn(app.run_until_stopped());
        TestApp {
            address,
            live_key: self.live_key.clone(),
            test_key: self.test_key.clone(),
            workspace_id: self.workspace_id,
            database_url: self.database_url.clone(),
            settings: self.settings.clone(),
            client: Client::builder().timeout(Duration::from_secs(30)).finish(),
            handle,
            registry,
            resolver: self.resolver.clone(),
            _dir: None,
        }
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
        let _ = self.registry.send(smsgw::actors::registry::Shutdown).await;
        self.handle.stop(true).await;
    }

    /// Sends a request with an optional key and JSON body.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let header = key.map(|key| ("x-api-key", key));
        self.json_request(method, path, header, body).await
    }

    /// Sends `method` to `path` (below the address) with one optional header and an optional
    /// JSON body; the reply's body is whatever JSON came back (`Null` when empty).
    async fn json_request(
        &self,
        method: &str,
        path: &str,
        header: Option<(&str, &str)>,
        body: Option<Value>,
    ) -> Reply {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .client
            .request(method, format!("{}{}", self.address, path));
        if let Some(header) = header {
            req = req.insert_header(header);
        }
        let mut response = match body {
            Some(body) => req.send_json(&body).await,
            None => req.send().await,
        }
        .expect("request completes");
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let bytes = response.body().limit(16 * 1024 * 1024).await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
        };
        Reply {
            status,
            body,
            headers,
        }
    }

    /// Sends raw bytes with a content type.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Reply {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .client
            .request(method, format!("{}{}", self.address, path))
            .insert_header(("content-type", content_type));
        if let Some(key) = key {
            req = req.insert_header(("x-api-key", key));
        }
        let mut response = req.send_body(bytes).await.expect("request completes");
        let status = response.status().as_u16();
        let bytes = response.body().limit(16 * 1024 * 1024).await.expect("body");
        Reply {
            status,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            headers: HashMap::new(),
        }
    }

    /// The value of one series of `/metrics` now: the line of `series` whose labels contain
    /// `label` (e.g. `outcome="success"`), 0 when there is none. The recorder is process-wide
    /// and tests run in parallel, so callers compare before and after.
    pub async fn metric(&self, series: &str, label: &str) -> f64 {
        let mut response = self
            .client
            .get(format!("{}/metrics", self.address))
            .send()
            .await
            .expect("metrics answer");
        assert_eq!(response.status().as_u16(), 200);
        let body = response.body().limit(16 << 20).await.expect("metrics body");
        let text = String::from_utf8(body.to_vec()).expect("metrics are text");
        let start = format!("{series}{{");
        text.lines()
            .filter(|line| line.starts_with(&start) && line.contains(label))
            .find_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    }

    pub async fn get(&self, path: &str, key: &str) -> Reply {
        self.request("GET", path, Some(key), None).await
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> Reply {
        self.request("POST", path, Some(key), Some(body)).await
    }

    pub async fn patch(&self, path: &str, key: &str, body: Value) -> Reply {
        self.request("PATCH", path, Some(key), Some(body)).await
    }

    pub async fn delete(&self, path: &str, key: &str) -> Reply {
        self.request("DELETE", path, Some(key), None).await
    }

    /// The first 100 messages the key's mode lists with the filters of `query`
    /// (`direction=outbound`, …), newest first.
    pub async fn messages(&self, key: &str, query: &str) -> Vec<Value> {
        self.get(&format!("/v1/messages?limit=100&{query}"), key)
            .await
            .expect(200)
            .data()["messages"]
            .as_array()
            .expect("messages is a list")
            .clone()
    }

    /// A test-mode inbound SMS from `from` to [`SENDER`]; the stored message.
    pub async fn test_inbound(&self, from: &str, content: &str) -> Value {
        self.post(
            "/v1/test/inbound",
            &self.test_key,
            json!({ "from_number": from, "to_number": SENDER, "content": content }),
        )
        .await
        .expect(201)
        .data()
        .clone()
    }

    /// A test-mode send from a fixed number.
    pub async fn send_test(&self, to: &str, content: &str) -> Reply {
        self.post(
            "/v1/messages/send",
            &self.test_key,
            json!({ "from_number": SENDER, "to_number": to, "content": content }),
        )
        .await
    }

    /// Sends `content` from [`SENDER`] to [`RECIPIENT`] with the live key (so a paired phone
    /// must send it); returns the accepted message's id.
    pub async fn send_live(&self, content: &str) -> String {
        self.post(
            "/v1/messages/send",
            &self.live_key,
            send_body(SENDER, RECIPIENT, content),
        )
        .await
        .expect(202)
        .data()["id"]
            .as_str()
            .expect("an accepted send has an id")
            .to_string()
    }

    /// Polls a message until `check` holds, or panics after `within`.
    pub async fn wait_for_message(
        &self,
        key: &str,
        id: &str,
        within: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let reply = self.get(&format!("/v1/messages/{id}"), key).await;
            if reply.status == 200 && check(reply.data()) {
                return reply.data().clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "message {id} never reached the expected state; last: {}",
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the message has `status`.
    pub async fn wait_for_status(&self, key: &str, id: &str, status: &str) -> Value {
        self.wait_for_message(key, id, Duration::from_secs(10), |m| m["status"] == status)
            .await
    }

    /// Pairs a phone with the live key; returns (phone id, device token).
    pub async fn pair_phone(&self, number: &str) -> (String, String) {
        let reply = self
            .post(
                "/v1/phones",
                &self.live_key,
                json!({ "phone_number": number }),
            )
            .await
            .expect(201);
        (
            reply.data()["id"].as_str().expect("id").to_string(),
            reply.data()["device_token"]
                .as_str()
                .expect("token")
                .to_string(),
        )
    }

    /// The WebSocket URL of the phone endpoint.
    pub fn ws_url(&self) -> String {
        format!(
            "{}/v1/phones/connect",
            self.address.replacen("http", "ws", 1)
        )
    }

    /// Connects a fake phone with this device token and reads its `hello`.
    pub async fn connect_phone(&self, token: &str) -> FakePhone {
        let mut phone = FakePhone::connect(&self.ws_url(), token)
            .await
            .expect("phone connects");
        match phone.next_frame().await {
            Some(ServerFrame::Hello { .. }) => phone,
            other => panic!("expected hello, got {other:?}"),
        }
    }

    /// Waits until the phone with this id is online (or offline) as the API reports it.
    pub async fn wait_online(&self, phone_id: &str, online: bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let reply = self
                .get(&format!("/v1/phones/{phone_id}"), &self.live_key)
                .await;
            if reply.data()["online"] == online {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "phone never became online={online}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The sending number tests use.
pub const SENDER: &str = "+14155550100";
/// A valid US recipient.
pub const RECIPIENT: &str = "+14155550123";

/// A phone speaking the real WebSocket protocol, scripted by the test.
pub struct FakePhone {
    framed: Framed<BoxedSocket, Codec>,
}

impl FakePhone {
    /// Opens the WebSocket; Err carries the HTTP status of a refused upgrade.
    pub async fn connect(url: &str, token: &str) -> Result<FakePhone, u16> {
        let client = Client::builder().finish();
        let result = client
            .ws(url)
            .bearer_auth(token)
            .max_frame_size(1 << 20)
            .connect()
            .await;
        match result {
            Ok((_, framed)) => Ok(FakePhone { framed }),
            Err(awc::error::WsClientError::InvalidResponseStatus(status)) => Err(status.as_u16()),
            Err(other) => panic!("websocket error: {other}"),
        }
    }

    /// The next server frame within 5 s; None when the session closed or nothing came.
    pub async fn next_frame(&mut self) -> Option<ServerFrame> {
        self.next_frame_within(Duration::from_secs(5)).await
    }

    /// The next server frame within `within`.
    pub async fn next_frame_within(&mut self, within: Duration) -> Option<ServerFrame> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let next = tokio::time::timeout_at(deadline, self.framed.next())
                .await
                .ok()??;
            match next.ok()? {
                Frame::Text(bytes) => {
                    return Some(serde_json::from_slice(&bytes).expect("server frame is JSON"));
                }
                Frame::Ping(bytes) => {
                    let _ = self.framed.send(WsMessage::Pong(bytes)).await;
                }
                Frame::Close(_) => return None,
                _ => {}
            }
        }
    }

    /// Waits for the close frame and returns its code.
    pub async fn close_code(&mut self) -> Option<u16> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let next = tokio::time::timeout_at(deadline, self.framed.next())
                .await
                .ok()??;
            if let Ok(Frame::Close(reason)) = next {
                return reason.map(|r| u16::from(r.code));
            }
        }
    }

    /// Sends a protocol frame.
    pub async fn send(&mut self, frame: &PhoneFrame) {
        let text = serde_json::to_string(frame).expect("frame serializes");
        self.framed
            .send(WsMessage::Text(text.into()))
            .await
            .expect("frame sent");
    }

    /// Sends raw text (for malformed-frame tests).
    pub async fn send_text(&mut self, text: &str) {
        self.framed
            .send(WsMessage::Text(text.to_string().into()))
            .await
            .expect("frame sent");
    }

    /// Writes one unfragmented text frame carrying `payload` as it is, valid UTF-8 or not
    /// (the codec only takes text it can check).
    pub async fn send_raw_text_frame(&mut self, payload: &[u8]) {
        use tokio::io::AsyncWriteExt;
        assert!(payload.len() < 126, "a short frame");
        // FIN + text opcode; masked (a client must mask) with a zero key, so the payload is
        // written as it is.
        let mut frame = vec![0x81, 0x80 | payload.len() as u8, 0, 0, 0, 0];
        frame.extend_from_slice(payload);
        let socket = self.framed.io_mut();
        socket.write_all(&frame).await.expect("frame written");
        socket.flush().await.expect("frame flushed");
    }

    /// The next `send` frame: (message_id, to, content, attempt).
    pub async fn expect_send(&mut self) -> (Uuid, String, String, u32) {
        match self.next_frame().await {
            Some(ServerFrame::Send {
                message_id,
                to,
                content,
                attempt,
                ..
            }) => (message_id, to, content, attempt),
            other => panic!("expected a send frame, got {other:?}"),
        }
    }

    /// Reports the message sent, then waits for the ack of `reference`.
    pub async fn report(&mut self, frame: PhoneFrame) -> Option<ServerFrame> {
        self.send(&frame).await;
        self.next_frame().await
    }

    /// Reports a sent, delivered or failed frame and asserts the server acks its reference.
    pub async fn report_acked(&mut self, frame: PhoneFrame) {
        let reference = match &frame {
            PhoneFrame::Sent { reference, .. }
            | PhoneFrame::Delivered { reference, .. }
            | PhoneFrame::Failed { reference, .. } => reference.clone(),
            other => panic!("not a status report: {other:?}"),
        };
        let reference = reference.expect("a report with a reference to ack");
        assert_eq!(
            self.report(frame).await,
            Some(ServerFrame::Ack { reference })
        );
    }

    /// Sends a frame as a fragmented WebSocket message of `parts` frames.
    /// Forwards an SMS the phone received and waits for the server's ack (sent once the
    /// message is stored).
    pub async fn receive(&mut self, reference: &str, from: &str, content: &str) {
        let ack = self
            .report(PhoneFrame::Received {
                reference: reference.into(),
                from: from.into(),
                content: content.into(),
                received_at: chrono::Utc::now(),
            })
            .await;
        assert_eq!(
            ack,
            Some(ServerFrame::Ack {
                reference: reference.into()
            }),
            "the phone gets its ack once the message is stored"
        );
    }

    pub async fn send_fragmented(&mut self, frame: &PhoneFrame, parts: usize) {
        use actix_http::ws::Item;
        let text = serde_json::to_string(frame).expect("frame serializes");
        let bytes = bytes::Bytes::from(text);
        let size = bytes.len().div_ceil(parts);
        let chunks: Vec<bytes::Bytes> = bytes
            .chunks(size)
            .map(bytes::Bytes::copy_from_slice)
            .collect();
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let item = match i {
                0 => Item::FirstText(chunk),
                i if i == last => Item::Last(chunk),
                _ => Item::Continue(chunk),
            };
            self.framed
                .send(WsMessage::Continuation(item))
                .await
                .expect("fragment sent");
        }
    }

    /// Pings the server and waits (5 s) for the pong; its payload.
    pub async fn ping(&mut self, payload: &'static [u8]) -> Option<bytes::Bytes> {
        self.framed
            .send(WsMessage::Ping(bytes::Bytes::from_static(payload)))
            .await
            .expect("ping sent");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let next = tokio::time::timeout_at(deadline, self.framed.next())
                .await
                .ok()??;
            if let Ok(Frame::Pong(bytes)) = next {
                return Some(bytes);
            }
        }
    }

    /// Closes the session from the phone side.
    pub async fn close(mut self) {
        let _ = self.framed.send(WsMessage::Close(None)).await;
    }
}

/// A JSON body helper.
/// The `type` of each entry of a message's timeline (`events`), oldest first.
pub fn timeline(message: &Value) -> Vec<&str> {
    message["events"]
        .as_array()
        .expect("a message has its timeline")
        .iter()
        .map(|e| e["type"].as_str().expect("a timeline entry has a type"))
        .collect()
}

pub fn send_body(from: &str, to: &str, content: &str) -> Value {
    json!({ "from_number": from, "to_number": to, "content": content })
}

/// One request a [`WebhookReceiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub at: std::time::Instant,
}

impl Received {
    /// The body parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("webhook body is JSON")
    }

    /// A header by lowercase name.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

#[derive(Default)]
struct ReceiverScript {
    /// Statuses answered in order; 200 once exhausted.
    statuses: std::collections::VecDeque<u16>,
    /// Delays before answering, in order; `default_delay` once exhausted.
    delays: std::collections::VecDeque<Duration>,
    default_delay: Duration,
    received: Vec<Received>,
}

/// A real HTTP server on 127.0.0.1 that records every request (headers and exact body
/// bytes) and answers as scripted: a sequence of statuses and of delays.
pub struct WebhookReceiver {
    pub url: String,
    state: Arc<std::sync::Mutex<ReceiverScript>>,
    handle: actix_web::dev::ServerHandle,
}

impl WebhookReceiver {
    /// Starts a receiver answering 200 at once.
    pub async fn start() -> WebhookReceiver {
        let state = Arc::new(std::sync::Mutex::new(ReceiverScript::default()));
        let shared = state.clone();
        let server = actix_web::HttpServer::new(move || {
            let shared = shared.clone();
            actix_web::App::new().default_service(actix_web::web::to(
                move |req: actix_web::HttpRequest, body: actix_web::web::Bytes| {
                    let shared = shared.clone();
                    async move {
                        let (status, delay) = {
                            let mut script = shared.lock().unwrap();
                            script.received.push(Received {
                                headers: req
                                    .headers()
                                    .iter()
                                    .map(|(k, v)| {
                                        (
                                            k.as_str().to_ascii_lowercase(),
                                            v.to_str().unwrap_or("").to_string(),
                                        )
                                    })
                                    .collect(),
                                body: body.to_vec(),
                                at: std::time::Instant::now(),
                            });
                            let status = script.statuses.pop_front().unwrap_or(200);
                            let delay = script.delays.pop_front().unwrap_or(script.default_delay);
                            (status, delay)
                        };
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        actix_web::HttpResponse::build(
                            actix_web::http::StatusCode::from_u16(status).unwrap(),
                        )
                        .body("ok")
                    }
                },
            ))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .bind("127.0.0.1:0")
        .expect("receiver binds");
        let address = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        WebhookReceiver {
            url: format!("http://{address}/hook"),
            state,
            handle,
        }
    }

    /// Answers these statuses, in order, to the next requests (then 200).
    pub fn answer(&self, statuses: &[u16]) {
        self.state.lock().unwrap().statuses.extend(statuses);
    }

    /// Waits this long before answering the next requests, in order.
    pub fn delay(&self, delays: &[Duration]) {
        self.state.lock().unwrap().delays.extend(delays);
    }

    /// Waits this long before answering every request not scripted otherwise.
    pub fn delay_always(&self, delay: Duration) {
        self.state.lock().unwrap().default_delay = delay;
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// Waits until at least `n` requests arrived; panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let received = self.received();
            if received.len() >= n {
                return received;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "receiver got {} requests, expected {n}",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the server.
    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

/// `Authorization: Bearer <key>` for the SMSGate-compatible client API.
pub fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// `Authorization: Basic base64(login:password)` for the SMSGate-compatible client API.
pub fn basic(login: &str, password: &str) -> String {
    use base64::Engine;
    let pair = format!("{login}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

impl TestApp {
    /// A request to the SMSGate-compatible client API (`/3rdparty/v1` + `path`) with an
    /// optional `Authorization` header and JSON body; the reply's body is whatever JSON came
    /// back (`Null` when empty).
    pub async fn client_api(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let header = authorization.map(|value| ("authorization", value));
        self.json_request(method, &format!("/3rdparty/v1{path}"), header, body)
            .await
    }
}
