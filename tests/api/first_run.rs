//! The first run of the real binary (docs/api.md, "CLI" and "First start"): a first `serve`
//! that fails (port taken, missing TLS file, bad bind) leaves no keys nobody saw, and the next
//! good start prints them in a block; workspaces are listed and named by `key create`;
//! `serve --bind`; a misspelled `SMSGW_…` variable is warned about; a configuration file's
//! relative paths are read from its folder.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use awc::Client;
use serde_json::Value;

use crate::backend_tests;
use crate::helpers::{Backend, POSTGRES_SECRETS_KEY, SelfSigned, fresh_database};

/// The rule the key block starts and ends with (a line of `=`).
fn is_rule(line: &str) -> bool {
    line.len() >= 20 && line.chars().all(|c| c == '=')
}

/// A `smsgw serve` that printed `listening on`; killed when dropped.
struct Served {
    child: Child,
    /// Its stdout up to `listening on …`.
    stdout: Vec<String>,
    /// `http://…` or `https://…`.
    address: String,
    stderr_path: PathBuf,
    _stderr_dir: tempfile::TempDir,
}

impl Served {
    /// The rest of the stdout line that starts with `prefix`.
    fn line(&self, prefix: &str) -> Option<String> {
        self.stdout
            .iter()
            .find_map(|line| line.strip_prefix(prefix))
            .map(str::to_string)
    }

    /// Everything written to stderr so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `smsgw` command run in `dir` with `env` on top of the test's environment.
fn smsgw_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_smsgw"));
    command
        .current_dir(dir)
        .args(args)
        .env_remove("RUST_LOG")
        .env("SMSGW_LIMITS__API_PER_SECOND", "0");
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// Starts a serve; Ok once it printed `listening on`, Err with its output when it ended first.
fn serve_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Served, String> {
    let stderr_dir = tempfile::tempdir().unwrap();
    let stderr_path = stderr_dir.path().join("stderr.log");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let mut child = smsgw_in(dir, args, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .expect("smsgw starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stdout = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                let address = line.strip_prefix("listening on ").map(str::to_string);
                stdout.push(line);
                if let Some(address) = address {
                    return Ok(Served {
                        child,
                        stdout,
                        address,
                        stderr_path,
                        _stderr_dir: stderr_dir,
                    });
                }
            }
            _ => {
                let status = child.wait().unwrap();
                let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                return Err(format!(
                    "{status}\nstdout:\n{}\nstderr:\n{stderr}",
                    stdout.join("\n")
                ));
            }
        }
    }
}

/// Runs a command that ends (not a serve that works) off the test's runtime.
async fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = smsgw_in(dir, args, env);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("smsgw runs")
}

/// The environment that points the binary at `database_url`.
fn database_env(database_url: &str) -> Vec<(&'static str, String)> {
    let mut env = vec![("SMSGW_DATABASE__URL", database_url.to_string())];
    if database_url.starts_with("postgres") {
        env.push(("SMSGW_SECRETS__KEY", POSTGRES_SECRETS_KEY.to_string()));
    }
    env
}

