//! Webhook delivery benchmark (BENCHMARKS.md, "Webhooks"): runs the server in-process on a
//! fresh SQLite database with local receivers on 127.0.0.1 (name resolution is a fixed table,
//! so nothing leaves the machine), then measures
//!
//! 1. throughput: signed deliveries per second from test-mode sends (message.sent and
//!    message.delivered per message) to `--endpoints` receivers, every signature verified,
//!    none lost, no duplicates;
//! 2. isolation: the delay (API accept → receipt of message.sent) a healthy endpoint sees,
//!    alone and while another endpoint hangs 10 s on every request.
//!
//! `cargo run --release --example bench_webhooks -- [--messages N] [--endpoints E]`

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::{Value, json};
use smsgw::domain::phone_number::PhoneNumber;
use smsgw::domain::signing;
use smsgw::outbound::target::StaticResolver;
use smsgw::startup::{Application, Hooks};

#[derive(Default)]
struct Tally {
    key: String,
    delay: Duration,
    event_ids: HashSet<String>,
    received: usize,
    duplicates: usize,
    bad_signatures: usize,
    first: Option<Instant>,
    last: Option<Instant>,
    /// First receipt of message.sent per message id.
    sent_at: HashMap<String, Instant>,
    /// Requests wait until this turns true (lets a backlog build up first).
    gate: Option<tokio::sync::watch::Receiver<bool>>,
}

type Shared = Arc<Mutex<Tally>>;

async fn receive(req: HttpRequest, body: web::Bytes, tally: web::Data<Shared>) -> HttpResponse {
    let gate = tally.lock().unwrap_or_else(|e| e.into_inner()).gate.clone();
    if let Some(mut gate) = gate {
        let _ = gate.wait_for(|open| *open).await;
    }
    let now = Instant::now();
    let delay = {
        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let timestamp: i64 = header("x-timestamp").parse().unwrap_or(0);
        let unix_now = chrono::Utc::now().timestamp();
        if signing::verify(&t.key, &body, &header("x-signature"), timestamp, unix_now).is_err() {
            t.bad_signatures += 1;
        }
        t.received += 1;
        t.first.get_or_insert(now);
        t.last = Some(now);
        if !t.event_ids.insert(header("x-event-id")) {
            t.duplicates += 1;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&body)
            && v["event"] == "message.sent"
            && let Some(id) = v["message"]["id"].as_str()
        {
            t.sent_at.entry(id.to_string()).or_insert(now);
        }
        t.delay
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    HttpResponse::Ok().finish()
}

fn start_receiver(
    delay: Duration,
    gate: Option<tokio::sync::watch::Receiver<bool>>,
) -> (String, Shared) {
    let tally: Shared = Arc::new(Mutex::new(Tally {
        delay,
        gate,
        ..Tally::default()
    }));
    let data = web::Data::new(tally.clone());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .default_service(web::to(receive))
    })
    .workers(1)
    .disable_signals()
    .bind("127.0.0.1:0")
    .unwrap_or_else(|e| panic!("receiver bind: {e}"));
    let url = format!("http://{}/hook", server.addrs()[0]);
    actix_web::rt::spawn(server.run());
    (url, tally)
}

struct Api {
    base: String,
    key: String,
    client: awc::Client,
}

impl Api {
    async fn post(&self, path: &str, body: Value) -> Value {
        let mut res = self
            .client
            .post(format!("{}{path}", self.base))
            .insert_header(("x-api-key", self.key.as_str()))
            .send_json(&body)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        res.json::<Value>()
            .limit(16 << 20)
            .await
            .unwrap_or_else(|e| panic!("POST {path} body: {e}"))
    }

    async fn endpoint(&self, url: &str, tally: &Shared) -> String {
        let created = self
            .post(
                "/v1/webhooks",
                json!({ "url": url, "events": ["message.sent", "message.delivered"] }),
            )
            .await;
        let data = &created["data"];
        tally.lock().unwrap_or_else(|e| e.into_inner()).key =
            data["signing_key"].as_str().unwrap_or("").to_string();
        data["id"].as_str().unwrap_or("").to_string()
    }

