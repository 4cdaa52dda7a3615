//! `smsgw loadtest` (docs/api.md, `smsgw loadtest`): drives a server (started here as a child
//! process, or one already running) with N simulated phones over real WebSockets, K concurrent API
//! clients and a local webhook receiver that verifies every signature; measures a bare actix-web
//! route as the ceiling in the same run; checks that every accepted message reached a phone and
//! every event its receiver; prints the figures and writes them as JSON.

mod ceiling;
mod clients;
mod cluster;
mod phones;
mod receiver;
mod report;
mod server;

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use awc::Client;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::phone_sim::SimCommand;
use clients::StopAfter;
pub use report::{Latency, Report};
use report::{Machine, Meter};
use server::Target;

/// Exit status when the server lacks a feature a scenario needs (the route answers 404).
pub const EXIT_MISSING_FEATURE: u8 = 2;

/// The scenarios of docs/api.md, `smsgw loadtest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Single sends from K clients, pace lifted.
    Send,
    /// Many idle phones: server memory.
    Fleet,
    /// One campaign of many recipients.
    Campaign,
    /// Phones forwarding inbound SMS.
    Inbound,
    /// Sends with one healthy and one hanging webhook endpoint.
    Webhooks,
    /// N nodes on one PostgreSQL database, sends across nodes, one node killed halfway.
    Cluster,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Send => "send",
            Scenario::Fleet => "fleet",
            Scenario::Campaign => "campaign",
            Scenario::Inbound => "inbound",
            Scenario::Webhooks => "webhooks",
            Scenario::Cluster => "cluster",
        }
    }

    fn default_phones(self) -> usize {
        match self {
            Scenario::Fleet => 10_000,
            Scenario::Campaign => 1,
            Scenario::Cluster => 30,
            _ => 10,
        }
    }
}

/// Command-line options of `smsgw loadtest`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadtestArgs {
    #[arg(long, value_enum, default_value_t = Scenario::Send)]
    pub scenario: Scenario,
    /// Simulated phones (default: 10; fleet 10,000; campaign 1).
    #[arg(long)]
    pub phones: Option<usize>,
    /// Concurrent API clients (inbound: messages in flight).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Seconds of load (fleet: seconds idle before memory is read).
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Stop after this many requests instead of after --duration.
    #[arg(long)]
    pub count: Option<u64>,
    /// Campaign scenario: recipients of the campaign.
    #[arg(long, default_value_t = 10_000)]
    pub recipients: usize,
    /// Target a running server instead of starting one (its pace and limits must allow the load).
    #[arg(long, requires = "api_key")]
    pub server: Option<String>,
    /// Live API key of the running server.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Pid of the running server, to read its memory.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Database of the started server (default: a temporary SQLite file). Must be empty.
    /// Cluster scenario: a PostgreSQL server URL; a fresh database is created on it and dropped.
    #[arg(long, alias = "database-url")]
    pub database: Option<String>,
    /// Cluster scenario: nodes started (at least 2).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// HTTP workers of the started server and of the ceiling (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Simulated delay between a phone's `sent` and `delivered` reports.
    #[arg(long, default_value_t = 0)]
    pub deliver_after_ms: u64,
    /// Seconds to wait after the load for every message and event to arrive.
    #[arg(long, default_value_t = 60)]
    pub drain_timeout: u64,
    /// Skip the bare actix-web ceiling measurement.
    #[arg(long)]
    pub no_ceiling: bool,
    /// How the simulated phones talk to the server: `websocket` (smsgw's protocol) or
    /// `smsgate` (the device API, as the SMSGate Android app speaks it).
    #[arg(long, value_enum, default_value_t = crate::phone_sim::Protocol::Websocket)]
    pub transport: crate::phone_sim::Protocol,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// Why a run could not produce figures.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Setup(String),
    #[error(
        "the server does not implement {feature} ({route} answers 404): the {scenario} scenario cannot run"
    )]
    MissingFeature {
        feature: &'static str,
        route: &'static str,
        scenario: &'static str,
    },
}

