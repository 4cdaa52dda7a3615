//! The actor of one endpoint: its I/O (the endpoint's record, the messages of due deliveries,
//! the attempts and their records) and its timers, around the decisions of its
//! [`EndpointQueue`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use uuid::Uuid;

use super::attempt::attempt;
use super::queue::{EndpointQueue, Outcome};
use super::{Deliver, LoadDeliveries, LoadPending, Reload, StopDeliveries};
use crate::actors::Deps;
use crate::domain::ids::EndpointId;
use crate::domain::webhook_event::{EventKind, WebhookFormat};
use crate::outbound::body::subjects;
use crate::outbound::target as webhook_target;
use crate::store::cluster::LeaseKey;
use crate::store::scoped::Scope;
use crate::store::settings;
use crate::store::webhooks::{self, AttemptRecord, EndpointRecord, PendingDelivery, Recorded};

/// How often, in a cluster, the actor reads its endpoint's pending deliveries again.
const PENDING_RESYNC: Duration = Duration::from_secs(5);

/// One endpoint's deliveries: a due-time ordered queue, retry timers, attempts in flight.
pub struct WebhookEndpoint {
    deps: Deps,
    endpoint_id: EndpointId,
    endpoint: Option<EndpointRecord>,
    client: Option<awc::Client>,
    /// What is due, read, in flight and recorded, and when to wake up.
    queue: EndpointQueue,
    /// An SMSGate-format endpoint's signing key (the workspace's `webhooks.signing_key`,
    /// sealed), read again with every batch of messages, so a key changed through the
    /// settings signs the deliveries read after the change.
    smsgate_key: Option<String>,
    /// Raised when the endpoint's lease was lost: the supervisor replaces this actor.
    lost: Arc<AtomicBool>,
    /// The timer of the queue's one wake-up, for the earliest waiting delivery not due yet.
    wake: Option<SpawnHandle>,
}

impl WebhookEndpoint {
    /// An actor for `endpoint_id`; it loads the endpoint and its pending deliveries when started.
    pub fn new(deps: Deps, endpoint_id: EndpointId, lost: Arc<AtomicBool>) -> WebhookEndpoint {
        WebhookEndpoint {
            deps,
            endpoint_id,
            endpoint: None,
            client: None,
            queue: EndpointQueue::new(endpoint_id),
            smsgate_key: None,
            lost,
            wake: None,
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
    /// here (a supervised actor whose address the supervisor still holds would be restarted at
    /// once); the supervisor drops it on `EndpointDeleted`, and it ends with its last address.
    fn go_idle(&mut self) {
        tracing::debug!(endpoint_id = %self.endpoint_id, "webhook endpoint gone; idle");
        self.endpoint = None;
        self.queue.go_idle();
    }

    fn enqueue(&mut self, deliveries: Vec<PendingDelivery>, ctx: &mut Context<Self>) {
        if self.queue.is_stopped() {
            return;
        }
        let now = self.deps.clock.now_ms();
        let wake = self.queue.enqueue(deliveries, now);
        self.arm(wake, now, ctx);
        self.pump(ctx);
    }

    /// Arms the queue's wake-up for `wake` (a time after `now`), replacing the one armed; when
    /// it fires, `pump` takes what is due and the queue names the next.
    fn arm(&mut self, wake: Option<i64>, now: i64, ctx: &mut Context<Self>) {
        let Some(at) = wake else {
            return;
        };
        if let Some(timer) = self.wake.take() {
            ctx.cancel_future(timer);
        }
        let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
        let timer = ctx.run_later(wait, |act, ctx| {
            act.wake = None;
            act.queue.woken();
            act.pump(ctx);
        });
        self.wake = Some(timer);
    }

    /// Starts every attempt the in-flight limit allows from the deliveries whose message is
    /// read, and reads ahead the messages of the next due ones.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let Some(endpoint) = self.endpoint.clone() else {
            return;
        };
        if !endpoint.enabled || self.queue.is_stopped() {
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
        while let Some(ready) = self.queue.next_ready() {
            let now = self.deps.clock.now_ms();
            if let Err(allowed_at) = self.deps.webhooks.budgets.take(scope, now) {
                self.queue.wait_for_budget(ready);
                let wait = Duration::from_millis(u64::try_from(allowed_at - now).unwrap_or(0));
                ctx.run_later(wait, |act, ctx| {
                    act.queue.budget_allows();
                    act.pump(ctx);
                });
                break;
            }
            self.queue.attempt_started();
            let (delivery, message) = ready;
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
        let now = self.deps.clock.now_ms();
        let (batch, wake) = self.queue.take_due(now);
        self.arm(wake, now, ctx);
        if batch.is_empty() {
            return;
        }
        // One query reads the messages of every delivery taken now (and one the drafts of
        // `ai.draft.created` deliveries).
        let db = self.deps.db.clone();
        let is_phone_event = |d: &PendingDelivery| {
            d.event
                .parse::<EventKind>()
                .is_ok_and(EventKind::is_phone_event)
        };
        let ids: Vec<Uuid> = batch
            .iter()
            .filter(|d| !is_phone_event(d))
            .map(|d| d.message_id)
            .collect();
        let phone_events: Vec<Uuid> = batch
            .iter()
            .filter(|d| is_phone_event(d))
            .map(|d| d.message_id)
            .collect();
        let drafted: Vec<Uuid> = batch
            .iter()
            .filter(|d| d.event == EventKind::AiDraftCreated.as_str())
            .map(|d| d.message_id)
            .collect();
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
                Ok::<_, crate::store::StoreError>((
                    subjects(&db, &ids, &drafted, &phone_events).await?,
                    key,
                ))
            }
            .into_actor(self)
            .map(move |read, act, ctx| {
                if !act.queue.end_read() {
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
                    act.queue.push_ready((delivery, message));
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
        self.queue.answered();
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
        let outcome = Outcome::of(recorded, &record);
        let now = self.deps.clock.now_ms();
        let wake = self.queue.recorded(id, outcome, now);
        if outcome == Outcome::LeaseLost {
            // Another node owns the endpoint now and delivers from what the database says.
            if let (Some(cluster), Some(lease)) = (&self.deps.cluster, &record.lease) {
                cluster.lost(lease);
            }
            self.ownership_lost();
            return;
        }
        self.arm(wake, now, ctx);
        self.pump(ctx);
    }

    /// This node no longer holds the endpoint's lease: stop acting at once, with no further
    /// attempt or record, and let the supervisor replace this actor when the node is to run
    /// the endpoint again. The new owner rebuilds the queue from the database; attempts sent
    /// here and not recorded are sent again there (at least once).
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
        if self.queue.is_stopped() {
            // Restarted after `StopDeliveries`: the supervisor no longer holds this address, so
            // this stop is final.
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
        self.wake = None;
        self.queue.restart();
        self.smsgate_key = None;
    }
}

impl Handler<Deliver> for WebhookEndpoint {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Self::Context) {
        let now = self.deps.clock.now_ms();
        let wake = self.queue.deliver(msg.deliveries, now);
        self.arm(wake, now, ctx);
        self.pump(ctx);
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
    /// at a time ([`EndpointQueue::begin_pending_read`]); a read by ids is small and runs at
    /// once.
    fn read_pending(&mut self, ids: Option<Vec<Uuid>>, ctx: &mut Context<Self>) {
        if self.queue.is_stopped() {
            return;
        }
        let whole = ids.is_none();
        if whole && !self.queue.begin_pending_read() {
            return;
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
                    if whole && act.queue.end_pending_read() {
                        act.read_pending(None, ctx);
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
        self.queue.stop();
        ctx.stop();
    }
}
