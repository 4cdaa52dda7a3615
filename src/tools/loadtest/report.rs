//! The report of a run (stdout and `--json PATH`, names of docs/api.md, `smsgw loadtest`) and the
//! progress display (a bar on a terminal, a plain line every few seconds otherwise).

use std::cell::Cell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// p50/p99/max in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    /// From a histogram of microseconds; None when empty.
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Latency {
            p50: ms(h.value_at_quantile(0.50)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        })
    }
}

/// The machine the figures were measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_mb: Option<u64>,
}

impl Machine {
    pub fn detect() -> Machine {
        let memory_mb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
                .map(|kb| kb / 1024)
        });
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_mb,
        }
    }
}

/// One run's figures. Fields a scenario does not measure are null.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub phones: usize,
    pub clients: usize,
    pub duration_s: f64,
    pub accepted: u64,
    pub accepted_per_s: f64,
    pub api_latency_ms: Option<Latency>,
    pub dispatch_latency_ms: Option<Latency>,
    pub webhooks_delivered: Option<u64>,
    pub webhooks_per_s: Option<f64>,
    pub e2e_latency_ms: Option<Latency>,
    pub server_rss_mb: Option<f64>,
    pub server_peak_rss_mb: Option<f64>,
    pub pace_violations: u64,
    pub lost: u64,
    pub duplicates: u64,
    /// The bare actix-web JSON route, same clients, same run.
    pub ceiling_per_s: Option<f64>,
    /// accepted_per_s / ceiling_per_s.
    pub ceiling_ratio: Option<f64>,
    /// CPU time the ceiling's process used per bare-route request it answered, read from
    /// /proc (its threads' scheduler statistics) around the ceiling phase; null without a
    /// ceiling.
    pub ceiling_cpu_us_per_request: Option<f64>,
    pub api_errors: u64,
    pub bad_signatures: u64,
    pub phones_connected: usize,
    /// Inbound scenario: `received` frame → server ack.
    pub inbound_ack_latency_ms: Option<Latency>,
    /// CPU time (user + system) the server used per accepted item, from the start of the load
    /// to the end of the drain; null when its process is not known (`--server` without
    /// `--server-pid`).
    pub server_cpu_us_per_accepted: Option<f64>,
    /// The same for this harness (clients, phones and webhook receiver together).
    pub harness_cpu_us_per_accepted: Option<f64>,
    /// The highest `ceiling_ratio` this machine allows with the harness's own work alone:
    /// all cores spent on the harness (`cores × 1 s ÷ harness_cpu_us_per_accepted` items per
    /// second, the server costing nothing) over `ceiling_per_s`. The clients and receiver
    /// share the machine with the server, so in a steady run `ceiling_ratio` stays below it.
    pub harness_bound_ratio: Option<f64>,
    /// The figure the server's work is steered by: `server_cpu_us_per_accepted` in units of
    /// one bare-route request measured in the same run, `cores × 1 s ÷ ceiling_per_s` (the
    /// machine's CPU over the bare route's rate), so machines of different speeds compare.
    /// Null without a ceiling or the server's CPU. The goal is [`CPU_PER_SEND_GOAL`] or less.
    pub server_cpu_per_send_bare: Option<f64>,
    /// The same cost in units of the CPU the bare route's own process spent per request
    /// (`server_cpu_us_per_accepted ÷ ceiling_cpu_us_per_request`): unlike the figure above it
    /// does not read low when other work shares the cores during the ceiling phase, and it is
    /// about twice as high (the bare route's process does not use every core by itself).
    pub server_cpu_per_send_bare_cpu: Option<f64>,
    /// Cluster scenario: nodes started.
    pub nodes: Option<usize>,
    /// Cluster scenario: for each phone of the killed node, the kill → the first message a
    /// surviving node handed it.
    pub takeover_ms: Option<Latency>,
    /// Cluster scenario: the kill → the first webhook event received after it.
    pub webhook_after_kill_ms: Option<f64>,
    /// Cluster scenario: events delivered a second time because the killed node had sent
    /// them and not yet recorded the attempt (at least once; not counted in `duplicates`).
    pub webhook_redeliveries: Option<u64>,
    /// Cluster scenario: the bound of `webhook_redeliveries`: events of the killed node's
    /// endpoints the receiver had at the kill while their delivery was still pending.
    pub webhook_in_flight_at_kill: Option<u64>,
    /// Soak scenario: the minute samples and their slopes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soak: Option<super::soak::Soak>,
    pub machine: Machine,
    pub notes: Vec<String>,
}

/// The goal for `server_cpu_per_send_bare`, in bare-route requests (docs/api.md, `smsgw loadtest`).
pub const CPU_PER_SEND_GOAL: f64 = 4.0;

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

impl Report {
    /// Rounds rates and sizes to two decimals for reading.
    pub fn tidy(mut self) -> Report {
        self.duration_s = round(self.duration_s);
        self.accepted_per_s = round(self.accepted_per_s);
        self.webhooks_per_s = self.webhooks_per_s.map(round);
        self.server_rss_mb = self.server_rss_mb.map(round);
        self.server_peak_rss_mb = self.server_peak_rss_mb.map(round);
        self.ceiling_per_s = self.ceiling_per_s.map(round);
        self.ceiling_ratio = self.ceiling_ratio.map(|r| (r * 1000.0).round() / 1000.0);
        self.ceiling_cpu_us_per_request = self.ceiling_cpu_us_per_request.map(round);
        self.server_cpu_us_per_accepted = self.server_cpu_us_per_accepted.map(round);
        self.harness_cpu_us_per_accepted = self.harness_cpu_us_per_accepted.map(round);
        self.harness_bound_ratio = self
            .harness_bound_ratio
            .map(|r| (r * 1000.0).round() / 1000.0);
        self.server_cpu_per_send_bare = self.server_cpu_per_send_bare.map(round);
        self.server_cpu_per_send_bare_cpu = self.server_cpu_per_send_bare_cpu.map(round);
        self
    }

