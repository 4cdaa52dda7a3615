//! `smsgw loadtest --scenario cluster` (docs/api.md, `smsgw loadtest`): N `smsgw serve` nodes on
//! one fresh PostgreSQL database, phones and API clients spread over them, every send crossing
//! nodes (a node's clients send only from phones connected elsewhere), one node killed with
//! SIGKILL halfway; reports cross-node accept → phone, the takeover of the dead node's phones
//! and webhooks, and what was lost, duplicated or mis-paced.
//!
//! Webhooks are delivered at least once: an attempt the killed node had sent but not yet
//! recorded is sent again by the endpoint's next owner (docs/api.md, Webhooks). The scenario
//! counts those apart (`webhook_redeliveries`) and bounds them: at the kill it reads which
//! endpoints the victim held and, right after, which events the receiver already had while
//! their delivery was still pending in the database (`webhook_in_flight_at_kill`). A repeat of
//! any other event, or a second repeat, is a duplicate and fails the run.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use base64::Engine;
use rand::RngCore;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection};

use super::report::{Latency, Meter, Report};
use super::server::{self, Target};
use super::{
    LoadError, LoadtestArgs, Run, StopAfter, base_report, clients, connect_phones, drain,
    hook_figures, hooks, percentiles, phones, stop_of,
};
use crate::domain::ids::EndpointId;
use crate::domain::webhook_event::EventKind;
use crate::store::cluster::{self as leases, LeaseKind};
use crate::store::webhooks;

/// Events due per sent message, the one timed end to end first.
const SEND_EVENTS: [EventKind; 2] = [EventKind::MessageDelivered, EventKind::MessageSent];

/// A database of its own on the PostgreSQL server of `--database-url`, dropped at the end.
struct FreshDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl FreshDatabase {
    async fn create(server_url: &str) -> Result<FreshDatabase, LoadError> {
        if !server_url.starts_with("postgres://") && !server_url.starts_with("postgresql://") {
            return Err(LoadError::Setup(
                "the cluster scenario needs --database-url postgres://USER@HOST:PORT/DB (a PostgreSQL server it may create a database on)".into(),
            ));
        }
        let Some((prefix, _)) = server_url.rsplit_once('/') else {
            return Err(LoadError::Setup(format!(
                "--database-url {server_url}: no /database"
            )));
        };
        let name = format!("smsgw_loadtest_{}", uuid::Uuid::new_v4().simple());
        let admin = Database::connect(server_url)
            .await
            .map_err(|e| LoadError::Setup(format!("connecting to {server_url}: {e}")))?;
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| LoadError::Setup(format!("creating database {name}: {e}")))?;
        Ok(FreshDatabase {
            admin_url: server_url.to_string(),
            url: format!("{prefix}/{name}"),
            name,
        })
    }

    /// Drops the database (the nodes are gone by then; FORCE ends any connection left).
    async fn drop_now(self) {
        if let Ok(admin) = Database::connect(&self.admin_url).await {
            let _ = admin
                .execute_unprepared(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .await;
        }
    }
}

/// Starts the nodes: the first creates the schema and the keys, the others join it.
async fn start_nodes(args: &LoadtestArgs, database: &str) -> Result<Vec<Target>, LoadError> {
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    // Every node must open the same sealed secrets.
    let env = vec![(
        "SMSGW_SECRETS__KEY".to_string(),
        base64::engine::general_purpose::STANDARD.encode(key),
    )];
    let mut nodes = Vec::with_capacity(args.nodes);
    for index in 0..args.nodes.max(2) {
        let (database, env, workers) = (database.to_string(), env.clone(), args.workers);
        let node = actix_web::rt::task::spawn_blocking(move || {
            Target::start_node(Some(&database), workers, &env, index == 0)
        })
        .await
        .map_err(|e| LoadError::Setup(format!("starting node {index}: {e}")))??;
        nodes.push(node);
    }
    Ok(nodes)
}

pub(super) async fn cluster_scenario(args: &LoadtestArgs) -> Result<Report, LoadError> {
    let Some(server_url) = args.database.as_deref() else {
        return Err(LoadError::Setup(
            "the cluster scenario needs --database-url postgres://… (a PostgreSQL server)".into(),
        ));
    };
    let database = FreshDatabase::create(server_url).await?;
    let outcome = match start_nodes(args, &database.url).await {
        Ok(nodes) => run_cluster(args, nodes, &database.url).await,
        Err(e) => Err(e),
    };
    database.drop_now().await;
    outcome
}

