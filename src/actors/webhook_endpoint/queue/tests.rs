//! Unit and property tests of an endpoint's queue.

use std::collections::HashSet;

use super::*;
use proptest::prelude::*;

const NOW: i64 = 1_700_000_000_000;

fn endpoint() -> EndpointId {
    Uuid::from_u128(0xE).into()
}

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n + 1)
}

/// Delivery `n`, due at `at`, after `attempts` attempts.
fn delivery(n: u128, at: i64, attempts: u32) -> PendingDelivery {
    PendingDelivery {
        id: id(n),
        endpoint_id: endpoint(),
        event: "message.sent".into(),
        event_id: id(1000 + n),
        message_id: id(2000 + n),
        attempts,
        next_attempt_at: at,
        created_at: NOW,
    }
}

fn ids(batch: &[PendingDelivery]) -> Vec<Uuid> {
    batch.iter().map(|d| d.id).collect()
}

/// Reads the batch (every message found) and starts every attempt a slot allows.
fn read_and_start(queue: &mut EndpointQueue, batch: Vec<PendingDelivery>) -> Vec<Uuid> {
    assert!(queue.end_read());
    for d in batch {
        queue.push_ready((d, Ok(None)));
    }
    let mut started = Vec::new();
    while let Some((d, _)) = queue.next_ready() {
        queue.attempt_started();
        started.push(d.id);
    }
    started
}

#[test]
fn due_deliveries_are_read_in_due_order_and_later_ones_arm_the_wake_up() {
    let mut queue = EndpointQueue::new(endpoint());
    let wake = queue.enqueue(
        vec![
            delivery(0, NOW + 500, 0),
            delivery(1, NOW - 10, 0),
            delivery(2, NOW, 0),
            delivery(3, NOW + 200, 0),
        ],
        NOW,
    );
    assert_eq!(wake, Some(NOW + 200), "the earliest one not due");
    let (batch, wake) = queue.take_due(NOW);
    assert_eq!(ids(&batch), [id(1), id(2)]);
    assert_eq!(wake, None, "armed already for the head");
    assert_eq!(queue.take_due(NOW).0, [], "one read at a time");
    assert_eq!(read_and_start(&mut queue, batch), [id(1), id(2)]);
    queue.woken();
    let (batch, wake) = queue.take_due(NOW + 200);
    assert_eq!(ids(&batch), [id(3)]);
    assert_eq!(wake, Some(NOW + 500));
}

#[test]
fn a_delivery_is_held_once_and_other_endpoints_are_ignored() {
    let mut queue = EndpointQueue::new(endpoint());
    queue.enqueue(vec![delivery(0, NOW, 0), delivery(0, NOW, 0)], NOW);
    let other = PendingDelivery {
        endpoint_id: Uuid::from_u128(0xF).into(),
        ..delivery(1, NOW, 0)
    };
    queue.enqueue(vec![other], NOW);
    let (batch, _) = queue.take_due(NOW);
    assert_eq!(ids(&batch), [id(0)]);
    read_and_start(&mut queue, batch);
    queue.enqueue(vec![delivery(0, NOW, 0)], NOW);
    assert!(queue.due.is_empty(), "in flight, not waiting again");
}

#[test]
fn in_flight_attempts_are_capped() {
    let mut queue = EndpointQueue::new(endpoint());
    let many: Vec<_> = (0..40).map(|n| delivery(n, NOW, 0)).collect();
    queue.enqueue(many, NOW);
    let (batch, _) = queue.take_due(NOW);
    assert_eq!(batch.len(), 40);
    let started = read_and_start(&mut queue, batch);
    assert_eq!(started.len(), MAX_IN_FLIGHT);
    queue.answered();
    assert!(queue.next_ready().is_some(), "a freed slot takes the next");
}

#[test]
fn read_ahead_is_bounded() {
    let mut queue = EndpointQueue::new(endpoint());
    let many: Vec<_> = (0..200).map(|n| delivery(n, NOW, 0)).collect();
    queue.enqueue(many, NOW);
    let (batch, _) = queue.take_due(NOW);
    assert_eq!(batch.len(), READ_AHEAD);
}

#[test]
fn a_spent_budget_holds_the_delivery_first_in_line() {
    let mut queue = EndpointQueue::new(endpoint());
    queue.enqueue(vec![delivery(0, NOW, 0), delivery(1, NOW, 0)], NOW);
    let (batch, _) = queue.take_due(NOW);
    assert!(queue.end_read());
    for d in batch {
        queue.push_ready((d, Ok(None)));
    }
    let first = queue.next_ready().expect("a read delivery");
    queue.wait_for_budget(first);
    assert!(queue.next_ready().is_none(), "nothing starts while spent");
    queue.budget_allows();
    assert_eq!(queue.next_ready().map(|(d, _)| d.id), Some(id(0)));
}

