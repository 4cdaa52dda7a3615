//! One actor per paired phone (and one per test-mode sending number): it owns the phone's
//! queue, its exact pace windows and the link to its current transport.
//!
//! Mailbox: commands `Enqueue`, `Attach`, `Detach`, `Forget`, `SetPace`, `Unpair`, `StopPhone`,
//! `HandBack`; the queries `GetNextSendAt` and `GetLineLoad` (a sender pool's choice); the immediate hand-over `Reserve` → `Handed` or
//! `Release`; the events `Report` (a frame from the phone) and `ReportAndWait` (one whose
//! transport waits until it is stored). It tells its registry `LineStalled`, `LineUnstalled`
//! (its stall watchdog, `watchdog.rs`) and `HealthReported` (a `status` frame). The actor never
//! holds a database connection while it waits: every write is a future spawned on its context.
//!
//! Its decisions are plain types it holds: the queue (`domain::phone_queue`), the pace log
//! (`domain::pace`) and the outcome of a status report (`domain::status_report`). This file
//! declares the messages and the actor and does the I/O and timers; `handlers.rs` holds the
//! handlers.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use actix::prelude::*;
use uuid::Uuid;

use super::Deps;
use super::link::Link;
use crate::clock::from_ms;
use crate::domain::pace::{Jitter, Pace, PaceLog, THIRTY_MINUTE_WINDOW};
use crate::domain::phone_queue::{DepthGauge, PhoneQueue, QueuedMessage};
use crate::domain::protocol::{FrameErrorCode, PaceOut, PhoneFrame, ServerFrame};
use crate::domain::sim_slot::SimSlot;
use crate::domain::stall::StallWatch;
use crate::domain::status::{Direction, MessageStatus, QueueClass};
use crate::domain::status_report::{self, ReportDecision, ReportedMessage, StatusReport};
use crate::store::messages::{self, Message};
use crate::store::scoped::Scope;
use crate::store::writer::{Content, InboundOutcome, NewMessage, Transition};

mod handlers;
mod rebuild;
mod reports;
mod reservation;
mod watchdog;

pub use reservation::{NotTaken, Reservation};
pub use watchdog::{HealthReported, HealthTo, LineStalled, LineUnstalled};

/// Close code for a session whose phone was unpaired or whose token was rotated.
pub const CLOSE_UNPAIRED: u16 = 4001;

/// Add messages (already stored as queued) to this phone's queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Enqueue {
    pub messages: Vec<Message>,
}

/// Reserve an immediate hand-over for a new single send, before it is stored (the fast path
/// of `POST /v1/messages/send`). Granted only when the phone is ready and online, no single
/// send waits in its queue, and its pace allows a send now; the send is then recorded in the
/// pace log at once, so the pace holds while the accept commits. Answer with [`Handed`] once the
/// message is stored as `sending`, or [`Release`] when it was not stored.
#[derive(Message)]
#[rtype(result = "Option<Ticket>")]
pub struct Reserve;

/// A granted [`Reserve`]: the session to send on, and the pace slot.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// The transport the hand-over was reserved on; the frame is queued on it directly by
    /// [`Ticket::send_frame`], without a trip through this actor's mailbox.
    link: Link,
    /// The pace log entry of the reserved send.
    at: chrono::DateTime<chrono::Utc>,
    /// The SIM slot of the reserving phone, when it is a SIM line.
    sim_slot: Option<SimSlot>,
}

impl Ticket {
    /// Queues the `send` frame of `message` (stored as `sending`) on the reserved session;
    /// false when that session is gone or stuck.
    pub fn send_frame(&self, message: &Message) -> bool {
        self.link.send(ServerFrame::Send {
            message_id: message.id,
            to: message.to_number.clone(),
            content: message.content.clone(),
            segments: message.segments,
            encoding: message.encoding.as_str().to_string(),
            attempt: message.send_attempts,
            sim_slot: self.sim_slot,
        })
    }
}

