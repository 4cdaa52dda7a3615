//! The registry: one actor, started once, that knows every paired phone, routes sends to an
//! online phone, starts and supervises the Phone actors, rebuilds their queues at start-up and
//! expires messages nobody handed over in time.
//!
//! Mailbox: queries `Route`, `GetPhoneStates`; commands `Enqueue`, `Cancel`, `Paired`,
//! `PaceChanged`, `Unpaired`, `TokenRotated`; events `Connected`, `Disconnected`. Its handlers
//! are in `handlers.rs` (its own messages), `work.rs` (the campaign and webhook messages it
//! routes) and `cluster.rs` (the cluster's events); test mode's simulated phones are in
//! `test_mode.rs`; when a phone was last heard from, and when that is stored, in `last_seen.rs`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use actix::prelude::*;
use uuid::Uuid;

use super::Deps;
use super::phone::{self, Phone, PhoneIdentity};
use super::phone_session::Link;
use crate::domain::pace::Pace;
use crate::domain::status::Mode;
use crate::store::messages::{self, Message};
use crate::store::phones::{self, PhoneRecord};
use crate::store::scoped::Scope;
use crate::store::writer::{Reroute, Transition};

mod cluster;
mod handlers;
mod last_seen;
mod test_mode;
mod work;

use last_seen::LastSeen;
use test_mode::TestModeHere;

/// Most ids one notice names (its payload stays far below PostgreSQL's 8,000 bytes); more go
/// in several notices, so the owner reads what is new by id, never a whole backlog again.
const NOTICE_IDS: usize = 64;

/// How long a phone's actor stays on a node after its transport closed (a quick reconnect to
/// the same node keeps it) before the node lets go of the phone's lease (cluster only).
const OFFLINE_GRACE: Duration = Duration::from_secs(2);

/// How often a cluster node looks for campaigns and webhook endpoints no node holds.
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

/// Why a pinned device cannot take a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    UnknownDevice,
    NumberMismatch,
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

/// Live state of one phone.
#[derive(Debug, Clone, Copy)]
pub struct PhoneState {
    pub online: bool,
    /// When this node last heard from the phone (or read it from the database).
    pub last_seen_at: Option<i64>,
}

impl PhoneState {
    /// When the phone was last heard from: the later of this node's live value (`state`; None
    /// when the registry does not know the phone) and the database's `stored` one, which the
    /// node holding the phone writes about once a minute while connected (docs/api.md, Phones).
    pub fn last_seen(state: Option<&PhoneState>, stored: Option<i64>) -> Option<i64> {
        state.and_then(|s| s.last_seen_at).max(stored)
    }
}

/// Stop every phone actor (their sessions close with 1001 "going away") and the registry.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Number of phones with an open session.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CountOnline;

struct Entry {
    record: PhoneRecord,
    addr: Option<Addr<Phone>>,
    session: Option<u64>,
    last_seen: LastSeen,
}

/// A sending number of one workspace and mode: the key of the phones sharing it, of their
/// round-robin position, and of a test-mode number's simulated phone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct NumberKey {
    scope: Scope,
    number: String,
}

/// The registry actor.
pub struct Registry {
    deps: Deps,
    phones: HashMap<Uuid, Entry>,
    by_number: HashMap<NumberKey, Vec<Uuid>>,
    simulated: HashMap<NumberKey, Addr<Phone>>,
    /// Round-robin position per number, to spread sends over phones sharing it.
    next_pick: HashMap<NumberKey, usize>,
    /// One supervised actor per webhook endpoint with work (see `webhook_endpoint`).
    pub(crate) webhooks: super::webhook_endpoint::EndpointActors,
    /// One supervised actor per running, scheduled or paused campaign (see `campaign`).
    pub(crate) campaigns: super::campaign::CampaignActors,
    /// In a cluster: phones online on other nodes, and the node holding each.
    remote_online: HashMap<Uuid, Uuid>,
    /// This actor's address (set when started), for the phones' [`phone::NotOwned`].
    me: Option<Addr<Registry>>,
    /// Whether the simulated phones of test mode run on this node (see `test_mode`).
    test_mode: TestModeHere,
    /// In a cluster: the live nodes at the last take-over scan (None before the first). A node
    /// leaving this set may have died between a commit and its notice: see
    /// [`Registry::nodes_seen`].
    live_nodes: Option<HashSet<Uuid>>,
}

impl Registry {
    /// A registry; it loads the phones and rebuilds queues when started.
    pub fn new(deps: Deps) -> Registry {
        let deps_cluster = deps.cluster.is_some();
        Registry {
            deps,
            phones: HashMap::new(),
            by_number: HashMap::new(),
            simulated: HashMap::new(),
            next_pick: HashMap::new(),
            webhooks: Default::default(),
            campaigns: Default::default(),
            remote_online: HashMap::new(),
            me: None,
            live_nodes: None,
            test_mode: match deps_cluster {
                true => TestModeHere::No,
                false => TestModeHere::Yes,
            },
        }
    }

    /// What the actors share.
    pub(crate) fn deps(&self) -> &Deps {
        &self.deps
    }

    /// Tells the portal's live event streams that a phone came online or went offline.
    fn publish_phone_status(&self, scope: Scope, phone_id: Uuid, online: bool, now_ms: i64) {
        use super::live_events::{LiveEvent, PhoneStatusOut};
        let status = PhoneStatusOut {
            id: phone_id,
            online,
            last_seen_at: Some(crate::clock::format_ms(now_ms)),
        };
        self.deps
            .live
            .publish([(scope, LiveEvent::PhoneStatus(status))]);
    }