#[test]
fn a_retry_waits_for_its_time_and_an_end_drops_older_copies() {
    let mut queue = EndpointQueue::new(endpoint());
    queue.enqueue(vec![delivery(0, NOW, 0), delivery(1, NOW, 0)], NOW);
    let (batch, _) = queue.take_due(NOW);
    read_and_start(&mut queue, batch);
    queue.answered();
    queue.answered();
    let retry = Outcome::Retry {
        attempt: 1,
        at: NOW + 1000,
    };
    assert_eq!(queue.recorded(id(0), retry, NOW), Some(NOW + 1000));
    assert_eq!(
        queue.recorded(id(1), Outcome::Ended { attempt: 1 }, NOW),
        None
    );
    assert_eq!(queue.recording, 0);
    assert_eq!(queue.known.get(&id(0)).map(|d| d.attempts), Some(1));
    // A copy read before delivery 1 ended is stale; a manual retry keeps the count and passes.
    queue.enqueue(vec![delivery(1, NOW, 0)], NOW);
    assert!(!queue.known.contains_key(&id(1)));
    queue.enqueue(vec![delivery(1, NOW, 1)], NOW);
    assert!(queue.known.contains_key(&id(1)));
}

#[test]
fn a_manual_retry_moves_a_waiting_delivery_to_now() {
    let mut queue = EndpointQueue::new(endpoint());
    queue.enqueue(vec![delivery(0, NOW + 60_000, 2)], NOW);
    queue.deliver(vec![delivery(0, NOW, 2)], NOW);
    let (batch, _) = queue.take_due(NOW);
    assert_eq!(ids(&batch), [id(0)]);
}

#[test]
fn a_failed_record_forgets_the_delivery_for_the_next_load() {
    let mut queue = EndpointQueue::new(endpoint());
    queue.enqueue(vec![delivery(0, NOW, 0)], NOW);
    let (batch, _) = queue.take_due(NOW);
    read_and_start(&mut queue, batch);
    queue.answered();
    queue.recorded(id(0), Outcome::NotRecorded, NOW);
    queue.enqueue(vec![delivery(0, NOW, 0)], NOW);
    assert!(queue.due.contains(&(NOW, id(0))), "loaded again as pending");
}

#[test]
fn an_idle_queue_takes_nothing_and_a_read_after_it_is_dropped() {
    let mut queue = EndpointQueue::new(endpoint());
    queue.enqueue(vec![delivery(0, NOW, 0)], NOW);
    let (batch, _) = queue.take_due(NOW);
    assert_eq!(batch.len(), 1);
    queue.go_idle();
    assert!(!queue.end_read());
    queue.enqueue(vec![delivery(1, NOW, 0)], NOW);
    assert!(queue.known.is_empty() && queue.due.is_empty());
}

#[test]
fn pending_reads_coalesce_into_at_most_one_more() {
    let mut queue = EndpointQueue::new(endpoint());
    assert!(queue.begin_pending_read());
    assert!(!queue.begin_pending_read());
    assert!(!queue.begin_pending_read());
    assert!(queue.end_pending_read(), "one more after it");
    assert!(queue.begin_pending_read());
    assert!(!queue.end_pending_read());
}

#[test]
fn a_restart_forgets_the_queue_but_not_what_ended() {
    let mut queue = EndpointQueue::new(endpoint());
    queue.enqueue(vec![delivery(0, NOW, 0), delivery(1, NOW + 5, 0)], NOW);
    let (batch, _) = queue.take_due(NOW);
    read_and_start(&mut queue, batch);
    queue.answered();
    queue.recorded(id(0), Outcome::Ended { attempt: 1 }, NOW);
    queue.restart();
    assert_eq!((queue.in_flight, queue.recording, queue.wake), (0, 0, None));
    queue.enqueue(vec![delivery(0, NOW, 0), delivery(1, NOW + 5, 0)], NOW);
    assert_eq!(queue.known.len(), 1, "the ended one stays dropped");
}

