//! The actor of one endpoint: its due-time ordered queue, retry timers, the attempts in
//! flight and their recording.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use uuid::Uuid;

use super::attempt::attempt;
use super::body::{Subject, subjects};
use super::{Deliver, LoadDeliveries, LoadPending, MAX_IN_FLIGHT, Reload, StopDeliveries};
use crate::actors::Deps;
use crate::actors::webhook_target;
use crate::domain::ids::EndpointId;
use crate::domain::webhook_event::{EventKind, WebhookFormat};
use crate::store::cluster::LeaseKey;
use crate::store::scoped::Scope;
use crate::store::settings;
use crate::store::webhooks::{
    self, AttemptRecord, DeliveryState, EndpointRecord, PendingDelivery, Recorded,
};

/// Most due deliveries of one endpoint whose messages are read ahead of a free request slot.
const READ_AHEAD: usize = 4 * MAX_IN_FLIGHT;
/// Most finished attempts of one endpoint waiting to be recorded; past it no new attempt starts.
const MAX_RECORDING: usize = 512;
/// How often, in a cluster, the actor reads its endpoint's pending deliveries again.
const PENDING_RESYNC: Duration = Duration::from_secs(5);
/// Deliveries whose end this actor remembers, so a copy read before that end is not
/// delivered again (see [`Finished`]).
const FINISHED_KEPT: usize = 8192;

/// The deliveries this actor finished lately (succeeded, failed, or recorded by another
/// attempt), with the attempt number they ended at. A copy of one read from the database
/// before it ended (a `LoadPending` read overtaken by the attempt's record, a `Deliver` that
/// waited in the Registry's mailbox) still says pending with fewer attempts: it is dropped, not
/// sent a second time. A manual retry keeps the attempt count, so it passes.
#[derive(Default)]
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

/// One endpoint's deliveries: a due-time ordered queue, retry timers, attempts in flight.
pub struct WebhookEndpoint {
    deps: Deps,
    endpoint_id: EndpointId,
    endpoint: Option<EndpointRecord>,
    client: Option<awc::Client>,
    /// Waiting deliveries by (due ms, id).
    due: BTreeSet<(i64, Uuid)>,
    /// Every delivery this actor holds, waiting or in flight.
    known: HashMap<Uuid, PendingDelivery>,
    in_flight: usize,
    /// Attempts answered but not yet recorded.
    recording: usize,
    /// A read of the messages of deliveries that are due is in flight: deliveries falling due
    /// meanwhile wait for it and share the next read (one read per burst, not per delivery).
    reading: bool,
    /// Due deliveries whose message was read, waiting for a request slot. Reads run ahead of
    /// the slots, so a slot is held only for the request itself, not for a database round trip.
    ready: VecDeque<(PendingDelivery, Result<Option<Subject>, String>)>,
    /// The workspace's delivery budget is spent: a timer pumps again when it allows more.
    waiting_for_budget: bool,
    /// An SMSGate-format endpoint's signing key (the workspace's `webhooks.signing_key`,
    /// sealed), read again with every batch of messages, so a key changed through the
    /// settings signs the deliveries read after the change.
    smsgate_key: Option<String>,
    /// Deliveries that ended here lately.
    finished: Finished,
    /// Raised when the endpoint's lease was lost: the Registry replaces this actor.
    lost: Arc<AtomicBool>,
    /// The read of pending deliveries asked by other nodes' notices ([`PendingRead`]).
    pending_read: PendingRead,
    /// The one wake-up armed for the earliest waiting delivery not due yet: its time and its
    /// timer. One timer, not one per delivery: actix polls every timer an actor holds on each
    /// wake-up, so a backlog of retries made every answer and every new delivery cost them all.
    wake: Option<(i64, SpawnHandle)>,
    stopping: bool,
}

/// Whether a read of the endpoint's pending deliveries runs, and whether one more was asked
/// for meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PendingRead {
    Idle,
    Running,
    Again,
}

impl WebhookEndpoint {
    /// An actor for `endpoint_id`; it loads the endpoint and its pending deliveries when started.
    pub fn new(deps: Deps, endpoint_id: EndpointId, lost: Arc<AtomicBool>) -> WebhookEndpoint {
        WebhookEndpoint {
            deps,
            endpoint_id,
            endpoint: None,
            client: None,
            due: BTreeSet::new(),
            known: HashMap::new(),
            in_flight: 0,
            recording: 0,
            reading: false,
            ready: VecDeque::new(),
            waiting_for_budget: false,
            smsgate_key: None,
            finished: Finished::default(),
            lost,
            pending_read: PendingRead::Idle,
            wake: None,
            stopping: false,
        }
    }

