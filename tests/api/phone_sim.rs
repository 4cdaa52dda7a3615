//! `smsgw phone-sim`: the simulated phone over the real protocol, in-process and as a CLI.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awc::Client;
use smsgw::config::TlsSettings;
use smsgw::tools::phone_sim::{SimEvent, SimOptions, run_phone};
use tokio::sync::mpsc;

use crate::backend_tests;
use crate::helpers::{
    Backend, FAILED_THREE_TIMES, SENDER, SelfSigned, TestApp, poll, run_cli, spawn_app,
    spawn_app_with, timeline,
};

fn start_sim(app: &TestApp, token: &str) -> mpsc::UnboundedReceiver<SimEvent> {
    let (tx, rx) = mpsc::unbounded_channel();
    let options = SimOptions {
        server: app.address.clone(),
        token: token.to_string(),
        fail_rate: 0.0,
        deliver_after: Duration::from_millis(30),
        heartbeat_every: Duration::from_secs(5),
        ca_certs: Vec::new(),
        battery: None,
    };
    actix_web::rt::spawn(run_phone(options, Some(tx), None));
    rx
}

async fn wait_for(
    events: &mut mpsc::UnboundedReceiver<SimEvent>,
    wanted: impl Fn(&SimEvent) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("event in time")
            .expect("simulator running");
        if wanted(&event) {
            return;
        }
    }
}

async fn simulated_phone_delivers_live_sends(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut events = start_sim(&app, &token);
    wait_for(&mut events, |e| *e == SimEvent::Connected).await;
    app.wait_online(&phone_id, true).await;
    let id = app.send_live("via phone-sim").await;
    let message = app.wait_for_status(&app.live_key, &id, "delivered").await;
    let kinds = timeline(&message);
    assert_eq!(kinds, ["queued", "sending", "sent", "delivered"]);
}

async fn simulated_phone_survives_a_server_restart(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut events = start_sim(&app, &token);
    wait_for(&mut events, |e| *e == SimEvent::Connected).await;
    app.wait_online(&phone_id, true).await;
    let app = app.restart().await;
    // The restarted server listens on another port; a real phone would find the same address.
    // Point a new simulator at it with the same token, while the first one keeps retrying.
    let mut events = start_sim(&app, &token);
    wait_for(&mut events, |e| *e == SimEvent::Connected).await;
    app.wait_online(&phone_id, true).await;
    let id = app.send_live("after restart").await;
    app.wait_for_status(&app.live_key, &id, "delivered").await;
}

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Several server URLs: when the node it is connected to goes away, the phone moves on to the
/// next URL, and a message sent there reaches it.
async fn simulated_phone_moves_on_to_the_next_server(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let next = free_port();
    let (tx, mut events) = mpsc::unbounded_channel();
    let options = SimOptions {
        server: format!("{},http://127.0.0.1:{next}", app.address),
        token: token.clone(),
        fail_rate: 0.0,
        deliver_after: Duration::from_millis(30),
        heartbeat_every: Duration::from_secs(5),
        ca_certs: Vec::new(),
        battery: None,
    };
    actix_web::rt::spawn(run_phone(options, Some(tx), None));
    wait_for(&mut events, |e| *e == SimEvent::Connected).await;
    app.wait_online(&phone_id, true).await;
    // The first node goes away; the same database comes back on the second URL only.
    let app = app
        .restart_with(|s| s.server.bind = format!("127.0.0.1:{next}"))
        .await;
    assert_eq!(app.address, format!("http://127.0.0.1:{next}"));
    wait_for(&mut events, |e| *e == SimEvent::Disconnected).await;
    wait_for(&mut events, |e| *e == SimEvent::Connected).await;
    app.wait_online(&phone_id, true).await;
    let id = app.send_live("on the next node").await;
    app.wait_for_status(&app.live_key, &id, "delivered").await;
}

/// Runs `phone-sim` with `args` and a token no server knows: it exits 1 saying it was refused.
async fn sim_refuses_a_bad_token(args: &[&str]) {
    let args = [&["phone-sim"], args, &["--token", "dt_not_a_real_token"]].concat();
    let output = run_cli(&args, &[]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("refused"));
}

