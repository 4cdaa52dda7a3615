//! K concurrent API clients: each sends `POST /v1/messages/send` in a loop until the count is
//! reached or the time is up, recording latency and the accept instant of every message.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use awc::Client;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use uuid::Uuid;

/// When the clients stop.
#[derive(Debug, Clone, Copy)]
pub enum StopAfter {
    Count(u64),
    Duration(Duration),
}

/// What the clients measured.
pub struct ClientRun {
    /// Request latency in microseconds.
    pub latency_us: Histogram<u64>,
    /// Every accepted message and when its 202 arrived.
    pub accepted: Vec<(Uuid, Instant)>,
    /// Requests answered with something other than 202 (or not answered).
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
}

/// Progress shared with the reporter: requests answered so far.
pub type Progress = Rc<Cell<u64>>;

/// A fresh latency histogram: 1 µs to 60 s at 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

/// How long the harness keeps an idle pooled connection: under the server's 5 s keep-alive
/// (actix-http's default), so a request never goes out on a connection the server is closing
/// (awc keeps one 15 s by default; such a request fails with "connector has been
/// disconnected", which a loaded machine made frequent between the set-up steps).
const IDLE_CONNECTION_KEPT: Duration = Duration::from_secs(3);

/// The HTTP client of the harness: a connection per API client, generous timeout.
pub fn http_client(connections: usize) -> Client {
    let connector = awc::Connector::new()
        .limit(connections + 16)
        .conn_keep_alive(IDLE_CONNECTION_KEPT);
    Client::builder()
        .connector(connector)
        .timeout(Duration::from_secs(30))
        .finish()
}

/// Distinct recipients the sends rotate over: as many as a business's customer list, so the
/// server reads a new number on most sends (its per-thread cache of parsed numbers holds the
/// few senders, not every recipient).
pub const RECIPIENTS: usize = 10_000;

/// The numbers the sends go between: senders rotate over `from`, so every phone gets its
/// share, and recipients over `to`.
#[derive(Clone)]
pub struct Numbers {
    pub from: Rc<[String]>,
    pub to: Rc<[String]>,
}

impl Numbers {
    /// Body of the i-th send.
    pub fn send_body(&self, i: u64) -> Value {
        let pick = |list: &[String]| {
            list.get((i as usize) % list.len().max(1))
                .cloned()
                .unwrap_or_default()
        };
        json!({
            "from_number": pick(&self.from),
            "to_number": pick(&self.to),
            "content": format!("loadtest message {i}"),
        })
    }
}

/// Runs `clients` concurrent senders against `urls` (the API's send route on each node, or the ceiling's);
/// the accepted message's id is read from the envelope (the bare ceiling answers one too).
pub async fn run(
    client: &Client,
    urls: &[String],
    api_key: &str,
    numbers: &Numbers,
    clients: usize,
    stop: StopAfter,
    progress: Progress,
) -> ClientRun {
    let shared = Rc::new(RefCell::new(ClientRun {
        latency_us: histogram(),
        accepted: Vec::new(),
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
    }));
    let issued = Rc::new(Cell::new(0u64));
    let started = Instant::now();
    let urls: Rc<[String]> = urls.into();
    let mut tasks = Vec::with_capacity(clients);
    for task in 0..clients.max(1) {
        let client = client.clone();
        let urls = urls.clone();
        // Clients spread over the URLs; one whose request fails to get an answer moves on to
        // the next URL, as behind a load balancer (one URL: it stays).
        let mut at = task % urls.len().max(1);
        let key = api_key.to_string();
        let shared = shared.clone();
        let issued = issued.clone();
        let progress = progress.clone();
        let numbers = numbers.clone();
        tasks.push(actix_web::rt::spawn(async move {
            loop {
                let i = issued.get();
                let more = match stop {
                    StopAfter::Count(n) => i < n,
                    StopAfter::Duration(d) => started.elapsed() < d,
                };
                if !more {
                    break;
                }
                issued.set(i + 1);
                let body = numbers.send_body(i);
                let sent = Instant::now();
                let Some(url) = urls.get(at) else { break };
                let result = client
                    .post(url.as_str())
                    .insert_header(("x-api-key", key.as_str()))
                    .send_json(&body)
                    .await;
                let outcome = match result {
                    Ok(mut response) => {
                        let status = response.status().as_u16();
                        match response.json::<Value>().limit(1 << 20).await {
                            Ok(reply) if status == 202 => reply["data"]["id"]
                                .as_str()
                                .and_then(|id| Uuid::parse_str(id).ok())
                                .ok_or_else(|| format!("202 without an id: {reply}")),
                            Ok(reply) => Err(format!("HTTP {status}: {reply}")),
                            Err(e) => Err(format!("HTTP {status}, unreadable body: {e}")),
                        }
                    }
                    Err(e) => {
                        at = (at + 1) % urls.len();
                        Err(format!("request failed: {e}"))
                    }
                };
                let done = Instant::now();
                let mut run = shared.borrow_mut();
                let micros = done.duration_since(sent).as_micros().max(1) as u64;
                let _ = run.latency_us.record(micros.min(60_000_000));
                match outcome {
                    Ok(id) => run.accepted.push((id, done)),
                    Err(e) => {
                        run.errors += 1;
                        run.first_error.get_or_insert(e);
                    }
                }
                progress.set(progress.get() + 1);
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = started.elapsed();
    let mut run = shared.replace(ClientRun {
        latency_us: histogram(),
        accepted: Vec::new(),
        errors: 0,
        first_error: None,
        elapsed,
    });
    run.elapsed = elapsed;
    run
}
