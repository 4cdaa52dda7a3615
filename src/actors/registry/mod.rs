//! The registry: one actor, started once, that knows every paired phone, routes sends to an
//! online phone, starts and supervises the Phone actors, rebuilds their queues at start-up and
//! expires messages nobody handed over in time.
//!
//! Mailbox: queries `Route`, `GetPhoneStates`, `ChooseLines`; commands `Enqueue`, `Cancel`,
//! `Paired`, `PaceChanged`, `Unpaired`, `TokenRotated`, `DrainLine`; events `Connected`,
//! `Disconnected`, `LineFrame`, and phone health's `HealthReported`, `LineStalled`,
//! `LineUnstalled` (`health.rs`: alert episodes and their webhook events, docs/api.md "Phone
//! health"). A stalled line's pooled queue is drained (`DrainLine`).
//!
//! Sender pools (docs/api.md, "Pools") are `pools.rs`: the choice of a line for each pooled
//! send (`ChooseLines`) and failover, a sweep every second plus `DrainLine`.
//!
//! SIM lines (docs/api.md, "Phones") are phones with their own actor, queue and pace whose
//! transport is their device's: a device's connection connects its lines on the same [`Link`]
//! (a line's frames carry its slot), its close disconnects them, and unpairing or rotating the
//! token of a device does the same to its lines. A transport hands the frames it knows to be a
//! line's (by slot) to the Registry as [`LineFrame`]s. Its handlers
//! are in `handlers.rs` (its own messages), `work.rs` (the live-node scan of a cluster)
//! `cluster.rs` (the cluster's events); test mode's simulated phones are in
//! `test_mode.rs`; when a phone was last heard from, and when that is stored, in `last_seen.rs`.
//! The phone directory and its decisions (who takes a send, what connecting, disconnecting and
//! pairing change) are a plain type, [`PhoneDirectory`] in `directory.rs`; the actor does the
//! I/O and the timers around it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use actix::prelude::*;
use uuid::Uuid;

use super::Deps;
use super::link::Link;
use super::phone::{self, Phone, PhoneIdentity};
use crate::domain::pace::Pace;
use crate::domain::protocol::PhoneFrame;
use crate::domain::sim_slot::SimSlot;
use crate::domain::status::Mode;
use crate::store::messages::{self, Message};
use crate::store::phones::{self, PhoneRecord};
use crate::store::scoped::Scope;
use crate::store::writer::{Reroute, Transition};

mod cluster;
mod directory;
mod handlers;
mod health;
mod last_seen;
mod pools;
mod test_mode;
mod work;

use directory::{NumberKey, PhoneDirectory, PhoneHandle};
pub use directory::{PhoneState, RouteError};
pub use health::{HealthReported, LineStalled, LineUnstalled};
pub use pools::{ChooseLines, DrainLine, PoolPick};
use test_mode::TestModeHere;

/// Most ids one notice names (its payload stays far below PostgreSQL's 8,000 bytes); more go
/// in several notices, so the owner reads what is new by id, never a whole backlog again.
const NOTICE_IDS: usize = 64;

/// How long a phone's actor stays on a node after its transport closed (a quick reconnect to
/// the same node keeps it) before the node lets go of the phone's lease (cluster only).
const OFFLINE_GRACE: Duration = Duration::from_secs(2);

/// How often a cluster node reads which nodes are live.
const TAKE_OVER_EVERY: Duration = Duration::from_secs(2);

/// How often queued messages are checked for expiry.
const EXPIRY_SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Most messages expired per sweep.
const EXPIRY_BATCH: u64 = 1000;

/// Which phone should take a send from `from_number` (live mode; test mode needs none): an
/// online one, with its actor, or None.
#[derive(Message)]
#[rtype(result = "Result<Option<Routed>, RouteError>")]
pub struct Route {
    pub scope: Scope,
    pub from_number: String,
    pub device_id: Option<Uuid>,
}

/// The online phone a send goes to.
#[derive(Debug, Clone)]
pub struct Routed {
    pub device_id: Uuid,
    /// Its actor, for a hand-over reserved before the accept (`phone::Reserve`); None when the
    /// phone is online on another node of the cluster.
    pub phone: Option<Addr<Phone>>,
}

/// Stored messages to hand to their phones.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Enqueue {
    pub messages: Vec<Message>,
}