/// The reserved message is stored as `sending` (attempt 1) on this phone, and its frame was
/// queued on the reserved session (`frame_queued`) or not: track it as handed over, or put it
/// back in the queue when the frame did not leave on the session that is still current.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Handed {
    pub ticket: Ticket,
    pub message: Message,
    pub frame_queued: bool,
}

/// The reserved message was not stored (duplicate request, limit, storage error): give the
/// pace slot back.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release {
    pub ticket: Ticket,
}

/// A transport connected for this phone; it replaces any previous one (close code 4000).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Attach {
    pub link: Link,
}

/// The transport with this session id went away.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Detach {
    pub session_id: u64,
}

/// A frame arrived from the phone on session `session_id`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Report {
    pub session_id: u64,
    pub frame: PhoneFrame,
}

/// A frame from the phone whose transport answers the phone only once the frame's outcome is
/// stored (the device API's `PATCH /message` and inbound posts): `done` is answered once the
/// report or the inbound message is written, or changed nothing; it is dropped when storing
/// failed. Unlike [`Report`], it may come from a transport that is not the current one.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReportAndWait {
    pub frame: PhoneFrame,
    pub done: tokio::sync::oneshot::Sender<()>,
}

/// Drop a message from the queue (it was cancelled or expired).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Forget {
    pub message_id: Uuid,
}

/// Change the pace (None: unlimited).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetPace {
    pub pace: Option<Pace>,
}

/// When could this phone next hand a message over, as far as its pace goes: `None` now (or
/// no pace), otherwise the earliest instant all its windows allow a send (and a jitter wait
/// already drawn has passed): `domain::pace::next_send_at`. Its queue, transport and
/// readiness are not considered.
#[derive(Message)]
#[rtype(result = "Option<chrono::DateTime<chrono::Utc>>")]
pub struct GetNextSendAt;

/// How loaded this phone is, for the choice of a line in a sender pool
/// (`domain::pool_choice`): [`GetNextSendAt`] and what waits in its queue.
#[derive(Message)]
#[rtype(result = "LineLoad")]
pub struct GetLineLoad;

/// The answer to [`GetLineLoad`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineLoad {
    /// When its pace next allows a send (ms since the epoch); None: at once.
    pub next_send_at: Option<i64>,
    /// Messages waiting (not handed over).
    pub queued: u32,
    /// Its steady spacing between sends under its pace (ms; 0: no pace).
    pub spacing_ms: i64,
    /// Its stall watchdog has marked it (docs/api.md, "Phone health"): a pool sends elsewhere.
    pub stalled: bool,
}

/// The phone was unpaired or its token rotated: close the session; with `stop`, also fail
/// the queue and stop.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Unpair {
    pub stop: bool,
}

/// Give back every waiting message that was not pinned to this phone (it went offline or was
/// unpaired, and another phone can send them). Answers their ids.
#[derive(Message)]
#[rtype(result = "Vec<Uuid>")]
pub struct HandBack;

/// The server is stopping: close the session with 1001 "going away" and stop. Nothing is
/// lost: queued and handed-over messages are in the database and rebuilt at the next start.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopPhone;

/// WebSocket close code "going away".
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// Load these messages (None: every one still `queued`) of this phone from the database into
/// the queue: another node stored them (docs/architecture.md, "Cluster").
#[derive(Message)]
#[rtype(result = "()")]
pub struct LoadQueued {
    pub ids: Option<Vec<Uuid>>,
}

/// Told by a phone's actor to its registry: this node does not (or no longer) own the phone
/// (its lease could not be taken); the actor stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub struct NotOwned {
    pub phone_id: Uuid,
}

/// How many messages wait in each class, and how many are handed over.
#[derive(Message)]
#[rtype(result = "QueueDepth")]
pub struct GetQueueDepth;

/// Queue depth by class.
#[derive(Debug, Clone, Copy, Default, MessageResponse)]
pub struct QueueDepth(pub crate::domain::phone_queue::QueueDepth);

