//! N simulated phones paired through the API and connected over real WebSockets (the phone-sim
//! code), and what they saw: every `send` frame with its instant, inbound acks, reconnects.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use awc::Client;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::LoadError;
use crate::domain::phone_number::PhoneNumber;
use crate::tools::phone_sim::{Protocol, SimCommand, SimEvent, SimOptions, run_phone};

/// One paired phone.
pub struct Phone {
    pub number: String,
    pub per_minute: u32,
    pub per_30_minutes: u32,
    pub commands: mpsc::UnboundedSender<SimCommand>,
}

/// The first `send` frame of a message.
pub struct Dispatch {
    pub at: Instant,
}

/// Everything the phones observed.
#[derive(Default)]
pub struct Observed {
    /// Phones that have connected at least once.
    pub connected: Vec<bool>,
    pub connected_count: usize,
    pub disconnects: u64,
    /// First non-repeat `send` per message.
    pub dispatched: HashMap<Uuid, Dispatch>,
    /// Non-repeat `send` frames for a message already handled (on another phone): duplicates.
    pub duplicates: u64,
    /// Repeats the sim deduped (legitimate after a reconnect).
    pub repeats: u64,
    /// Non-repeat send instants per phone, for the pace check.
    pub send_times: Vec<Vec<Instant>>,
    /// Inbound forwarded and not yet acked, by (phone, ref).
    pub forwarded: HashMap<(usize, String), Instant>,
    /// Inbound acked: forward → ack latency in µs.
    pub inbound_acked: Vec<u64>,
    /// When the last inbound ack arrived.
    pub last_ack: Option<Instant>,
    pub server_errors: u64,
    /// From this instant on (the cluster scenario's kill), the first `send` frame (repeat or
    /// not) each phone gets is recorded in `first_send_since`.
    pub watch_from: Option<Instant>,
    pub first_send_since: Vec<Option<Instant>>,
}

/// `count` distinct valid E.164 senders (none premium, none the harness's recipient).
pub fn numbers(count: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(count);
    for prefix in ["+1415555", "+1650555", "+1212555", "+1312555"] {
        for n in 0..10_000u32 {
            if out.len() == count {
                return out;
            }
            let candidate = format!("{prefix}{n:04}");
            if candidate == "+14155550123" {
                continue;
            }
            if PhoneNumber::parse(&candidate).is_ok_and(|p| !p.is_premium_rate()) {
                out.push(candidate);
            }
        }
    }
    out
}

async fn pair(
    client: &Client,
    base: &str,
    api_key: &str,
    number: &str,
    index: usize,
) -> Result<(String, u32, u32), LoadError> {
    let mut response = client
        .post(format!("{base}/v1/phones"))
        .insert_header(("x-api-key", api_key))
        .send_json(&json!({"phone_number": number, "name": format!("loadtest {index}")}))
        .await
        .map_err(|e| LoadError::Setup(format!("pairing a phone: {e}")))?;
    let status = response.status().as_u16();
    let body: Value = response
        .json()
        .await
        .map_err(|e| LoadError::Setup(format!("pairing a phone: HTTP {status}: {e}")))?;
    if status != 201 {
        return Err(LoadError::Setup(format!(
            "pairing a phone: HTTP {status}: {body}"
        )));
    }
    let data = &body["data"];
    let token = data["device_token"]
        .as_str()
        .ok_or_else(|| LoadError::Setup(format!("pairing answered without a token: {body}")))?;
    let pace = |k: &str| data["pace"][k].as_u64().unwrap_or(u64::from(u32::MAX)) as u32;
    Ok((
        token.to_string(),
        pace("per_minute"),
        pace("per_30_minutes"),
    ))
}