/// A message was cancelled: drop it from its phone's queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Cancel {
    pub message_id: Uuid,
    pub device_id: Option<Uuid>,
    pub scope: Scope,
    pub from_number: String,
}

/// A transport connected for a phone; answers the Phone actor to report frames to, or None
/// when the phone is not (or no longer) paired.
#[derive(Message)]
#[rtype(result = "Option<Addr<Phone>>")]
pub struct Connected {
    pub phone_id: Uuid,
    pub link: Link,
}

/// A transport asks to become the phone's link only while none is current (the device API's
/// fetch, report or inbound post: activity, not a new connection, so it never replaces a
/// connected WebSocket or event stream). Answers the Phone actor either way.
#[derive(Message)]
#[rtype(result = "Result<Addr<Phone>, NotAttached>")]
pub struct ConnectIfIdle {
    pub phone_id: Uuid,
    pub link: Link,
}

/// Why a [`ConnectIfIdle`] attached nothing.
#[derive(Debug)]
pub enum NotAttached {
    /// The phone is not (or no longer) paired.
    NotPaired,
    /// Another transport is current; its Phone actor still takes reports.
    Busy(Addr<Phone>),
}

/// A transport of a phone closed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Disconnected {
    pub phone_id: Uuid,
    pub session_id: u64,
}

/// A frame a device's transport received about its SIM line on `sim_slot`: a report on a
/// message sent from that slot, or an SMS received on it. The Registry hands it to the line's
/// Phone actor (the device's own when the device has no line on that slot). With `done`, it is
/// answered once stored, as a `phone::ReportAndWait`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LineFrame {
    pub device_id: Uuid,
    pub sim_slot: SimSlot,
    pub session_id: u64,
    pub frame: PhoneFrame,
    pub done: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The registry's messages a phone's transport sends (a WebSocket session, the device API's
/// link), as recipients: a transport reaches the registry only through these, never its
/// address, so the transports and the registry do not import each other.
pub struct TransportRecipients {
    pub connected: Recipient<Connected>,
    pub connect_if_idle: Recipient<ConnectIfIdle>,
    pub disconnected: Recipient<Disconnected>,
    pub seen: Recipient<Seen>,
    pub line_frame: Recipient<LineFrame>,
}

impl TransportRecipients {
    /// The recipients of `registry`.
    pub fn of(registry: &Addr<Registry>) -> TransportRecipients {
        TransportRecipients {
            connected: registry.clone().recipient(),
            connect_if_idle: registry.clone().recipient(),
            disconnected: registry.clone().recipient(),
            seen: registry.clone().recipient(),
            line_frame: registry.clone().recipient(),
        }
    }
}

/// A frame arrived from a phone: it is alive now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Seen {
    pub phone_id: Uuid,
}

/// A phone was paired.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Paired {
    pub phone: PhoneRecord,
}

/// A phone's pace override changed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PaceChanged {
    pub phone_id: Uuid,
    pub pace: Option<Pace>,
}

/// A phone was unpaired: close its session, fail its queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Unpaired {
    pub phone_id: Uuid,
}

/// A phone's token was rotated: close its session.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TokenRotated {
    pub phone_id: Uuid,
}

/// Live state of some phones: online and last seen.
#[derive(Message)]
#[rtype(result = "HashMap<Uuid, PhoneState>")]
pub struct GetPhoneStates {
    pub ids: Vec<Uuid>,
}

/// Stop every phone actor (their sessions close with 1001 "going away") and the registry.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Number of phones with an open session.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CountOnline;

impl PhoneHandle for Addr<Phone> {
    fn is_running(&self) -> bool {
        self.connected()
    }
}

/// The registry actor.
pub struct Registry {
    deps: Deps,
    /// The paired phones, their transports and actors, and who takes a send.
    directory: PhoneDirectory<Addr<Phone>>,
    /// The current transport of each device connected here, for the SIM lines added to it
    /// while it is connected.
    links: HashMap<Uuid, Link>,
    /// This actor's address (set when started), for the phones' [`phone::NotOwned`].
    me: Option<Addr<Registry>>,
    /// Whether the simulated phones of test mode run on this node (see `test_mode`).
    test_mode: TestModeHere,
    /// In a cluster: the live nodes at the last take-over scan (None before the first). A node
    /// leaving this set may have died between a commit and its notice: see
    /// [`Registry::nodes_seen`].
    live_nodes: Option<HashSet<Uuid>>,
    /// Where each sender pool's round robin stands (`domain::pool_choice`); lost on a restart,
    /// which only changes who takes the next tie.
    pool_turns: HashMap<Uuid, usize>,
    /// The webhook endpoints' supervisor, told of the deliveries of phone alerts.
    alerts_to: Option<Recipient<super::webhook_endpoint::DeliveriesCreated>>,
}

