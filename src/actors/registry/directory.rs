//! The Registry's phone directory: every paired phone this node knows, whether a transport of
//! it is open here or (in a cluster) on another node, the actor of each, test mode's simulated
//! phones, and the decisions made from that: which phone takes a send ([`Target`]; round robin
//! over the online phones sharing a sending number), what a transport connecting or closing
//! changes, what pairing, unpairing and a token rotation change, and which last-seen times are
//! due for writing (docs/api.md, Phones). A SIM line is a phone of its own here (own actor,
//! own number); the directory also knows the lines of each device, which the Registry
//! connects, disconnects and unpairs with their device.
//!
//! No I/O and no actix: the Registry holds one, starts the actors it asks for, sends the
//! messages and does the writes. The actor handle is a type parameter ([`PhoneHandle`]), so the
//! rules are tested here without a running system.

use std::collections::HashMap;

use uuid::Uuid;

use super::last_seen::{self, LastSeen};
use crate::domain::pace::Pace;
use crate::domain::sim_slot::SimSlot;
use crate::domain::status::Mode;
use crate::store::phones::PhoneRecord;
use crate::store::scoped::Scope;

#[cfg(test)]
mod tests;

/// A phone actor's handle as the directory keeps it (the Registry's is `Addr<Phone>`).
pub trait PhoneHandle: Clone {
    /// False once the actor stopped for good: the next use starts a new one.
    fn is_running(&self) -> bool;
}

/// A sending number of one workspace and mode: the key of the phones sharing it, of their
/// round-robin position, and of a test-mode number's simulated phone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NumberKey {
    pub scope: Scope,
    pub number: String,
}

impl NumberKey {
    /// The key of `number` in `scope`.
    pub fn new(scope: Scope, number: &str) -> NumberKey {
        NumberKey {
            scope,
            number: number.to_string(),
        }
    }
}

/// Why a pinned device cannot take a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// No phone of that id in the send's workspace and mode.
    UnknownDevice,
    /// The phone has another number than the send's `from`.
    NumberMismatch,
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

/// The phone a send goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// Online here: its actor takes the hand-over.
    Here(Uuid),
    /// Online on another node of the cluster (that node is told), or, in test mode, the phone
    /// the message names while the number's simulated phone sends: no actor here takes it.
    Elsewhere(Uuid),
}

/// What a transport connecting changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// The phone had no transport here before: it is announced online.
    pub came_online: bool,
    /// The last-seen time to write at once, if newer than the stored one.
    pub seen: Option<i64>,
    pub scope: Scope,
}

/// What a transport closing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnection<A> {
    /// No transport of the phone is left here (a replaced session's late close changes
    /// nothing): it is announced offline.
    pub went_offline: bool,
    /// The last-seen time to write at once, if newer than the stored one.
    pub seen: Option<i64>,
    /// The phone's actor, told to detach the transport.
    pub actor: Option<A>,
    pub scope: Scope,
    /// Phones with the same number connected here, to take the waiting unpinned messages;
    /// empty unless the phone went offline and has an actor.
    pub reroute_to: Vec<Uuid>,
}

/// What unpairing a phone left to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed<A> {
    /// Its actor, to hand back its unpinned messages and stop.
    pub actor: Option<A>,
    /// The other phones with its number, connected ones first: where its unpinned messages go.
    pub reroute_to: Vec<Uuid>,
    /// Whether it was online on another node (whose actor then handles its queue).
    pub online_elsewhere: bool,
}

/// One paired phone.
#[derive(Debug)]
struct Entry<A> {
    record: PhoneRecord,
    actor: Option<A>,
    /// The current transport's session id, while one is open here.
    session: Option<u64>,
    last_seen: LastSeen,
}

/// The phones this node knows, and who takes a send (see the module docs).
#[derive(Debug)]
pub struct PhoneDirectory<A> {
    phones: HashMap<Uuid, Entry<A>>,
    /// The phones of each sending number, in pairing order.
    by_number: HashMap<NumberKey, Vec<Uuid>>,
    /// The SIM lines of each device that has any, in pairing order.
    lines: HashMap<Uuid, Vec<Uuid>>,
    /// Round-robin position per number, to spread sends over phones sharing it.
    next_pick: HashMap<NumberKey, usize>,
    /// Test mode's simulated phone of each number it sent from.
    simulated: HashMap<NumberKey, A>,
    /// In a cluster: phones online on other nodes, and the node holding each.
    remote_online: HashMap<Uuid, Uuid>,
    /// The pace of a phone without an override (`settings.pace`).
    default_pace: Pace,
}

