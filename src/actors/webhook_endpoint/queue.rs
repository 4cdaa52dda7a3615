//! The decisions of one endpoint's actor, as a plain type: which deliveries it holds and when
//! each is due, which are read ahead of a request slot, how many attempts are in flight and
//! waiting to be recorded, what a recorded attempt changes, which copies read from the
//! database are stale, and when the actor must wake up. [`EndpointQueue`] does no I/O and
//! knows no timer: its methods take the time and answer what to do (a batch to read, an
//! attempt to start, the wake-up to arm); the actor (`actor.rs`) does the reads, the requests,
//! the records and the timers.
//!
//! A delivery the queue holds is in exactly one place at a time: waiting (in the due-time
//! ordered queue), being read (a batch handed out by [`EndpointQueue::take_due`]), read
//! (ready for a request slot), in flight, or being recorded. So no delivery is sent twice
//! at once, and none is forgotten while this actor owns the endpoint.

use std::collections::{BTreeSet, HashMap, VecDeque};

use uuid::Uuid;

use super::MAX_IN_FLIGHT;
use crate::domain::ids::EndpointId;
use crate::outbound::body::Subject;
use crate::store::webhooks::{AttemptRecord, DeliveryState, PendingDelivery, Recorded};

#[cfg(test)]
mod tests;

/// Most due deliveries of one endpoint whose messages are read ahead of a free request slot.
pub const READ_AHEAD: usize = 4 * MAX_IN_FLIGHT;
/// Most finished attempts of one endpoint waiting to be recorded; past it no new attempt starts.
pub const MAX_RECORDING: usize = 512;
/// Deliveries whose end the queue remembers, so a copy read before that end is not delivered
/// again (see [`Finished`]).
const FINISHED_KEPT: usize = 8192;

/// What reading a delivery's message gave: the message (None: removed by retention) or the
/// read's error, which the attempt records.
pub type MessageRead = Result<Option<Subject>, String>;

/// A delivery whose message was read, waiting for a request slot.
pub type Ready = (PendingDelivery, MessageRead);

/// What became of a recorded attempt, as far as the queue is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Recorded, with another attempt due at `at`.
    Retry { attempt: u32, at: i64 },
    /// Recorded as the end (succeeded or failed), or another attempt with this number was
    /// recorded first.
    Ended { attempt: u32 },
    /// Not recorded (storage error): the database still says pending, and the next load
    /// reads it.
    NotRecorded,
    /// Refused: the endpoint's lease moved on, and this actor no longer owns the endpoint.
    LeaseLost,
}

impl Outcome {
    /// The outcome of `record`, given what recording it answered (None: it failed).
    pub fn of(recorded: Option<Recorded>, record: &AttemptRecord) -> Outcome {
        match recorded {
            Some(Recorded::LeaseLost) => Outcome::LeaseLost,
            Some(Recorded::Written) if record.state == DeliveryState::Pending => Outcome::Retry {
                attempt: record.attempt,
                at: record.next_attempt_at.unwrap_or(record.attempted_at),
            },
            Some(Recorded::Written | Recorded::MovedOn) => Outcome::Ended {
                attempt: record.attempt,
            },
            None => Outcome::NotRecorded,
        }
    }
}

/// The deliveries that ended here lately (succeeded, failed, or recorded by another attempt),
/// with the attempt number they ended at. A copy of one read from the database before it
/// ended (a `LoadPending` read overtaken by the attempt's record, a `Deliver` that waited in
/// the supervisor's mailbox) still says pending with fewer attempts: it is dropped, not sent a
/// second time. A manual retry keeps the attempt count, so it passes.
#[derive(Debug, Default)]
struct Finished {
    at: HashMap<Uuid, u32>,
    order: VecDeque<Uuid>,
}

impl Finished {
    fn insert(&mut self, id: Uuid, attempt: u32) {
        if self.at.insert(id, attempt).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > FINISHED_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.at.remove(&old);
            }
        }
    }

    /// Whether `d` is a copy read before the delivery ended here.
    fn is_stale(&self, d: &PendingDelivery) -> bool {
        self.at.get(&d.id).is_some_and(|&ended| d.attempts < ended)
    }
}

/// Whether a read of the endpoint's pending deliveries runs, and whether one more was asked
/// for meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PendingRead {
    Idle,
    Running,
    Again,
}