impl Registry {
    /// A registry; it loads the phones and rebuilds queues when started.
    pub fn new(deps: Deps) -> Registry {
        let deps_cluster = deps.cluster.is_some();
        Registry {
            directory: PhoneDirectory::new(deps.settings.pace),
            links: HashMap::new(),
            deps,
            me: None,
            live_nodes: None,
            pool_turns: HashMap::new(),
            alerts_to: None,
            test_mode: match deps_cluster {
                true => TestModeHere::No,
                false => TestModeHere::Yes,
            },
        }
    }

    /// `endpoints` (the webhook endpoints' supervisor) delivers phone alerts (docs/api.md,
    /// "Phone health").
    pub fn with_alerts(
        mut self,
        endpoints: Recipient<super::webhook_endpoint::DeliveriesCreated>,
    ) -> Registry {
        self.alerts_to = Some(endpoints);
        self
    }

    /// Tells the portal's live event streams that a phone came online or went offline.
    fn publish_phone_status(&self, scope: Scope, phone_id: Uuid, online: bool, now_ms: i64) {
        use crate::live_events::{LiveEvent, PhoneStatusOut};
        let status = PhoneStatusOut {
            id: phone_id,
            online,
            last_seen_at: Some(crate::clock::format_ms(now_ms)),
        };
        self.deps
            .live
            .publish([(scope, LiveEvent::PhoneStatus(status))]);
    }

    /// The phone's actor, started (supervised) on first use; None when the phone is unknown.
    fn phone_addr(&mut self, phone_id: Uuid) -> Option<Addr<Phone>> {
        if let Some(addr) = self.directory.running(phone_id) {
            return Some(addr);
        }
        let pace = self.directory.pace_of(phone_id)?;
        let record = self.directory.record(phone_id)?;
        let identity = PhoneIdentity {
            device_id: Some(record.id),
            scope: record.scope(),
            number: record.phone_number.clone(),
            sim_slot: record.line.map(|l| l.sim_slot),
        };
        let deps = self.deps.clone();
        let owner = self
            .me
            .clone()
            .filter(|_| deps.cluster.is_some())
            .map(Addr::recipient);
        let health_to = self.me.clone().map(|me| phone::HealthTo {
            health: me.clone().recipient(),
            stalled: me.clone().recipient(),
            unstalled: me.recipient(),
        });
        let addr = Supervisor::start(move |_| {
            let mut phone = Phone::new(deps, identity, Some(pace));
            if let Some(to) = health_to.clone() {
                phone = phone.with_health(to);
            }
            match owner {
                Some(owner) => phone.with_owner(owner),
                None => phone,
            }
        });
        self.directory.started(phone_id, addr.clone());
        Some(addr)
    }

    /// The phone's actor when this node owns the phone: always on a single node; in a
    /// cluster, when the actor runs here and holds (or is claiming) the phone's lease.
    fn owned_addr(&self, phone_id: Uuid) -> Option<Addr<Phone>> {
        self.directory.owned(phone_id, || match &self.deps.cluster {
            None => true,
            Some(cluster) => cluster
                .lease(crate::store::cluster::LeaseKey::Phone(phone_id.into()))
                .is_some(),
        })
    }

    fn deliver(&mut self, messages: Vec<Message>) {
        let mut per_phone: HashMap<Uuid, Vec<Message>> = HashMap::new();
        let mut simulated = Vec::new();
        for message in messages {
            if message.mode == Mode::Test {
                simulated.push(message);
            } else if let Some(device) = message.device_id {
                per_phone.entry(device).or_default().push(message);
            } else {
                tracing::warn!(message_id = %message.id, "live message without a phone; it will expire");
            }
        }
        for (device, messages) in per_phone {
            if let Some(cluster) = &self.deps.cluster {
                // The phone's owner (here or on another node) loads them from the database.
                match self.owned_addr(device) {
                    Some(addr) => addr.do_send(phone::Enqueue { messages }),
                    None if self.directory.contains(device) => {
                        for chunk in messages.chunks(NOTICE_IDS) {
                            cluster.tell(crate::cluster::Notice::Enqueue {
                                phone: device,
                                messages: Some(chunk.iter().map(|m| m.id).collect()),
                            });
                        }
                    }
                    None => {
                        for m in messages {
                            self.fail_unpaired(m.id);
                        }
                    }
                }
                continue;
            }
            match self.phone_addr(device) {
                Some(addr) => addr.do_send(phone::Enqueue { messages }),
                None => {
                    // The phone was unpaired meanwhile.
                    for m in messages {
                        self.fail_unpaired(m.id);
                    }
                }
            }
        }
        self.simulate(simulated);
    }