/// The webhook endpoints the node at `url` holds (their lease), read just before the kill.
async fn endpoints_held_by(db: &DatabaseConnection, url: &str) -> Vec<EndpointId> {
    let address = url.trim_start_matches("http://");
    let nodes = leases::live_nodes(db, Duration::from_secs(60))
        .await
        .unwrap_or_default();
    let Some(victim) = nodes.iter().find(|n| n.address == address).map(|n| n.id) else {
        return Vec::new();
    };
    leases::live(db, LeaseKind::WebhookEndpoint)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|lease| lease.node == victim)
        .filter_map(|lease| match lease.key {
            leases::LeaseKey::WebhookEndpoint(id) => Some(id),
            _ => None,
        })
        .collect()
}

/// Of `received` (the event ids the receiver had right after the kill), those whose delivery
/// on one of `endpoints` is still pending in the database: sent by the killed node, not
/// recorded. Only these may be delivered again.
async fn in_flight_at_kill(
    db: &DatabaseConnection,
    endpoints: &[EndpointId],
    received: &HashSet<String>,
) -> HashSet<String> {
    let mut in_flight = HashSet::new();
    for endpoint in endpoints {
        for delivery in webhooks::pending_for(db, *endpoint)
            .await
            .unwrap_or_default()
        {
            let id = delivery.event_id.to_string();
            if received.contains(&id) {
                in_flight.insert(id);
            }
        }
    }
    in_flight
}

/// Repeats the receiver saw, split into redeliveries (the first repeat, after the kill, of an
/// event in flight at the kill) and duplicates (any other).
fn split_repeats(
    repeats: &[(String, Instant)],
    in_flight: &HashSet<String>,
    killed_at: Option<Instant>,
) -> (u64, u64) {
    let mut seen: HashMap<&str, u32> = HashMap::new();
    let (mut redelivered, mut duplicates) = (0, 0);
    for (event_id, at) in repeats {
        let count = seen.entry(event_id).or_default();
        *count += 1;
        let after_kill = killed_at.is_some_and(|kill| *at >= kill);
        if *count == 1 && after_kill && in_flight.contains(event_id) {
            redelivered += 1;
        } else {
            duplicates += 1;
        }
    }
    (redelivered, duplicates)
}