/// Runs the load test and returns the process exit status: 0 when nothing was lost, 1 when
/// something was lost, duplicated, badly signed or paced wrong (or setup failed), 2 when the
/// server lacks the scenario's feature.
pub async fn run(args: LoadtestArgs) -> u8 {
    // Ctrl-C drops the run, and with it the child server (killed when its handle drops).
    let outcome = tokio::select! {
        outcome = execute(&args) => outcome,
        _ = tokio::signal::ctrl_c() => Err(LoadError::Setup("interrupted".into())),
    };
    match outcome {
        Ok(report) => {
            let report = report.tidy();
            print!("{}", report.text());
            if let Some(path) = &args.json {
                let written = serde_json::to_vec_pretty(&report)
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| std::fs::write(path, bytes).map_err(|e| e.to_string()));
                if let Err(e) = written {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    return 1;
                }
            }
            let failed = report.lost > 0
                || report.duplicates > 0
                || report.pace_violations > 0
                || report.bad_signatures > 0;
            if failed {
                eprintln!("error: the run lost, duplicated or mis-paced messages (see above)");
                1
            } else {
                0
            }
        }
        Err(err @ LoadError::MissingFeature { .. }) => {
            eprintln!("error: {err}");
            EXIT_MISSING_FEATURE
        }
        Err(err) => {
            eprintln!("error: {err}");
            1
        }
    }
}

/// Everything a scenario works with.
struct Run<'a> {
    args: &'a LoadtestArgs,
    target: Target,
    client: Client,
    meter: Meter,
    notes: Vec<String>,
    workers: usize,
    /// The URLs phones connect to (one node: the target's).
    nodes: Vec<String>,
}

async fn execute(args: &LoadtestArgs) -> Result<Report, LoadError> {
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if args.scenario == Scenario::Cluster {
        return cluster::cluster_scenario(args).await;
    }
    let target = match &args.server {
        Some(url) => Target::existing(
            url.clone(),
            args.api_key.clone().unwrap_or_default(),
            args.server_pid,
        ),
        None => {
            let database = args.database.clone();
            let chosen = args.workers;
            actix_web::rt::task::spawn_blocking(move || Target::start(database.as_deref(), chosen))
                .await
                .map_err(|e| LoadError::Setup(format!("starting the server: {e}")))??
        }
    };
    let run = Run {
        args,
        nodes: vec![target.url.clone()],
        target,
        client: clients::http_client(args.clients),
        meter: Meter::new(),
        notes: Vec::new(),
        workers,
    };
    match args.scenario {
        Scenario::Send | Scenario::Webhooks => send_scenario(run).await,
        Scenario::Fleet => fleet_scenario(run).await,
        Scenario::Campaign => campaign_scenario(run).await,
        Scenario::Inbound => inbound_scenario(run).await,
        // Started above, before any single target.
        Scenario::Cluster => cluster::cluster_scenario(args).await,
    }
}

/// Asks whether a POST route exists: an empty body gets 422 (or 400) from a route that exists,
/// 404 from one that does not. Nothing is written either way.
async fn route_exists(run: &Run<'_>, path: &str) -> Result<bool, LoadError> {
    let response = run
        .client
        .post(format!("{}{path}", run.target.url))
        .insert_header(("x-api-key", run.target.api_key.as_str()))
        .send_json(&json!({}))
        .await
        .map_err(|e| LoadError::Setup(format!("POST {path}: {e}")))?;
    Ok(response.status().as_u16() != 404)
}

/// POSTs and returns (status, body).
async fn post(run: &Run<'_>, path: &str, body: &Value) -> Result<(u16, Value), LoadError> {
    let mut response = run
        .client
        .post(format!("{}{path}", run.target.url))
        .insert_header(("x-api-key", run.target.api_key.as_str()))
        .timeout(Duration::from_secs(120))
        .send_json(body)
        .await
        .map_err(|e| LoadError::Setup(format!("POST {path}: {e}")))?;
    let status = response.status().as_u16();
    let body = response
        .json::<Value>()
        .limit(64 << 20)
        .await
        .unwrap_or(Value::Null);
    Ok((status, body))
}

/// GETs and returns (status, body).
async fn get(run: &Run<'_>, path: &str) -> Result<(u16, Value), LoadError> {
    let mut response = run
        .client
        .get(format!("{}{path}", run.target.url))
        .insert_header(("x-api-key", run.target.api_key.as_str()))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| LoadError::Setup(format!("GET {path}: {e}")))?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// Polls a campaign until it is `completed` (at most the drain timeout); its last record.
