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
mod scenarios;
mod server;
mod soak;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use awc::Client;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::domain::campaign::CampaignStatus;
use crate::domain::webhook_event::EventKind;
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
    /// A steady moderate load for --duration, sampled each minute (RSS, file descriptors,
    /// database size, queue, latency) with their slopes after a warm-up.
    Soak,
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
            Scenario::Soak => "soak",
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
    /// Soak scenario: single sends per second.
    #[arg(long, default_value_t = 5)]
    pub rate: u64,
    /// Campaign scenario: recipients of the campaign.
    #[arg(long, default_value_t = 10_000)]
    pub recipients: usize,
    /// Campaign scenario: send from a sender pool of this many lines (docs/api.md, "Pools")
    /// instead of one number; sets the phones to N.
    #[arg(long)]
    pub pool: Option<usize>,
    /// Campaign scenario with --pool: each line's pace, sends per minute (its 30-minute window
    /// is 30 times this), so a run measures lines, not the server.
    #[arg(long, default_value_t = 60)]
    pub pool_pace: u32,
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
    /// Serve only the bare ceiling route (with --workers) until killed: the process the harness
    /// starts to measure the ceiling in.
    #[arg(long, hide = true)]
    pub serve_ceiling: bool,
    /// How the simulated phones talk to the server: `websocket` (smsgw's protocol) or
    /// `smsgate` (the device API, as the SMSGate Android app speaks it).
    #[arg(long, value_enum, default_value_t = crate::tools::phone_sim::Protocol::Websocket)]
    pub transport: crate::tools::phone_sim::Protocol,
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
    if args.serve_ceiling {
        let workers = args.workers.unwrap_or(1);
        return match ceiling::serve(workers).await {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("error: ceiling server: {err}");
                1
            }
        };
    }
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

impl Run<'_> {
    /// Simulated phones of this run: `--phones`, or the scenario's default.
    fn phone_count(&self) -> usize {
        self.args
            .pool
            .or(self.args.phones)
            .unwrap_or(self.args.scenario.default_phones())
    }
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
            let env = match args.scenario {
                Scenario::Soak => soak::server_env(),
                _ => Vec::new(),
            };
            actix_web::rt::task::spawn_blocking(move || {
                Target::start(database.as_deref(), chosen, &env)
            })
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
        Scenario::Send | Scenario::Webhooks => scenarios::send(run).await,
        Scenario::Fleet => scenarios::fleet(run).await,
        Scenario::Campaign => scenarios::campaign(run).await,
        Scenario::Inbound => scenarios::inbound(run).await,
        Scenario::Soak => soak::soak(run).await,
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

/// Sends `body` with `method` and returns (status, body).
async fn call(
    run: &Run<'_>,
    method: actix_web::http::Method,
    path: &str,
    body: &Value,
) -> Result<(u16, Value), LoadError> {
    let mut response = run
        .client
        .request(method.clone(), format!("{}{path}", run.target.url))
        .insert_header(("x-api-key", run.target.api_key.as_str()))
        .timeout(Duration::from_secs(120))
        .send_json(body)
        .await
        .map_err(|e| LoadError::Setup(format!("{method} {path}: {e}")))?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, body))
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
        if body["data"]["status"] == CampaignStatus::Completed.as_str() || Instant::now() > deadline
        {
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
    events: &[EventKind],
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
        &json!({
            "url": format!("{}/healthy", receiver.url),
            "events": events.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        }),
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
            &json!({
                "url": format!("{}/hanging", receiver.url),
                "events": events.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            }),
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
    /// server's CPU per item in units of the ceiling process's CPU per bare-route request.
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
        let cores = report.machine.cores as f64;
        report.server_cpu_per_send_bare = report
            .server_cpu_us_per_accepted
            .zip(report.ceiling_per_s.filter(|c| *c > 0.0))
            .map(|(send, ceiling)| send / (cores * 1_000_000.0 / ceiling));
        report.server_cpu_per_send_bare_cpu = report
            .server_cpu_us_per_accepted
            .zip(report.ceiling_cpu_us_per_request.filter(|us| *us > 0.0))
            .map(|(send, bare)| send / bare);
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
        ceiling_cpu_us_per_request: None,
        api_errors: 0,
        bad_signatures: 0,
        phones_connected: 0,
        inbound_ack_latency_ms: None,
        server_cpu_us_per_accepted: None,
        harness_cpu_us_per_accepted: None,
        harness_bound_ratio: None,
        server_cpu_per_send_bare: None,
        server_cpu_per_send_bare_cpu: None,
        nodes: None,
        takeover_ms: None,
        webhook_after_kill_ms: None,
        webhook_redeliveries: None,
        webhook_in_flight_at_kill: None,
        soak: None,
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

impl HookFigures {
    /// The run's note on webhooks that never arrived, by kind; none when all did.
    fn missing_note(&self) -> Option<String> {
        if self.missing == 0 {
            return None;
        }
        let by_kind: Vec<String> = self
            .missing_by_kind
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        Some(format!(
            "webhooks that never arrived: {}",
            by_kind.join(", ")
        ))
    }
}

fn hook_figures(
    hooks: &Hooks,
    accepted: &[(Uuid, Instant)],
    expected: &[EventKind],
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
    let mut missing_by_kind: Vec<(String, u64)> = expected
        .iter()
        .map(|k| (k.as_str().to_string(), 0))
        .collect();
    for (id, at) in accepted {
        for (i, kind) in expected.iter().enumerate() {
            match seen.get(&(*id, kind.as_str())) {
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