/// Who this actor sends for.
#[derive(Debug, Clone)]
pub struct PhoneIdentity {
    /// The paired phone's id; None for a test-mode simulated phone.
    pub device_id: Option<Uuid>,
    pub scope: Scope,
    pub number: String,
    /// A SIM line's slot: its send frames name it, and it sends no `hello` (its device does).
    pub sim_slot: Option<SimSlot>,
}

impl From<&Message> for QueuedMessage {
    fn from(m: &Message) -> Self {
        QueuedMessage {
            id: m.id,
            to: m.to_number.clone(),
            content: m.content.clone(),
            segments: m.segments,
            encoding: m.encoding,
            class: m.class,
            expires_at: m.expires_at,
            scheduled_for: m.scheduled_for,
            pinned: m.pinned,
        }
    }
}

/// The phone actor.
pub struct Phone {
    deps: Deps,
    identity: PhoneIdentity,
    pace: Option<Pace>,
    log: PaceLog,
    /// The jitter wait of the next hand-over.
    jitter: Jitter,
    /// Waiting and handed-over messages, and the queue-depth gauge.
    queue: PhoneQueue<QueueGauge>,
    /// When each hand-over still being recorded took its pace slot.
    paced_at: HashMap<Uuid, chrono::DateTime<chrono::Utc>>,
    /// Hand-overs in the order they were decided, with their write outcome once known.
    handovers: VecDeque<(Uuid, Option<HandoverOutcome>)>,
    link: Option<Link>,
    /// False until the pace log and queue are rebuilt from the database.
    ready: bool,
    wake: Option<SpawnHandle>,
    wake_at: Option<i64>,
    /// Set by [`StopPhone`]: a supervised restart must not bring the actor back.
    stopping: bool,
    /// In a cluster: told when the phone's lease could not be taken.
    owner: Option<Recipient<NotOwned>>,
    /// The stall watchdog (`domain::stall`) and its one timer.
    watch: StallWatch,
    watch_timer: Option<SpawnHandle>,
    /// Told of stalls and health reports (a paired phone's registry; None in test mode).
    health_to: Option<HealthTo>,
}

impl Phone {
    /// A phone actor; `pace` None means unlimited (test mode).
    pub fn new(deps: Deps, identity: PhoneIdentity, pace: Option<Pace>) -> Phone {
        Phone {
            deps,
            identity,
            pace,
            log: pace.map_or_else(PaceLog::new, PaceLog::for_pace),
            jitter: Jitter::new(),
            queue: PhoneQueue::new(QueueGauge),
            paced_at: HashMap::new(),
            handovers: VecDeque::new(),
            link: None,
            ready: false,
            wake: None,
            wake_at: None,
            stopping: false,
            owner: None,
            watch: StallWatch::new(),
            watch_timer: None,
            health_to: None,
        }
    }

    /// `to` (the registry) hears of this phone's stalls and health reports.
    pub fn with_health(mut self, to: HealthTo) -> Phone {
        self.health_to = Some(to);
        self
    }

    /// In a cluster, `owner` (the registry) hears when this node cannot own the phone.
    pub fn with_owner(mut self, owner: Recipient<NotOwned>) -> Phone {
        self.owner = Some(owner);
        self
    }

