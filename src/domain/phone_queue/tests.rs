//! Unit and property tests of the phone queue.

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
        encoding: crate::domain::sms::Encoding::Gsm7,
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
fn interrupted_messages_come_back_first_in_their_hand_over_order() {
    let mut queue = PhoneQueue::new(Counter::default());
    for n in 0..6 {
        queue.enqueue(message(n, QueueClass::Bulk), NOW);
    }
    queue.enqueue(message(6, QueueClass::Single), NOW);
    // 6 (single) first, then 0..4 of the bulk class; 4 and 5 still wait.
    let handed: Vec<Uuid> = (0..5).filter_map(|_| queue.hand_over_next(NOW)).collect();
    assert_eq!(handed, [id(6), id(0), id(1), id(2), id(3)]);
    queue.enqueue(message(7, QueueClass::Bulk), NOW);
    let drained = queue.drain_in_flight();
    assert_eq!(
        drained.iter().map(|m| m.id).collect::<Vec<_>>(),
        handed,
        "drained in hand-over order"
    );
    assert_eq!(queue.retry_all_first(drained, NOW), 5);
    assert_eq!(
        hand_over_all(&mut queue, NOW),
        [id(6), id(0), id(1), id(2), id(3), id(4), id(5), id(7)]
    );
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
                    // Drained in hand-over order, and back at the front in that order.
                    let drained = queue.drain_in_flight();
                    let expected = std::mem::take(&mut model.in_flight);
                    prop_assert_eq!(&drained, &expected);
                    prop_assert_eq!(queue.retry_all_first(drained, now), expected.len());
                    for item in expected.into_iter().rev() {
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
