//! Operations: health, readiness, metrics, and graceful shutdown of the real binary.

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

async fn health_ready_and_metrics(backend: Backend) {
    let app = spawn_app(backend).await;
    app.request("GET", "/health", None, None).await.expect(200);
    let ready = app.request("GET", "/ready", None, None).await.expect(200);
    assert_eq!(ready.data()["database"], "ok");
    let sent = app.send_test(RECIPIENT, "counted").await.expect(202);
    assert!(sent.headers.contains_key("x-request-id"));
    app.wait_for_status(
        &app.test_key,
        sent.data()["id"].as_str().unwrap(),
        "delivered",
    )
    .await;
    let mut response = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = String::from_utf8(response.body().await.unwrap().to_vec()).unwrap();
    for name in [
        "smsgw_http_requests_total",
        "smsgw_http_request_duration_seconds_bucket",
        "smsgw_message_transitions_total",
        "smsgw_phones_online",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    assert!(
        text.contains(r#"route="/v1/messages/send""#),
        "requests are labelled by route"
    );
}

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

async fn sigterm_loses_nothing_accepted(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let mut server = start_server(&url, true);
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();

    // A phone is connected: it must see a 1001 "going away" close.
    let (mut phone, _) = connect_phone_to(&server, &client).await;

    // 300 concurrent sends; SIGTERM goes out once 50 of them were accepted, while the rest are
    // in flight or not yet sent.
    let pid = server.child.id().to_string();
    let accepted_so_far = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let sends = (0..300).map(|i| {
        let client = client.clone();
        let url = format!("{}/v1/messages/send", server.address);
        let key = server.test_key.clone();
        let counter = accepted_so_far.clone();
        async move {
            let mut res = client
                .post(url)
                .insert_header(("x-api-key", key.as_str()))
                .send_json(&json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": format!("m{i}") }))
                .await
                .ok()?;
            if res.status().as_u16() != 202 {
                return None;
            }
            let body: serde_json::Value = res.json().await.ok()?;
            counter.set(counter.get() + 1);
            body["data"]["id"].as_str().map(str::to_string)
        }
    });
    let killer = {
        let counter = accepted_so_far.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while counter.get() < 50 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
        }
    };
    let (results, ()) = tokio::join!(join_all(sends), killer);
    let accepted: Vec<String> = results.into_iter().flatten().collect();
    assert!(
        !accepted.is_empty(),
        "some sends were accepted before the signal"
    );

    assert_eq!(
        phone.close_code().await,
        Some(1001),
        "phones are told the server is going away"
    );
    let status = server.exit_status().await;
    assert!(status.success(), "exit 0 after SIGTERM, got {status}");

    // Every accepted message is in the database, and a restarted server delivers it.
    let restarted = start_server(&url, false);
    for id in &accepted {
        poll(
            Duration::from_secs(20),
            Duration::from_millis(50),
            async || {
                let mut res = client
                    .get(format!("{}/v1/messages/{id}", restarted.address))
                    .insert_header(("x-api-key", server.test_key.as_str()))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status().as_u16(), 200, "accepted message {id} was lost");
                let body: serde_json::Value = res.json().await.unwrap();
                if body["data"]["status"] == "delivered" {
                    return Ok(());
                }
                Err(format!("{id} never delivered after restart: {body}"))
            },
        )
        .await;
    }
    drop(restarted);
}

/// The value of the first sample of `name` whose labels contain every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            return None;
        }
        let (series, value) = rest.rsplit_once(' ')?;
        labels
            .iter()
            .all(|l| series.contains(l))
            .then(|| value.parse().ok())
            .flatten()
    })
}

async fn scrape(app: &TestApp) -> String {
    let mut response = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers().get("content-type").unwrap();
    assert!(content_type.to_str().unwrap().starts_with("text/plain"));
    String::from_utf8(response.body().limit(16 << 20).await.unwrap().to_vec()).unwrap()
}