async fn cli_refuses_a_bad_token(backend: Backend) {
    let app = spawn_app(backend).await;
    sim_refuses_a_bad_token(&["--server", &app.address]).await;
    // With several URLs (comma-separated), a dead one is passed over and the live one answers.
    let servers = format!("http://127.0.0.1:{},{}", free_port(), app.address);
    sim_refuses_a_bad_token(&["--server", &servers]).await;
}

/// `--protocol smsgate`: the simulator speaks the device API as the SMSGate Android app does.
async fn smsgate_simulator_sends_and_forwards_inbound(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let (tx, mut events) = mpsc::unbounded_channel();
    let (commands, commands_rx) = mpsc::unbounded_channel();
    let options = SimOptions {
        server: app.address.clone(),
        token: token.clone(),
        fail_rate: 0.0,
        deliver_after: Duration::from_millis(30),
        heartbeat_every: Duration::from_secs(5),
        ca_certs: Vec::new(),
        battery: None,
    };
    actix_web::rt::spawn(smsgw::tools::phone_sim::smsgate::run_phone(
        options,
        Some(tx),
        Some(commands_rx),
    ));
    wait_for(&mut events, |e| *e == SimEvent::Connected).await;
    app.wait_online(&phone_id, true).await;
    let id = app.send_live("via the device API").await;
    let message = app.wait_for_status(&app.live_key, &id, "delivered").await;
    let kinds = timeline(&message);
    assert_eq!(kinds, ["queued", "sending", "sent", "delivered"]);
    // An inbound SMS goes to the server as a signed webhook and is stored.
    commands
        .send(smsgw::tools::phone_sim::SimCommand::Receive {
            from: "+14155550177".into(),
            content: "hello from a customer".into(),
        })
        .unwrap();
    wait_for(&mut events, |e| matches!(e, SimEvent::Acked { .. })).await;
    let inbound = app
        .get("/v1/messages?direction=inbound", &app.live_key)
        .await
        .expect(200);
    let inbound = inbound.data()["messages"].as_array().unwrap();
    assert_eq!(inbound.len(), 1);
    assert_eq!(inbound[0]["content"], "hello from a customer");
    // The CLI refuses a bad token over this protocol too.
    sim_refuses_a_bad_token(&["--protocol", "smsgate", "--server", &app.address]).await;
}

/// A message the phone fails is sent again by the simulated app: each retry comes under a new
/// app id, which the app (and the sim) has not seen.
async fn smsgate_simulator_sends_each_retry(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let (tx, mut events) = mpsc::unbounded_channel();
    let options = SimOptions {
        server: app.address.clone(),
        token,
        fail_rate: 1.0,
        deliver_after: Duration::from_millis(30),
        heartbeat_every: Duration::from_secs(5),
        ca_certs: Vec::new(),
        battery: None,
    };
    actix_web::rt::spawn(smsgw::tools::phone_sim::smsgate::run_phone(
        options,
        Some(tx),
        None,
    ));
    wait_for(&mut events, |e| *e == SimEvent::Connected).await;
    app.wait_online(&phone_id, true).await;
    let id = app.send_live("fails every time").await;
    let message = app.wait_for_status(&app.live_key, &id, "failed").await;
    let kinds = timeline(&message);
    // messages.max_send_attempts = 3: three sends, each reported failed by the phone.
    assert_eq!(kinds, FAILED_THREE_TIMES);
    let mut sends = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let SimEvent::Send {
            attempt, repeat, ..
        } = event
        {
            sends.push((attempt, repeat));
        }
    }
    assert_eq!(sends, [(1, false), (2, false), (3, false)]);
}

/// A running `smsgw phone-sim` (no `SSL_CERT_FILE` from the test's environment); its stdout
/// lines are collected as they come. Killed when dropped.
struct SimProcess {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl SimProcess {
    fn start(args: &[&str]) -> SimProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_smsgw"))
            .arg("phone-sim")
            .args(args)
            .env_remove("SSL_CERT_FILE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("phone-sim starts");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        SimProcess { child, lines }
    }

