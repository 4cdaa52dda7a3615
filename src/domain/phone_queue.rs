//! One phone's queue: the messages waiting to be handed to it (one FIFO per priority class, plus
//! the ones held until `scheduled_for`) and the ones handed over and not yet reported on, kept in
//! step by this struct's own methods, with the queue-depth gauge updated in one place.
//!
//! A message is in at most one place: a class FIFO, the held set, or in flight. Waiting
//! messages (FIFOs and held) count in the depth, by class; in-flight ones do not. Classes are
//! served in priority order, FIFO inside a class (`docs/architecture.md`, "Phones").
//!
//! Time is always passed in (milliseconds since the epoch); this module never reads a clock and
//! does no I/O: the depth goes to a [`DepthGauge`] the owner provides.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::{Index, IndexMut};

use uuid::Uuid;

use super::status::QueueClass;

/// One value per [`QueueClass`], indexed by the class itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByClass<T> {
    single: T,
    bulk: T,
    campaign: T,
}

impl<T> ByClass<T> {
    /// The classes in the order a phone's queue serves them.
    pub const PRIORITY: [QueueClass; 3] =
        [QueueClass::Single, QueueClass::Bulk, QueueClass::Campaign];

    /// The values with their class, in priority order.
    pub fn iter(&self) -> impl Iterator<Item = (QueueClass, &T)> {
        Self::PRIORITY
            .into_iter()
            .map(move |class| (class, &self[class]))
    }
}

impl<T> Index<QueueClass> for ByClass<T> {
    type Output = T;

    fn index(&self, class: QueueClass) -> &T {
        match class {
            QueueClass::Single => &self.single,
            QueueClass::Bulk => &self.bulk,
            QueueClass::Campaign => &self.campaign,
        }
    }
}

impl<T> IndexMut<QueueClass> for ByClass<T> {
    fn index_mut(&mut self, class: QueueClass) -> &mut T {
        match class {
            QueueClass::Single => &mut self.single,
            QueueClass::Bulk => &mut self.bulk,
            QueueClass::Campaign => &mut self.campaign,
        }
    }
}

/// Where the depth of a queue goes (the actor's metrics gauge; a counter in tests).
pub trait DepthGauge {
    /// The number of waiting messages of `class` changed by `delta`.
    fn add(&mut self, class: QueueClass, delta: i64);
}

/// A gauge that records nothing.
#[derive(Debug, Default)]
pub struct NoGauge;

impl DepthGauge for NoGauge {
    fn add(&mut self, _: QueueClass, _: i64) {}
}

/// What a phone needs of a message to send it, and to order, hold and hand it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    pub id: Uuid,
    pub to: String,
    pub content: String,
    pub segments: u32,
    pub encoding: crate::domain::sms::Encoding,
    pub class: QueueClass,
    /// Milliseconds since the epoch; a message due after it is not handed over.
    pub expires_at: i64,
    /// Milliseconds since the epoch; held until then.
    pub scheduled_for: Option<i64>,
    /// Sent by this phone only (the request named its `device_id`): never handed back.
    pub pinned: bool,
}

/// A phone's waiting and in-flight messages. See the module documentation.
#[derive(Debug)]
pub struct PhoneQueue<G: DepthGauge = NoGauge> {
    ready: ByClass<VecDeque<QueuedMessage>>,
    /// Held until their `scheduled_for`, by (scheduled_for, id).
    held: BTreeMap<(i64, Uuid), QueuedMessage>,
    /// Ids in `ready` or `held`, so repeats are ignored and removals are cheap.
    waiting: HashSet<Uuid>,
    /// Handed over and not reported on, each with its place in the hand-over order.
    in_flight: HashMap<Uuid, (u64, QueuedMessage)>,
    /// The place the next hand-over takes.
    handed: u64,
    /// Waiting messages by class: what `gauge` was told.
    depth: ByClass<usize>,
    gauge: G,
}

impl<G: DepthGauge + Default> Default for PhoneQueue<G> {
    fn default() -> Self {
        PhoneQueue::new(G::default())
    }
}

impl<G: DepthGauge> PhoneQueue<G> {
    /// An empty queue reporting its depth to `gauge`.
    pub fn new(gauge: G) -> PhoneQueue<G> {
        PhoneQueue {
            ready: ByClass::default(),
            held: BTreeMap::new(),
            waiting: HashSet::new(),
            in_flight: HashMap::new(),
            handed: 0,
            depth: ByClass::default(),
            gauge,
        }
    }