    fn load(&mut self, ctx: &mut Context<Self>) {
        let db = self.deps.db.clone();
        let id = self.endpoint_id;
        ctx.wait(
            async move {
                let endpoint = webhooks::find(&db, id).await?;
                let pending = webhooks::pending_for(&db, id).await?;
                Ok::<_, crate::store::StoreError>((endpoint, pending))
            }
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok((Some(endpoint), pending)) => {
                    act.endpoint = Some(endpoint);
                    act.enqueue(pending, ctx);
                }
                Ok((None, _)) => act.go_idle(),
                Err(err) => {
                    tracing::error!(endpoint_id = %act.endpoint_id, error = %err, "webhook endpoint not loaded; retrying in 5 s");
                    ctx.run_later(Duration::from_secs(5), |act, ctx| act.load(ctx));
                }
            }),
        );
    }

    /// The endpoint was deleted: drop the queue and do nothing more. The actor is not stopped
    /// here (a supervised actor whose address the registry still holds would be restarted at
    /// once); the registry drops it on `EndpointDeleted`, and it ends with its last address.
    fn go_idle(&mut self) {
        tracing::debug!(endpoint_id = %self.endpoint_id, "webhook endpoint gone; idle");
        self.stopping = true;
        self.endpoint = None;
        self.due.clear();
        self.known.clear();
        self.ready.clear();
    }

    fn enqueue(&mut self, deliveries: Vec<PendingDelivery>, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let now = self.deps.clock.now_ms();
        for d in deliveries {
            if d.endpoint_id != self.endpoint_id
                || self.known.contains_key(&d.id)
                || self.finished.is_stale(&d)
            {
                continue;
            }
            self.schedule(d.next_attempt_at, d.id, now, ctx);
            self.known.insert(d.id, d);
        }
        self.pump(ctx);
    }

    fn schedule(&mut self, at: i64, id: Uuid, now: i64, ctx: &mut Context<Self>) {
        self.due.insert((at, id));
        if at > now {
            self.wake_at(at, now, ctx);
        }
    }

    /// Arms the wake-up for `at` (a time after `now`) unless one is armed for then or earlier.
    /// When it fires, `pump` takes what is due and arms the next from the queue's head.
    fn wake_at(&mut self, at: i64, now: i64, ctx: &mut Context<Self>) {
        if self.wake.is_some_and(|(armed, _)| armed <= at) {
            return;
        }
        if let Some((_, timer)) = self.wake.take() {
            ctx.cancel_future(timer);
        }
        let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
        let timer = ctx.run_later(wait, |act, ctx| {
            act.wake = None;
            act.pump(ctx);
        });
        self.wake = Some((at, timer));
    }

    /// Starts every attempt the in-flight limit allows from the deliveries whose message is
    /// read, and reads ahead the messages of the next due ones.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let Some(endpoint) = self.endpoint.clone() else {
            return;
        };
        if !endpoint.enabled || self.stopping {
            return;
        }
        let scope = Scope {
            workspace_id: endpoint.workspace_id,
            mode: endpoint.mode,
        };
        // In a cluster every attempt is made under the endpoint's lease, and recorded only while
        // it still holds; once the lease is gone here, nothing more is sent.
        let lease = match &self.deps.cluster {
            None => None,
            Some(cluster) => match cluster.lease(LeaseKey::WebhookEndpoint(self.endpoint_id)) {
                Some(lease) => Some(lease),
                None => {
                    self.ownership_lost();
                    return;
                }
            },
        };
        while self.in_flight < MAX_IN_FLIGHT && !self.waiting_for_budget {
            let Some((delivery, message)) = self.ready.pop_front() else {
                break;
            };
            let now = self.deps.clock.now_ms();
            if let Err(allowed_at) = self.deps.webhooks.budgets.take(scope, now) {
                self.ready.push_front((delivery, message));
                self.waiting_for_budget = true;
                let wait = Duration::from_millis(u64::try_from(allowed_at - now).unwrap_or(0));
                ctx.run_later(wait, |act, ctx| {
                    act.waiting_for_budget = false;
                    act.pump(ctx);
                });
                break;
            }
            self.in_flight += 1;
            let id = delivery.id;
            let fut = attempt(
                self.deps.clone(),
                self.client().clone(),
                endpoint.clone(),
                self.smsgate_key.clone(),
                delivery,
                message,
            );
            let lease = lease.clone();
            ctx.spawn(fut.into_actor(self).map(move |record, act, ctx| {
                act.answered(id, AttemptRecord { lease, ..record }, ctx)
            }));
        }
        if self.reading || self.ready.len() >= MAX_IN_FLIGHT {
            return;
        }
        let now = self.deps.clock.now_ms();
        let mut batch = Vec::new();
        while self.ready.len() + batch.len() < READ_AHEAD && self.recording < MAX_RECORDING {
            let Some(&(at, id)) = self.due.first() else {
                break;
            };
            if at > now {
                self.wake_at(at, now, ctx);
                break;
            }
            self.due.pop_first();
            if let Some(delivery) = self.known.get(&id).cloned() {
                batch.push(delivery);
            }
        }
        if batch.is_empty() {
            return;
        }
        // One query reads the messages of every delivery taken now (and one the drafts of
        // `ai.draft.created` deliveries).
        let db = self.deps.db.clone();
        let ids: Vec<Uuid> = batch.iter().map(|d| d.message_id).collect();
        let drafted: Vec<Uuid> = batch
            .iter()
            .filter(|d| d.event == EventKind::AiDraftCreated.as_str())
            .map(|d| d.message_id)
            .collect();
        self.reading = true;
        let key_read = (endpoint.format == WebhookFormat::Smsgate).then(|| {
            (
                scope,
                self.deps.webhooks.secrets.clone(),
                self.deps.clock.now_ms(),
            )
        });
        ctx.spawn(
            async move {
                let key = match key_read {
                    Some((scope, secrets, now)) => {
                        Some(settings::signing_key(&db, scope, &secrets, now).await?)
                    }
                    None => None,
                };
                Ok::<_, crate::store::StoreError>((subjects(&db, &ids, &drafted).await?, key))
            }
            .into_actor(self)
            .map(move |read, act, ctx| {
                act.reading = false;
                if act.stopping {
                    return;
                }
                let read = read.map(|(found, key)| {
                    if key.is_some() {
                        act.smsgate_key = key;
                    }
                    found
                });
                for delivery in batch {
                    let message = match &read {
                        Ok(found) => Ok(found.get(&delivery.message_id).cloned()),
                        Err(err) => Err(err.to_string()),
                    };
                    act.ready.push_back((delivery, message));
                }
                act.pump(ctx);
            }),
        );
    }

    fn client(&mut self) -> &awc::Client {
        let settings = &self.deps.settings.webhooks;
        let resolver = self.deps.webhooks.resolver.clone();
        self.client.get_or_insert_with(|| {
            webhook_target::client(resolver, settings.allow_insecure_targets, settings.timeout)
        })
    }

    /// The request is over: its slot goes to the next due delivery at once, while the
    /// attempt is recorded (group commit) before this delivery's next attempt is scheduled.
    fn answered(&mut self, id: Uuid, record: AttemptRecord, ctx: &mut Context<Self>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.recording += 1;
        let recorder = self.deps.webhooks.recorder.clone();
        ctx.spawn(
            async move {
                match recorder.record(record.clone()).await {
                    Ok(recorded) => (Some(recorded), record),
                    Err(err) => {
                        tracing::error!(delivery_id = %record.delivery.id, error = %err, "webhook attempt not recorded");
                        (None, record)
                    }
                }
            }
            .into_actor(self)
            .map(move |(recorded, record), act, ctx| act.finished(id, recorded, record, ctx)),
        );
        self.pump(ctx);
    }

    fn finished(
        &mut self,
        id: Uuid,
        recorded: Option<Recorded>,
        record: AttemptRecord,
        ctx: &mut Context<Self>,
    ) {
        self.recording = self.recording.saturating_sub(1);
        match recorded {
            Some(Recorded::LeaseLost) => {
                // Another node owns the endpoint now and delivers from what the database says.
                if let (Some(cluster), Some(lease)) = (&self.deps.cluster, &record.lease) {
                    cluster.lost(lease);
                }
                self.ownership_lost();
                return;
            }
            Some(Recorded::Written) if record.state == DeliveryState::Pending => {
                let at = record.next_attempt_at.unwrap_or(record.attempted_at);
                let now = self.deps.clock.now_ms();
                if let Some(d) = self.known.get_mut(&id) {
                    d.attempts = record.attempt;
                    d.next_attempt_at = at;
                }
                self.schedule(at, id, now, ctx);
            }
            Some(Recorded::Written | Recorded::MovedOn) => {
                // Ended, or another attempt with this number was recorded first.
                self.known.remove(&id);
                self.finished.insert(id, record.attempt);
            }
            None => {
                // Not recorded (storage error): forget it here; the database still says it is
                // pending and the next load reads it.
                self.known.remove(&id);
            }
        }
        self.pump(ctx);
    }

    /// This node no longer holds the endpoint's lease: stop acting at once, with no further
    /// attempt or record, and let the Registry replace this actor when the node is to run the
    /// endpoint again. The new owner rebuilds the queue from the database; attempts sent here
    /// and not recorded are sent again there (at least once).
    fn ownership_lost(&mut self) {
        if !self.lost.swap(true, Ordering::Relaxed) {
            tracing::warn!(endpoint_id = %self.endpoint_id, "webhook endpoint's lease lost; its actor stops here");
        }
        self.go_idle();
    }
}