/// The server list of phone `index`: every node, starting with node `index % nodes` (phones
/// spread evenly; after a lost connection each moves on to the next node).
pub fn servers_of(nodes: &[String], index: usize) -> String {
    let first = index % nodes.len().max(1);
    nodes[first..]
        .iter()
        .chain(&nodes[..first])
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

/// Pairs `count` phones (32 requests at a time) through `base`, starts a simulator for each
/// (spread over `nodes`, see [`servers_of`]), and a collector that folds their events into the
/// returned [`Observed`].
pub async fn start(
    client: &Client,
    base: &str,
    nodes: &[String],
    api_key: &str,
    count: usize,
    deliver_after: Duration,
    transport: Protocol,
) -> Result<(Vec<Phone>, Rc<RefCell<Observed>>), LoadError> {
    let senders = numbers(count);
    if senders.len() < count {
        return Err(LoadError::Setup(format!(
            "only {} distinct sender numbers available",
            senders.len()
        )));
    }
    let paired: Vec<Result<(String, u32, u32), LoadError>> =
        futures_util::stream::iter(senders.iter().enumerate())
            .map(|(i, number)| pair(client, base, api_key, number, i))
            .buffered(32)
            .collect()
            .await;
    let observed = Rc::new(RefCell::new(Observed {
        connected: vec![false; count],
        send_times: vec![Vec::new(); count],
        first_send_since: vec![None; count],
        ..Observed::default()
    }));
    let (events_tx, mut events_rx) = mpsc::unbounded_channel::<(usize, SimEvent)>();
    let mut phones = Vec::with_capacity(count);
    let mut sims = Vec::with_capacity(count);
    for (index, (result, number)) in paired.into_iter().zip(senders).enumerate() {
        let (token, per_minute, per_30_minutes) = result?;
        let (command_tx, command_rx) = mpsc::unbounded_channel();
        let options = SimOptions {
            server: servers_of(nodes, index),
            token,
            fail_rate: 0.0,
            deliver_after,
            heartbeat_every: crate::tools::phone_sim::HEARTBEAT_EVERY,
            ca_certs: Vec::new(),
            battery: None,
        };
        sims.push((index, options, command_rx));
        phones.push(Phone {
            number,
            per_minute,
            per_30_minutes,
            commands: command_tx,
        });
    }
    run_on_own_thread(sims, events_tx, transport)?;
    let sink = observed.clone();
    actix_web::rt::spawn(async move {
        while let Some((phone, event)) = events_rx.recv().await {
            fold(&mut sink.borrow_mut(), phone, event);
        }
    });
    Ok((phones, observed))
}

/// Runs the simulated phones on a thread and runtime of their own, for the rest of the
/// process. On the harness's thread they would wait behind the API clients' work, and the
/// instant a phone records for a `send` frame would measure the harness's queue rather than
/// the server's hand-over.
fn run_on_own_thread(
    sims: Vec<(usize, SimOptions, mpsc::UnboundedReceiver<SimCommand>)>,
    events: mpsc::UnboundedSender<(usize, SimEvent)>,
    transport: Protocol,
) -> Result<(), LoadError> {
    std::thread::Builder::new()
        .name("loadtest-phones".into())
        .spawn(move || {
            let system = actix_web::rt::System::new();
            system.block_on(async move {
                for (index, options, commands) in sims {
                    let (own_tx, mut own_rx) = mpsc::unbounded_channel::<SimEvent>();
                    match transport {
                        Protocol::Websocket => {
                            actix_web::rt::spawn(run_phone(options, Some(own_tx), Some(commands)));
                        }
                        Protocol::Smsgate => {
                            actix_web::rt::spawn(crate::tools::phone_sim::smsgate::run_phone(
                                options,
                                Some(own_tx),
                                Some(commands),
                            ));
                        }
                    }
                    let shared = events.clone();
                    actix_web::rt::spawn(async move {
                        while let Some(event) = own_rx.recv().await {
                            if shared.send((index, event)).is_err() {
                                break;
                            }
                        }
                    });
                }
                drop(events);
                std::future::pending::<()>().await;
            });
        })
        .map(|_| ())
        .map_err(|e| LoadError::Setup(format!("cannot start the phones' thread: {e}")))
}

fn fold(seen: &mut Observed, phone: usize, event: SimEvent) {
    match event {
        SimEvent::Connected => {
            if let Some(flag) = seen.connected.get_mut(phone)
                && !*flag
            {
                *flag = true;
                seen.connected_count += 1;
            }
        }
        SimEvent::Disconnected => seen.disconnects += 1,
        SimEvent::Send {
            message_id,
            repeat,
            at,
            ..
        } => {
            if seen.watch_from.is_some_and(|from| at >= from)
                && let Some(slot @ None) = seen.first_send_since.get_mut(phone)
            {
                *slot = Some(at);
            }
            if repeat {
                seen.repeats += 1;
            } else if let std::collections::hash_map::Entry::Vacant(slot) =
                seen.dispatched.entry(message_id)
            {
                slot.insert(Dispatch { at });
                if let Some(times) = seen.send_times.get_mut(phone) {
                    times.push(at);
                }
            } else {
                seen.duplicates += 1;
            }
        }
        SimEvent::Forwarded { reference } => {
            seen.forwarded.insert((phone, reference), Instant::now());
        }
        SimEvent::Acked { reference } => {
            if let Some(at) = seen.forwarded.remove(&(phone, reference)) {
                seen.last_ack = Some(Instant::now());
                seen.inbound_acked
                    .push(at.elapsed().as_micros().max(1) as u64);
            }
        }
        SimEvent::ServerError { .. } => seen.server_errors += 1,
        SimEvent::Reported { .. } | SimEvent::Reconnecting { .. } => {}
    }
}

/// Sends beyond the pace each phone announced, over both windows, counted per excess send.
pub fn pace_violations(phones: &[Phone], seen: &Observed) -> u64 {
    let mut violations = 0;
    for (phone, times) in phones.iter().zip(&seen.send_times) {
        let mut times = times.clone();
        times.sort();
        for (limit, window) in [
            (phone.per_minute, Duration::from_secs(60)),
            (phone.per_30_minutes, Duration::from_secs(1800)),
        ] {
            let mut start = 0;
            for end in 0..times.len() {
                while times[end].duration_since(times[start]) >= window {
                    start += 1;
                }
                if end - start + 1 > limit as usize {
                    violations += 1;
                }
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_numbers_are_distinct_and_valid() {
        let list = numbers(12_000);
        assert_eq!(list.len(), 12_000);
        let unique: std::collections::HashSet<_> = list.iter().collect();
        assert_eq!(unique.len(), list.len());
        assert!(!list.iter().any(|n| n == "+14155550123"));
    }

    #[test]
    fn phones_spread_over_the_nodes() {
        let nodes = ["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(servers_of(&nodes, 0), "a,b,c");
        assert_eq!(servers_of(&nodes, 1), "b,c,a");
        assert_eq!(servers_of(&nodes, 5), "c,a,b");
        assert_eq!(servers_of(&nodes[..1], 7), "a");
    }

    #[test]
    fn pace_counts_each_send_over_the_window() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let phone = Phone {
            number: "+14155550100".into(),
            per_minute: 2,
            per_30_minutes: 100,
            commands: tx,
        };
        let t0 = Instant::now();
        let seen = Observed {
            send_times: vec![vec![
                t0,
                t0 + Duration::from_secs(1),
                t0 + Duration::from_secs(2),
                t0 + Duration::from_secs(61),
            ]],
            ..Observed::default()
        };
        // The third send falls in the first minute with two others; the fourth does not.
        assert_eq!(pace_violations(&[phone], &seen), 1);
    }
}
