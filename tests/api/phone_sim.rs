//! `smsgw phone-sim`: the simulated phone over the real protocol, in-process and as a CLI.

use std::time::Duration;

use smsgw::phone_sim::{SimEvent, SimOptions, run_phone};
use tokio::sync::mpsc;

use crate::backend_tests;
use crate::helpers::{Backend, FAILED_THREE_TIMES, SENDER, TestApp, run_cli, spawn_app, timeline};

fn start_sim(app: &TestApp, token: &str) -> mpsc::UnboundedReceiver<SimEvent> {
    let (tx, rx) = mpsc::unbounded_channel();
    let options = SimOptions {
        server: app.address.clone(),
        token: token.to_string(),
        fail_rate: 0.0,
        deliver_after: Duration::from_millis(30),
        heartbeat_every: Duration::from_secs(5),
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
    };
    actix_web::rt::spawn(smsgw::phone_sim::smsgate::run_phone(
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
        .send(smsgw::phone_sim::SimCommand::Receive {
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
    };
    actix_web::rt::spawn(smsgw::phone_sim::smsgate::run_phone(
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

backend_tests!(
    smsgate_simulator_sends_each_retry,
    simulated_phone_delivers_live_sends,
    simulated_phone_survives_a_server_restart,
    simulated_phone_moves_on_to_the_next_server,
    cli_refuses_a_bad_token,
    smsgate_simulator_sends_and_forwards_inbound,
);