    /// Moves the unpinned waiting messages of `phone` to `targets` (round-robin); with
    /// `fail_leftovers`, messages that cannot move fail (their phone is gone).
    fn reroute_from(
        &mut self,
        ctx: &mut Context<Self>,
        phone: Addr<Phone>,
        from_device: Uuid,
        targets: Vec<Uuid>,
        fail_leftovers: bool,
    ) {
        let writer = self.deps.writer.clone();
        // Enqueued now, so it reaches the phone before anything sent after this call (an Unpair).
        let handed_back = phone.send(phone::HandBack);
        ctx.spawn(
            async move {
                let ids = handed_back.await.unwrap_or_default();
                let mut moved = Vec::new();
                let mut stuck = Vec::new();
                for (i, id) in ids.into_iter().enumerate() {
                    let Some(target) = targets.get(i % targets.len().max(1)).copied() else {
                        stuck.push(id);
                        continue;
                    };
                    let reroute = Reroute {
                        id,
                        from_device,
                        to_device: target,
                        to_number: None,
                        detail: format!(
                            "phone {from_device} went away; rerouted to phone {target}"
                        ),
                    };
                    match writer.reroute(reroute).await {
                        Ok(Some(message)) => moved.push(message),
                        Ok(None) => {}
                        Err(err) => {
                            tracing::error!(message_id = %id, error = %err, "reroute failed");
                            stuck.push(id);
                        }
                    }
                }
                (moved, stuck)
            }
            .into_actor(self)
            .map(move |(moved, stuck), act, _| {
                act.deliver(moved);
                // Without `fail_leftovers` the old phone is still paired: what could not move
                // stays queued for it in the database and is rebuilt when its actor restarts.
                if fail_leftovers {
                    for id in stuck {
                        act.fail_unpaired(id);
                    }
                }
            }),
        );
    }

    fn fail_unpaired(&self, id: Uuid) {
        let writer = self.deps.writer.clone();
        actix::spawn(async move {
            let transition = Transition::unpair(id);
            if let Err(err) = writer.transition(transition).await {
                tracing::error!(message_id = %id, error = %err, "could not fail message");
            }
        });
    }

    fn forget(&mut self, message_id: Uuid, device_id: Option<Uuid>, scope: Scope, from: &str) {
        if scope.mode == Mode::Test {
            if let Some(addr) = self.directory.simulated(&NumberKey::new(scope, from)) {
                addr.do_send(phone::Forget { message_id });
            }
        } else if let Some(addr) = device_id.and_then(|d| self.directory.actor(d)) {
            addr.do_send(phone::Forget { message_id });
        }
    }

    /// Loads phones and unfinished messages; messages left `sending` return to `queued`. In a
    /// cluster live messages are rebuilt by the node that takes their phone (its lease, when
    /// the phone connects there), and test-mode ones only by the node running test mode.
    fn rebuild(&mut self, ctx: &mut Context<Self>) {
        let deps = self.deps.clone();
        let test_mode_only = match &deps.cluster {
            None => Some(false),
            Some(cluster) => cluster
                .lease(crate::store::cluster::LeaseKey::Sweep(
                    crate::store::cluster::Sweep::TestMode,
                ))
                .map(|_| true),
        };
        if test_mode_only == Some(true) {
            self.test_mode = TestModeHere::Rebuilding(Vec::new());
        }
        ctx.wait(
            async move {
                let phones = phones::all(&deps.db).await?;
                let unfinished = match test_mode_only {
                    Some(test_mode_only) => Some(
                        test_mode::unfinished(
                            &deps,
                            test_mode_only,
                            "server restarted before the phone reported; queued again",
                        )
                        .await,
                    ),
                    None => None,
                };
                Ok::<_, crate::store::StoreError>((phones, unfinished))
            }
            .into_actor(self)
            .map(|result, act, _ctx| match result {
                Ok((phones, unfinished)) => {
                    for record in phones {
                        act.directory.insert(record);
                    }
                    let Some(unfinished) = unfinished else {
                        tracing::info!(
                            phones = act.directory.len(),
                            "registry rebuilt from the database"
                        );
                        return;
                    };
                    let count = unfinished.as_ref().map_or(0, |u| u.queued.len());
                    let (live, simulated) = match unfinished {
                        Ok(u) => {
                            let (simulated, live): (Vec<Message>, Vec<Message>) =
                                u.queued.into_iter().partition(|m| m.mode == Mode::Test);
                            let rest = test_mode::Unfinished {
                                queued: simulated,
                                awaiting_delivery: u.awaiting_delivery,
                            };
                            (live, Ok(rest))
                        }
                        Err(err) => (Vec::new(), Err(err)),
                    };
                    act.deliver(live);
                    act.test_mode_rebuilt(simulated);
                    tracing::info!(
                        phones = act.directory.len(),
                        messages = count,
                        "registry rebuilt from the database"
                    );
                }
                Err(err) => {
                    tracing::error!(error = %err, "registry could not rebuild from the database")
                }
            }),
        );
    }