/// Polls /metrics until `check` holds (gauges are process-wide and tests run in parallel).
async fn scrape_until(app: &TestApp, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(app).await;
        if check(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "{what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every metric of issue 6 is exported, described, and moves with what happens.
async fn metrics_cover_requests_messages_phones_queues(backend: Backend) {
    let app = spawn_app(backend).await;
    let text = scrape(&app).await;
    for (name, label) in [
        ("smsgw_queue_depth", r#"class="single""#),
        ("smsgw_queue_depth", r#"class="bulk""#),
        ("smsgw_queue_depth", r#"class="campaign""#),
        ("smsgw_webhook_attempts_total", r#"outcome="success""#),
        ("smsgw_webhook_attempts_total", r#"outcome="timeout""#),
        ("smsgw_campaign_recipients_total", r#"state="delivered""#),
        ("smsgw_ai_drafts_total", r#"outcome="created""#),
        // Counted from the database at the scrape (every status, 0 when none).
        ("smsgw_messages", r#"status="queued""#),
        ("smsgw_messages", r#"status="delivered""#),
        ("smsgw_messages", r#"status="canceled""#),
    ] {
        assert!(
            sample(&text, name, &[label]).is_some(),
            "{name}{{{label}}} exists before any event:\n{text}"
        );
    }

    // Requests by route pattern and status, with latency.
    let id = uuid::Uuid::now_v7();
    app.request(
        "GET",
        &format!("/v1/messages/{id}"),
        Some(&app.test_key),
        None,
    )
    .await
    .expect(404);
    app.request("GET", "/no/such/route", None, None)
        .await
        .expect(404);
    let sent = app.send_test(RECIPIENT, "counted").await.expect(202);
    app.wait_for_status(
        &app.test_key,
        sent.data()["id"].as_str().unwrap(),
        "delivered",
    )
    .await;
    // A held message waits in the single queue of its (simulated) phone.
    app.send(
        &app.test_key,
        json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "later",
                "scheduled_for": "2999-01-01T00:00:00Z" }),
    )
    .await
    .expect(202);
    let (_, _phone) = app.online_phone(SENDER).await;

    let text = scrape_until(&app, "metrics after traffic", |text| {
        sample(text, "smsgw_phones_online", &[]).is_some_and(|v| v >= 1.0)
            && sample(text, "smsgw_queue_depth", &[r#"class="single""#]).is_some_and(|v| v >= 1.0)
    })
    .await;
    for labels in [
        &[
            r#"route="/v1/messages/{id}""#,
            r#"method="GET""#,
            r#"status="404""#,
        ][..],
        &[
            r#"route="/v1/messages/send""#,
            r#"method="POST""#,
            r#"status="202""#,
        ][..],
        &[r#"route="unmatched""#, r#"status="404""#][..],
    ] {
        assert!(
            sample(&text, "smsgw_http_requests_total", labels).is_some_and(|v| v >= 1.0),
            "requests counted by route pattern and status {labels:?}:\n{text}"
        );
        let mut bucket = labels.to_vec();
        bucket.push(r#"le="+Inf""#);
        assert!(
            sample(&text, "smsgw_http_request_duration_seconds_bucket", &bucket)
                .is_some_and(|v| v >= 1.0),
            "latency histogram by route and status {labels:?}"
        );
    }
    // (A histogram shows once it has a sample: smsgw_webhook_attempt_duration_seconds appears
    // with the first webhook attempt.)
    for name in [
        "smsgw_http_requests_total",
        "smsgw_http_request_duration_seconds",
        "smsgw_message_transitions_total",
        "smsgw_phones_online",
        "smsgw_queue_depth",
        "smsgw_webhook_attempts_total",
        "smsgw_campaign_recipients_total",
        "smsgw_ai_drafts_total",
        "smsgw_messages",
        "smsgw_writer_batch_jobs",
        "smsgw_writer_commit_duration_seconds",
    ] {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} is described:\n{text}"
        );
    }
    assert!(
        !text.contains(&id.to_string()),
        "ids never become label values (the route pattern is used)"
    );
    // The writer's transactions: jobs per batch in buckets of its own (1 … 512), durations in
    // the latency buckets. The send above committed at least one batch.
    assert!(
        sample(&text, "smsgw_writer_batch_jobs_bucket", &[r#"le="512""#]).is_some_and(|v| v >= 1.0),
        "batch sizes counted in jobs:\n{text}"
    );
    assert!(
        sample(&text, "smsgw_writer_batch_jobs_sum", &[]).is_some_and(|v| v >= 1.0),
        "jobs summed:\n{text}"
    );
    assert!(
        sample(
            &text,
            "smsgw_writer_commit_duration_seconds_bucket",
            &[r#"le="10""#]
        )
        .is_some_and(|v| v >= 1.0),
        "commit durations counted:\n{text}"
    );
    for kind in ["queued", "sending", "sent", "delivered"] {
        assert!(
            sample(
                &text,
                "smsgw_message_transitions_total",
                &[&format!("kind=\"{kind}\"")]
            )
            .is_some_and(|v| v >= 1.0),
            "transition {kind} counted"
        );
    }
}

/// A TCP proxy on loopback in front of PostgreSQL whose forwarding can be paused: while paused,
/// the database never answers (connections stay open, bytes go nowhere).
struct StallingProxy {
    address: std::net::SocketAddr,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StallingProxy {
    fn start(upstream: String) -> StallingProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let paused = std::sync::Arc::new(AtomicBool::new(false));
        let flag = paused.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(&upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            let n = match from.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            while flag.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        StallingProxy { address, paused }
    }

    fn pause(&self, paused: bool) {
        self.paused
            .store(paused, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `/ready` is 503 `not_ready` within a bounded wait when the database does not answer, and
/// 200 again once it does; `/health` stays 200. (PostgreSQL only: a network database is the
/// one that can stop answering; the SQLite variant checks the healthy answer.)
async fn ready_is_503_when_the_database_does_not_answer(backend: Backend) {
    if backend == Backend::Sqlite {
        let app = spawn_app(backend).await;
        let ready = app.request("GET", "/ready", None, None).await.expect(200);
        assert_eq!(ready.data()["database"], "ok");
        return;
    }
    let base = std::env::var("SMSGW_TEST_DATABASE_URL").unwrap();
    let authority = base
        .split_once("://")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split('/').next())
        .map(|a| a.rsplit('@').next().unwrap().to_string())
        .unwrap();
    let proxy = StallingProxy::start(authority.clone());
    let proxied = proxy.address.to_string();
    let app = spawn_app_with(backend, |s| {
        s.database.url = s.database.url.replacen(&authority, &proxied, 1);
    })
    .await;
    assert!(app.settings.database.url.contains(&proxied));
    app.request("GET", "/ready", None, None).await.expect(200);

    proxy.pause(true);
    let started = Instant::now();
    let reply = app.request("GET", "/ready", None, None).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 503, "{:?}", reply.body);
    assert_eq!(reply.body["status"], "error");
    assert_eq!(reply.code(), "not_ready");
    assert_eq!(reply.data()["database"], "unavailable");
    assert!(
        waited < Duration::from_secs(5),
        "bounded wait, took {waited:?}"
    );
    app.request("GET", "/health", None, None).await.expect(200);

    proxy.pause(false);
    poll(
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || {
            if app.request("GET", "/ready", None, None).await.status == 200 {
                return Ok(());
            }
            Err("ready again once the database answers".to_string())
        },
    )
    .await;
}

/// JSON logs of the real binary: every line is a JSON object, requests carry their request id,
/// and no API key, device token or message content ever appears (at debug level, which logs
/// more than the default info).
async fn json_logs_carry_request_ids_and_no_secrets(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let (mut server, log_path, _log_dir) = start_server_logging(
        &url,
        &[
            ("SMSGW_LOG__FORMAT", "json"),
            ("SMSGW_LOG__LEVEL", "debug"),
            ("SMSGW_WEBHOOKS__ALLOW_INSECURE_TARGETS", "true"),
        ],
    );
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let content = "secret-content-4f1c9e never log me";

    // A test-mode webhook endpoint, its key rotated: both signing keys stay out of the logs
    // while deliveries are signed with the current one.
    let receiver = WebhookReceiver::start().await;
    let mut created = client
        .post(format!("{}/v1/webhooks", server.address))
        .insert_header(("x-api-key", server.test_key.as_str()))
        .send_json(&json!({ "url": receiver.url, "events": ["message.sent", "message.delivered"] }))
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let created: serde_json::Value = created.json().await.unwrap();
    let first_signing_key = created["data"]["signing_key"].as_str().unwrap().to_string();
    let mut rotated = client
        .post(format!(
            "{}/v1/webhooks/{}/rotate-key",
            server.address,
            created["data"]["id"].as_str().unwrap()
        ))
        .insert_header(("x-api-key", server.test_key.as_str()))
        .send()
        .await
        .unwrap();
    assert_eq!(rotated.status().as_u16(), 200);
    let rotated: serde_json::Value = rotated.json().await.unwrap();
    let signing_key = rotated["data"]["signing_key"].as_str().unwrap().to_string();
    assert!(signing_key.starts_with("whsec_") && signing_key != first_signing_key);

    let (mut phone, token) = connect_phone_to(&server, &client).await;
    let ws_url = format!(
        "{}/v1/phones/connect",
        server.address.replacen("http", "ws", 1)
    );
    let mut sent = client
        .post(format!("{}/v1/messages/send", server.address))
        .insert_header(("x-api-key", server.live_key.as_str()))
        .insert_header(("x-request-id", "req-logs-7d2a"))
        .send_json(&json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": content }))
        .await
        .unwrap();
    assert_eq!(sent.status().as_u16(), 202);
    assert_eq!(sent.headers().get("x-request-id").unwrap(), "req-logs-7d2a");
    let _: serde_json::Value = sent.json().await.unwrap();
    let (message_id, _, _, attempt) = phone.expect_send().await;
    assert_eq!(attempt, 1, "the phone got message {message_id}");
    let mut test_send = client
        .post(format!("{}/v1/messages/send", server.address))
        .insert_header(("x-api-key", server.test_key.as_str()))
        .send_json(&json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": content }))
        .await
        .unwrap();
    assert_eq!(test_send.status().as_u16(), 202);
    let _: serde_json::Value = test_send.json().await.unwrap();
    // message.sent and message.delivered of the test send reached the receiver, signed.
    assert_eq!(receiver.wait_for(2, Duration::from_secs(20)).await.len(), 2);
    let wrong_key = format!("sk_live_{}", "Z".repeat(40));
    let refused = client
        .get(format!("{}/v1/messages", server.address))
        .insert_header(("x-api-key", wrong_key.as_str()))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(
        FakePhone::connect(&ws_url, "dt_wrongtoken0000000000")
            .await
            .err(),
        Some(401)
    );
    // A request that is not HTTP: the client's error, logged below ERROR.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = server.address.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(b"NOT HTTP AT ALL\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        assert!(
            String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 400"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.signal("-TERM");
    server.exit_status().await;

    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "the server logged something:\n{log}");
    let mut request_id_seen = false;
    let mut client_error_seen = false;
    for line in &lines {
        let entry: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
        assert!(
            entry["level"].is_string() && entry["timestamp"].is_string(),
            "{line}"
        );
        for secret in [
            server.live_key.as_str(),
            server.test_key.as_str(),
            wrong_key.as_str(),
            token.as_str(),
            first_signing_key.as_str(),
            signing_key.as_str(),
            "dt_wrongtoken",
            "secret-content-4f1c9e",
        ] {
            assert!(
                !line.contains(secret),
                "a secret or content was logged: {line}"
            );
        }
        request_id_seen |= line.contains("req-logs-7d2a");
        assert_ne!(
            entry["level"], "ERROR",
            "nothing here is a server error: {line}"
        );
        client_error_seen |= entry["level"] == "WARN" && entry["client_error"] == true;
    }
    assert!(request_id_seen, "request logs carry the request id:\n{log}");
    assert!(
        client_error_seen,
        "the malformed request is logged as a warning:\n{log}"
    );
}

/// SIGINT (Ctrl-C) stops the server as gracefully as SIGTERM: every phone sees 1001 (the
/// sessions are not HTTP connections the server's stop waits for, so this needs the server to
/// wait for them), exit 0 in 10 s.
async fn sigint_stops_gracefully(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let mut server = start_server(&url, true);
    let client = awc::Client::new();
    let mut phones = Vec::new();
    for _ in 0..20 {
        phones.push(connect_phone_to(&server, &client).await.0);
    }
    server.signal("-INT");
    let codes = join_all(phones.iter_mut().map(FakePhone::close_code)).await;
    assert_eq!(codes, vec![Some(1001); 20]);
    let status = server.exit_status().await;
    assert!(status.success(), "exit 0 after SIGINT, got {status}");
}

/// Logs are human-readable by default (not JSON) and go to stderr, never stdout.
async fn logs_are_human_readable_by_default(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    let (mut server, log_path, _log_dir) =
        start_server_logging(&url, &[("SMSGW_LOG__LEVEL", "info")]);
    server.signal("-TERM");
    // The signal comes right after the address is printed: it is handled gracefully already.
    let status = server.exit_status().await;
    assert!(status.success(), "exit 0, got {status}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("shutdown requested"))
        .unwrap_or_else(|| panic!("the shutdown is logged at info:\n{log}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(
        serde_json::from_str::<serde_json::Value>(line).is_err(),
        "not JSON: {line}"
    );
}

backend_tests!(
    logs_are_human_readable_by_default,
    sigint_stops_gracefully,
    health_ready_and_metrics,
    sigterm_loses_nothing_accepted,
    metrics_cover_requests_messages_phones_queues,
    ready_is_503_when_the_database_does_not_answer,
    json_logs_carry_request_ids_and_no_secrets,
);

/// Runs two queries that take seconds on `backend` in one spawned task and ends the runtime while
/// they run, as a test (or the server) that ends while an actor is mid-query. Dropping that task
/// drops two pooled connections; without a Tokio context the first panicked ("requires a Tokio
/// context") and the second, panicking during that unwind, aborted the whole process.
fn end_runtime_mid_query(backend: Backend) {
    crate::helpers::run(async move {
        let (url, _dir) = fresh_database(backend).await;
        let db = smsgw::store::connect(&url, 2).await.unwrap();
        let slow = match backend {
            Backend::Sqlite => {
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000000) \
                 SELECT count(*) FROM c"
            }
            Backend::Postgres => "SELECT pg_sleep(5)",
        };
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        actix_web::rt::spawn(async move {
            let _ = started_tx.send(());
            let _ = tokio::join!(db.execute_unprepared(slow), db.execute_unprepared(slow));
        });
        started_rx.await.unwrap();
        // Both queries are now running, each holding a pooled connection.
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
}

#[test]
fn ending_the_runtime_mid_query_does_not_panic_sqlite() {
    end_runtime_mid_query(Backend::Sqlite);
}

#[test]
fn ending_the_runtime_mid_query_does_not_panic_postgres() {
    if crate::helpers::postgres_enabled() {
        end_runtime_mid_query(Backend::Postgres);
    }
}

/// SQLite: the writer never checkpoints inside a commit; a connection of its own copies the
/// WAL back into the database file beside it. Messages accepted through the API reach the
/// database file itself (read here with `immutable=true`, which makes SQLite ignore the WAL)
/// within a second or two, with no other write to trigger a checkpoint.
#[test]
fn wal_is_checkpointed_beside_the_writer() {
    crate::helpers::run(async {
        let app = spawn_app(Backend::Sqlite).await;
        for i in 0..20 {
            app.send_test(RECIPIENT, &format!("checkpointed {i}"))
                .await
                .expect(202);
        }
        let path = app
            .database_url
            .trim_start_matches("sqlite://")
            .split('?')
            .next()
            .unwrap()
            .to_string();
        let file_only = format!("sqlite://{path}?mode=ro&immutable=true");
        poll(Duration::from_secs(10), Duration::from_millis(200), async || {
            let db = sea_orm::Database::connect(&file_only).await.unwrap();
            // Until the first checkpoint the file may not even hold the schema.
            let stored: i64 = match db
                .query_one_raw(sea_orm::Statement::from_string(
                    sea_orm::DbBackend::Sqlite,
                    "SELECT count(*) AS n FROM messages",
                ))
                .await
            {
                Ok(Some(row)) => row.try_get("", "n").unwrap(),
                _ => 0,
            };
            db.close().await.unwrap();
            if stored >= 20 {
                return Ok(());
            }
            Err(format!("the database file holds {stored} of 20 messages after 10 s: the WAL is not checkpointed"))
        })
        .await;
        drop(app);
    });
}