/// One endpoint's deliveries: a due-time ordered queue, the read-ahead, the attempts in
/// flight and being recorded, and the one wake-up for the earliest delivery not due yet.
#[derive(Debug)]
pub struct EndpointQueue {
    endpoint_id: EndpointId,
    /// Waiting deliveries by (due ms, id).
    due: BTreeSet<(i64, Uuid)>,
    /// Every delivery this queue holds, in any place.
    known: HashMap<Uuid, PendingDelivery>,
    in_flight: usize,
    /// Attempts answered but not yet recorded.
    recording: usize,
    /// A read of the messages of deliveries that are due is in flight: deliveries falling due
    /// meanwhile wait for it and share the next read (one read per burst, not per delivery).
    reading: bool,
    /// Due deliveries whose message was read, waiting for a request slot. Reads run ahead of
    /// the slots, so a slot is held only for the request itself, not for a database round trip.
    ready: VecDeque<Ready>,
    /// The workspace's delivery budget is spent: nothing starts until it allows more.
    waiting_for_budget: bool,
    finished: Finished,
    pending_read: PendingRead,
    /// When the one wake-up armed fires. One, not one per delivery: actix polls every timer an
    /// actor holds on each wake-up, so a backlog of retries made every event cost them all.
    wake: Option<i64>,
    /// Nothing more is taken (the actor stops, or the endpoint is gone or no longer owned).
    stopped: bool,
}

impl EndpointQueue {
    /// An empty queue of `endpoint_id`'s deliveries.
    pub fn new(endpoint_id: EndpointId) -> EndpointQueue {
        EndpointQueue {
            endpoint_id,
            due: BTreeSet::new(),
            known: HashMap::new(),
            in_flight: 0,
            recording: 0,
            reading: false,
            ready: VecDeque::new(),
            waiting_for_budget: false,
            finished: Finished::default(),
            pending_read: PendingRead::Idle,
            wake: None,
            stopped: false,
        }
    }

    /// Takes the deliveries it does not hold yet (and did not just finish, see [`Finished`]);
    /// those of other endpoints are ignored. Answers the wake-up to arm, if it changed.
    pub fn enqueue(&mut self, deliveries: Vec<PendingDelivery>, now: i64) -> Option<i64> {
        let armed = self.wake;
        if self.stopped {
            return None;
        }
        for d in deliveries {
            if d.endpoint_id != self.endpoint_id
                || self.known.contains_key(&d.id)
                || self.finished.is_stale(&d)
            {
                continue;
            }
            self.schedule(d.next_attempt_at, d.id, now);
            self.known.insert(d.id, d);
        }
        self.wake.filter(|_| self.wake != armed)
    }

    /// [`EndpointQueue::enqueue`], after moving a delivery it holds waiting to the due time of
    /// its new copy (a manual retry of a delivery waiting for its next attempt). The waiting
    /// entry is found by its key (`known` holds its due time), not by a scan of the queue: a
    /// hanging endpoint's queue holds tens of thousands (docs/performance.md, "A webhook
    /// endpoint's queue found by key").
    pub fn deliver(&mut self, deliveries: Vec<PendingDelivery>, now: i64) -> Option<i64> {
        let armed = self.wake;
        for d in &deliveries {
            let Some(held) = self.known.get_mut(&d.id) else {
                continue;
            };
            let waiting_at = held.next_attempt_at;
            if self.due.remove(&(waiting_at, d.id)) {
                held.next_attempt_at = d.next_attempt_at;
                self.schedule(d.next_attempt_at, d.id, now);
            }
        }
        self.enqueue(deliveries, now);
        self.wake.filter(|_| self.wake != armed)
    }

    fn schedule(&mut self, at: i64, id: Uuid, now: i64) {
        self.due.insert((at, id));
        if at > now {
            self.wake_at(at);
        }
    }

    /// Arms the wake-up for `at` unless one is armed for then or earlier.
    fn wake_at(&mut self, at: i64) {
        if self.wake.is_some_and(|armed| armed <= at) {
            return;
        }
        self.wake = Some(at);
    }

    /// The armed wake-up fired.
    pub fn woken(&mut self) {
        self.wake = None;
    }

    /// The next read delivery to attempt, when a request slot is free and the budget is not
    /// spent. The caller either starts it ([`EndpointQueue::attempt_started`]) or gives it back
    /// ([`EndpointQueue::wait_for_budget`]).
    pub fn next_ready(&mut self) -> Option<Ready> {
        if self.in_flight >= MAX_IN_FLIGHT || self.waiting_for_budget {
            return None;
        }
        self.ready.pop_front()
    }

    /// The delivery [`EndpointQueue::next_ready`] gave is being attempted: it holds a slot.
    pub fn attempt_started(&mut self) {
        self.in_flight += 1;
    }

    /// The workspace's delivery budget is spent: `ready` goes back first in line, and nothing
    /// starts until [`EndpointQueue::budget_allows`].
    pub fn wait_for_budget(&mut self, ready: Ready) {
        self.ready.push_front(ready);
        self.waiting_for_budget = true;
    }