    async fn delete(&self, id: &str) {
        let _ = self
            .client
            .delete(format!("{}/v1/webhooks/{id}", self.base))
            .insert_header(("x-api-key", self.key.as_str()))
            .send()
            .await;
    }
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn recipients(n: usize) -> Vec<String> {
    (0..10_000)
        .map(|i| format!("+1415555{i:04}"))
        .filter(|n| PhoneNumber::parse(n).is_ok())
        .cycle()
        .take(n)
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn count_deliveries(db: &sea_orm::DatabaseConnection) -> usize {
    use sea_orm::{EntityTrait, PaginatorTrait};
    match entity::webhook_deliveries::Entity::find().count(db).await {
        Ok(n) => usize::try_from(n).unwrap_or(0),
        Err(err) => {
            eprintln!("count failed: {err}");
            0
        }
    }
}

async fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done()
}

/// Sends `count` messages one by one, `every` apart; returns accept instants by message id.
async fn paced_sends(api: &Api, count: usize, every: Duration) -> HashMap<String, Instant> {
    let mut accepted = HashMap::new();
    for i in 0..count {
        let reply = api
            .post(
                "/v1/messages/send",
                json!({ "from_number": "+14155550100", "to_number": "+14155550123",
                        "content": format!("latency {i}") }),
            )
            .await;
        if let Some(id) = reply["data"]["id"].as_str() {
            accepted.insert(id.to_string(), Instant::now());
        }
        tokio::time::sleep(every).await;
    }
    accepted
}

fn latencies_ms(accepted: &HashMap<String, Instant>, tally: &Shared) -> Vec<f64> {
    let t = tally.lock().unwrap_or_else(|e| e.into_inner());
    let mut out: Vec<f64> = accepted
        .iter()
        .filter_map(|(id, at)| t.sent_at.get(id).map(|r| r.duration_since(*at)))
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

#[actix_web::main]
async fn main() {
    let messages = arg("--messages", 10_000);
    let endpoints = arg("--endpoints", 1).max(1);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let mut settings = common::bench_settings(dir.path(), "error");
    let database_url = settings.database.url.clone();
    settings.server.workers = 1;
    // Long enough that a message's sent report commits before its delivered report.
    settings.test_mode.deliver_after = Duration::from_millis(10);
    // The gate holds the first requests while the backlog builds up.
    settings.webhooks.timeout = Duration::from_secs(600);
    settings.webhooks.allow_insecure_targets = true;
    smsgw::telemetry::init(smsgw::config::LogFormat::Human, "error");
    let hooks = Hooks {
        clock: None,
        resolver: Some(Arc::new(StaticResolver::new())),
    };
    let app = Application::build_with(settings, hooks)
        .await
        .unwrap_or_else(|e| panic!("server: {e}"));
    let keys = app
        .initial_keys
        .clone()
        .unwrap_or_else(|| panic!("fresh database has keys"));
    let base = format!("http://{}", app.address());
    actix_web::rt::spawn(app.run_until_stopped());
    let api = Api {
        base,
        key: keys.test_key,
        client: awc::Client::builder()
            .timeout(Duration::from_secs(60))
            .finish(),
    };

    let db = sea_orm::Database::connect(&database_url)
        .await
        .unwrap_or_else(|e| panic!("database: {e}"));

    // 1. Throughput: the receivers hold requests until every delivery is stored, then the
    // backlog drains; the drain rate is the delivery throughput.
    let (open, gate) = tokio::sync::watch::channel(false);
    let mut receivers = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..endpoints {
        let (url, tally) = start_receiver(Duration::ZERO, Some(gate.clone()));
        ids.push(api.endpoint(&url, &tally).await);
        receivers.push(tally);
    }
    let expected = messages * 2 * endpoints;
    let possible = expected;
    let to = recipients(500);
    let senders = [
        "+14155550100",
        "+14155550101",
        "+14155550102",
        "+14155550103",
    ];
    let started = Instant::now();
    let mut sent = 0;
    let mut batch = 0;
    while sent < messages {
        let n = (messages - sent).min(500);
        let from = senders[batch % senders.len()];
        let reply = api
            .post(
                "/v1/messages/bulk-send",
                json!({ "from_number": from, "to_numbers": &to[..n], "content": "bench" }),
            )
            .await;
        assert_eq!(reply["status"], "success", "bulk send: {reply}");
        sent += n;
        batch += 1;
    }
    let accepted_in = started.elapsed();
    // Production is over when every event fired: the delivery count stops moving. (Under load
    // the test-mode simulator's delivered report can commit before its sent report, which then
    // fires nothing; the events that fired are what must arrive.)
    let mut stored = 0;
    let mut stable_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        let n = count_deliveries(&db).await;
        if n != stored {
            stored = n;
            stable_since = Instant::now();
        }
        if stored == expected || (stored > 0 && stable_since.elapsed() > Duration::from_secs(3)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fired = stored;
    let expected = fired;
    let produced_in = started.elapsed();
    let opened = Instant::now();
    let _ = open.send(true);
    let total = |rs: &Vec<Shared>| {
        rs.iter()
            .map(|t| t.lock().unwrap_or_else(|e| e.into_inner()).received)
            .sum::<usize>()
    };
    let complete = wait_until(Duration::from_secs(300), || total(&receivers) >= expected).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut received, mut unique, mut duplicates, mut bad) = (0, 0, 0, 0);
    let mut last = started;
    for t in &receivers {
        let t = t.lock().unwrap_or_else(|e| e.into_inner());
        received += t.received;
        unique += t.event_ids.len();
        duplicates += t.duplicates;
        bad += t.bad_signatures;
        last = last.max(t.last.unwrap_or(started));
    }
    let span = last.duration_since(opened).as_secs_f64();
    println!(
        "throughput: messages={messages} endpoints={endpoints} possible_events={possible} expected={expected} received={received} \
         unique={unique} lost={} duplicates={duplicates} bad_signatures={bad} complete={complete} \
         events_fired={fired} accepted_in={:.2}s events_stored_in={:.2}s drain={span:.2}s deliveries_per_s={:.0}",
        expected.saturating_sub(unique),
        accepted_in.as_secs_f64(),
        produced_in.as_secs_f64(),
        received as f64 / span
    );
    for id in &ids {
        api.delete(id).await;
    }

    // 2. Isolation: a healthy endpoint's delay, alone and beside one that hangs 10 s.
    let (healthy_url, healthy) = start_receiver(Duration::ZERO, None);
    api.endpoint(&healthy_url, &healthy).await;
    let every = Duration::from_millis(20);
    let alone = paced_sends(&api, 200, every).await;
    wait_until(Duration::from_secs(30), || {
        healthy.lock().map(|t| t.sent_at.len()).unwrap_or(0) >= alone.len()
    })
    .await;
    let base_lat = latencies_ms(&alone, &healthy);
    let (hang_url, hanging) = start_receiver(Duration::from_secs(10), None);
    api.endpoint(&hang_url, &hanging).await;
    let beside = paced_sends(&api, 200, every).await;
    wait_until(Duration::from_secs(30), || {
        latencies_ms(&beside, &healthy).len() >= beside.len()
    })
    .await;
    let hang_lat = latencies_ms(&beside, &healthy);
    let hung = hanging.lock().map(|t| t.received).unwrap_or(0);
    println!(
        "isolation: healthy alone p50={:.1}ms p99={:.1}ms max={:.1}ms (n={}); \
         beside a 10 s hang p50={:.1}ms p99={:.1}ms max={:.1}ms (n={}); hanging endpoint got {hung} requests",
        percentile(&base_lat, 0.5),
        percentile(&base_lat, 0.99),
        base_lat.last().copied().unwrap_or(f64::NAN),
        base_lat.len(),
        percentile(&hang_lat, 0.5),
        percentile(&hang_lat, 0.99),
        hang_lat.last().copied().unwrap_or(f64::NAN),
        hang_lat.len(),
    );
    std::process::exit(0);
}