impl Actor for WebhookEndpoint {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.stopping {
            // Restarted after `StopDeliveries`: the registry no longer holds this address, so this stop
            // is final.
            ctx.stop();
            return;
        }
        ctx.set_mailbox_capacity(1024);
        if self.deps.cluster.is_some() {
            // Another node's `endpoint` notice may never come (it died between its commit and
            // the notice): its deliveries would wait for the next notice, maybe for ever.
            ctx.run_interval(PENDING_RESYNC, |act, ctx| act.read_pending(None, ctx));
        }
        self.load(ctx);
    }
}

impl Supervised for WebhookEndpoint {
    fn restarting(&mut self, _: &mut Self::Context) {
        // Rebuilt from the database by `started`: in-flight attempts were not recorded, so
        // their deliveries are still pending there.
        self.endpoint = None;
        self.client = None;
        self.pending_read = PendingRead::Idle;
        self.wake = None;
        self.due.clear();
        self.known.clear();
        self.ready.clear();
        self.reading = false;
        self.waiting_for_budget = false;
        self.in_flight = 0;
        self.recording = 0;
        self.smsgate_key = None;
    }
}

impl Handler<Deliver> for WebhookEndpoint {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Self::Context) {
        let now = self.deps.clock.now_ms();
        for d in &msg.deliveries {
            // A manual retry of a delivery waiting for its next timer: due at the new time. The
            // waiting entry is found by its key (`known` holds its due time), not by a scan of
            // the queue: a hanging endpoint's queue holds tens of thousands, and the scan per
            // new delivery took the actor thread (docs/performance.md, "A webhook endpoint's queue
            // found by key").
            let Some(held) = self.known.get_mut(&d.id) else {
                continue;
            };
            let waiting_at = held.next_attempt_at;
            if self.due.remove(&(waiting_at, d.id)) {
                held.next_attempt_at = d.next_attempt_at;
                self.schedule(d.next_attempt_at, d.id, now, ctx);
            }
        }
        self.enqueue(msg.deliveries, ctx);
    }
}