    /// Writes the last-seen times that are due (`all`: every one newer than the stored one,
    /// as on a stop), in one batch off the actor's thread.
    fn store_last_seen(&mut self, all: bool) {
        let seen = match all {
            true => self.directory.last_seen_newer(),
            false => self.directory.last_seen_due(),
        };
        self.write_last_seen(seen);
    }

    /// Stores last-seen times in the background; a failure is logged and the next change of
    /// the phone's time writes it again.
    fn write_last_seen(&self, seen: Vec<(Uuid, i64)>) {
        if seen.is_empty() {
            return;
        }
        let db = self.deps.db.clone();
        actix::spawn(async move {
            if let Err(err) = phones::touch(&db, &seen).await {
                tracing::warn!(phones = seen.len(), error = %err, "last_seen_at not stored");
            }
        });
    }

    fn sweep_expired(&mut self, ctx: &mut Context<Self>) {
        let deps = self.deps.clone();
        ctx.spawn(
            async move {
                // In a cluster one node at a time sweeps: the holder of the `expiry` lease.
                if let Some(cluster) = &deps.cluster
                    && cluster
                        .acquire(crate::store::cluster::LeaseKey::Sweep(
                            crate::store::cluster::Sweep::Expiry,
                        ))
                        .await
                        .is_none()
                {
                    return Ok(Vec::new());
                }
                let now = deps.clock.now_ms();
                let ids = messages::expired_candidates(&deps.db, now, EXPIRY_BATCH).await?;
                let mut expired = Vec::new();
                for id in ids {
                    let transition = Transition::expire(id);
                    if let Some(row) = deps.writer.transition(transition).await? {
                        expired.push(row);
                    }
                }
                Ok::<_, crate::store::StoreError>(expired)
            }
            .into_actor(self)
            .map(|result, act, _| match result {
                Ok(expired) => {
                    for m in expired {
                        let scope = Scope {
                            workspace_id: m.workspace_id,
                            mode: m.mode,
                        };
                        act.forget(m.id, m.device_id, scope, &m.from_number);
                    }
                }
                Err(err) => tracing::error!(error = %err, "expiry sweep failed"),
            }),
        );
    }
}

impl Actor for Registry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(65_536);
        self.me = Some(ctx.address());
        if let Some(cluster) = &self.deps.cluster {
            cluster.start(ctx.address());
        }
        self.rebuild(ctx);
        ctx.run_interval(EXPIRY_SWEEP_EVERY, |act, ctx| act.sweep_expired(ctx));
        ctx.run_interval(pools::FAILOVER_SWEEP_EVERY, |act, ctx| act.sweep_pools(ctx));
        ctx.run_interval(last_seen::FLUSH_EVERY, |act, _| act.store_last_seen(false));
        ctx.run_interval(health::ALERT_SWEEP_EVERY, |act, ctx| {
            act.sweep_offline_alerts(ctx)
        });
        ctx.run_later(self.deps.settings.phones.heartbeat_timeout, |act, ctx| {
            act.outages_since_start(ctx)
        });
        if self.deps.cluster.is_some() {
            ctx.run_interval(TAKE_OVER_EVERY, |act, ctx| {
                act.take_over(ctx);
                act.take_over_test_mode(ctx);
            });
        }
    }
}