    /// Hands messages to the transport while the pace allows; otherwise sleeps until it does.
    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        if !self.ready {
            return;
        }
        let now = self.deps.clock.now();
        let now_ms = now.timestamp_millis();
        self.queue.release_due(now_ms);
        let mut next_wake: Option<i64> = self.queue.next_due();
        while self.link.is_some() && self.queue.has_ready() {
            if let Some(pace) = self.pace {
                // The windows first, at the actual send time; then the jitter wait, drawn
                // once the windows allow the next message, so it only ever delays a send.
                let wait = self
                    .log
                    .next_allowed(pace, now)
                    .or_else(|| self.jitter.hold(pace, now, draw_jitter));
                if let Some(at) = wait {
                    let at = at.timestamp_millis() + 1;
                    next_wake = Some(next_wake.map_or(at, |w| w.min(at)));
                    break;
                }
            }
            // An expired message is dropped here: the expiry sweep moves it to `expired` and
            // fires message.failed.
            let Some(id) = self.queue.hand_over_next(now_ms) else {
                break;
            };
            if self.pace.is_some() {
                self.log.record(now);
                self.paced_at.insert(id, now);
                self.jitter.clear();
            }
            self.hand_over(id, ctx);
        }
        if !self.queue.has_ready() {
            // Nothing waits: the next message draws its own jitter when it comes.
            self.jitter.clear();
        }
        self.schedule_wake(next_wake, ctx);
    }

    fn schedule_wake(&mut self, at: Option<i64>, ctx: &mut Context<Self>) {
        let Some(at) = at else { return };
        if self.wake_at.is_some_and(|current| current <= at) && self.wake.is_some() {
            return;
        }
        if let Some(handle) = self.wake.take() {
            ctx.cancel_future(handle);
        }
        let delay =
            Duration::from_millis(u64::try_from(at - self.deps.clock.now_ms()).unwrap_or(0));
        self.wake_at = Some(at);
        self.wake = Some(ctx.run_later(delay, |act, ctx| {
            act.wake = None;
            act.wake_at = None;
            act.dispatch(ctx);
        }));
    }

    /// Records the hand-over (status `sending`) and only then sends the frame, so a message
    /// cancelled or expired in between is never sent. Frames leave in hand-over order even
    /// though the writes complete as separate futures.
    fn hand_over(&mut self, id: Uuid, ctx: &mut Context<Self>) {
        self.handovers.push_back((id, None));
        // In a cluster the hand-over carries the phone's lease (a simulated phone of test mode:
        // the node's `test_mode` lease): refused once it moved on. Without the lease (lost
        // meanwhile) it carries fence 0, which no lease ever has.
        // A lease suspended while the database was away (docs/deploy.md, "Bad days") is not
        // lost: the hand-over waits and is tried again, as when the write fails.
        let mut suspended = false;
        let lease = self.deps.cluster.as_ref().map(|cluster| {
            use crate::store::cluster::{LeaseKey, Sweep};
            let key = match self.identity.device_id {
                Some(device) => LeaseKey::Phone(device.into()),
                None => LeaseKey::Sweep(Sweep::TestMode),
            };
            suspended = cluster.is_suspended(key);
            cluster.fence(key)
        });
        let transition = Transition::hand_over(id, self.identity.device_id).fenced(lease);
        let writer = self.deps.writer.clone();
        ctx.spawn(
            async move {
                if suspended {
                    return Err(crate::store::StoreError::Unavailable(
                        "the phone's lease is suspended until the database answers".into(),
                    ));
                }
                writer.transition(transition).await
            }
                .into_actor(self)
                .map(move |result, act, ctx| {
                    let outcome = match result {
                        Ok(Some(row)) => HandoverOutcome::Recorded(row.send_attempts),
                        Ok(None) => HandoverOutcome::Refused,
                        Err(err @ crate::store::StoreError::Unavailable(_)) => {
                            tracing::warn!(message_id = %id, error = %err, "hand-over waits for the database");
                            HandoverOutcome::Failed
                        }
                        Err(err) => {
                            tracing::error!(message_id = %id, error = %err, "hand-over not recorded");
                            HandoverOutcome::Failed
                        }
                    };
                    if let Some(slot) = act.handovers.iter_mut().find(|(i, _)| *i == id) {
                        slot.1 = Some(outcome);
                    }
                    act.flush_handovers(ctx);
                }),
        );
    }

    /// Sends the frames of recorded hand-overs, oldest first, up to the first still pending.
    fn flush_handovers(&mut self, ctx: &mut Context<Self>) {
        let mut requeued = false;
        while let Some((id, Some(outcome))) = self.handovers.front().cloned() {
            self.handovers.pop_front();
            match outcome {
                HandoverOutcome::Recorded(attempt) => {
                    self.paced_at.remove(&id);
                    let Some(item) = self.queue.in_flight(id) else {
                        continue;
                    };
                    let frame = ServerFrame::Send {
                        message_id: id,
                        to: item.to.clone(),
                        content: item.content.clone(),
                        segments: item.segments,
                        encoding: item.encoding.as_str().to_string(),
                        attempt,
                        sim_slot: self.identity.sim_slot,
                    };
                    if let Some(link) = &self.link {
                        link.send(frame);
                    }
                    self.watch_handed(ctx);
                }
                HandoverOutcome::Refused => {
                    // Nothing was sent (cancelled, expired, withdrawn by a campaign's pause):
                    // the pace slot it took is given back.
                    self.give_back_pace(id);
                    self.queue.settle(id);
                }
                HandoverOutcome::Failed => {
                    self.give_back_pace(id);
                    if let Some(item) = self.queue.settle(id) {
                        let now = self.deps.clock.now_ms();
                        self.queue.retry_first(item, now);
                        requeued = true;
                    }
                }
            }
        }
        if requeued {
            // Retry after a pause rather than spinning against a failing database.
            ctx.run_later(Duration::from_secs(1), |act, ctx| act.dispatch(ctx));
        }
    }

    /// Takes back the pace slot a hand-over recorded, when it sent nothing.
    fn give_back_pace(&mut self, id: Uuid) {
        if let Some(at) = self.paced_at.remove(&id) {
            self.log.unrecord(at);
        }
    }

    /// Asks the transport of `link` to close, unless this phone is a SIM line: the line only
    /// lets go of its device's transport, which its device's actor closes when it must
    /// (deleting a line leaves its device connected).
    fn close_link(&self, link: Link, code: u16, reason: &str) {
        if self.identity.sim_slot.is_none() {
            link.close(code, reason);
        }
    }

    fn ack(&self, reference: Option<String>) {
        if let (Some(reference), Some(link)) = (reference, &self.link) {
            link.send(ServerFrame::Ack { reference });
        }
    }

    fn reject(&self, code: FrameErrorCode, message: String) {
        if let Some(link) = &self.link {
            link.send(ServerFrame::Error {
                code: code.as_str().to_string(),
                message,
            });
        }
    }

    /// Returns handed-over messages to the queue: their phone went away. Once every move back
    /// to `queued` is written, the ones written go to the front of the queue together, in the
    /// order they were handed over (moved one by one, they would come back in the order the
    /// writes finished, the last handed first).
    fn requeue_in_flight(&mut self, ctx: &mut Context<Self>, reason: &'static str) {
        let items = self.queue.drain_in_flight();
        if items.is_empty() {
            return;
        }
        let writes: Vec<_> = items
            .iter()
            .map(|item| {
                let writer = self.deps.writer.clone();
                let transition = Transition::requeue(item.id, reason);
                async move { matches!(writer.transition(transition).await, Ok(Some(_))) }
            })
            .collect();
        ctx.spawn(futures_util::future::join_all(writes).into_actor(self).map(
            move |written, act, ctx| {
                let back: Vec<QueuedMessage> = items
                    .into_iter()
                    .zip(written)
                    .filter_map(|(item, written)| written.then_some(item))
                    .collect();
                let now = act.deps.clock.now_ms();
                act.queue.retry_all_first(back, now);
                act.dispatch(ctx);
            },
        ));
    }

    /// Moves one message that is `sending` on this phone back to `queued` and, once that is
    /// written, to the front of its queue.
    fn requeue(&mut self, item: QueuedMessage, reason: &'static str, ctx: &mut Context<Self>) {
        let transition = Transition::requeue(item.id, reason);
        let writer = self.deps.writer.clone();
        ctx.spawn(
            async move { writer.transition(transition).await }
                .into_actor(self)
                .map(move |result, act, ctx| {
                    if let Ok(Some(_)) = result {
                        act.retry_first(item, ctx);
                    }
                }),
        );
    }

    /// Puts a message that is `queued` again (its attempt failed or was interrupted) at the
    /// front of its queue, due now, and dispatches.
    fn retry_first(&mut self, item: QueuedMessage, ctx: &mut Context<Self>) {
        let now = self.deps.clock.now_ms();
        self.queue.retry_first(item, now);
        self.dispatch(ctx);
    }
}