#[test]
fn the_outcome_of_a_record() {
    let record = |state, next| AttemptRecord {
        delivery: delivery(0, NOW, 0),
        attempt: 3,
        status_code: None,
        error: None,
        error_detail: None,
        duration_ms: 1,
        attempted_at: NOW,
        next_attempt_at: next,
        state,
        lease: None,
    };
    let pending = record(DeliveryState::Pending, Some(NOW + 9));
    assert_eq!(
        Outcome::of(Some(Recorded::Written), &pending),
        Outcome::Retry {
            attempt: 3,
            at: NOW + 9
        }
    );
    assert_eq!(
        Outcome::of(
            Some(Recorded::Written),
            &record(DeliveryState::Pending, None)
        ),
        Outcome::Retry {
            attempt: 3,
            at: NOW
        }
    );
    let failed = record(DeliveryState::Failed, None);
    assert_eq!(
        Outcome::of(Some(Recorded::Written), &failed),
        Outcome::Ended { attempt: 3 }
    );
    assert_eq!(
        Outcome::of(Some(Recorded::MovedOn), &pending),
        Outcome::Ended { attempt: 3 }
    );
    assert_eq!(
        Outcome::of(Some(Recorded::LeaseLost), &pending),
        Outcome::LeaseLost
    );
    assert_eq!(Outcome::of(None, &pending), Outcome::NotRecorded);
}

/// One step of the model-based test: what the actor's events do to the queue.
#[derive(Debug, Clone)]
enum Op {
    /// Deliveries read from the database (new, a reload, or a stale copy).
    Enqueue {
        n: u128,
        due_in: i64,
        attempts: u32,
    },
    /// A manual retry: due now, with the attempts the database holds.
    Retry {
        n: u128,
    },
    /// Time passes; an armed wake-up that is due fires.
    Advance(i64),
    /// The running read of messages ends.
    ReadDone,
    /// The `k`th attempt in flight is answered.
    Answer(usize),
    /// The `k`th answered attempt's record ends.
    Record(usize, RecordKind),
    /// The workspace's budget is spent or allows again.
    Budget(bool),
    GoIdle,
    Restart,
}

#[derive(Debug, Clone, Copy)]
enum RecordKind {
    Retry(i64),
    Ended,
    NotRecorded,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u128..24, -50i64..400, 0u32..3)
            .prop_map(|(n, due_in, attempts)| Op::Enqueue { n, due_in, attempts }),
        1 => (0u128..24).prop_map(|n| Op::Retry { n }),
        4 => (0i64..300).prop_map(Op::Advance),
        4 => Just(Op::ReadDone),
        4 => (0usize..20).prop_map(Op::Answer),
        4 => (0usize..20, prop_oneof![
            (1i64..300).prop_map(RecordKind::Retry),
            Just(RecordKind::Ended),
            Just(RecordKind::NotRecorded),
        ]).prop_map(|(k, kind)| Op::Record(k, kind)),
        1 => any::<bool>().prop_map(Op::Budget),
        1 => Just(Op::GoIdle),
        1 => Just(Op::Restart),
    ]
}

/// What the actor around the queue holds: the batch being read, the attempts in flight and
/// being recorded, the budget, the time, and what the database says of each delivery.
#[derive(Default)]
struct Driver {
    now: i64,
    reading: Option<Vec<PendingDelivery>>,
    in_flight: Vec<PendingDelivery>,
    recording: Vec<(PendingDelivery, u32)>,
    budget_spent: bool,
    /// Attempts recorded per delivery (the database's count).
    attempts: HashMap<Uuid, u32>,
    /// The attempt number each delivery ended at.
    ended: HashMap<Uuid, u32>,
}

impl Driver {
    /// What `pump` does: start what a slot and the budget allow, then read ahead.
    fn pump(&mut self, queue: &mut EndpointQueue) -> Result<(), TestCaseError> {
        if queue.is_stopped() {
            return Ok(());
        }
        while let Some(ready) = queue.next_ready() {
            if self.budget_spent {
                queue.wait_for_budget(ready);
                break;
            }
            queue.attempt_started();
            self.in_flight.push(ready.0);
        }
        let (batch, _) = queue.take_due(self.now);
        if !batch.is_empty() {
            prop_assert!(self.reading.is_none(), "a second read while one runs");
            prop_assert!(batch.len() <= READ_AHEAD);
            let keys: Vec<(i64, Uuid)> = batch.iter().map(|d| (d.next_attempt_at, d.id)).collect();
            prop_assert!(keys.windows(2).all(|w| w[0] <= w[1]), "not in due order");
            for d in &batch {
                prop_assert!(d.next_attempt_at <= self.now, "read before it is due");
            }
            self.reading = Some(batch);
        }
        Ok(())
    }

    fn places(&self, queue: &EndpointQueue, id: Uuid) -> usize {
        let waiting = queue.due.iter().filter(|(_, d)| *d == id).count();
        let reading = self.reading.iter().flatten().filter(|d| d.id == id).count();
        let ready = queue.ready.iter().filter(|(d, _)| d.id == id).count();
        let flying = self.in_flight.iter().filter(|d| d.id == id).count();
        let recording = self.recording.iter().filter(|(d, _)| d.id == id).count();
        waiting + reading + ready + flying + recording
    }

