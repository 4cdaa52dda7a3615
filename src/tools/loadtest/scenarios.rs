//! The scenarios of `smsgw loadtest` (docs/api.md, `smsgw loadtest`): send and webhooks, fleet,
//! inbound and campaign, each from set-up through load and drain to its report.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;

use super::clients::StopAfter;
use super::report::{Latency, Report};
use super::{
    CpuUse, LoadError, Run, Scenario, base_report, campaign_outcome, ceiling, clients,
    connect_phones, drain, drive, hook_figures, hooks, percentiles, phones, post, route_exists,
    rss, server, stop_of,
};
use crate::domain::campaign::{CampaignStatus, RecipientStatus};
use crate::domain::webhook_event::EventKind;
use crate::tools::phone_sim::SimCommand;

/// Events due per sent message, the one timed end to end first.
const SEND_EVENTS: [EventKind; 2] = [EventKind::MessageDelivered, EventKind::MessageSent];
/// Events the receiver's endpoints subscribe to in the sending scenarios.
const SUBSCRIBED: [EventKind; 2] = [EventKind::MessageSent, EventKind::MessageDelivered];

/// `send` and `webhooks`: K clients send single messages through N phones.
pub(super) async fn send(mut run: Run<'_>) -> Result<Report, LoadError> {
    let webhooks = run.args.scenario == Scenario::Webhooks;
    let count = run.phone_count();
    let hooks = hooks(&mut run, &SUBSCRIBED, webhooks, webhooks).await?;
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
        let workers = run.workers;
        let bare = actix_web::rt::task::spawn_blocking(move || ceiling::start(workers))
            .await
            .map_err(|e| LoadError::Setup(format!("starting the ceiling server: {e}")))??;
        let before = server::threads_cpu_time(bare.pid);
        let bare_run = drive(&run, "ceiling", &bare.send_url.clone(), &numbers).await;
        let after = server::threads_cpu_time(bare.pid);
        drop(bare);
        let requests = bare_run.accepted.len() as f64;
        report.ceiling_per_s = Some(requests / bare_run.elapsed.as_secs_f64().max(0.001));
        report.ceiling_cpu_us_per_request = after
            .zip(before)
            .and_then(|(after, before)| after.checked_sub(before))
            .filter(|_| requests > 0.0)
            .map(|used| used.as_micros() as f64 / requests);
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
        run.notes.extend(figures.missing_note());
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
pub(super) async fn fleet(run: Run<'_>) -> Result<Report, LoadError> {
    let count = run.phone_count();
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
pub(super) async fn inbound(mut run: Run<'_>) -> Result<Report, LoadError> {
    let count = run.phone_count();
    let hooks = hooks(&mut run, &[EventKind::MessageReceived], false, false).await?;
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
                    .filter(|e| e.event == EventKind::MessageReceived.as_str())
                    .count() as u64
            })
        };
        drain(&run, injected, delivered).await;
        let figures = hook_figures(hooks, &[], &[EventKind::MessageReceived], started);
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
/// Paces every phone of the run at `--pool-pace` and puts them in one sender pool; its id.
async fn pool_of_all_phones(run: &Run<'_>, count: usize) -> Result<String, LoadError> {
    let (status, listed) = super::get(run, "/v1/phones?limit=100").await?;
    let ids: Vec<String> = listed["data"]["phones"]
        .as_array()
        .map(|phones| {
            phones
                .iter()
                .filter_map(|p| p["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if status != 200 || ids.len() != count {
        return Err(LoadError::Setup(format!(
            "--pool takes 1 to 100 lines; listing them: HTTP {status}, {} found",
            ids.len()
        )));
    }
    let per_minute = run.args.pool_pace.max(1);
    let pace = json!({ "pace": { "per_minute": per_minute, "per_30_minutes": per_minute.saturating_mul(30) } });
    for id in &ids {
        let path = format!("/v1/phones/{id}");
        let (status, reply) =
            super::call(run, actix_web::http::Method::PATCH, &path, &pace).await?;
        if status != 200 {
            return Err(LoadError::Setup(format!(
                "pacing {path}: HTTP {status}: {reply}"
            )));
        }
    }
    let body = json!({ "name": "loadtest pool", "phone_ids": ids });
    let (status, reply) = post(run, "/v1/pools", &body).await?;
    match (status, reply["data"]["id"].as_str()) {
        (201, Some(id)) => Ok(id.to_string()),
        _ => Err(LoadError::Setup(format!(
            "creating the pool: HTTP {status}: {reply}"
        ))),
    }
}

pub(super) async fn campaign(mut run: Run<'_>) -> Result<Report, LoadError> {
    if !route_exists(&run, "/v1/campaigns").await? {
        return Err(LoadError::MissingFeature {
            feature: "campaigns",
            route: "POST /v1/campaigns",
            scenario: "campaign",
        });
    }
    let count = run.phone_count();
    let hooks = hooks(&mut run, &SUBSCRIBED, false, false).await?;
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
    let mut body = json!({
        "name": "loadtest campaign",
        "from_number": sender,
        "body": "Hello {{name}}, this is a load test",
        "recipients": recipients,
        "launch_now": true,
    });
    if run.args.pool.is_some() {
        let pool_id = pool_of_all_phones(&run, count).await?;
        body["from_pool"] = json!(pool_id);
        if let Some(fields) = body.as_object_mut() {
            fields.remove("from_number");
        }
        run.notes.push(format!(
            "from a pool of {count} lines at {} sends a minute each",
            run.args.pool_pace
        ));
    }
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
    let delivered = outcome["counts"][RecipientStatus::Delivered.as_str()]
        .as_u64()
        .unwrap_or(0);
    notes.push(format!(
        "campaign status {} with {delivered} of {total} delivered (started {}, finished {})",
        outcome["status"].as_str().unwrap_or("unknown"),
        outcome["started_at"].as_str().unwrap_or("-"),
        outcome["finished_at"].as_str().unwrap_or("-"),
    ));
    // A campaign that did not complete lost its undelivered recipients, as far as the run goes.
    if outcome["status"] != CampaignStatus::Completed.as_str() {
        report.lost += total.saturating_sub(delivered).max(1);
    }
    report.notes = notes;
    Ok(report)
}