    /// The gauge the depth goes to.
    pub fn gauge(&self) -> &G {
        &self.gauge
    }

    /// The one place the depth changes: every insert and removal of a waiting message.
    fn count(&mut self, class: QueueClass, added: bool) {
        if added {
            self.depth[class] += 1;
            self.gauge.add(class, 1);
        } else {
            self.depth[class] = self.depth[class].saturating_sub(1);
            self.gauge.add(class, -1);
        }
    }

    /// Adds a message at the back of its class (or to the held set while `scheduled_for` is
    /// after `now`). False, and nothing changes, when it already waits or is in flight.
    pub fn enqueue(&mut self, item: QueuedMessage, now: i64) -> bool {
        self.insert(item, false, now)
    }

    /// Puts a message whose attempt failed or was interrupted at the front of its class, due
    /// now. False, and nothing changes, when it already waits or is in flight.
    pub fn retry_first(&mut self, item: QueuedMessage, now: i64) -> bool {
        let item = QueuedMessage {
            scheduled_for: None,
            ..item
        };
        self.insert(item, true, now)
    }

    /// Puts messages whose attempts were interrupted (their phone went away) at the front of
    /// their classes, due now, in the order given (as [`PhoneQueue::drain_in_flight`] answers
    /// them): they are handed over again in their first order, before everything else. The
    /// ones that already wait or are in flight are left out; how many went in.
    pub fn retry_all_first(&mut self, items: Vec<QueuedMessage>, now: i64) -> usize {
        items
            .into_iter()
            .rev()
            .filter(|item| self.retry_first(item.clone(), now))
            .count()
    }

    fn insert(&mut self, item: QueuedMessage, front: bool, now: i64) -> bool {
        if self.in_flight.contains_key(&item.id) || !self.waiting.insert(item.id) {
            return false;
        }
        self.count(item.class, true);
        match item.scheduled_for {
            Some(at) if at > now => {
                self.held.insert((at, item.id), item);
            }
            _ => {
                let fifo = &mut self.ready[item.class];
                if front {
                    fifo.push_front(item);
                } else {
                    fifo.push_back(item);
                }
            }
        }
        true
    }