/// A jitter wait, uniform in `0..=max` at millisecond resolution.
fn draw_jitter(max: chrono::TimeDelta) -> chrono::TimeDelta {
    let max_ms = u64::try_from(max.num_milliseconds()).unwrap_or(0);
    let ms = rand::random_range(0..=max_ms);
    chrono::TimeDelta::milliseconds(i64::try_from(ms).unwrap_or(0))
}

/// WebSocket close code "try again later": the phone reconnects (another node owns it now).
pub const CLOSE_TRY_AGAIN: u16 = 1013;

/// Takes the lease of phone `device` for this node: at once when it is free; when another
/// node holds it, that node is asked to let go (a `release` notice) and the lease is tried
/// again until it expires at the latest. False when it could not be taken in that time.
async fn claim(cluster: &crate::cluster::Cluster, device: Uuid) -> bool {
    use crate::cluster::Notice;
    use crate::store::cluster::LeaseKey;
    let key = LeaseKey::Phone(device.into());
    let deadline = std::time::Instant::now() + cluster.lease_ttl() * 2;
    let mut asked = None;
    loop {
        if cluster.acquire(key).await.is_some() {
            cluster
                .notify(&Notice::Online {
                    phone: device,
                    node: cluster.node(),
                })
                .await;
            return true;
        }
        if let Some(holder) = cluster.holder(key).await
            && asked != Some(holder.node)
        {
            cluster
                .notify(&Notice::Release {
                    phone: device,
                    node: holder.node,
                })
                .await;
            asked = Some(holder.node);
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The answer a [`ReportAndWait`] waits for.
type Done = tokio::sync::oneshot::Sender<()>;

/// Tells a waiting transport its frame's outcome is stored.
fn answer(done: Option<Done>) {
    if let Some(done) = done {
        let _ = done.send(());
    }
}

/// Messages waiting in phone queues (held ones included), by class: the sum over every
/// phone's [`PhoneQueue`].
struct QueueGauge;

impl DepthGauge for QueueGauge {
    fn add(&mut self, class: QueueClass, delta: i64) {
        // Depths are far below 2^52: the conversion is exact.
        #[allow(clippy::cast_precision_loss)]
        let delta = delta as f64;
        metrics::gauge!(crate::telemetry::names::QUEUE_DEPTH, "class" => class.as_str())
            .increment(delta);
    }
}

#[derive(Debug, Clone, Copy)]
enum HandoverOutcome {
    /// Stored as `sending`; the attempt number.
    Recorded(u32),
    /// The message left `queued` meanwhile (cancelled, expired).
    Refused,
    /// The write failed; the message goes back to the queue.
    Failed,
}

impl Actor for Phone {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.stopping {
            // Restarted by its supervisor after a final stop: stay inert until the last address
            // is dropped, then the actor ends for good. Stopping again here would be restarted
            // again at once, spinning the actor thread for as long as anyone (a closing session,
            // an accept task) still holds the address.
            return;
        }
        ctx.set_mailbox_capacity(4096);
        self.restore_stall(ctx);
        self.rebuild(ctx);
    }
}

impl Supervised for Phone {
    /// A restarted Phone keeps its queue (the registry re-sends nothing): pace is rebuilt from
    /// the database so a restart can never let the phone exceed it.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        self.ready = false;
        self.wake = None;
        self.wake_at = None;
        self.watch_timer = None;
    }
}
