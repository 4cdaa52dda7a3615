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
    pub encoding: String,
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
    in_flight: HashMap<Uuid, QueuedMessage>,
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
                self.in_flight.insert(id, item);
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
        self.in_flight.insert(item.id, item);
        true
    }

    /// A message in flight.
    pub fn in_flight(&self, id: Uuid) -> Option<&QueuedMessage> {
        self.in_flight.get(&id)
    }

    /// Stops tracking a message in flight (it was reported on, or its hand-over was refused).
    pub fn settle(&mut self, id: Uuid) -> Option<QueuedMessage> {
        self.in_flight.remove(&id)
    }

    /// Every message in flight, no longer tracked (their phone went away).
    pub fn drain_in_flight(&mut self) -> Vec<QueuedMessage> {
        self.in_flight.drain().map(|(_, item)| item).collect()
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
        let mut ids: Vec<Uuid> = self.in_flight.drain().map(|(id, _)| id).collect();
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
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use proptest::prelude::*;

    /// A gauge the test can read after the queue is gone.
    #[derive(Debug, Default, Clone)]
    struct Counter(Rc<RefCell<ByClass<i64>>>);

    impl DepthGauge for Counter {
        fn add(&mut self, class: QueueClass, delta: i64) {
            self.0.borrow_mut()[class] += delta;
        }
    }

    impl Counter {
        fn get(&self, class: QueueClass) -> i64 {
            self.0.borrow()[class]
        }
    }

    const NOW: i64 = 1_700_000_000_000;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n + 1)
    }

    fn message(n: u128, class: QueueClass) -> QueuedMessage {
        QueuedMessage {
            id: id(n),
            to: "+15550100".into(),
            content: format!("message {n}"),
            segments: 1,
            encoding: "gsm7".into(),
            class,
            expires_at: NOW + 3_600_000,
            scheduled_for: None,
            pinned: false,
        }
    }

    fn hand_over_all(queue: &mut PhoneQueue<Counter>, now: i64) -> Vec<Uuid> {
        std::iter::from_fn(|| queue.hand_over_next(now)).collect()
    }

    #[test]
    fn classes_are_served_in_priority_order_and_fifo_inside_a_class() {
        let mut queue = PhoneQueue::new(Counter::default());
        queue.enqueue(message(0, QueueClass::Campaign), NOW);
        queue.enqueue(message(1, QueueClass::Bulk), NOW);
        queue.enqueue(message(2, QueueClass::Single), NOW);
        queue.enqueue(message(3, QueueClass::Bulk), NOW);
        queue.enqueue(message(4, QueueClass::Single), NOW);
        assert_eq!(
            hand_over_all(&mut queue, NOW),
            [id(2), id(4), id(1), id(3), id(0)]
        );
        assert_eq!(queue.depth().in_flight, 5);
    }

    #[test]
    fn a_message_waits_or_flies_once() {
        let mut queue = PhoneQueue::new(Counter::default());
        assert!(queue.enqueue(message(0, QueueClass::Bulk), NOW));
        assert!(!queue.enqueue(message(0, QueueClass::Bulk), NOW));
        assert!(!queue.track_in_flight(message(0, QueueClass::Bulk)));
        assert_eq!(queue.hand_over_next(NOW), Some(id(0)));
        assert!(!queue.enqueue(message(0, QueueClass::Bulk), NOW));
        assert!(!queue.retry_first(message(0, QueueClass::Bulk), NOW));
        assert_eq!(queue.depth().waiting(), 0);
        assert_eq!(queue.gauge().get(QueueClass::Bulk), 0);
    }

    #[test]
    fn held_messages_join_their_class_when_due() {
        let mut queue = PhoneQueue::new(Counter::default());
        let later = QueuedMessage {
            scheduled_for: Some(NOW + 1_000),
            ..message(0, QueueClass::Single)
        };
        queue.enqueue(later, NOW);
        queue.enqueue(message(1, QueueClass::Campaign), NOW);
        assert_eq!(queue.next_due(), Some(NOW + 1_000));
        assert_eq!(queue.ready_len(QueueClass::Single), 0);
        // Held messages count in the depth.
        assert_eq!(queue.gauge().get(QueueClass::Single), 1);
        queue.release_due(NOW + 999);
        assert_eq!(queue.ready_len(QueueClass::Single), 0);
        queue.release_due(NOW + 1_000);
        assert_eq!(queue.next_due(), None);
        assert_eq!(hand_over_all(&mut queue, NOW + 1_000), [id(0), id(1)]);
    }

    #[test]
    fn a_retried_message_goes_first_and_is_due_now() {
        let mut queue = PhoneQueue::new(Counter::default());
        queue.enqueue(message(0, QueueClass::Bulk), NOW);
        queue.enqueue(message(1, QueueClass::Bulk), NOW);
        assert_eq!(queue.hand_over_next(NOW), Some(id(0)));
        let back = queue.settle(id(0)).unwrap();
        let back = QueuedMessage {
            scheduled_for: Some(NOW + 60_000),
            ..back
        };
        assert!(queue.retry_first(back, NOW));
        assert_eq!(hand_over_all(&mut queue, NOW), [id(0), id(1)]);
    }

    #[test]
    fn expired_messages_are_dropped_at_hand_over() {
        let mut queue = PhoneQueue::new(Counter::default());
        let expired = QueuedMessage {
            expires_at: NOW,
            ..message(0, QueueClass::Single)
        };
        queue.enqueue(expired, NOW - 1);
        queue.enqueue(message(1, QueueClass::Single), NOW);
        assert_eq!(queue.hand_over_next(NOW), Some(id(1)));
        assert_eq!(queue.hand_over_next(NOW), None);
        assert_eq!(
            queue.depth(),
            QueueDepth {
                in_flight: 1,
                ..QueueDepth::default()
            }
        );
        assert_eq!(queue.gauge().get(QueueClass::Single), 0);
    }

    #[test]
    fn hand_back_keeps_pinned_messages() {
        let mut queue = PhoneQueue::new(Counter::default());
        let pinned = QueuedMessage {
            pinned: true,
            ..message(0, QueueClass::Single)
        };
        let held = QueuedMessage {
            scheduled_for: Some(NOW + 5_000),
            ..message(2, QueueClass::Bulk)
        };
        queue.enqueue(pinned, NOW);
        queue.enqueue(message(1, QueueClass::Campaign), NOW);
        queue.enqueue(held, NOW);
        assert_eq!(queue.hand_back(), [id(1), id(2)]);
        assert_eq!(queue.gauge().get(QueueClass::Campaign), 0);
        assert_eq!(queue.gauge().get(QueueClass::Bulk), 0);
        assert_eq!(hand_over_all(&mut queue, NOW), [id(0)]);
    }

    #[test]
    fn remove_waiting_finds_ready_and_held_but_not_in_flight() {
        let mut queue = PhoneQueue::new(Counter::default());
        let held = QueuedMessage {
            scheduled_for: Some(NOW + 5_000),
            ..message(1, QueueClass::Bulk)
        };
        queue.enqueue(message(0, QueueClass::Single), NOW);
        queue.enqueue(held, NOW);
        queue.enqueue(message(2, QueueClass::Single), NOW);
        assert_eq!(queue.hand_over_next(NOW), Some(id(0)));
        assert!(!queue.remove_waiting(id(0)));
        assert!(queue.remove_waiting(id(1)));
        assert!(queue.remove_waiting(id(2)));
        assert!(!queue.remove_waiting(id(2)));
        assert_eq!(queue.depth().waiting(), 0);
        assert_eq!(queue.gauge().get(QueueClass::Bulk), 0);
        assert!(queue.in_flight(id(0)).is_some());
    }

    #[test]
    fn drain_all_empties_in_flight_ready_and_held() {
        let gauge = Counter::default();
        let mut queue = PhoneQueue::new(gauge.clone());
        let held = QueuedMessage {
            scheduled_for: Some(NOW + 5_000),
            ..message(3, QueueClass::Single)
        };
        queue.enqueue(message(0, QueueClass::Bulk), NOW);
        assert_eq!(queue.hand_over_next(NOW), Some(id(0)));
        queue.enqueue(message(1, QueueClass::Campaign), NOW);
        queue.enqueue(message(2, QueueClass::Single), NOW);
        queue.enqueue(held, NOW);
        assert_eq!(queue.drain_all(), [id(0), id(2), id(1), id(3)]);
        assert_eq!(queue.depth(), QueueDepth::default());
        for class in ByClass::<()>::PRIORITY {
            assert_eq!(gauge.get(class), 0);
        }
    }

    #[test]
    fn a_dropped_queue_leaves_the_gauge() {
        let gauge = Counter::default();
        let mut queue = PhoneQueue::new(gauge.clone());
        queue.enqueue(message(0, QueueClass::Bulk), NOW);
        queue.enqueue(message(1, QueueClass::Bulk), NOW);
        assert_eq!(gauge.get(QueueClass::Bulk), 2);
        drop(queue);
        assert_eq!(gauge.get(QueueClass::Bulk), 0);
    }

    /// One step of a phone's life, on message ids `0..8`.
    #[derive(Debug, Clone)]
    enum Op {
        Enqueue {
            n: u128,
            class: QueueClass,
            hold_ms: Option<i64>,
            pinned: bool,
        },
        Advance(i64),
        HandOver,
        /// The report of an in-flight message settles it (a success or a final failure).
        Report(u128),
        /// The report of an in-flight message asks for another attempt.
        RetryAfterReport(u128),
        /// The phone went away: every message in flight is queued again at the front.
        Requeue,
        Remove(u128),
        HandBack,
        Track(u128, QueueClass),
    }

    fn class_strategy() -> impl Strategy<Value = QueueClass> {
        prop_oneof![
            Just(QueueClass::Single),
            Just(QueueClass::Bulk),
            Just(QueueClass::Campaign)
        ]
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..8_u128, class_strategy(), proptest::option::of(1..5_000_i64), any::<bool>())
                .prop_map(|(n, class, hold_ms, pinned)| Op::Enqueue { n, class, hold_ms, pinned }),
            2 => (0..3_000_i64).prop_map(Op::Advance),
            4 => Just(Op::HandOver),
            1 => (0..8_u128).prop_map(Op::Report),
            1 => (0..8_u128).prop_map(Op::RetryAfterReport),
            1 => Just(Op::Requeue),
            1 => (0..8_u128).prop_map(Op::Remove),
            1 => Just(Op::HandBack),
            1 => (0..8_u128, class_strategy()).prop_map(|(n, class)| Op::Track(n, class)),
        ]
    }

    /// The rule written as plainly as possible: one list per class, a list of held messages,
    /// a list in flight.
    #[derive(Default)]
    struct Model {
        ready: ByClass<Vec<QueuedMessage>>,
        held: Vec<QueuedMessage>,
        in_flight: Vec<QueuedMessage>,
    }

    impl Model {
        fn knows(&self, id: Uuid) -> bool {
            self.all().any(|m| m.id == id)
        }

        fn all(&self) -> impl Iterator<Item = &QueuedMessage> {
            self.ready
                .iter()
                .flat_map(|(_, list)| list.iter())
                .chain(&self.held)
                .chain(&self.in_flight)
        }

        fn insert(&mut self, item: QueuedMessage, front: bool, now: i64) {
            if self.knows(item.id) {
                return;
            }
            match item.scheduled_for {
                Some(at) if at > now => self.held.push(item),
                _ if front => self.ready[item.class].insert(0, item),
                _ => self.ready[item.class].push(item),
            }
        }

        fn release_due(&mut self, now: i64) {
            self.held.sort_by_key(|m| (m.scheduled_for, m.id));
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
                .into_iter()
                .partition(|m| m.scheduled_for.is_some_and(|at| at <= now));
            self.held = later;
            for item in due {
                self.ready[item.class].push(item);
            }
        }

        fn hand_over(&mut self) -> Option<Uuid> {
            let class = ByClass::<()>::PRIORITY
                .into_iter()
                .find(|c| !self.ready[*c].is_empty())?;
            let item = self.ready[class].remove(0);
            let id = item.id;
            self.in_flight.push(item);
            Some(id)
        }

        fn take_in_flight(&mut self, id: Uuid) -> Option<QueuedMessage> {
            let at = self.in_flight.iter().position(|m| m.id == id)?;
            Some(self.in_flight.remove(at))
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Across any sequence of steps: nothing is lost or duplicated, classes are served in
        /// priority order and FIFO inside a class, and the gauge equals the depth.
        #[test]
        fn the_queue_follows_the_rule(ops in proptest::collection::vec(op_strategy(), 1..80)) {
            let gauge = Counter::default();
            let mut queue = PhoneQueue::new(gauge.clone());
            let mut model = Model::default();
            let mut now = NOW;
            for op in ops {
                match op {
                    Op::Enqueue { n, class, hold_ms, pinned } => {
                        let item = QueuedMessage {
                            scheduled_for: hold_ms.map(|ms| now + ms),
                            pinned,
                            ..message(n, class)
                        };
                        let known = model.knows(item.id);
                        prop_assert_eq!(queue.enqueue(item.clone(), now), !known);
                        model.insert(item, false, now);
                    }
                    Op::Advance(ms) => {
                        now += ms;
                        queue.release_due(now);
                        model.release_due(now);
                    }
                    Op::HandOver => {
                        prop_assert_eq!(queue.hand_over_next(now), model.hand_over());
                    }
                    Op::Report(n) => {
                        let settled = queue.settle(id(n));
                        prop_assert_eq!(settled, model.take_in_flight(id(n)));
                    }
                    Op::RetryAfterReport(n) => {
                        let settled = queue.settle(id(n));
                        prop_assert_eq!(&settled, &model.take_in_flight(id(n)));
                        if let Some(item) = settled {
                            prop_assert!(queue.retry_first(item.clone(), now));
                            model.insert(QueuedMessage { scheduled_for: None, ..item }, true, now);
                        }
                    }
                    Op::Requeue => {
                        let mut drained = queue.drain_in_flight();
                        drained.sort_by_key(|m| m.id);
                        let mut expected = std::mem::take(&mut model.in_flight);
                        expected.sort_by_key(|m| m.id);
                        prop_assert_eq!(&drained, &expected);
                        for item in drained {
                            prop_assert!(queue.retry_first(item.clone(), now));
                            model.insert(QueuedMessage { scheduled_for: None, ..item }, true, now);
                        }
                    }
                    Op::Remove(n) => {
                        let waits = model.knows(id(n)) && model.in_flight.iter().all(|m| m.id != id(n));
                        prop_assert_eq!(queue.remove_waiting(id(n)), waits);
                        for class in ByClass::<()>::PRIORITY {
                            model.ready[class].retain(|m| m.id != id(n));
                        }
                        model.held.retain(|m| m.id != id(n));
                    }
                    Op::HandBack => {
                        let mut expected = Vec::new();
                        for class in ByClass::<()>::PRIORITY {
                            expected.extend(model.ready[class].iter().filter(|m| !m.pinned).map(|m| m.id));
                            model.ready[class].retain(|m| m.pinned);
                        }
                        model.held.sort_by_key(|m| (m.scheduled_for, m.id));
                        expected.extend(model.held.iter().filter(|m| !m.pinned).map(|m| m.id));
                        model.held.retain(|m| m.pinned);
                        prop_assert_eq!(queue.hand_back(), expected);
                    }
                    Op::Track(n, class) => {
                        let known = model.knows(id(n));
                        prop_assert_eq!(queue.track_in_flight(message(n, class)), !known);
                        if !known {
                            model.in_flight.push(message(n, class));
                        }
                    }
                }

                // Nothing lost or duplicated: every message is in exactly one place.
                let mut ids: Vec<Uuid> = queue.ready.iter().flat_map(|(_, f)| f.iter().map(|m| m.id))
                    .chain(queue.held.values().map(|m| m.id))
                    .chain(queue.in_flight.keys().copied())
                    .collect();
                ids.sort();
                let before = ids.len();
                ids.dedup();
                prop_assert_eq!(before, ids.len(), "a message is in two places");
                let mut expected: Vec<Uuid> = model.all().map(|m| m.id).collect();
                expected.sort();
                prop_assert_eq!(ids, expected);
                let mut waiting: Vec<Uuid> = queue.waiting.iter().copied().collect();
                waiting.sort();
                let mut expected_waiting: Vec<Uuid> = model.ready.iter().flat_map(|(_, l)| l.iter())
                    .chain(&model.held).map(|m| m.id).collect();
                expected_waiting.sort();
                prop_assert_eq!(waiting, expected_waiting);

                // The gauge equals the depth, class by class.
                for class in ByClass::<()>::PRIORITY {
                    let depth = queue.ready[class].len() + queue.held.values().filter(|m| m.class == class).count();
                    prop_assert_eq!(gauge.get(class), i64::try_from(depth).unwrap());
                }
                prop_assert_eq!(
                    usize::try_from(ByClass::<()>::PRIORITY.iter().map(|c| gauge.get(*c)).sum::<i64>()).unwrap(),
                    queue.depth().waiting()
                );
            }
            // Dropping the queue takes its messages out of the gauge.
            drop(queue);
            for class in ByClass::<()>::PRIORITY {
                prop_assert_eq!(gauge.get(class), 0);
            }
        }
    }
}