    fn check(&self, queue: &EndpointQueue) -> Result<(), TestCaseError> {
        prop_assert_eq!(queue.in_flight, self.in_flight.len());
        prop_assert!(queue.in_flight <= MAX_IN_FLIGHT);
        prop_assert_eq!(queue.recording, self.recording.len());
        prop_assert_eq!(queue.reading, self.reading.is_some());
        prop_assert!(queue.ready.len() <= READ_AHEAD);
        // Nothing held is lost or in two places at once (never sent twice at once).
        for id in queue.known.keys() {
            prop_assert_eq!(self.places(queue, *id), 1, "delivery {} misplaced", id);
        }
        let flying: HashSet<Uuid> = self.in_flight.iter().map(|d| d.id).collect();
        prop_assert_eq!(
            flying.len(),
            self.in_flight.len(),
            "one delivery flies twice"
        );
        // Liveness: an idle queue with waiting deliveries has its wake-up armed in time.
        let idle = !queue.stopped
            && self.reading.is_none()
            && queue.ready.is_empty()
            && self.in_flight.is_empty()
            && self.recording.is_empty()
            && !queue.waiting_for_budget;
        if idle && let Some(&(at, _)) = queue.due.first() {
            prop_assert!(at > self.now, "due yet not taken");
            prop_assert!(queue.wake.is_some_and(|w| w <= at), "no wake-up for {}", at);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Across any sequence of events: every delivery held is in exactly one place, none is
    /// read before it is due or out of due order, the in-flight and read-ahead limits hold, a
    /// copy older than an end is dropped, and an idle queue always has its wake-up armed.
    #[test]
    fn the_queue_follows_the_rule(ops in proptest::collection::vec(op_strategy(), 1..120)) {
        let mut queue = EndpointQueue::new(endpoint());
        let mut driver = Driver { now: NOW, ..Driver::default() };
        for op in ops {
            match op {
                Op::Enqueue { n, due_in, attempts } => {
                    let d = delivery(n, driver.now + due_in, attempts);
                    let held = queue.known.contains_key(&d.id);
                    let stale = driver.ended.get(&d.id).is_some_and(|&e| attempts < e);
                    queue.enqueue(vec![d.clone()], driver.now);
                    let accepted = !queue.stopped && !held && !stale;
                    prop_assert_eq!(queue.known.contains_key(&d.id), held || accepted);
                    if stale {
                        prop_assert!(!queue.due.contains(&(d.next_attempt_at, d.id)) || held);
                    }
                }
                Op::Retry { n } => {
                    let attempts = driver.attempts.get(&id(n)).copied().unwrap_or(0);
                    queue.deliver(vec![delivery(n, driver.now, attempts)], driver.now);
                }
                Op::Advance(ms) => {
                    driver.now += ms;
                    if queue.wake.is_some_and(|w| w <= driver.now) {
                        queue.woken();
                    }
                }
                Op::ReadDone => {
                    if let Some(batch) = driver.reading.take()
                        && queue.end_read()
                    {
                        for d in batch {
                            queue.push_ready((d, Ok(None)));
                        }
                    }
                }
                Op::Answer(k) => {
                    if !driver.in_flight.is_empty() {
                        let d = driver.in_flight.remove(k % driver.in_flight.len());
                        queue.answered();
                        let attempt = d.attempts + 1;
                        driver.recording.push((d, attempt));
                    }
                }
                Op::Record(k, kind) => {
                    if !driver.recording.is_empty() {
                        let (d, attempt) = driver.recording.remove(k % driver.recording.len());
                        let outcome = match kind {
                            RecordKind::Retry(ms) => {
                                driver.attempts.insert(d.id, attempt);
                                Outcome::Retry { attempt, at: driver.now + ms }
                            }
                            RecordKind::Ended => {
                                driver.attempts.insert(d.id, attempt);
                                driver.ended.insert(d.id, attempt);
                                Outcome::Ended { attempt }
                            }
                            RecordKind::NotRecorded => Outcome::NotRecorded,
                        };
                        queue.recorded(d.id, outcome, driver.now);
                        if let Outcome::Retry { at, .. } = outcome
                            && let Some(held) = queue.known.get(&d.id)
                        {
                            prop_assert_eq!((held.attempts, held.next_attempt_at), (attempt, at));
                        }
                    }
                }
                Op::Budget(spent) => {
                    driver.budget_spent = spent;
                    if !spent {
                        queue.budget_allows();
                    }
                }
                Op::GoIdle => queue.go_idle(),
                Op::Restart => {
                    // The context's futures are dropped with it: no read, attempt or record
                    // of before comes back.
                    queue.restart();
                    driver.reading = None;
                    driver.in_flight.clear();
                    driver.recording.clear();
                }
            }
            driver.pump(&mut queue)?;
            driver.check(&queue)?;
        }
    }
}