async fn run_cluster(
    args: &LoadtestArgs,
    mut nodes: Vec<Target>,
    database: &str,
) -> Result<Report, LoadError> {
    let db = Database::connect(database)
        .await
        .map_err(|e| LoadError::Setup(format!("connecting to {database}: {e}")))?;
    let count = args.phones.unwrap_or(30).max(nodes.len());
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    // The last node dies; the first (which made the keys) answers the harness's own reads.
    let victim_index = nodes.len() - 1;
    let pids: Vec<Option<u32>> = nodes.iter().map(|n| n.pid).collect();
    let mut victim = nodes.pop();
    let first = nodes.remove(0);
    let survivors_extra = nodes;
    let mut run = Run {
        args,
        target: first,
        client: clients::http_client(args.clients),
        meter: Meter::new(),
        notes: Vec::new(),
        workers: args.workers.unwrap_or(1),
        nodes: urls.clone(),
    };
    let hooks = hooks(
        &mut run,
        &[EventKind::MessageSent, EventKind::MessageDelivered],
        false,
        false,
    )
    .await?;
    let (phone_list, observed) = connect_phones(&run, count).await?;
    let recipients = {
        let senders: HashSet<&String> = phone_list.iter().map(|p| &p.number).collect();
        let to: Vec<String> = phones::numbers(count + clients::RECIPIENTS)
            .into_iter()
            .filter(|n| !senders.contains(n))
            .take(clients::RECIPIENTS)
            .collect();
        Rc::<[String]>::from(to)
    };
    let cpu_before: Vec<Option<Duration>> = pids
        .iter()
        .map(|pid| pid.and_then(|p| server::cpu_time(Some(p))))
        .collect();

    // Node j's clients send only from phones whose first node is another one.
    let stop = stop_of(args);
    let half = match stop {
        StopAfter::Duration(d) => d / 2,
        StopAfter::Count(_) => Duration::from_secs(args.duration / 2),
    };
    run.meter.phase("sending", half.as_secs() * 2);
    let per_node = (args.clients / urls.len()).max(1);
    let killed_at: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
    let started = Instant::now();
    let loads = futures_util::future::join_all(urls.iter().enumerate().map(|(j, _)| {
        let from: Vec<String> = phone_list
            .iter()
            .enumerate()
            .filter(|(i, _)| i % urls.len() != j)
            .map(|(_, p)| p.number.clone())
            .collect();
        let numbers = clients::Numbers {
            from: from.into(),
            to: recipients.clone(),
        };
        // This node first, then the others in turn (where its clients go when it dies).
        let send_urls: Vec<String> = phones::servers_of(&urls, j)
            .split(',')
            .map(|u| format!("{u}/v1/messages/send"))
            .collect();
        let client = run.client.clone();
        let key = run.target.api_key.clone();
        async move {
            let numbers = numbers;
            clients::run(
                &client,
                &send_urls,
                &key,
                &numbers,
                per_node,
                stop,
                Rc::new(Cell::new(0)),
            )
            .await
        }
    }));
    let killer = {
        let killed_at = killed_at.clone();
        let observed = observed.clone();
        let victim = &mut victim;
        let (db, inbox) = (&db, hooks.as_ref().map(|h| h.receiver.inbox.clone()));
        async move {
            actix_web::rt::time::sleep(half).await;
            let held = match victim.as_ref() {
                Some(v) => endpoints_held_by(db, &v.url).await,
                None => Vec::new(),
            };
            let now = Instant::now();
            observed.borrow_mut().watch_from = Some(now);
            killed_at.set(Some(now));
            // Dropping the target kills its process with SIGKILL (and waits for it).
            drop(victim.take());
            let received: HashSet<String> = inbox
                .and_then(|inbox| {
                    inbox
                        .lock()
                        .ok()
                        .map(|i| i.events.keys().cloned().collect())
                })
                .unwrap_or_default();
            (held.len(), in_flight_at_kill(db, &held, &received).await)
        }
    };
    let (loads, (victim_endpoints, in_flight)) = tokio::join!(loads, killer);
    let elapsed = started.elapsed();
    let mut accepted: Vec<(uuid::Uuid, Instant)> = Vec::new();
    let mut latency = clients::histogram();
    let mut errors = 0;
    let mut first_error = None;
    for load in loads {
        accepted.extend(load.accepted);
        let _ = latency.add(&load.latency_us);
        errors += load.errors;
        if first_error.is_none() {
            first_error = load.first_error;
        }
    }
    let total = accepted.len() as u64;
    drain(&run, total, || {
        let seen = observed.borrow();
        accepted
            .iter()
            .filter(|(id, _)| seen.dispatched.contains_key(id))
            .count() as u64
    })
    .await;
    if let Some(hooks) = &hooks {
        drain(&run, total * 2, || {
            total * 2 - hook_figures(hooks, &accepted, &SEND_EVENTS, started).missing
        })
        .await;
    }
    run.meter.finish();
    let killed_at = killed_at.get();
    let mut report = base_report(&run, count);
    report.scenario = "cluster".into();
    let seen = observed.borrow();
    // accept -> phone of the sends accepted before the kill (each crossed nodes); those
    // accepted after it include the wait for the dead node's phones to come back.
    let mut dispatch = Vec::with_capacity(accepted.len());
    let mut after_kill = Vec::new();
    let mut lost = 0;
    for (id, at) in &accepted {
        match seen.dispatched.get(id) {
            Some(d) => {
                let micros = d.at.saturating_duration_since(*at).as_micros() as u64;
                if killed_at.is_some_and(|kill| *at >= kill) {
                    after_kill.push(micros);
                } else {
                    dispatch.push(micros);
                }
            }
            None => lost += 1,
        }
    }
    if let Some(l) = percentiles(after_kill) {
        run.notes.push(format!(
            "accept -> phone of the sends accepted after the kill: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            l.p50, l.p99, l.max
        ));
    }
    if lost > 0 {
        run.notes
            .push(format!("{lost} accepted messages never reached a phone"));
    }
    if seen.duplicates > 0 {
        run.notes.push(format!(
            "{} messages handed to a phone as new a second time",
            seen.duplicates
        ));
    }
    report.duration_s = elapsed.as_secs_f64();
    report.accepted = total;
    report.accepted_per_s = total as f64 / elapsed.as_secs_f64().max(0.001);
    report.api_latency_ms = Latency::of(&latency);
    report.dispatch_latency_ms = percentiles(dispatch);
    report.pace_violations = phones::pace_violations(&phone_list, &seen);
    report.duplicates = seen.duplicates;
    report.api_errors = errors;
    report.phones_connected = seen.connected_count;
    report.nodes = Some(urls.len());
    // The dead node's phones: kill → the first message a survivor handed each of them.
    let takeovers: Vec<u64> = (0..count)
        .filter(|i| i % urls.len() == victim_index)
        .filter_map(|i| {
            let at = seen.first_send_since.get(i).copied().flatten()?;
            Some(at.saturating_duration_since(killed_at?).as_micros() as u64)
        })
        .collect();
    let dead_phones = (0..count)
        .filter(|i| i % urls.len() == victim_index)
        .count();
    report.takeover_ms = percentiles(takeovers.iter().copied());
    run.notes.push(format!(
        "node {victim_index} of {} killed (SIGKILL) {:.1} s into the load; {} of its {dead_phones} phones were handed a message by a survivor afterwards",
        urls.len(),
        half.as_secs_f64(),
        takeovers.len()
    ));
    if let Some(hooks) = &hooks {
        let figures = hook_figures(hooks, &accepted, &SEND_EVENTS, started);
        report.webhooks_delivered = Some(figures.delivered);
        report.webhooks_per_s = Some(figures.per_s);
        report.e2e_latency_ms = figures.e2e;
        report.bad_signatures = figures.bad_signatures;
        lost += figures.missing;
        let (redelivered, duplicates) = match hooks.receiver.inbox.lock() {
            Ok(inbox) => split_repeats(&inbox.repeats, &in_flight, killed_at),
            Err(_) => (0, figures.duplicates),
        };
        report.duplicates += duplicates;
        report.webhook_redeliveries = Some(redelivered);
        report.webhook_in_flight_at_kill = Some(in_flight.len() as u64);
        run.notes.push(format!(
            "the killed node held {victim_endpoints} webhook endpoint(s); {} of their events were received but not recorded when it died, {redelivered} of them were delivered again (at least once, same event id)",
            in_flight.len()
        ));
        if duplicates > 0 {
            run.notes.push(format!(
                "{duplicates} webhook events received again outside the killed node's in-flight attempts (same event id)"
            ));
        }
        run.notes.extend(figures.missing_note());
        if let (Some(kill), Ok(inbox)) = (killed_at, hooks.receiver.inbox.lock()) {
            report.webhook_after_kill_ms = inbox
                .events
                .values()
                .filter(|e| e.at >= kill)
                .map(|e| e.at.duration_since(kill).as_secs_f64() * 1000.0)
                .reduce(f64::min);
        }
    }
    report.lost = lost;
    for (i, (pid, before)) in pids.iter().zip(&cpu_before).enumerate() {
        if i == victim_index {
            continue;
        }
        if let Some(used) = pid
            .and_then(|p| server::cpu_time(Some(p)))
            .zip(*before)
            .and_then(|(now, before)| now.checked_sub(before))
        {
            run.notes.push(format!(
                "node {i}: {:.2} s CPU during the run, {:.0} us per accepted send over all nodes",
                used.as_secs_f64(),
                used.as_micros() as f64 / total.max(1) as f64
            ));
        }
    }
    if let Some(e) = first_error {
        run.notes.push(format!("first API error: {e}"));
    }
    if seen.repeats > 0 {
        run.notes.push(format!(
            "{} messages handed again after the kill and deduped by the phones",
            seen.repeats
        ));
    }
    run.notes.push(
        "every send crosses nodes until the kill (a node's clients send from phones connected elsewhere); afterwards the dead node's phones have moved".into(),
    );
    report.notes = std::mem::take(&mut run.notes);
    drop(seen);
    drop(survivors_extra);
    Ok(report)
}
