//! `smsgw loadtest --scenario cluster` (docs/api.md, `smsgw loadtest`): N `smsgw serve` nodes on
//! one fresh PostgreSQL database, phones and API clients spread over them, every send crossing
//! nodes (a node's clients send only from phones connected elsewhere), one node killed with
//! SIGKILL halfway; reports cross-node accept → phone, the takeover of the dead node's phones
//! and webhooks, and what was lost, duplicated or mis-paced.

use std::cell::Cell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use base64::Engine;
use rand::RngCore;
use sea_orm::{ConnectionTrait, Database};

use super::report::{Latency, Meter, Report};
use super::server::{self, Target};
use super::{
    LoadError, LoadtestArgs, Run, StopAfter, base_report, clients, connect_phones, drain,
    hook_figures, hooks, percentiles, phones, stop_of,
};
use crate::domain::webhook_event::EventKind;

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
        Ok(nodes) => run_cluster(args, nodes).await,
        Err(e) => Err(e),
    };
    database.drop_now().await;
    outcome
}

async fn run_cluster(args: &LoadtestArgs, mut nodes: Vec<Target>) -> Result<Report, LoadError> {
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
        async move {
            actix_web::rt::time::sleep(half).await;
            let now = Instant::now();
            observed.borrow_mut().watch_from = Some(now);
            killed_at.set(Some(now));
            // Dropping the target kills its process with SIGKILL.
            drop(victim.take());
        }
    };
    let (loads, ()) = tokio::join!(loads, killer);
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
        report.duplicates += figures.duplicates;
        report.bad_signatures = figures.bad_signatures;
        lost += figures.missing;
        if figures.duplicates > 0 {
            run.notes.push(format!(
                "{} webhook events received twice (same event id)",
                figures.duplicates
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