    /// Moves held messages due at or before `now` to the back of their class, earliest first.
    pub fn release_due(&mut self, now: i64) {
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let item = entry.remove();
            self.ready[item.class].push_back(item);
        }
    }

    /// When the next held message is due.
    pub fn next_due(&self) -> Option<i64> {
        self.held.first_key_value().map(|((at, _), _)| *at)
    }

    /// Whether a message is ready to be handed over.
    pub fn has_ready(&self) -> bool {
        self.ready.iter().any(|(_, fifo)| !fifo.is_empty())
    }

    /// How many messages of `class` are ready to be handed over (held ones not counted).
    pub fn ready_len(&self, class: QueueClass) -> usize {
        self.ready[class].len()
    }

    /// Hands over the first ready message of the highest class: it moves to in flight and its
    /// id is returned. Messages that expired (`expires_at <= now`) on the way are dropped: the
    /// expiry sweep moves them to `expired`.
    pub fn hand_over_next(&mut self, now: i64) -> Option<Uuid> {
        loop {
            let item = self.pop_ready()?;
            if item.expires_at > now {
                let id = item.id;
                self.fly(item);
                return Some(id);
            }
        }
    }

    fn pop_ready(&mut self) -> Option<QueuedMessage> {
        let class = ByClass::<()>::PRIORITY
            .into_iter()
            .find(|class| !self.ready[*class].is_empty())?;
        let item = self.ready[class].pop_front()?;
        self.waiting.remove(&item.id);
        self.count(item.class, false);
        Some(item)
    }

    /// Tracks a message handed over outside the queue (the immediate hand-over of a single
    /// send). False, and nothing changes, when it already waits or is in flight.
    pub fn track_in_flight(&mut self, item: QueuedMessage) -> bool {
        if self.waiting.contains(&item.id) || self.in_flight.contains_key(&item.id) {
            return false;
        }
        self.fly(item);
        true
    }

    fn fly(&mut self, item: QueuedMessage) {
        self.handed += 1;
        self.in_flight.insert(item.id, (self.handed, item));
    }

    /// A message in flight.
    pub fn in_flight(&self, id: Uuid) -> Option<&QueuedMessage> {
        self.in_flight.get(&id).map(|(_, item)| item)
    }

    /// Stops tracking a message in flight (it was reported on, or its hand-over was refused).
    pub fn settle(&mut self, id: Uuid) -> Option<QueuedMessage> {
        self.in_flight.remove(&id).map(|(_, item)| item)
    }

    /// Every message in flight, no longer tracked (their phone went away), in the order they
    /// were handed over.
    pub fn drain_in_flight(&mut self) -> Vec<QueuedMessage> {
        let mut flying: Vec<(u64, QueuedMessage)> =
            self.in_flight.drain().map(|(_, entry)| entry).collect();
        flying.sort_unstable_by_key(|(handed, _)| *handed);
        flying.into_iter().map(|(_, item)| item).collect()
    }

    /// Removes a waiting message (ready or held); false when it does not wait here.
    pub fn remove_waiting(&mut self, id: Uuid) -> bool {
        if !self.waiting.remove(&id) {
            return false;
        }
        let mut removed = None;
        for class in ByClass::<()>::PRIORITY {
            let fifo = &mut self.ready[class];
            if let Some(at) = fifo.iter().position(|item| item.id == id) {
                removed = fifo.remove(at);
                break;
            }
        }
        if removed.is_none() {
            let key = self
                .held
                .iter()
                .find(|(_, item)| item.id == id)
                .map(|(k, _)| *k);
            removed = key.and_then(|key| self.held.remove(&key));
        }
        if let Some(item) = removed {
            self.count(item.class, false);
        }
        true
    }

    /// Removes the waiting messages that are not pinned (another phone may send them); their
    /// ids, ready ones by class then held ones.
    pub fn hand_back(&mut self) -> Vec<Uuid> {
        let mut handed = Vec::new();
        for class in ByClass::<()>::PRIORITY {
            let (keep, give): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.ready[class])
                .into_iter()
                .partition(|item| item.pinned);
            self.ready[class] = keep;
            handed.extend(give);
        }
        let held = std::mem::take(&mut self.held);
        for (key, item) in held {
            if item.pinned {
                self.held.insert(key, item);
            } else {
                handed.push(item);
            }
        }
        handed
            .into_iter()
            .map(|item| {
                self.waiting.remove(&item.id);
                self.count(item.class, false);
                item.id
            })
            .collect()
    }

    /// Empties the queue: the ids of the messages in flight, then the ready ones in the order
    /// they would have been handed over, then the held ones.
    pub fn drain_all(&mut self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self.drain_in_flight().into_iter().map(|m| m.id).collect();
        while let Some(item) = self.pop_ready() {
            ids.push(item.id);
        }
        for (_, item) in std::mem::take(&mut self.held) {
            self.waiting.remove(&item.id);
            self.count(item.class, false);
            ids.push(item.id);
        }
        ids
    }

    /// How many messages wait and are in flight.
    pub fn depth(&self) -> QueueDepth {
        let mut ready = ByClass::default();
        for (class, fifo) in self.ready.iter() {
            ready[class] = fifo.len();
        }
        QueueDepth {
            ready,
            held: self.held.len(),
            in_flight: self.in_flight.len(),
        }
    }
}

impl<G: DepthGauge> Drop for PhoneQueue<G> {
    /// A queue that goes away takes its waiting messages out of the gauge.
    fn drop(&mut self) {
        for class in ByClass::<()>::PRIORITY {
            let left = i64::try_from(self.depth[class]).unwrap_or(i64::MAX);
            if left > 0 {
                self.gauge.add(class, -left);
            }
        }
    }
}

/// How many messages a queue holds, by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Ready to be handed over, by class.
    pub ready: ByClass<usize>,
    /// Held until their `scheduled_for`.
    pub held: usize,
    /// Handed over, not yet reported on.
    pub in_flight: usize,
}

impl QueueDepth {
    /// Waiting messages (ready and held): what the gauge counts.
    pub fn waiting(&self) -> usize {
        self.ready.iter().map(|(_, n)| n).sum::<usize>() + self.held
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