impl<A: PhoneHandle> PhoneDirectory<A> {
    /// An empty directory; phones without a pace override get `default_pace`.
    pub fn new(default_pace: Pace) -> PhoneDirectory<A> {
        PhoneDirectory {
            phones: HashMap::new(),
            by_number: HashMap::new(),
            lines: HashMap::new(),
            next_pick: HashMap::new(),
            simulated: HashMap::new(),
            remote_online: HashMap::new(),
            default_pace,
        }
    }

    /// Phones known.
    pub fn len(&self) -> usize {
        self.phones.len()
    }

    /// Whether the phone is known (paired).
    pub fn contains(&self, phone_id: Uuid) -> bool {
        self.phones.contains_key(&phone_id)
    }

    /// Every phone known.
    pub fn ids(&self) -> Vec<Uuid> {
        self.phones.keys().copied().collect()
    }

    /// A phone was paired (or read at start-up): known from now on, offline here, without an
    /// actor, last seen as stored. A phone known already starts over.
    pub fn insert(&mut self, record: PhoneRecord) {
        let key = NumberKey::new(record.scope(), &record.phone_number);
        let ids = self.by_number.entry(key).or_default();
        if !ids.contains(&record.id) {
            ids.push(record.id);
        }
        if let Some(line) = record.line {
            let lines = self.lines.entry(line.device_phone_id).or_default();
            if !lines.contains(&record.id) {
                lines.push(record.id);
            }
        }
        let last_seen = LastSeen::loaded(record.last_seen_at);
        self.phones.insert(
            record.id,
            Entry {
                record,
                actor: None,
                session: None,
                last_seen,
            },
        );
    }

    /// Another node changed the phone's record: a known phone keeps its transport and actor,
    /// an unknown one is inserted.
    pub fn record_changed(&mut self, record: PhoneRecord) {
        match self.phones.get_mut(&record.id) {
            Some(entry) => entry.record = record,
            None => self.insert(record),
        }
    }

    /// The SIM lines of a device (none for a one-line device or a line), in pairing order.
    pub fn lines_of(&self, device: Uuid) -> Vec<Uuid> {
        self.lines.get(&device).cloned().unwrap_or_default()
    }

    /// The line of `device` on SIM slot `slot`, if it has one.
    pub fn line_on(&self, device: Uuid, slot: SimSlot) -> Option<Uuid> {
        self.lines.get(&device)?.iter().copied().find(|id| {
            self.record(*id)
                .and_then(|r| r.line)
                .is_some_and(|line| line.sim_slot == slot)
        })
    }

    /// The phone's record.
    pub fn record(&self, phone_id: Uuid) -> Option<&PhoneRecord> {
        self.phones.get(&phone_id).map(|e| &e.record)
    }

    /// The pace the phone sends at: its override, else the default.
    pub fn pace_of(&self, phone_id: Uuid) -> Option<Pace> {
        let record = self.record(phone_id)?;
        Some(record.pace.unwrap_or(self.default_pace))
    }

    /// The phone's pace override changed; the pace it sends at now, None when unknown.
    pub fn set_pace(&mut self, phone_id: Uuid, pace: Option<Pace>) -> Option<Pace> {
        self.phones.get_mut(&phone_id)?.record.pace = pace;
        self.pace_of(phone_id)
    }

    /// The phone's actor, running or not.
    pub fn actor(&self, phone_id: Uuid) -> Option<A> {
        self.phones.get(&phone_id)?.actor.clone()
    }

    /// The phone's actor while it runs; None asks the caller to start one ([`Self::started`]).
    pub fn running(&self, phone_id: Uuid) -> Option<A> {
        self.actor(phone_id).filter(A::is_running)
    }

    /// The caller started the phone's actor.
    pub fn started(&mut self, phone_id: Uuid, actor: A) {
        if let Some(entry) = self.phones.get_mut(&phone_id) {
            entry.actor = Some(actor);
        }
    }

    /// The phone's actor when this node owns the phone: its actor runs here and it is
    /// connected here or `leased` (whether this node holds the phone's lease; always true on a
    /// single node).
    pub fn owned(&self, phone_id: Uuid, leased: impl FnOnce() -> bool) -> Option<A> {
        let entry = self.phones.get(&phone_id)?;
        let actor = entry.actor.clone().filter(A::is_running)?;
        (leased() || entry.session.is_some()).then_some(actor)
    }

    /// Whether a transport of the phone is open here.
    pub fn connected_here(&self, phone_id: Uuid) -> bool {
        self.phones
            .get(&phone_id)
            .is_some_and(|e| e.session.is_some())
    }

    /// Whether a transport of the phone is open here or, in a cluster, on another node.
    pub fn is_online(&self, phone_id: Uuid) -> bool {
        self.connected_here(phone_id) || self.remote_online.contains_key(&phone_id)
    }

    /// Phones with a transport open here.
    pub fn count_connected_here(&self) -> usize {
        self.phones.values().filter(|e| e.session.is_some()).count()
    }