    /// The budget allows more attempts again.
    pub fn budget_allows(&mut self) {
        self.waiting_for_budget = false;
    }

    /// The due deliveries whose messages to read now, earliest first, as many as the
    /// read-ahead and the recording backlog allow (none while a read runs or enough are read
    /// already); a batch marks a read running until [`EndpointQueue::end_read`]. Also answers
    /// the wake-up to arm for the first delivery not due yet, if it changed.
    pub fn take_due(&mut self, now: i64) -> (Vec<PendingDelivery>, Option<i64>) {
        let armed = self.wake;
        let mut batch = Vec::new();
        if self.reading || self.ready.len() >= MAX_IN_FLIGHT {
            return (batch, None);
        }
        while self.ready.len() + batch.len() < READ_AHEAD && self.recording < MAX_RECORDING {
            let Some(&(at, id)) = self.due.first() else {
                break;
            };
            if at > now {
                self.wake_at(at);
                break;
            }
            self.due.pop_first();
            if let Some(delivery) = self.known.get(&id).cloned() {
                batch.push(delivery);
            }
        }
        self.reading = !batch.is_empty();
        (batch, self.wake.filter(|_| self.wake != armed))
    }

    /// The read of a batch ended; false when the queue stopped meanwhile (its batch is
    /// dropped), else the batch's reads go to [`EndpointQueue::push_ready`].
    pub fn end_read(&mut self) -> bool {
        self.reading = false;
        !self.stopped
    }

    /// A read delivery waits for a request slot.
    pub fn push_ready(&mut self, ready: Ready) {
        self.ready.push_back(ready);
    }

    /// An attempt was answered: its slot is free, and its record is being written.
    pub fn answered(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.recording += 1;
    }

    /// An attempt of delivery `id` was recorded with `outcome`: a retry waits for its time, an
    /// end is remembered (so older copies are dropped), a failed record forgets the delivery
    /// here (the database still has it). After [`Outcome::LeaseLost`] the caller stops the
    /// queue ([`EndpointQueue::go_idle`]). Answers the wake-up to arm, if it changed.
    pub fn recorded(&mut self, id: Uuid, outcome: Outcome, now: i64) -> Option<i64> {
        let armed = self.wake;
        self.recording = self.recording.saturating_sub(1);
        match outcome {
            Outcome::LeaseLost => {}
            Outcome::Retry { attempt, at } => {
                if let Some(d) = self.known.get_mut(&id) {
                    d.attempts = attempt;
                    d.next_attempt_at = at;
                }
                self.schedule(at, id, now);
            }
            Outcome::Ended { attempt } => {
                self.known.remove(&id);
                self.finished.insert(id, attempt);
            }
            Outcome::NotRecorded => {
                self.known.remove(&id);
            }
        }
        self.wake.filter(|_| self.wake != armed)
    }

    /// Whether a read of every pending delivery should start now. Asked again while one runs,
    /// it answers false and [`EndpointQueue::end_pending_read`] asks for one more read after
    /// it, whatever the number of asks: a stream of notices costs at most two reads in a row.
    pub fn begin_pending_read(&mut self) -> bool {
        match self.pending_read {
            PendingRead::Idle => {
                self.pending_read = PendingRead::Running;
                true
            }
            PendingRead::Running | PendingRead::Again => {
                self.pending_read = PendingRead::Again;
                false
            }
        }
    }

    /// The read of every pending delivery ended; true when another was asked for meanwhile.
    pub fn end_pending_read(&mut self) -> bool {
        let again = self.pending_read == PendingRead::Again;
        self.pending_read = PendingRead::Idle;
        again
    }

    /// Nothing more is taken, read or started (the actor stops); what it holds stays.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// The endpoint is gone or no longer owned here: stop, and drop every waiting and read
    /// delivery (the database keeps them).
    pub fn go_idle(&mut self) {
        self.stopped = true;
        self.due.clear();
        self.known.clear();
        self.ready.clear();
    }

    /// Whether the queue stopped ([`EndpointQueue::stop`], [`EndpointQueue::go_idle`]).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The actor restarts (supervised) and rebuilds the queue from the database: attempts in
    /// flight were not recorded, so their deliveries are still pending there. What ended here
    /// lately, and whether the queue stopped, are kept.
    pub fn restart(&mut self) {
        self.due.clear();
        self.known.clear();
        self.in_flight = 0;
        self.recording = 0;
        self.reading = false;
        self.ready.clear();
        self.waiting_for_budget = false;
        self.pending_read = PendingRead::Idle;
        self.wake = None;
    }
}