    fn number_key(scope: Scope, number: &str) -> NumberKey {
        NumberKey {
            scope,
            number: number.to_string(),
        }
    }

    fn insert(&mut self, record: PhoneRecord) {
        let key = Self::number_key(record.scope(), &record.phone_number);
        let ids = self.by_number.entry(key).or_default();
        if !ids.contains(&record.id) {
            ids.push(record.id);
        }
        let last_seen = LastSeen::loaded(record.last_seen_at);
        self.phones.insert(
            record.id,
            Entry {
                record,
                addr: None,
                session: None,
                last_seen,
            },
        );
    }

    fn pace_of(&self, record: &PhoneRecord) -> Pace {
        record.pace.unwrap_or(self.deps.settings.pace)
    }

    /// The phone's actor, started (supervised) on first use.
    fn phone_addr(&mut self, phone_id: Uuid) -> Option<Addr<Phone>> {
        let pace = self
            .phones
            .get(&phone_id)
            .map(|e| self.pace_of(&e.record))?;
        let deps = self.deps.clone();
        let entry = self.phones.get_mut(&phone_id)?;
        if let Some(addr) = &entry.addr
            && addr.connected()
        {
            return Some(addr.clone());
        }
        let identity = PhoneIdentity {
            device_id: Some(entry.record.id),
            scope: entry.record.scope(),
            number: entry.record.phone_number.clone(),
        };
        let owner = self
            .me
            .clone()
            .filter(|_| deps.cluster.is_some())
            .map(Addr::recipient);
        let addr = Supervisor::start(move |_| {
            let phone = Phone::new(deps, identity, Some(pace));
            match owner {
                Some(owner) => phone.with_owner(owner),
                None => phone,
            }
        });
        entry.addr = Some(addr.clone());
        Some(addr)
    }

    fn online_for(&mut self, scope: Scope, number: &str) -> Option<Uuid> {
        let key = Self::number_key(scope, number);
        let online: Vec<Uuid> = self
            .by_number
            .get(&key)?
            .iter()
            .copied()
            .filter(|id| self.is_online(*id))
            .collect();
        if online.is_empty() {
            return None;
        }
        let pick = self.next_pick.entry(key).or_insert(0);
        *pick = pick.wrapping_add(1);
        online.get(*pick % online.len()).copied()
    }

    /// Whether a transport of the phone is open here or, in a cluster, on another node.
    fn is_online(&self, phone_id: Uuid) -> bool {
        self.phones
            .get(&phone_id)
            .is_some_and(|e| e.session.is_some())
            || self.remote_online.contains_key(&phone_id)
    }

    /// The phone's actor when this node owns the phone: always on a single node; in a
    /// cluster, when the actor runs here and holds (or is claiming) the phone's lease.
    fn owned_addr(&self, phone_id: Uuid) -> Option<Addr<Phone>> {
        let entry = self.phones.get(&phone_id)?;
        let addr = entry.addr.clone().filter(Addr::connected)?;
        match &self.deps.cluster {
            None => Some(addr),
            Some(cluster) => {
                let leased = cluster
                    .lease(crate::store::cluster::LeaseKey::Phone(phone_id.into()))
                    .is_some();
                (leased || entry.session.is_some()).then_some(addr)
            }
        }
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
                    None if self.phones.contains_key(&device) => {
                        for chunk in messages.chunks(NOTICE_IDS) {
                            cluster.tell(super::cluster::Notice::Enqueue {
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

    /// Phones with this number other than `except`: online ones first.
    fn alternatives(&self, scope: Scope, number: &str, except: Uuid) -> Vec<Uuid> {
        let key = Self::number_key(scope, number);
        let mut ids: Vec<Uuid> = self
            .by_number
            .get(&key)
            .map(|ids| ids.iter().copied().filter(|id| *id != except).collect())
            .unwrap_or_default();
        ids.sort_by_key(|id| self.phones.get(id).is_none_or(|e| e.session.is_none()));
        ids
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
            if let Some(addr) = self.simulated.get(&Self::number_key(scope, from)) {
                addr.do_send(phone::Forget { message_id });
            }
        } else if let Some(addr) = device_id
            .and_then(|d| self.phones.get(&d))
            .and_then(|e| e.addr.clone())
        {
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
                        act.insert(record);
                    }
                    let Some(unfinished) = unfinished else {
                        tracing::info!(
                            phones = act.phones.len(),
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
                        phones = act.phones.len(),
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
        let seen: Vec<(Uuid, i64)> = self
            .phones
            .iter_mut()
            .filter_map(|(id, entry)| {
                let at = match all {
                    true => entry.last_seen.take_newer(),
                    false => entry.last_seen.take_due(last_seen::STORE_EVERY),
                };
                at.map(|at| (*id, at))
            })
            .collect();
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
        super::webhook_endpoint::EndpointActors::rebuild(ctx, self.deps.clone());
        super::campaign::CampaignActors::rebuild(ctx, self.deps.clone());
        ctx.run_interval(EXPIRY_SWEEP_EVERY, |act, ctx| act.sweep_expired(ctx));
        ctx.run_interval(last_seen::FLUSH_EVERY, |act, _| act.store_last_seen(false));
        if self.deps.cluster.is_some() {
            ctx.run_interval(TAKE_OVER_EVERY, |act, ctx| {
                act.take_over(ctx);
                act.take_over_test_mode(ctx);
            });
        }
    }
}