    /// Which phone takes a send from `from_number` in `scope`, pinned to `device_id` or not.
    /// A pinned device must be of the scope and have that number. In test mode the number's
    /// simulated phone sends, and the message names the pinned phone, else an online one of
    /// the number in turn, else the first paired. Live sends go to the pinned phone when
    /// online, else to the online phones of the number in turn; None when none is online.
    pub fn route(
        &mut self,
        scope: Scope,
        from_number: &str,
        device_id: Option<Uuid>,
    ) -> Result<Option<Target>, RouteError> {
        if let Some(device) = device_id {
            let entry = self.phones.get(&device).ok_or(RouteError::UnknownDevice)?;
            if entry.record.scope() != scope {
                return Err(RouteError::UnknownDevice);
            }
            if entry.record.phone_number != from_number {
                return Err(RouteError::NumberMismatch);
            }
        }
        if scope.mode == Mode::Test {
            let named = device_id.or_else(|| self.test_phone_for(scope, from_number));
            return Ok(named.map(Target::Elsewhere));
        }
        let online = match device_id {
            Some(device) => self.is_online(device).then_some(device),
            None => self.online_for(scope, from_number),
        };
        Ok(online.map(|id| match self.connected_here(id) {
            true => Target::Here(id),
            false => Target::Elsewhere(id),
        }))
    }

    /// The next online phone of the number, round robin.
    fn online_for(&mut self, scope: Scope, number: &str) -> Option<Uuid> {
        let key = NumberKey::new(scope, number);
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

    /// The test-mode phone a test-mode send from `number` names: an online one in turn, else
    /// the first paired, else None.
    fn test_phone_for(&mut self, scope: Scope, number: &str) -> Option<Uuid> {
        self.online_for(scope, number).or_else(|| {
            self.by_number
                .get(&NumberKey::new(scope, number))
                .and_then(|ids| ids.first().copied())
        })
    }

    /// Phones with this number other than `except`: connected here first, else in pairing
    /// order.
    fn alternatives(&self, scope: Scope, number: &str, except: Uuid) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self
            .by_number
            .get(&NumberKey::new(scope, number))
            .map(|ids| ids.iter().copied().filter(|id| *id != except).collect())
            .unwrap_or_default();
        ids.sort_by_key(|id| !self.connected_here(*id));
        ids
    }

    /// A transport (session `session_id`) became the phone's current one at `now` (ms); None
    /// when the phone is unknown. The caller started its actor first.
    pub fn connected(&mut self, phone_id: Uuid, session_id: u64, now: i64) -> Option<Connection> {
        let entry = self.phones.get_mut(&phone_id)?;
        let came_online = entry.session.is_none();
        entry.session = Some(session_id);
        entry.last_seen.heard(now);
        // Stored at once, so the client API and the other nodes see a connected phone as seen.
        let seen = entry.last_seen.take_newer();
        Some(Connection {
            came_online,
            seen,
            scope: entry.record.scope(),
        })
    }

    /// Session `session_id` of the phone closed at `now` (ms); None when the phone is unknown.
    /// The phone goes offline here only when that session was the current one.
    pub fn disconnected(
        &mut self,
        phone_id: Uuid,
        session_id: u64,
        now: i64,
    ) -> Option<Disconnection<A>> {
        let entry = self.phones.get_mut(&phone_id)?;
        if entry.session == Some(session_id) {
            entry.session = None;
        }
        entry.last_seen.heard(now);
        let seen = entry.last_seen.take_newer();
        let went_offline = entry.session.is_none();
        let actor = entry.actor.clone();
        let scope = entry.record.scope();
        let number = entry.record.phone_number.clone();
        let reroute_to = match went_offline && actor.is_some() {
            true => self
                .alternatives(scope, &number, phone_id)
                .into_iter()
                .filter(|id| self.connected_here(*id))
                .collect(),
            false => Vec::new(),
        };
        Some(Disconnection {
            went_offline,
            seen,
            actor,
            scope,
            reroute_to,
        })
    }

    /// A frame arrived from the phone at `now` (ms).
    pub fn seen(&mut self, phone_id: Uuid, now: i64) {
        if let Some(entry) = self.phones.get_mut(&phone_id) {
            entry.last_seen.heard(now);
        }
    }