async fn campaign_outcome(run: &Run<'_>, id: &str) -> Result<Value, LoadError> {
    let deadline = Instant::now() + Duration::from_secs(run.args.drain_timeout);
    loop {
        let (_, body) = get(run, &format!("/v1/campaigns/{id}")).await?;
        if body["data"]["status"] == "completed" || Instant::now() > deadline {
            return Ok(body["data"].clone());
        }
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A webhook receiver and the endpoint registered for it, when the server has webhooks.
struct Hooks {
    receiver: receiver::Receiver,
}

/// Registers the receiver's healthy endpoint (and a hanging one when asked). None when the
/// server has no webhooks and they are optional.
async fn hooks(
    run: &mut Run<'_>,
    events: &[&str],
    hanging: bool,
    required: bool,
) -> Result<Option<Hooks>, LoadError> {
    if !route_exists(run, "/v1/webhooks").await? {
        if required {
            return Err(LoadError::MissingFeature {
                feature: "webhooks",
                route: "POST /v1/webhooks",
                scenario: run.args.scenario.name(),
            });
        }
        run.notes.push(
            "webhooks: the server has no /v1/webhooks (404); webhook and end-to-end figures not measured"
                .into(),
        );
        return Ok(None);
    }
    let receiver = receiver::start()?;
    let (status, body) = post(
        run,
        "/v1/webhooks",
        &json!({"url": format!("{}/healthy", receiver.url), "events": events}),
    )
    .await?;
    let key = body["data"]["signing_key"].as_str().map(str::to_string);
    match (status, key) {
        (201, Some(key)) => {
            if let Ok(mut inbox) = receiver.inbox.lock() {
                inbox.signing_key = Some(key);
            }
        }
        _ => {
            return Err(LoadError::Setup(format!(
                "creating the webhook endpoint: HTTP {status}: {body} (a running server needs webhooks.allow_insecure_targets = true)"
            )));
        }
    }
    if hanging {
        let (status, body) = post(
            run,
            "/v1/webhooks",
            &json!({"url": format!("{}/hanging", receiver.url), "events": events}),
        )
        .await?;
        if status != 201 {
            return Err(LoadError::Setup(format!(
                "creating the hanging endpoint: HTTP {status}: {body}"
            )));
        }
    }
    Ok(Some(Hooks { receiver }))
}

/// Pairs and connects the phones, waiting until each has connected once.
async fn connect_phones(
    run: &Run<'_>,
    count: usize,
) -> Result<(Vec<phones::Phone>, Rc<RefCell<phones::Observed>>), LoadError> {
    run.meter.phase("pairing", count as u64);
    let (list, observed) = phones::start(
        &run.client,
        &run.target.url,
        &run.nodes,
        &run.target.api_key,
        count,
        Duration::from_millis(run.args.deliver_after_ms),
        run.args.transport,
    )
    .await?;
    run.meter.phase("connecting", count as u64);
    let deadline = Instant::now() + Duration::from_secs(60 + count as u64 / 100);
    loop {
        let connected = observed.borrow().connected_count;
        run.meter.update(connected as u64, String::new());
        if connected >= count {
            break;
        }
        if Instant::now() > deadline {
            return Err(LoadError::Setup(format!(
                "only {connected} of {count} phones connected"
            )));
        }
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((list, observed))
}

fn stop_of(args: &LoadtestArgs) -> StopAfter {
    match args.count {
        Some(n) => StopAfter::Count(n),
        None => StopAfter::Duration(Duration::from_secs(args.duration)),
    }
}

/// Runs the clients against `base` while the meter follows them.
async fn drive(
    run: &Run<'_>,
    phase: &'static str,
    url: &str,
    numbers: &clients::Numbers,
) -> clients::ClientRun {
    let stop = stop_of(run.args);
    let total = match stop {
        StopAfter::Count(n) => n,
        StopAfter::Duration(d) => d.as_secs(),
    };
    run.meter.phase(phase, total);
    let progress = Rc::new(Cell::new(0u64));
    let started = Instant::now();
    let watching = Rc::new(Cell::new(true));
    let ticker = {
        let progress = progress.clone();
        let watching = watching.clone();
        let meter_total = total;
        let count_mode = matches!(stop, StopAfter::Count(_));
        let meter = &run.meter;
        async move {
            while watching.get() {
                let done = progress.get();
                let position = if count_mode {
                    done
                } else {
                    started.elapsed().as_secs().min(meter_total)
                };
                let rate = done as f64 / started.elapsed().as_secs_f64().max(0.001);
                meter.update(position, format!("{done} requests, {rate:.0}/s"));
                actix_web::rt::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let work = async {
        let result = clients::run(
            &run.client,
            &[url.to_string()],
            &run.target.api_key,
            numbers,
            run.args.clients,
            stop,
            progress.clone(),
        )
        .await;
        watching.set(false);
        result
    };
    let (result, ()) = tokio::join!(work, ticker);
    result
}

fn percentiles(samples: impl IntoIterator<Item = u64>) -> Option<Latency> {
    let mut h: Histogram<u64> = clients::histogram();
    for s in samples {
        let _ = h.record(s.clamp(1, 60_000_000));
    }
    Latency::of(&h)
}

fn rss(run: &Run<'_>) -> (Option<f64>, Option<f64>) {
    match run.target.pid.and_then(server::rss_mb) {
        Some((now, peak)) => (Some(now), Some(peak)),
        None => (None, None),
    }
}

/// CPU time of the server and of this harness at one instant (see [`CpuUse::per_accepted`]).
struct CpuUse {
    server: Option<Duration>,
    harness: Option<Duration>,
}

impl CpuUse {
    fn now(run: &Run<'_>) -> CpuUse {
        CpuUse {
            server: run.target.pid.and_then(|pid| server::cpu_time(Some(pid))),
            harness: server::cpu_time(None),
        }
    }

    /// Fills the report's CPU figures: what each process used since `self`, per accepted
    /// item, the ratio of the ceiling the harness's share alone leaves possible, and the
    /// server's CPU per item in bare-route requests.
    fn per_accepted(self, run: &Run<'_>, report: &mut Report) {
        let end = CpuUse::now(run);
        let accepted = report.accepted;
        let per = |start: Option<Duration>, end: Option<Duration>| {
            let used = end?.checked_sub(start?)?;
            (accepted > 0).then(|| used.as_micros() as f64 / accepted as f64)
        };
        report.server_cpu_us_per_accepted = per(self.server, end.server);
        report.harness_cpu_us_per_accepted = per(self.harness, end.harness);
        report.harness_bound_ratio = report
            .harness_cpu_us_per_accepted
            .filter(|us| *us > 0.0)
            .zip(report.ceiling_per_s.filter(|c| *c > 0.0))
            .map(|(us, ceiling)| report.machine.cores as f64 * 1_000_000.0 / us / ceiling);
        report.server_cpu_per_send_bare = report
            .server_cpu_us_per_accepted
            .zip(report.ceiling_per_s.filter(|c| *c > 0.0))
            .map(|(us, ceiling)| us / (report.machine.cores as f64 * 1_000_000.0 / ceiling));
    }
}

fn base_report(run: &Run<'_>, phones: usize) -> Report {
    Report {
        scenario: run.args.scenario.name().into(),
        phones,
        clients: run.args.clients,
        duration_s: 0.0,
        accepted: 0,
        accepted_per_s: 0.0,
        api_latency_ms: None,
        dispatch_latency_ms: None,
        webhooks_delivered: None,
        webhooks_per_s: None,
        e2e_latency_ms: None,
        server_rss_mb: None,
        server_peak_rss_mb: None,
        pace_violations: 0,
        lost: 0,
        duplicates: 0,
        ceiling_per_s: None,
        ceiling_ratio: None,
        api_errors: 0,
        bad_signatures: 0,
        phones_connected: 0,
        inbound_ack_latency_ms: None,
        server_cpu_us_per_accepted: None,
        harness_cpu_us_per_accepted: None,
        harness_bound_ratio: None,
        server_cpu_per_send_bare: None,
        nodes: None,
        takeover_ms: None,
        webhook_after_kill_ms: None,
        machine: Machine::detect(),
        notes: Vec::new(),
    }
}

/// Waits until `done()` holds or the drain timeout passes.
async fn drain(run: &Run<'_>, total: u64, mut done: impl FnMut() -> u64) {
    run.meter.phase("draining", total);
    let deadline = Instant::now() + Duration::from_secs(run.args.drain_timeout);
    loop {
        let n = done();
        run.meter.update(n, String::new());
        if n >= total || Instant::now() > deadline {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Webhook figures over the accepted messages: every kind in `expected` is due once per
/// message (`missing` counts each absent one); end-to-end latency runs from the accept instant
/// to the first kind's arrival; the rate covers every event received.
struct HookFigures {
    delivered: u64,
    per_s: f64,
    e2e: Option<Latency>,
    missing: u64,
    /// Missing events per kind, in `expected` order.
    missing_by_kind: Vec<(String, u64)>,
    duplicates: u64,
    bad_signatures: u64,
}

fn hook_figures(
    hooks: &Hooks,
    accepted: &[(Uuid, Instant)],
    expected: &[&str],
    since: Instant,
) -> HookFigures {
    let due = (accepted.len() * expected.len()) as u64;
    let Ok(inbox) = hooks.receiver.inbox.lock() else {
        return HookFigures {
            delivered: 0,
            per_s: 0.0,
            e2e: None,
            missing: due,
            missing_by_kind: Vec::new(),
            duplicates: 0,
            bad_signatures: 0,
        };
    };
    let mut seen = std::collections::HashMap::new();
    let mut last = since;
    for received in inbox.events.values() {
        last = last.max(received.at);
        if let Some(id) = received.message_id {
            seen.insert((id, received.event.as_str()), received.at);
        }
    }
    let mut e2e = Vec::new();
    let mut missing = 0;
    let mut missing_by_kind: Vec<(String, u64)> =
        expected.iter().map(|k| (k.to_string(), 0)).collect();
    for (id, at) in accepted {
        for (i, kind) in expected.iter().enumerate() {
            match seen.get(&(*id, *kind)) {
                Some(hook) if i == 0 => {
                    e2e.push(hook.saturating_duration_since(*at).as_micros() as u64)
                }
                Some(_) => {}
                None => {
                    missing += 1;
                    if let Some(slot) = missing_by_kind.get_mut(i) {
                        slot.1 += 1;
                    }
                }
            }
        }
    }
    let delivered = inbox.events.len() as u64;
    HookFigures {
        delivered,
        per_s: delivered as f64 / last.duration_since(since).as_secs_f64().max(0.001),
        e2e: percentiles(e2e),
        missing,
        missing_by_kind,
        duplicates: inbox.duplicates,
        bad_signatures: inbox.bad_signatures,
    }
}

/// Events due per sent message, the one timed end to end first.
const SEND_EVENTS: [&str; 2] = ["message.delivered", "message.sent"];

/// `send` and `webhooks`: K clients send single messages through N phones.
async fn send_scenario(mut run: Run<'_>) -> Result<Report, LoadError> {
    let webhooks = run.args.scenario == Scenario::Webhooks;
    let count = run
        .args
        .phones
        .unwrap_or(run.args.scenario.default_phones());
    let hooks = hooks(
        &mut run,
        &["message.sent", "message.delivered"],
        webhooks,
        webhooks,
    )
    .await?;
    let (phones, observed) = connect_phones(&run, count).await?;
    let from: Vec<String> = phones.iter().map(|p| p.number.clone()).collect();
    // Recipients: valid numbers that are none of the phones.
    let senders: HashSet<&String> = from.iter().collect();
    let numbers = clients::Numbers {
        to: phones::numbers(from.len() + clients::RECIPIENTS)
            .into_iter()
            .filter(|n| !senders.contains(n))
            .take(clients::RECIPIENTS)
            .collect(),
        from: from.into(),
    };
    let mut report = base_report(&run, count);
    if !run.args.no_ceiling {
        let bare = ceiling::start(run.workers)?;
        let bare_run = drive(&run, "ceiling", &bare.send_url.clone(), &numbers).await;
        drop(bare);
        report.ceiling_per_s =
            Some(bare_run.accepted.len() as f64 / bare_run.elapsed.as_secs_f64().max(0.001));
    }
    let load_start = Instant::now();
    let cpu = CpuUse::now(&run);
    let url = format!("{}/v1/messages/send", run.target.url);
    let load = drive(&run, "sending", &url, &numbers).await;
    let accepted = load.accepted.len() as u64;
    let (rss_now, rss_peak) = rss(&run);
    drain(&run, accepted, || {
        let seen = observed.borrow();
        load.accepted
            .iter()
            .filter(|(id, _)| seen.dispatched.contains_key(id))
            .count() as u64
    })
    .await;
    if let Some(hooks) = &hooks {
        drain(&run, accepted * 2, || {
            accepted * 2 - hook_figures(hooks, &load.accepted, &SEND_EVENTS, load_start).missing
        })
        .await;
    }
    run.meter.finish();
    let seen = observed.borrow();
    let mut dispatch = Vec::with_capacity(load.accepted.len());
    let mut lost = 0;
    for (id, at) in &load.accepted {
        match seen.dispatched.get(id) {
            Some(d) => dispatch.push(d.at.saturating_duration_since(*at).as_micros() as u64),
            None => lost += 1,
        }
    }
    report.duration_s = load.elapsed.as_secs_f64();
    report.accepted = accepted;
    report.accepted_per_s = accepted as f64 / load.elapsed.as_secs_f64().max(0.001);
    report.api_latency_ms = Latency::of(&load.latency_us);
    report.dispatch_latency_ms = percentiles(dispatch);
    report.server_rss_mb = rss_now;
    report.server_peak_rss_mb = rss_peak;
    report.pace_violations = phones::pace_violations(&phones, &seen);
    report.duplicates = seen.duplicates;
    report.api_errors = load.errors;
    report.phones_connected = seen.connected_count;
    report.ceiling_ratio = report
        .ceiling_per_s
        .filter(|c| *c > 0.0)
        .map(|c| report.accepted_per_s / c);
    cpu.per_accepted(&run, &mut report);
    if let Some(hooks) = &hooks {
        let figures = hook_figures(hooks, &load.accepted, &SEND_EVENTS, load_start);
        report.webhooks_delivered = Some(figures.delivered);
        report.webhooks_per_s = Some(figures.per_s);
        report.e2e_latency_ms = figures.e2e;
        report.duplicates += figures.duplicates;
        report.bad_signatures = figures.bad_signatures;
        lost += figures.missing;
        if figures.missing > 0 {
            let by_kind: Vec<String> = figures
                .missing_by_kind
                .iter()
                .map(|(kind, n)| format!("{n} {kind}"))
                .collect();
            run.notes.push(format!(
                "webhooks that never arrived: {}",
                by_kind.join(", ")
            ));
        }
        if webhooks && let Ok(inbox) = hooks.receiver.inbox.lock() {
            run.notes.push(format!(
                "hanging endpoint received {} requests (never answered)",
                inbox.hanging_hits
            ));
        }
    }
    report.lost = lost;
    if let Some(e) = &load.first_error {
        run.notes.push(format!("first API error: {e}"));
    }
    if seen.repeats > 0 {
        run.notes
            .push(format!("{} re-sent frames deduped by phones", seen.repeats));
    }
    run.notes.push(
        "accept -> phone is measured from the client's receipt of the 202 (a frame that beats it counts 0)"
            .into(),
    );
    report.notes = std::mem::take(&mut run.notes);
    Ok(report)
}

/// `fleet`: N idle phones connected; the server's memory after they settle.
async fn fleet_scenario(run: Run<'_>) -> Result<Report, LoadError> {
    let count = run
        .args
        .phones
        .unwrap_or(run.args.scenario.default_phones());
    let (rss_before, _) = rss(&run);
    let started = Instant::now();
    let (_phones, observed) = connect_phones(&run, count).await?;
    let connect_time = started.elapsed();
    let idle = Duration::from_secs(run.args.duration);
    run.meter.phase("idle", idle.as_secs());
    let idle_start = Instant::now();
    while idle_start.elapsed() < idle {
        run.meter
            .update(idle_start.elapsed().as_secs(), String::new());
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
    }
    run.meter.finish();
    let (rss_now, rss_peak) = rss(&run);
    let seen = observed.borrow();
    let mut report = base_report(&run, count);
    report.clients = 0;
    report.duration_s = idle.as_secs_f64();
    report.server_rss_mb = rss_now;
    report.server_peak_rss_mb = rss_peak;
    report.phones_connected = seen.connected_count;
    report.lost = (count - seen.connected_count.min(count)) as u64;
    let mut notes = run.notes;
    notes.push(format!(
        "{count} phones paired and connected in {:.1} s; {} disconnects while idle",
        connect_time.as_secs_f64(),
        seen.disconnects
    ));
    if let (Some(before), Some(after)) = (rss_before, rss_now) {
        notes.push(format!(
            "server RSS before the phones {before:.1} MB; {:.1} KB per connected phone",
            (after - before) * 1024.0 / count.max(1) as f64
        ));
    }
    report.notes = notes;
    Ok(report)
}

/// `inbound`: phones forward SMS as `received` frames, `--clients` in flight at a time.
async fn inbound_scenario(mut run: Run<'_>) -> Result<Report, LoadError> {
    let count = run
        .args
        .phones
        .unwrap_or(run.args.scenario.default_phones());
    let hooks = hooks(&mut run, &["message.received"], false, false).await?;
    let (phones, observed) = connect_phones(&run, count).await?;
    let stop = stop_of(run.args);
    let total = match stop {
        StopAfter::Count(n) => n,
        StopAfter::Duration(d) => d.as_secs(),
    };
    run.meter.phase("inbound", total);
    let started = Instant::now();
    let cpu = CpuUse::now(&run);
    let mut injected: u64 = 0;
    let in_flight = run.args.clients.max(1) as u64;
    loop {
        let more = match stop {
            StopAfter::Count(n) => injected < n,
            StopAfter::Duration(d) => started.elapsed() < d,
        };
        if !more {
            break;
        }
        let acked = observed.borrow().inbound_acked.len() as u64;
        if injected - acked >= in_flight {
            actix_web::rt::time::sleep(Duration::from_micros(200)).await;
            continue;
        }
        let phone = &phones[(injected as usize) % phones.len()];
        let _ = phone.commands.send(SimCommand::Receive {
            from: "+14155550123".into(),
            content: format!("loadtest inbound {injected}"),
        });
        injected += 1;
        if injected.is_multiple_of(64) {
            let position = match stop {
                StopAfter::Count(_) => injected,
                StopAfter::Duration(_) => started.elapsed().as_secs(),
            };
            run.meter.update(position, format!("{acked} stored"));
            actix_web::rt::task::yield_now().await;
        }
    }
    let elapsed = started.elapsed();
    let (rss_now, rss_peak) = rss(&run);
    drain(&run, injected, || {
        observed.borrow().inbound_acked.len() as u64
    })
    .await;
    let mut lost_hooks = 0;
    let mut report = base_report(&run, count);
    if let Some(hooks) = &hooks {
        let delivered = || {
            hooks.receiver.inbox.lock().map_or(0, |i| {
                i.events
                    .values()
                    .filter(|e| e.event == "message.received")
                    .count() as u64
            })
        };
        drain(&run, injected, delivered).await;
        let figures = hook_figures(hooks, &[], &["message.received"], started);
        let received = delivered();
        lost_hooks = injected.saturating_sub(received);
        report.webhooks_delivered = Some(figures.delivered);
        report.webhooks_per_s = Some(figures.per_s);
        report.duplicates += figures.duplicates;
        report.bad_signatures = figures.bad_signatures;
    }
    run.meter.finish();
    let seen = observed.borrow();
    let acked = seen.inbound_acked.len() as u64;
    // The rate runs until the last SMS was stored, not until the last was forwarded.
    let elapsed = seen
        .last_ack
        .map_or(elapsed, |at| at.duration_since(started).max(elapsed));
    report.clients = run.args.clients;
    report.duration_s = elapsed.as_secs_f64();
    report.accepted = acked;
    report.accepted_per_s = acked as f64 / elapsed.as_secs_f64().max(0.001);
    cpu.per_accepted(&run, &mut report);
    report.inbound_ack_latency_ms = percentiles(seen.inbound_acked.iter().copied());
    report.server_rss_mb = rss_now;
    report.server_peak_rss_mb = rss_peak;
    report.phones_connected = seen.connected_count;
    report.duplicates += seen.duplicates;
    report.lost = injected.saturating_sub(acked) + lost_hooks;
    let mut notes = run.notes;
    notes.push(format!(
        "{injected} inbound SMS forwarded; accepted = stored (acked) by the server; --clients = SMS in flight"
    ));
    report.notes = notes;
    Ok(report)
}

/// `campaign`: one campaign of `--recipients` recipients through one phone, pace lifted.
async fn campaign_scenario(mut run: Run<'_>) -> Result<Report, LoadError> {
    if !route_exists(&run, "/v1/campaigns").await? {
        return Err(LoadError::MissingFeature {
            feature: "campaigns",
            route: "POST /v1/campaigns",
            scenario: "campaign",
        });
    }
    let count = run
        .args
        .phones
        .unwrap_or(run.args.scenario.default_phones());
    let hooks = hooks(
        &mut run,
        &["message.sent", "message.delivered"],
        false,
        false,
    )
    .await?;
    let (phones, observed) = connect_phones(&run, count).await?;
    let Some(sender) = phones.first().map(|p| p.number.clone()) else {
        return Err(LoadError::Setup("the campaign needs a phone".into()));
    };
    let all = phones::numbers(count + run.args.recipients);
    let recipients: Vec<Value> = all
        .iter()
        .skip(count)
        .enumerate()
        .map(|(i, to)| json!({"to": to, "vars": {"name": format!("r{i}")}}))
        .collect();
    let total = recipients.len() as u64;
    let body = json!({
        "name": "loadtest campaign",
        "from_number": sender,
        "body": "Hello {{name}}, this is a load test",
        "recipients": recipients,
        "launch_now": true,
    });
    let started = Instant::now();
    let cpu = CpuUse::now(&run);
    let (status, reply) = post(&run, "/v1/campaigns", &body).await?;
    let created_in = started.elapsed();
    if status != 201 {
        return Err(LoadError::Setup(format!(
            "creating the campaign: HTTP {status}: {reply}"
        )));
    }
    let campaign_id = reply["data"]["id"].as_str().unwrap_or_default().to_string();
    drain(&run, total, || observed.borrow().dispatched.len() as u64).await;
    let elapsed = started.elapsed();
    let (rss_now, rss_peak) = rss(&run);
    let mut report = base_report(&run, count);
    let dispatched_ids: Vec<(Uuid, Instant)> = observed
        .borrow()
        .dispatched
        .iter()
        .map(|(id, d)| (*id, d.at))
        .collect();
    if let Some(hooks) = &hooks {
        drain(&run, dispatched_ids.len() as u64 * 2, || {
            dispatched_ids.len() as u64 * 2
                - hook_figures(hooks, &dispatched_ids, &SEND_EVENTS, started).missing
        })
        .await;
        let figures = hook_figures(hooks, &dispatched_ids, &SEND_EVENTS, started);
        report.webhooks_delivered = Some(figures.delivered);
        report.webhooks_per_s = Some(figures.per_s);
        report.duplicates += figures.duplicates;
        report.bad_signatures = figures.bad_signatures;
        report.lost += figures.missing;
    }
    // The campaign itself must end `completed`, every recipient delivered.
    let outcome = campaign_outcome(&run, &campaign_id).await?;
    run.meter.finish();
    let seen = observed.borrow();
    let dispatched = seen.dispatched.len() as u64;
    let mut latency = clients::histogram();
    let _ = latency.record((created_in.as_micros() as u64).clamp(1, 60_000_000));
    report.clients = 1;
    report.duration_s = elapsed.as_secs_f64();
    report.accepted = dispatched;
    report.accepted_per_s = dispatched as f64 / elapsed.as_secs_f64().max(0.001);
    cpu.per_accepted(&run, &mut report);
    report.api_latency_ms = Latency::of(&latency);
    report.server_rss_mb = rss_now;
    report.server_peak_rss_mb = rss_peak;
    report.phones_connected = seen.connected_count;
    report.pace_violations = phones::pace_violations(&phones, &seen);
    report.duplicates += seen.duplicates;
    report.lost += total.saturating_sub(dispatched);
    let mut notes = run.notes;
    notes.push(format!(
        "campaign {campaign_id}: {total} recipients; accepted = recipients handed to the phone; api latency = the create request"
    ));
    let delivered = outcome["counts"]["delivered"].as_u64().unwrap_or(0);
    notes.push(format!(
        "campaign status {} with {delivered} of {total} delivered (started {}, finished {})",
        outcome["status"].as_str().unwrap_or("unknown"),
        outcome["started_at"].as_str().unwrap_or("-"),
        outcome["finished_at"].as_str().unwrap_or("-"),
    ));
    // A campaign that did not complete lost its undelivered recipients, as far as the run goes.
    if outcome["status"] != "completed" {
        report.lost += total.saturating_sub(delivered).max(1);
    }
    report.notes = notes;
    Ok(report)
}