fn as_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// `GET /v1/workspace` with `key`: its status and body.
async fn workspace_of(client: &Client, address: &str, key: &str) -> (u16, Value) {
    let mut reply = client
        .get(format!("{address}/v1/workspace"))
        .insert_header(("x-api-key", key))
        .send()
        .await
        .unwrap();
    let body = reply.body().await.unwrap();
    (
        reply.status().as_u16(),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

/// The key block: a rule, the text, `workspace:`/`live key:`/`test key:`, a rule, then
/// `listening on`.
fn assert_key_block(served: &Served) {
    let out = &served.stdout;
    let rules: Vec<usize> = (0..out.len()).filter(|&i| is_rule(&out[i])).collect();
    assert_eq!(rules.len(), 2, "{out:#?}");
    let block = out[rules[0]..=rules[1]].join("\n");
    for needle in [
        "shown only once",
        "smsgw key create --workspace",
        "workspace: ",
        "live key: sk_live_",
        "test key: sk_test_",
    ] {
        assert!(block.contains(needle), "{needle} not in {block}");
    }
    assert!(out[rules[1] + 1].starts_with("listening on "), "{out:#?}");
}

async fn a_failed_first_start_leaves_no_keys_and_the_next_prints_them(backend: Backend) {
    let (database_url, _db_dir) = fresh_database(backend).await;
    let env = database_env(&database_url);
    let env = as_refs(&env);
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();

    let failed = run_in(dir.path(), &["serve", "--bind", &busy], &env).await;
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {busy}")),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert!(!stdout.contains("key:"), "{stdout}");

    let listed = run_in(dir.path(), &["workspace", "list"], &env).await;
    assert!(listed.status.success());
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("no workspace yet"), "{listed}");

    let served = serve_in(dir.path(), &["serve", "--bind", "127.0.0.1:0"], &env).unwrap();
    assert_key_block(&served);
    let live_key = served.line("live key: ").unwrap();
    let client = Client::default();
    let (status, body) = workspace_of(&client, &served.address, &live_key).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["name"], "default");
    assert_eq!(
        body["data"]["id"].as_str(),
        served.line("workspace: ").as_deref()
    );
    drop(taken);
}

