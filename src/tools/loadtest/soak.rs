//! The soak scenario (docs/api.md, `smsgw loadtest`; BENCHMARKS.md "Soak"): a steady moderate
//! load for `--duration` seconds, sampled once a minute, to show what grows.
//!
//! The load: `--rate` single sends per second over the phones in turn; an inbound SMS each
//! second from one phone; a campaign of 100 recipients every five minutes; every event to two
//! webhook endpoints, one healthy (signatures checked, every event counted) and one failing
//! every fourth attempt, so retries run all along; one phone dropping its connection and
//! reconnecting every two minutes. The started server keeps message records for
//! [`RECORD_AFTER`] and content for half that, so its retention sweeps bound the database.
//!
//! Each minute: the server's RSS, its open file descriptors, the database's size, the queued
//! messages (`smsgw_messages{status="queued"}`) and the p99 of that minute's sends. After the
//! warm-up (a sixth of the run, at least a minute), each figure's slope per hour by least
//! squares. At the end every accepted send must have reached a phone, every inbound SMS must
//! have been acknowledged and every campaign completed; anything else counts as lost.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Statement};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use super::{
    LoadError, Report, Run, base_report, campaign_outcome, connect_phones, drain, hooks, phones,
    post, server,
};
use crate::domain::campaign::CampaignStatus;
use crate::domain::webhook_event::EventKind;
use crate::tools::phone_sim::SimCommand;

/// What both endpoints subscribe to.
const SEND_AND_RECEIVE_EVENTS: [EventKind; 3] = [
    EventKind::MessageSent,
    EventKind::MessageDelivered,
    EventKind::MessageReceived,
];

/// How long the started server keeps message records (content: half of it).
pub const RECORD_AFTER: &str = "10m";

/// Configuration the soak's server starts with, beside the harness's usual (server.rs).
pub fn server_env() -> Vec<(String, String)> {
    vec![
        ("SMSGW_RETENTION__RECORD_AFTER".into(), RECORD_AFTER.into()),
        ("SMSGW_RETENTION__CONTENT_AFTER".into(), "5m".into()),
        ("SMSGW_RETENTION__INTERVAL".into(), "30s".into()),
        // Retries of the failing endpoint come soon, so they run all along.
        (
            "SMSGW_WEBHOOKS__RETRY_SCHEDULE".into(),
            "[\"2s\",\"5s\",\"10s\",\"30s\"]".into(),
        ),
    ]
}

/// One minute's sample.
#[derive(Debug, Clone, Serialize)]
pub struct SoakSample {
    pub minute: u64,
    pub rss_mb: Option<f64>,
    pub open_fds: Option<u64>,
    pub database_mb: Option<f64>,
    pub queued: Option<f64>,
    pub send_p99_ms: Option<f64>,
    pub sends: u64,
}

/// The samples and, after the warm-up, each figure's slope per hour.
#[derive(Debug, Clone, Serialize)]
pub struct Soak {
    pub warmup_minutes: u64,
    pub samples: Vec<SoakSample>,
    pub rss_mb_per_hour: Option<f64>,
    pub open_fds_per_hour: Option<f64>,
    pub database_mb_per_hour: Option<f64>,
    pub queued_per_hour: Option<f64>,
    pub send_p99_ms_per_hour: Option<f64>,
}

impl Soak {
    fn of(samples: Vec<SoakSample>, warmup_minutes: u64) -> Soak {
        let after: Vec<&SoakSample> = samples
            .iter()
            .filter(|s| s.minute >= warmup_minutes)
            .collect();
        let slope = |figure: fn(&SoakSample) -> Option<f64>| {
            let points: Vec<(f64, f64)> = after
                .iter()
                .filter_map(|s| figure(s).map(|y| (s.minute as f64 / 60.0, y)))
                .collect();
            slope_per_unit(&points)
        };
        Soak {
            warmup_minutes,
            rss_mb_per_hour: slope(|s| s.rss_mb),
            open_fds_per_hour: slope(|s| s.open_fds.map(|n| n as f64)),
            database_mb_per_hour: slope(|s| s.database_mb),
            queued_per_hour: slope(|s| s.queued),
            send_p99_ms_per_hour: slope(|s| s.send_p99_ms),
            samples,
        }
    }

