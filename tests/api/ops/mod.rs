//! Operations: health, readiness, metrics, logs and graceful shutdown, many of them of the real
//! binary, which `ServerProcess` starts here for the topic files.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use sea_orm::ConnectionTrait;
use serde_json::json;

use crate::backend_tests;
use crate::helpers::{
    Backend, FakePhone, RECIPIENT, SENDER, TestApp, WebhookReceiver, fresh_database, poll,
    spawn_app, spawn_app_with,
};

mod database;
mod logs;
mod metrics;
mod shutdown;

/// A server process started from the real binary; prints its keys and address on stdout.
struct ServerProcess {
    child: Child,
    address: String,
    test_key: String,
    live_key: String,
}

impl ServerProcess {
    /// Sends the server process `signal` (`-TERM`, `-INT`) as `kill` does.
    fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
    }

    /// Waits for the server to exit, 10 s at most; its exit status.
    async fn exit_status(&mut self) -> std::process::ExitStatus {
        poll(
            Duration::from_secs(10),
            Duration::from_millis(50),
            async || {
                self.child
                    .try_wait()
                    .unwrap()
                    .ok_or_else(|| "the server exits within 10 s".to_string())
            },
        )
        .await
    }
}

impl Drop for ServerProcess {
    /// A failing test must not leave a server running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pairs a phone (number [`SENDER`]) with the server's live key and connects it; returned with
/// its device token once its `hello` arrived.
async fn connect_phone_to(server: &ServerProcess, client: &awc::Client) -> (FakePhone, String) {
    let mut pair = client
        .post(format!("{}/v1/phones", server.address))
        .insert_header(("x-api-key", server.live_key.as_str()))
        .send_json(&json!({ "phone_number": SENDER }))
        .await
        .unwrap();
    let paired: serde_json::Value = pair.json().await.unwrap();
    let token = paired["data"]["device_token"].as_str().unwrap().to_string();
    let ws_url = format!(
        "{}/v1/phones/connect",
        server.address.replacen("http", "ws", 1)
    );
    let mut phone = FakePhone::connect(&ws_url, &token)
        .await
        .expect("phone connects");
    assert!(phone.next_frame().await.is_some(), "hello");
    (phone, token)
}

/// A first start of `smsgw serve` with extra environment, its stderr written to a file; the
/// server, the log file and the directory that holds it (removed when dropped).
fn start_server_logging(
    database_url: &str,
    env: &[(&str, &str)],
) -> (ServerProcess, std::path::PathBuf, tempfile::TempDir) {
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("server.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let server = start_server_with(database_url, true, env, Stdio::from(log_file));
    (server, log_path, log_dir)
}

/// Starts `smsgw serve` on the database; only a first start prints the keys.
fn start_server(database_url: &str, first_start: bool) -> ServerProcess {
    start_server_with(database_url, first_start, &[], Stdio::null())
}

/// [`start_server`] with extra environment and somewhere for the log (stderr) to go.
fn start_server_with(
    database_url: &str,
    first_start: bool,
    env: &[(&str, &str)],
    stderr: Stdio,
) -> ServerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_smsgw"));
    command
        .arg("serve")
        .env_remove("RUST_LOG")
        .env("SMSGW_DATABASE__URL", database_url)
        .env("SMSGW_SERVER__BIND", "127.0.0.1:0")
        .env("SMSGW_TEST_MODE__DELIVER_AFTER", "50ms")
        .env("SMSGW_LIMITS__API_PER_SECOND", "0")
        .env("SMSGW_LOG__LEVEL", "warn");
    if database_url.starts_with("postgres") {
        command.env("SMSGW_SECRETS__KEY", crate::helpers::POSTGRES_SECRETS_KEY);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("server starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (mut test_key, mut live_key, mut address) = (None, None, None);
    while address.is_none() {
        let line = lines
            .next()
            .expect("server prints its address")
            .expect("line");
        if let Some(k) = line.strip_prefix("test key: ") {
            test_key = Some(k.to_string());
        } else if let Some(k) = line.strip_prefix("live key: ") {
            live_key = Some(k.to_string());
        } else if let Some(a) = line.strip_prefix("listening on ") {
            address = Some(a.to_string());
        }
    }
    assert_eq!(
        test_key.is_some() && live_key.is_some(),
        first_start,
        "keys are printed on the first start only"
    );
    ServerProcess {
        child,
        address: address.unwrap(),
        test_key: test_key.unwrap_or_default(),
        live_key: live_key.unwrap_or_default(),
    }
}