async fn workspaces_are_listed_and_key_create_takes_a_name(backend: Backend) {
    let (database_url, _db_dir) = fresh_database(backend).await;
    let env = database_env(&database_url);
    let env = as_refs(&env);
    let dir = tempfile::tempdir().unwrap();
    let served = serve_in(dir.path(), &["serve", "--bind", "127.0.0.1:0"], &env).unwrap();
    let workspace = served.line("workspace: ").unwrap();

    let list = async || {
        let out = run_in(dir.path(), &["workspace", "list"], &env).await;
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = list().await;
    let row: Vec<String> = listed
        .lines()
        .find(|line| line.starts_with(&workspace))
        .unwrap_or_else(|| panic!("{workspace} not in {listed}"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(row.len(), 5, "{listed}");
    assert_eq!(&row[2..], ["1", "1", "default"], "{listed}");

    let created = run_in(
        dir.path(),
        &["key", "create", "--workspace", "default", "--mode", "live"],
        &env,
    )
    .await;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let stdout = String::from_utf8(created.stdout).unwrap();
    let key = stdout
        .trim()
        .strip_prefix("live key: ")
        .unwrap()
        .to_string();
    let (status, body) = workspace_of(&Client::default(), &served.address, &key).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["id"].as_str(), Some(workspace.as_str()));
    assert_eq!(body["data"]["mode"], "live");
    let listed = list().await;
    assert!(
        listed
            .lines()
            .any(|line| line.starts_with(&workspace) && line.contains(" 2 ")),
        "{listed}"
    );

    let unknown = run_in(
        dir.path(),
        &["key", "create", "--workspace", "nosuch", "--mode", "live"],
        &env,
    )
    .await;
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("\"nosuch\"") && stderr.contains("smsgw workspace list"),
        "{stderr}"
    );
    assert!(unknown.stdout.is_empty());
    assert!(list().await.lines().any(|line| line.contains(" 2 ")));
}

backend_tests!(
    a_failed_first_start_leaves_no_keys_and_the_next_prints_them,
    workspaces_are_listed_and_key_create_takes_a_name,
);

/// `serve --bind` wins over the setting; a variable with one underscore too few is named with
/// the one meant; a bind without a port stops the start before any file is written, and so
/// does an administration command where no database is; logs written to a file carry no
/// colour codes.
#[test]
fn serve_bind_flag_and_misspelled_variables() {
    crate::helpers::run(async {
        let dir = tempfile::tempdir().unwrap();
        let port = {
            let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            free.local_addr().unwrap().port()
        };
        let bind = format!("127.0.0.1:{port}");
        let env = [
            ("SMSGW_SERVER_BIND", "127.0.0.1:1"),
            ("SMSGW_SERVER__BIND", "127.0.0.1:2"),
            ("SMSGW_LOG__LEVEL", "info"),
        ];
        let served = serve_in(dir.path(), &["serve", "--bind", &bind], &env).unwrap();
        assert_eq!(served.address, format!("http://{bind}"));
        let reply = Client::default()
            .get(format!("{}/health", served.address))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 200);
        let stderr = served.stderr();
        assert!(
            stderr.contains(
                "warning: SMSGW_SERVER_BIND matches no setting; did you mean SMSGW_SERVER__BIND?"
            ),
            "{stderr}"
        );
        assert!(stderr.contains("INFO"), "{stderr}");
        assert!(
            !stderr.contains('\u{1b}'),
            "colour codes in a log file: {stderr}"
        );
        drop(served);

        let other = tempfile::tempdir().unwrap();
        let bad = run_in(other.path(), &["serve"], &[("SMSGW_SERVER__BIND", "18080")]).await;
        assert_eq!(bad.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert!(
            stderr.contains("server.bind") && stderr.contains("HOST:PORT"),
            "{stderr}"
        );
        let bad = run_in(other.path(), &["serve", "--bind", "8080"], &[]).await;
        assert_eq!(bad.status.code(), Some(2));
        // An administration command in a folder without the database creates none there.
        for args in [
            &["workspace", "list"][..],
            &["key", "create", "--workspace", "default", "--mode", "live"],
        ] {
            let lost = run_in(other.path(), args, &[]).await;
            assert!(!lost.status.success());
            let stderr = String::from_utf8_lossy(&lost.stderr);
            assert!(stderr.contains("no database at smsgw.db"), "{stderr}");
        }
        let left: Vec<_> = std::fs::read_dir(other.path()).unwrap().collect();
        assert!(left.is_empty(), "a refused start wrote {left:?}");
    });
}

/// A configuration file in another folder names its TLS files and database relative to
/// itself. A first start whose key file is missing fails before any database exists; once the
/// file is there, the start serves HTTPS and prints the keys.
#[test]
fn a_config_file_elsewhere_serves_tls_with_paths_from_its_folder() {
    crate::helpers::run(async {
        let root = tempfile::tempdir().unwrap();
        let (conf, run) = (root.path().join("conf"), root.path().join("run"));
        std::fs::create_dir(&conf).unwrap();
        std::fs::create_dir(&run).unwrap();
        std::fs::write(
            conf.join("smsgw.toml"),
            "[database]\nurl = \"sqlite://smsgw.db?mode=rwc\"\n\
             [server]\nbind = \"127.0.0.1:0\"\n\
             [server.tls]\ncert_file = \"cert.pem\"\nkey_file = \"key.pem\"\n",
        )
        .unwrap();
        let cert = SelfSigned::leaf();
        std::fs::write(conf.join("cert.pem"), &cert.cert_pem).unwrap();
        let args = ["serve", "--config", "../conf/smsgw.toml"];

        let failed = run_in(&run, &args, &[]).await;
        let stderr = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{stderr}");
        assert!(
            stderr.contains("server.tls") && stderr.contains("key.pem"),
            "{stderr}"
        );
        assert!(!conf.join("smsgw.db").exists(), "no database before TLS");
        let left: Vec<_> = std::fs::read_dir(&run).unwrap().collect();
        assert!(left.is_empty(), "the failed start wrote {left:?}");

        std::fs::write(conf.join("key.pem"), &cert.key_pem).unwrap();
        let served = serve_in(&run, &args, &[]).unwrap();
        assert_key_block(&served);
        assert!(served.address.starts_with("https://127.0.0.1:"));
        assert!(
            conf.join("smsgw.db").exists(),
            "the database is beside the file"
        );
        let left: Vec<_> = std::fs::read_dir(&run).unwrap().collect();
        assert!(
            left.is_empty(),
            "the start wrote {left:?} in the working directory"
        );

        let client = cert.client(&[]);
        let live_key = served.line("live key: ").unwrap();
        let (status, body) = workspace_of(&client, &served.address, &live_key).await;
        assert_eq!(status, 200, "{body}");
    });
}