    /// The table the report prints.
    pub fn text(&self) -> String {
        let opt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.1}"));
        let mut out = String::from("minute  rss MB  fds  db MB  queued  send p99 ms  sends\n");
        for s in &self.samples {
            out.push_str(&format!(
                "{:>6}  {:>6}  {:>3}  {:>5}  {:>6}  {:>11}  {:>5}\n",
                s.minute,
                opt(s.rss_mb),
                s.open_fds.map_or("n/a".into(), |n| n.to_string()),
                opt(s.database_mb),
                opt(s.queued),
                opt(s.send_p99_ms),
                s.sends
            ));
        }
        out.push_str(&format!(
            "slopes per hour after {} min: rss {} MB, fds {}, db {} MB, queued {}, send p99 {} ms\n",
            self.warmup_minutes,
            opt(self.rss_mb_per_hour),
            opt(self.open_fds_per_hour),
            opt(self.database_mb_per_hour),
            opt(self.queued_per_hour),
            opt(self.send_p99_ms_per_hour),
        ));
        out
    }
}

/// Least-squares slope of `points` (x, y); None under three points.
fn slope_per_unit(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The database's size in MB: SQLite's pages in use (the WAL aside), PostgreSQL's
/// `pg_database_size`.
async fn database_mb(db: &sea_orm::DatabaseConnection) -> Option<f64> {
    let backend = db.get_database_backend();
    let sql = if crate::store::is_sqlite(db) {
        "SELECT (SELECT page_count FROM pragma_page_count()) * (SELECT page_size FROM pragma_page_size())"
    } else {
        "SELECT pg_database_size(current_database())"
    };
    let row = db
        .query_one_raw(Statement::from_string(backend, sql.to_string()))
        .await
        .ok()??;
    let bytes: i64 = row.try_get_by_index(0).ok()?;
    Some(bytes as f64 / 1_048_576.0)
}

/// `smsgw_messages{status="queued"}` from the server's /metrics.
async fn queued(run: &Run<'_>) -> Option<f64> {
    let mut response = run
        .client
        .get(format!("{}/metrics", run.target.url))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    let body = response.body().limit(16 << 20).await.ok()?;
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find(|l| l.starts_with("smsgw_messages{") && l.contains("status=\"queued\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// What the load loop counted.
#[derive(Default)]
struct Counted {
    accepted: Vec<(Uuid, Instant)>,
    errors: u64,
    /// 503 `no_device_available`: the sender was reconnecting (an expected refusal).
    offline: u64,
    /// Send latencies (µs) of the current minute.
    minute: Vec<u64>,
    sends_this_minute: u64,
    all_latencies: Vec<u64>,
}

pub(super) async fn soak(mut run: Run<'_>) -> Result<Report, LoadError> {
    let count = run.phone_count().max(2);
    let duration = Duration::from_secs(run.args.duration);
    let rate = run.args.rate.max(1);
    let warmup_minutes = (run.args.duration / 60 / 6).max(1);
    let hooks = hooks(&mut run, &SEND_AND_RECEIVE_EVENTS, false, true)
        .await?
        .ok_or_else(|| LoadError::Setup("the soak needs webhooks".into()))?;
    let (status, body) = post(
        &run,
        "/v1/webhooks",
        &json!({
            "url": format!("{}/flaky", hooks.receiver.url),
            "events": SEND_AND_RECEIVE_EVENTS.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        }),
    )
    .await?;
    if status != 201 {
        return Err(LoadError::Setup(format!(
            "creating the failing endpoint: HTTP {status}: {body}"
        )));
    }
    let (phones, observed) = connect_phones(&run, count).await?;
    let numbers: Vec<String> = phones.iter().map(|p| p.number.clone()).collect();
    let customers = phones::numbers(count + 500);
    let customers: Vec<String> = customers.into_iter().skip(count).collect();
    let db = match &run.target.database_url {
        Some(url) => crate::store::connect(url, 1).await.ok(),
        None => None,
    };
    if db.is_none() {
        run.notes
            .push("database size not measured: the server was not started here".into());
    }

    run.meter.phase("soak", duration.as_secs());
    let counted = Rc::new(RefCell::new(Counted::default()));
    let mut samples = Vec::new();
    let mut campaigns = Vec::new();
    let mut inbound_sent = 0u64;
    let started = Instant::now();
    let mut second = 0u64;
    let mut next_sample = Duration::from_secs(60);
    while started.elapsed() < duration {
        // This second's sends, concurrently; each records its latency.
        for n in 0..rate {
            let i = (second * rate + n) as usize;
            let body = json!({
                "from_number": numbers[i % numbers.len()],
                "to_number": customers[i % customers.len()],
                "content": format!("soak {i}"),
            });
            let counted = counted.clone();
            let client = run.client.clone();
            let url = format!("{}/v1/messages/send", run.target.url);
            let key = run.target.api_key.clone();
            actix_web::rt::spawn(async move {
                let at = Instant::now();
                let reply = client
                    .post(url)
                    .insert_header(("x-api-key", key))
                    .timeout(Duration::from_secs(30))
                    .send_json(&body)
                    .await;
                let took = at.elapsed().as_micros() as u64;
                // What the answer says, read before the tally is borrowed (no borrow across
                // an await: the other sends of this thread update it too).
                let outcome = match reply {
                    Ok(mut response) if response.status().as_u16() == 202 => {
                        let body = response.json::<serde_json::Value>().await.ok();
                        match body
                            .as_ref()
                            .and_then(|b| b["data"]["id"].as_str())
                            .and_then(|id| id.parse::<Uuid>().ok())
                        {
                            Some(id) => Ok(id),
                            None => Err(false),
                        }
                    }
                    Ok(response) if response.status().as_u16() == 503 => Err(true),
                    _ => Err(false),
                };
                let mut counted = counted.borrow_mut();
                match outcome {
                    Ok(id) => counted.accepted.push((id, at)),
                    Err(true) => counted.offline += 1,
                    Err(false) => counted.errors += 1,
                }
                counted.minute.push(took);
                counted.all_latencies.push(took);
                counted.sends_this_minute += 1;
            });
        }
        // An inbound SMS from one phone.
        let phone = &phones[second as usize % phones.len()];
        let _ = phone.commands.send(SimCommand::Receive {
            from: customers[second as usize % customers.len()].clone(),
            content: format!("reply {second}"),
        });
        inbound_sent += 1;
        // A campaign every five minutes.
        if second % 300 == 150 {
            let recipients: Vec<_> = customers
                .iter()
                .skip((second as usize / 300 * 100) % 400)
                .take(100)
                .map(|to| json!({ "to": to }))
                .collect();
            let (status, body) = post(
                &run,
                "/v1/campaigns",
                &json!({
                    "name": format!("soak {second}"),
                    "from_number": numbers[second as usize % numbers.len()],
                    "body": "Soak campaign",
                    "recipients": recipients,
                    "launch_now": true,
                }),
            )
            .await?;
            match body["data"]["id"].as_str() {
                Some(id) if status == 201 => campaigns.push(id.to_string()),
                _ => counted.borrow_mut().errors += 1,
            }
        }
        // A phone drops its connection every two minutes.
        if second % 120 == 60 {
            let phone = &phones[(second as usize / 120) % phones.len()];
            let _ = phone.commands.send(SimCommand::Reconnect);
        }
        if started.elapsed() >= next_sample {
            let minute = next_sample.as_secs() / 60;
            next_sample += Duration::from_secs(60);
            let (minute_latencies, sends) = {
                let mut counted = counted.borrow_mut();
                let sends = std::mem::take(&mut counted.sends_this_minute);
                (std::mem::take(&mut counted.minute), sends)
            };
            let pid = run.target.pid;
            let sample = SoakSample {
                minute,
                rss_mb: pid.and_then(server::rss_mb).map(|(now, _)| now),
                open_fds: pid.and_then(server::open_fds),
                database_mb: match &db {
                    Some(db) => database_mb(db).await,
                    None => None,
                },
                queued: queued(&run).await,
                send_p99_ms: super::percentiles(minute_latencies).map(|l| l.p99),
                sends,
            };
            run.meter.update(
                started.elapsed().as_secs(),
                format!(
                    "rss {:.0} MB, db {:.1} MB",
                    sample.rss_mb.unwrap_or(0.0),
                    sample.database_mb.unwrap_or(0.0)
                ),
            );
            samples.push(sample);
        }
        second += 1;
        let next = started + Duration::from_secs(second);
        actix_web::rt::time::sleep_until(next.into()).await;
    }
    let elapsed = started.elapsed();

    // Every accepted send reaches a phone; every inbound SMS is acknowledged.
    let accepted: Vec<(Uuid, Instant)> = counted.borrow().accepted.clone();
    drain(&run, accepted.len() as u64, || {
        let seen = observed.borrow();
        accepted
            .iter()
            .filter(|(id, _)| seen.dispatched.contains_key(id))
            .count() as u64
    })
    .await;
    drain(&run, inbound_sent, || {
        observed.borrow().inbound_acked.len() as u64
    })
    .await;
    let mut lost = 0u64;
    for id in &campaigns {
        let outcome = campaign_outcome(&run, id).await?;
        if outcome["status"] != CampaignStatus::Completed.as_str() {
            lost += 1;
            run.notes
                .push(format!("campaign {id} ended {}", outcome["status"]));
        }
    }
    run.meter.finish();
    let seen = observed.borrow();
    let undelivered = accepted
        .iter()
        .filter(|(id, _)| !seen.dispatched.contains_key(id))
        .count() as u64;
    let unacked = inbound_sent.saturating_sub(seen.inbound_acked.len() as u64);
    let counted = counted.borrow();
    let mut report = base_report(&run, count);
    report.clients = rate as usize;
    report.duration_s = elapsed.as_secs_f64();
    report.accepted = accepted.len() as u64;
    report.accepted_per_s = accepted.len() as f64 / elapsed.as_secs_f64().max(0.001);
    report.api_latency_ms = super::percentiles(counted.all_latencies.iter().copied());
    report.api_errors = counted.errors;
    report.inbound_ack_latency_ms = super::percentiles(seen.inbound_acked.iter().copied());
    report.phones_connected = seen.connected_count;
    report.pace_violations = phones::pace_violations(&phones, &seen);
    report.duplicates = seen.duplicates;
    report.lost = undelivered + unacked + lost;
    let (rss_now, rss_peak) = super::rss(&run);
    report.server_rss_mb = rss_now;
    report.server_peak_rss_mb = rss_peak;
    if let Ok(inbox) = hooks.receiver.inbox.lock() {
        report.webhooks_delivered = Some(inbox.events.len() as u64);
        report.bad_signatures = inbox.bad_signatures;
        run.notes.push(format!(
            "failing endpoint: {} attempts, {} answered 500",
            inbox.flaky_hits, inbox.flaky_failures
        ));
    }
    run.notes.push(format!(
        "{} sends refused 503 while their phone reconnected",
        counted.offline
    ));
    run.notes.push(format!(
        "{rate} sends/s over {count} phones, 1 inbound SMS/s ({inbound_sent}, {unacked} unacknowledged), {} campaigns of 100, a reconnect every 2 min; {undelivered} accepted sends never reached a phone; records kept {RECORD_AFTER}",
        campaigns.len()
    ));
    report.notes = std::mem::take(&mut run.notes);
    report.soak = Some(Soak::of(samples, warmup_minutes));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::slope_per_unit;

    #[test]
    fn the_slope_is_the_least_squares_line() {
        assert_eq!(slope_per_unit(&[(0.0, 1.0), (1.0, 1.0)]), None);
        let flat = slope_per_unit(&[(0.0, 5.0), (1.0, 5.0), (2.0, 5.0)]).unwrap();
        assert!(flat.abs() < 1e-9);
        let rising = slope_per_unit(&[(0.0, 0.0), (1.0, 2.1), (2.0, 3.9), (3.0, 6.0)]).unwrap();
        assert!((rising - 1.98).abs() < 0.01, "{rising}");
    }
}