impl Handler<LoadDeliveries> for WebhookEndpoint {
    type Result = ();

    fn handle(&mut self, msg: LoadDeliveries, ctx: &mut Self::Context) {
        self.read_pending(Some(msg.ids), ctx);
    }
}

impl Handler<LoadPending> for WebhookEndpoint {
    type Result = ();

    fn handle(&mut self, _: LoadPending, ctx: &mut Self::Context) {
        self.read_pending(None, ctx);
    }
}

impl WebhookEndpoint {
    /// Reads the endpoint's pending deliveries again, those among `ids` or all of them; those
    /// this actor does not hold yet (and did not just finish) join its queue. One read of all
    /// at a time: asked again while one runs, it reads once more after it (whatever the number
    /// of asks), so a stream of notices from busy nodes costs at most two in a row, not one
    /// each. A read by ids is small and runs at once.
    fn read_pending(&mut self, ids: Option<Vec<Uuid>>, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let whole = ids.is_none();
        if whole {
            match self.pending_read {
                PendingRead::Idle => self.pending_read = PendingRead::Running,
                PendingRead::Running | PendingRead::Again => {
                    self.pending_read = PendingRead::Again;
                    return;
                }
            }
        }
        let db = self.deps.db.clone();
        let id = self.endpoint_id;
        ctx.spawn(
            async move { webhooks::pending_of(&db, id, ids.as_deref()).await }
                .into_actor(self)
                .map(move |result, act, ctx| {
                    match result {
                        Ok(pending) => act.enqueue(pending, ctx),
                        Err(err) => {
                            tracing::error!(endpoint_id = %act.endpoint_id, error = %err, "pending deliveries of another node not loaded")
                        }
                    }
                    if whole {
                        let again = act.pending_read == PendingRead::Again;
                        act.pending_read = PendingRead::Idle;
                        if again {
                            act.read_pending(None, ctx);
                        }
                    }
                }),
        );
    }
}

impl Handler<Reload> for WebhookEndpoint {
    type Result = ();

    fn handle(&mut self, _: Reload, ctx: &mut Self::Context) {
        let db = self.deps.db.clone();
        let id = self.endpoint_id;
        ctx.wait(
            async move { webhooks::find(&db, id).await }
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(Some(endpoint)) => {
                        act.endpoint = Some(endpoint);
                        act.pump(ctx);
                    }
                    Ok(None) => act.go_idle(),
                    Err(err) => {
                        tracing::error!(endpoint_id = %act.endpoint_id, error = %err, "webhook endpoint not reloaded")
                    }
                }),
        );
    }
}

impl Handler<StopDeliveries> for WebhookEndpoint {
    type Result = ();

    fn handle(&mut self, _: StopDeliveries, ctx: &mut Self::Context) {
        self.stopping = true;
        ctx.stop();
    }
}