    /// The human summary printed to stdout.
    pub fn text(&self) -> String {
        let lat = |l: &Option<Latency>| match l {
            Some(l) => format!(
                "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                l.p50, l.p99, l.max
            ),
            None => "n/a".into(),
        };
        let opt = |v: Option<f64>, unit: &str| match v {
            Some(v) => format!("{v:.2}{unit}"),
            None => "n/a".into(),
        };
        let mut out = String::new();
        let mut line = |k: &str, v: String| out.push_str(&format!("{k:<26} {v}\n"));
        line("scenario", self.scenario.clone());
        line(
            "server CPU per send",
            match (
                self.server_cpu_per_send_bare,
                self.server_cpu_per_send_bare_cpu,
            ) {
                (Some(n), Some(cpu)) => format!(
                    "{n:.1} bare requests (goal ≤ {CPU_PER_SEND_GOAL}); {cpu:.1} by the bare route's own CPU"
                ),
                (Some(n), None) => format!("{n:.1} bare requests (goal ≤ {CPU_PER_SEND_GOAL})"),
                _ => "n/a".into(),
            },
        );
        line(
            "machine",
            format!(
                "{} cores, {} MB",
                self.machine.cores,
                self.machine.memory_mb.unwrap_or(0)
            ),
        );
        line(
            "phones / clients",
            format!(
                "{} ({} connected) / {}",
                self.phones, self.phones_connected, self.clients
            ),
        );
        line("duration", format!("{:.2} s", self.duration_s));
        line("accepted", self.accepted.to_string());
        line("accepted/s", format!("{:.2}", self.accepted_per_s));
        line("ceiling/s (bare actix)", opt(self.ceiling_per_s, ""));
        line(
            "ratio of ceiling",
            opt(self.ceiling_ratio.map(|r| r * 100.0), " %"),
        );
        line("api latency", lat(&self.api_latency_ms));
        line("accept -> phone", lat(&self.dispatch_latency_ms));
        line("inbound -> ack", lat(&self.inbound_ack_latency_ms));
        line(
            "webhooks delivered",
            self.webhooks_delivered
                .map_or("n/a".into(), |n| n.to_string()),
        );
        line("webhooks/s", opt(self.webhooks_per_s, ""));
        line("accept -> webhook", lat(&self.e2e_latency_ms));
        line(
            "cpu per accepted",
            format!(
                "server {}, harness {}",
                opt(self.server_cpu_us_per_accepted, " us"),
                opt(self.harness_cpu_us_per_accepted, " us")
            ),
        );
        line(
            "cpu per bare request",
            opt(self.ceiling_cpu_us_per_request, " us"),
        );
        line(
            "harness bound",
            opt(
                self.harness_bound_ratio.map(|r| r * 100.0),
                " % of ceiling at most",
            ),
        );
        line("server rss", opt(self.server_rss_mb, " MB"));
        line("server peak rss", opt(self.server_peak_rss_mb, " MB"));
        if let Some(nodes) = self.nodes {
            line("nodes", nodes.to_string());
            line("takeover (phones)", lat(&self.takeover_ms));
            line(
                "first webhook after kill",
                opt(self.webhook_after_kill_ms, " ms"),
            );
            line(
                "webhook redeliveries",
                match (self.webhook_redeliveries, self.webhook_in_flight_at_kill) {
                    (Some(again), Some(bound)) => {
                        format!("{again} (in flight at the kill: {bound})")
                    }
                    _ => "n/a".into(),
                },
            );
        }
        line("api errors", self.api_errors.to_string());
        line("bad signatures", self.bad_signatures.to_string());
        line("pace violations", self.pace_violations.to_string());
        line("lost", self.lost.to_string());
        line("duplicates", self.duplicates.to_string());
        if let Some(soak) = &self.soak {
            out.push_str(&soak.text());
        }
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out
    }
}

/// Progress of the current phase.
pub struct Meter {
    bar: Option<ProgressBar>,
    last_line: Cell<Instant>,
    phase: Cell<&'static str>,
}

impl Meter {
    /// A bar when stderr is a terminal, plain lines otherwise.
    pub fn new() -> Meter {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(0);
            if let Ok(style) =
                ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        Meter {
            bar,
            last_line: Cell::new(Instant::now()),
            phase: Cell::new(""),
        }
    }

    /// Starts a phase of `total` steps.
    pub fn phase(&self, name: &'static str, total: u64) {
        self.phase.set(name);
        match &self.bar {
            Some(bar) => {
                bar.set_prefix(name);
                bar.set_length(total);
                bar.set_position(0);
                bar.set_message("");
            }
            None => eprintln!("{name}: started ({total} steps)"),
        }
        self.last_line.set(Instant::now());
    }

    /// Moves the current phase to `position`; plain output prints at most every 2 s.
    pub fn update(&self, position: u64, message: String) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(position);
                bar.set_message(message);
            }
            None => {
                if self.last_line.get().elapsed() >= Duration::from_secs(2) {
                    eprintln!("{}: {position} {message}", self.phase.get());
                    self.last_line.set(Instant::now());
                }
            }
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Default for Meter {
    fn default() -> Self {
        Meter::new()
    }
}