    /// The phone was unpaired: forgotten here, and online nowhere; None when it was unknown.
    pub fn unpaired(&mut self, phone_id: Uuid) -> Option<Removed<A>> {
        let online_elsewhere = self.remote_online.remove(&phone_id).is_some();
        let entry = self.phones.remove(&phone_id)?;
        let (scope, number) = (entry.record.scope(), &entry.record.phone_number);
        if let Some(ids) = self.by_number.get_mut(&NumberKey::new(scope, number)) {
            ids.retain(|id| *id != phone_id);
        }
        if let Some(line) = entry.record.line
            && let Some(lines) = self.lines.get_mut(&line.device_phone_id)
        {
            lines.retain(|id| *id != phone_id);
            if lines.is_empty() {
                self.lines.remove(&line.device_phone_id);
            }
        }
        let reroute_to = self.alternatives(scope, number, phone_id);
        Some(Removed {
            actor: entry.actor,
            reroute_to,
            online_elsewhere,
        })
    }

    /// The phone's token was rotated: its transport here no longer counts; its actor (to close
    /// the transport and keep the queue) if any.
    pub fn token_rotated(&mut self, phone_id: Uuid) -> Option<A> {
        let entry = self.phones.get_mut(&phone_id)?;
        entry.session = None;
        entry.actor.clone()
    }

    /// This node stops owning the phone (it went to another node, its lease was lost, or its
    /// actor found it owned elsewhere): no transport and no actor here any more; the actor it
    /// had, to stop.
    pub fn let_go(&mut self, phone_id: Uuid) -> Option<A> {
        let entry = self.phones.get_mut(&phone_id)?;
        entry.session = None;
        entry.actor.take()
    }

    /// The phone came online on another node (`node`); true when it has an actor here, which
    /// should let go of it.
    pub fn online_elsewhere(&mut self, phone_id: Uuid, node: Uuid) -> bool {
        self.remote_online.insert(phone_id, node);
        self.phones
            .get(&phone_id)
            .is_some_and(|e| e.actor.is_some())
    }

    /// The phone went offline on `node`; a later connection on another node stays.
    pub fn offline_elsewhere(&mut self, phone_id: Uuid, node: Uuid) {
        if self.remote_online.get(&phone_id) == Some(&node) {
            self.remote_online.remove(&phone_id);
        }
    }

    /// The phones online anywhere in the cluster and their node, as read at a heartbeat (those
    /// of `me` are this node's own and skipped). Answers the phones online elsewhere that are
    /// not known here.
    pub fn online_anywhere(
        &mut self,
        online: impl IntoIterator<Item = (Uuid, Uuid)>,
        me: Uuid,
    ) -> Vec<Uuid> {
        self.remote_online = online.into_iter().filter(|(_, node)| *node != me).collect();
        self.remote_online
            .keys()
            .filter(|phone| !self.phones.contains_key(phone))
            .copied()
            .collect()
    }

    /// Live state of the known phones among `ids`.
    pub fn states(&self, ids: impl IntoIterator<Item = Uuid>) -> HashMap<Uuid, PhoneState> {
        ids.into_iter()
            .filter_map(|id| {
                let entry = self.phones.get(&id)?;
                let state = PhoneState {
                    online: self.is_online(id),
                    last_seen_at: entry.last_seen.live(),
                };
                Some((id, state))
            })
            .collect()
    }

    /// The last-seen times due on the periodic flush ([`last_seen::STORE_EVERY`]), counted as
    /// written.
    pub fn last_seen_due(&mut self) -> Vec<(Uuid, i64)> {
        self.take_last_seen(|seen| seen.take_due(last_seen::STORE_EVERY))
    }

    /// Every last-seen time newer than the stored one (as on a stop), counted as written.
    pub fn last_seen_newer(&mut self) -> Vec<(Uuid, i64)> {
        self.take_last_seen(LastSeen::take_newer)
    }

    fn take_last_seen(&mut self, take: impl Fn(&mut LastSeen) -> Option<i64>) -> Vec<(Uuid, i64)> {
        self.phones
            .iter_mut()
            .filter_map(|(id, entry)| take(&mut entry.last_seen).map(|at| (*id, at)))
            .collect()
    }

    /// The simulated phone of a test-mode number while it runs.
    pub fn simulated(&self, key: &NumberKey) -> Option<A> {
        self.simulated.get(key).filter(|a| a.is_running()).cloned()
    }

    /// The caller started the simulated phone of a test-mode number.
    pub fn simulated_started(&mut self, key: NumberKey, actor: A) {
        self.simulated.insert(key, actor);
    }

    /// Forgets the simulated phones (test mode stops here); their actors, to stop.
    pub fn drain_simulated(&mut self) -> Vec<A> {
        self.simulated.drain().map(|(_, actor)| actor).collect()
    }

    /// Forgets every phone and simulated phone (the server stops); their actors, to stop.
    pub fn drain(&mut self) -> Vec<A> {
        let mut actors: Vec<A> = self.phones.drain().filter_map(|(_, e)| e.actor).collect();
        actors.extend(self.drain_simulated());
        self.by_number.clear();
        self.lines.clear();
        actors
    }
}