    /// Writes `text` to the simulator's stdin.
    fn type_in(&mut self, text: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The first printed line for which `wanted` holds; panics after 15 s with every line.
    async fn line(&self, wanted: impl Fn(&str) -> bool) -> String {
        poll(
            Duration::from_secs(15),
            Duration::from_millis(20),
            async || {
                let lines = self.lines.lock().unwrap();
                lines
                    .iter()
                    .find(|l| wanted(l))
                    .cloned()
                    .ok_or_else(|| format!("no such line among {lines:?}"))
            },
        )
        .await
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A self-signed certificate for 127.0.0.1 in a temporary directory: the server's settings,
/// the PEM file to give `--ca-file`, and an API client that trusts it.
fn self_signed() -> (tempfile::TempDir, TlsSettings, String, Client) {
    served(SelfSigned::leaf())
}

/// [`self_signed`] with a certificate made as docs/android.md's `openssl req -x509` line makes
/// it (a CA certificate).
fn openssl_like() -> (tempfile::TempDir, TlsSettings, String, Client) {
    served(SelfSigned::openssl_like())
}

fn served(cert: SelfSigned) -> (tempfile::TempDir, TlsSettings, String, Client) {
    let (dir, tls, cert_file) = cert.files();
    (dir, tls, cert_file, cert.client(&[]))
}

/// The certificate docs/android.md has people make is a CA certificate: with it in
/// `--ca-file` the phone trusts it as the server's own (as curl --cacert does) and delivers,
/// over either transport; another such certificate is refused, and the reconnect line says why.
async fn cli_trusts_the_self_signed_ca_certificate_it_is_given(backend: Backend) {
    let (_dir, tls, ca_file, client) = openssl_like();
    let (_other_dir, _, other_ca_file, _) = openssl_like();
    let mut app = spawn_app_with(backend, |s| s.server.tls = Some(tls)).await;
    app.address = app.address.replacen("http://", "https://", 1);
    app.client = client;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    for protocol in ["websocket", "smsgate"] {
        let args = |ca_file| {
            [
                "--protocol",
                protocol,
                "--server",
                &app.address,
                "--token",
                &token,
                "--ca-file",
                ca_file,
            ]
        };
        let other = SimProcess::start(&args(&other_ca_file));
        let line = other.line(|l| l.starts_with("reconnecting in")).await;
        assert!(
            line.contains(" ms: TLS: invalid peer certificate: CaUsedAsEndEntity (it is a CA")
                && line.ends_with("only when --ca-file holds that very certificate)"),
            "{protocol}: {line}"
        );
        drop(other);

        let trusted = SimProcess::start(&args(&ca_file));
        trusted.line(|l| l == "connected").await;
        app.wait_online(&phone_id, true).await;
        let id = app.send_live(&format!("{protocol} over pinned TLS")).await;
        app.wait_for_status(&app.live_key, &id, "delivered").await;
        drop(trusted);
        if protocol == "websocket" {
            // The same phone comes back over the device API next: its session ends first.
            app.wait_online(&phone_id, false).await;
        }
    }
}

/// Against a server with a self-signed certificate: without `--ca-file` each reconnect line
/// names the TLS failure; with it the phone connects and delivers; a `--server` with the API
/// path gets the 404 hint.
async fn cli_trusts_a_ca_file_and_says_why_it_reconnects(backend: Backend) {
    let (_dir, tls, ca_file, client) = self_signed();
    let mut app = spawn_app_with(backend, |s| s.server.tls = Some(tls)).await;
    app.address = app.address.replacen("http://", "https://", 1);
    app.client = client;
    let (phone_id, token) = app.pair_phone(SENDER).await;

    let untrusted = SimProcess::start(&["--server", &app.address, "--token", &token]);
    let line = untrusted.line(|l| l.starts_with("reconnecting in")).await;
    assert!(
        line.contains(" ms: TLS: ") && line.contains("UnknownIssuer"),
        "{line}"
    );
    drop(untrusted);

    let api_url = format!("{}/api/mobile/v1", app.address);
    for protocol in ["websocket", "smsgate"] {
        let args = [
            "--server",
            &api_url,
            "--token",
            &token,
            "--ca-file",
            &ca_file,
            "--protocol",
            protocol,
        ];
        let wrong_url = SimProcess::start(&args);
        let line = wrong_url.line(|l| l.starts_with("reconnecting in")).await;
        assert!(
            line.ends_with(
                "HTTP 404 — --server is the base URL (https://host:port), not …/api/mobile/v1"
            ),
            "{protocol}: {line}"
        );
    }

    let trusted = SimProcess::start(&[
        "--server",
        &app.address,
        "--token",
        &token,
        "--ca-file",
        &ca_file,
    ]);
    trusted.line(|l| l == "connected").await;
    app.wait_online(&phone_id, true).await;
    let id = app.send_live("over TLS, trusted by --ca-file").await;
    app.wait_for_status(&app.live_key, &id, "delivered").await;
    trusted.line(|l| l == format!("delivered {id}")).await;
    drop(trusted);

    // android.md §7 as written: the device API over HTTPS, with an incoming SMS.
    let (_, token) = app.pair_phone("+14155550101").await;
    let app_like = SimProcess::start(&[
        "--protocol",
        "smsgate",
        "--server",
        &app.address,
        "--token",
        &token,
        "--ca-file",
        &ca_file,
        "--receive",
        "+14155550123: hello over TLS",
    ]);
    app_like.line(|l| l.starts_with("ack ")).await;
    let inbound = app
        .get("/v1/messages?direction=inbound", &app.live_key)
        .await
        .expect(200);
    assert_eq!(inbound.data()["messages"][0]["content"], "hello over TLS");
}

/// A refused connection is named on the reconnect line.
#[test]
fn cli_names_a_refused_connection() {
    crate::helpers::run(async {
        let server = format!("http://127.0.0.1:{}", free_port());
        let sim = SimProcess::start(&["--server", &server, "--token", "dt_x"]);
        let line = sim.line(|l| l.starts_with("reconnecting in")).await;
        assert!(line.ends_with(" ms: connection refused"), "{line}");
    });
}

/// `--receive "FROM: TEXT"` (and `--receive -` with lines on stdin) makes the phone report an
/// incoming SMS once connected, over either transport; it is stored as an inbound message.
async fn cli_receives_sms_from_the_command_line(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut expected = Vec::new();
    for (protocol, number) in [("websocket", SENDER), ("smsgate", "+14155550101")] {
        let (_, token) = app.pair_phone(number).await;
        let from_args = format!("{protocol} from the command line");
        let mut sim = SimProcess::start(&[
            "--server",
            &app.address,
            "--token",
            &token,
            "--protocol",
            protocol,
            "--receive",
            &format!("+14155550123: {from_args}"),
            "--receive",
            "-",
        ]);
        sim.line(|l| l == "connected").await;
        let from_stdin = format!("{protocol} from stdin");
        sim.type_in(&format!("+14155550124: {from_stdin}\n"));
        expected.extend([from_args, from_stdin]);
        poll(
            Duration::from_secs(15),
            Duration::from_millis(50),
            async || {
                let reply = app
                    .get("/v1/messages?direction=inbound", &app.live_key)
                    .await
                    .expect(200);
                let mut stored: Vec<String> = reply.data()["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["content"].as_str().unwrap().to_string())
                    .collect();
                stored.sort();
                let mut wanted = expected.clone();
                wanted.sort();
                (stored == wanted)
                    .then_some(())
                    .ok_or(format!("stored {stored:?}"))
            },
        )
        .await;
    }
}

/// A malformed `--receive` or an unusable `--ca-file` is a usage error: exit 2, nothing run.
#[test]
fn cli_refuses_malformed_receive_and_ca_file() {
    crate::helpers::run(async {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let garbage = garbage.display().to_string();
        for (extra, says) in [
            (["--receive", "hello"], "FROM: TEXT"),
            (["--receive", "+14155550123:"], "FROM: TEXT"),
            (["--ca-file", "/nonexistent/ca.pem"], "/nonexistent/ca.pem"),
            (["--ca-file", garbage.as_str()], "no PEM certificate"),
        ] {
            let args = [
                &[
                    "phone-sim",
                    "--server",
                    "http://127.0.0.1:9",
                    "--token",
                    "dt_x",
                ][..],
                &extra,
            ]
            .concat();
            let output = run_cli(&args, &[]).await;
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
            assert!(stderr.contains(says), "{extra:?}: {stderr}");
        }
    });
}

backend_tests!(
    cli_trusts_a_ca_file_and_says_why_it_reconnects,
    cli_trusts_the_self_signed_ca_certificate_it_is_given,
    cli_receives_sms_from_the_command_line,
    smsgate_simulator_sends_each_retry,
    simulated_phone_delivers_live_sends,
    simulated_phone_survives_a_server_restart,
    simulated_phone_moves_on_to_the_next_server,
    cli_refuses_a_bad_token,
    smsgate_simulator_sends_and_forwards_inbound,
);
