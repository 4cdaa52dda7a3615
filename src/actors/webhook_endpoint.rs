//! One `WebhookEndpoint` actor per endpoint, started and supervised by the Registry: it owns
//! the endpoint's queue of due deliveries and their retry timers, and runs up to
//! [`MAX_IN_FLIGHT`] attempts at once, so a slow or dead endpoint never delays another.
//!
//! Mailbox: commands `Deliver`, `Reload`, `StopDeliveries`; registry commands `DeliveriesCreated`,
//! `EndpointChanged`, `EndpointDeleted`. Deliveries are written by the writer's commit hook
//! ([`WebhookFanout`]) in the transaction of the change that fires them; the actor only reads
//! them, so a restart (of the actor or the process) rebuilds the queue from the database.

use crate::telemetry::WebhookOutcome;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use actix::prelude::*;
use uuid::Uuid;

use super::Deps;
use super::registry::Registry;
use super::smsgate_body;
use super::webhook_target::{self, AttemptError, SharedResolver};
use crate::clock::format_ms;
use crate::config::QuotaSettings;
use crate::domain::quota::SlidingBudget;
use crate::domain::signing;
use crate::domain::webhook_event::{EventKind, WebhookFormat};
use crate::store::ai::Draft;
use crate::store::messages::{self, Scope};
use crate::store::settings::{self, SettingsSecret};
use crate::store::webhooks::{
    self, AttemptRecord, AttemptRecorder, DeliveryState, EndpointRecord, PendingDelivery,
    Subscriptions,
};
use crate::store::writer::{Change, CommitHook};

/// Most attempts one endpoint has in flight (HTTP requests open) at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// Most due deliveries of one endpoint whose messages are read ahead of a free request slot.
const READ_AHEAD: usize = 4 * MAX_IN_FLIGHT;
/// Most finished attempts of one endpoint waiting to be recorded; past it no new attempt starts.
const MAX_RECORDING: usize = 512;
/// Largest response body read (and discarded) so the connection can be reused, in bytes.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// The User-Agent of every delivery (docs/api.md, Webhooks).
const USER_AGENT: &str = "smsgw-webhooks";

/// Scopes with a delivery budget kept before the idle ones are dropped.
const BUDGETS_BEFORE_PRUNE: usize = 1024;

/// What the webhook actors share: the resolver, the attempt recorder, the subscription index,
/// the delivery budgets.
#[derive(Clone)]
pub struct WebhookDeps {
    pub resolver: SharedResolver,
    pub recorder: AttemptRecorder,
    pub subscriptions: Arc<Subscriptions>,
    /// Opens the endpoints' sealed signing keys (docs/api.md, "Secrets at rest").
    pub secrets: Arc<crate::domain::secrets::SecretBox>,
    pub budgets: Arc<DeliveryBudgets>,
}

/// The outbound delivery budget of every workspace and mode (docs/api.md, "Quotas"): at most
/// `quotas.webhook_deliveries` attempts start within any `quotas.webhook_delivery_window`,
/// over all its endpoints. An attempt over the budget waits in its endpoint's queue (the
/// delivery stays pending in the database), it is never dropped.
pub struct DeliveryBudgets {
    max: u32,
    window_ms: i64,
    scopes: Mutex<HashMap<Scope, SlidingBudget>>,
}

impl DeliveryBudgets {
    /// Budgets as configured; `webhook_deliveries` 0 means none.
    pub fn new(quotas: &QuotaSettings) -> DeliveryBudgets {
        DeliveryBudgets {
            max: quotas.webhook_deliveries,
            window_ms: i64::try_from(quotas.webhook_delivery_window.as_millis())
                .unwrap_or(i64::MAX),
            scopes: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one attempt of `scope` at `now_ms`, or says from when the budget allows one.
    pub fn take(&self, scope: Scope, now_ms: i64) -> Result<(), i64> {
        if self.max == 0 {
            return Ok(());
        }
        // A poisoned lock only means another thread panicked mid-update: the log is still a
        // list of times, so keep using it.
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        if scopes.len() >= BUDGETS_BEFORE_PRUNE {
            scopes.retain(|_, budget| !budget.is_idle(now_ms));
        }
        scopes
            .entry(scope)
            .or_insert_with(|| SlidingBudget::new(self.max, self.window_ms))
            .take(now_ms)
    }
}

/// New deliveries for this endpoint, already stored.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Deliver {
    pub deliveries: Vec<PendingDelivery>,
}

/// The endpoint's record changed (url, key, enabled): read it again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reload;

/// Stop the actor (endpoint deleted, shutdown); pending deliveries stay in the database.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopDeliveries;

/// Registry command: deliveries were committed; hand them to their endpoints' actors.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DeliveriesCreated {
    pub deliveries: Vec<PendingDelivery>,
}

/// Registry command: an endpoint was updated, its key rotated, or a delivery retried by hand.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndpointChanged {
    pub endpoint_id: Uuid,
    /// A delivery made due now (manual retry).
    pub retry: Option<PendingDelivery>,
}

/// Registry command: an endpoint was deleted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndpointDeleted {
    pub endpoint_id: Uuid,
}

/// The writer's commit hook: matches committed changes against the subscription index
/// (no query) and, after the commit, tells the registry about the new deliveries.
pub struct WebhookFanout {
    subscriptions: Arc<Subscriptions>,
    registry: OnceLock<Addr<Registry>>,
}

impl WebhookFanout {
    /// A fan-out over `subscriptions`; deliveries committed before [`WebhookFanout::attach`]
    /// are picked up by the registry's start-up rebuild.
    pub fn new(subscriptions: Arc<Subscriptions>) -> WebhookFanout {
        WebhookFanout {
            subscriptions,
            registry: OnceLock::new(),
        }
    }

    /// Connects the registry that starts the endpoint actors.
    pub fn attach(&self, registry: Addr<Registry>) {
        let _ = self.registry.set(registry);
    }
}

impl CommitHook for WebhookFanout {
    fn stage(&self, changes: &[Change], now_ms: i64) -> Vec<PendingDelivery> {
        self.subscriptions.deliveries_for(changes, now_ms)
    }

    fn committed(&self, deliveries: Vec<PendingDelivery>) {
        if let Some(registry) = self.registry.get() {
            registry.do_send(DeliveriesCreated { deliveries });
        }
    }
}

/// The registry's side: one supervised actor per endpoint with work.
#[derive(Default)]
pub struct EndpointActors {
    actors: HashMap<Uuid, Addr<WebhookEndpoint>>,
}

impl EndpointActors {
    /// The endpoint's actor, started (supervised) on first use.
    pub fn addr(&mut self, deps: &Deps, endpoint_id: Uuid) -> Addr<WebhookEndpoint> {
        if let Some(addr) = self.actors.get(&endpoint_id)
            && addr.connected()
        {
            return addr.clone();
        }
        let deps = deps.clone();
        let addr = Supervisor::start(move |_| WebhookEndpoint::new(deps, endpoint_id));
        self.actors.insert(endpoint_id, addr.clone());
        addr
    }

    /// Makes the endpoint's actor, if it runs, read its endpoint again.
    pub fn reload(&self, endpoint_id: Uuid) {
        if let Some(addr) = self.actors.get(&endpoint_id) {
            addr.do_send(Reload);
        }
    }

    /// Stops the endpoint's actor, if it runs (the endpoint was deleted).
    pub fn stop(&mut self, endpoint_id: Uuid) {
        if let Some(addr) = self.actors.remove(&endpoint_id) {
            addr.do_send(StopDeliveries);
        }
    }

    /// Stops every endpoint actor.
    pub fn stop_all(&mut self) {
        for (_, addr) in self.actors.drain() {
            addr.do_send(StopDeliveries);
        }
    }

    /// Starts the actors of endpoints with pending deliveries (after a restart).
    pub fn rebuild(ctx: &mut Context<Registry>, deps: Deps) {
        let load = async move { webhooks::endpoints_with_pending(&deps.db).await };
        ctx.spawn(
            actix::fut::wrap_future::<_, Registry>(load).map(|result, registry, _| match result {
                Ok(ids) => {
                    let deps = registry.deps().clone();
                    for id in ids {
                        registry.webhooks.addr(&deps, id);
                    }
                }
                Err(err) => {
                    tracing::error!(error = %err, "pending webhook deliveries not reloaded")
                }
            }),
        );
    }
}

/// One endpoint's deliveries: a due-time ordered queue, retry timers, attempts in flight.
pub struct WebhookEndpoint {
    deps: Deps,
    endpoint_id: Uuid,
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
    stopping: bool,
}

impl WebhookEndpoint {
    /// An actor for `endpoint_id`; it loads the endpoint and its pending deliveries when started.
    pub fn new(deps: Deps, endpoint_id: Uuid) -> WebhookEndpoint {
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
            if d.endpoint_id != self.endpoint_id || self.known.contains_key(&d.id) {
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
            let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
            ctx.run_later(wait, |act, ctx| act.pump(ctx));
        }
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
            ctx.spawn(
                fut.into_actor(self)
                    .map(move |record, act, ctx| act.answered(id, record, ctx)),
            );
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
                    Ok(true) => Some(record),
                    Ok(false) => None,
                    Err(err) => {
                        tracing::error!(delivery_id = %record.delivery.id, error = %err, "webhook attempt not recorded");
                        None
                    }
                }
            }
            .into_actor(self)
            .map(move |outcome, act, ctx| act.finished(id, outcome, ctx)),
        );
        self.pump(ctx);
    }

    fn finished(&mut self, id: Uuid, outcome: Option<AttemptRecord>, ctx: &mut Context<Self>) {
        self.recording = self.recording.saturating_sub(1);
        match outcome {
            Some(record) if record.state == DeliveryState::Pending => {
                let at = record.next_attempt_at.unwrap_or(record.attempted_at);
                let now = self.deps.clock.now_ms();
                if let Some(d) = self.known.get_mut(&id) {
                    d.attempts = record.attempt;
                    d.next_attempt_at = at;
                }
                self.schedule(at, id, now, ctx);
            }
            Some(_) => {
                self.known.remove(&id);
            }
            None => {
                // Not recorded (storage error or the delivery moved on): forget it here; the
                // database still says what is pending and the next start reloads it.
                self.known.remove(&id);
            }
        }
        self.pump(ctx);
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
        self.load(ctx);
    }
}

impl Supervised for WebhookEndpoint {
    fn restarting(&mut self, _: &mut Self::Context) {
        // Rebuilt from the database by `started`: in-flight attempts were not recorded, so
        // their deliveries are still pending there.
        self.endpoint = None;
        self.client = None;
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

/// What a delivery's body is built from: the message's current record and, for
/// `ai.draft.created`, the draft.
#[derive(Debug, Clone)]
pub struct Subject {
    pub message: messages::Message,
    pub draft: Option<Draft>,
}

/// The subjects of a batch of deliveries, by message id: messages removed by retention are
/// absent; drafts are read only for `drafted` (the messages of `ai.draft.created` deliveries).
async fn subjects(
    db: &sea_orm::DatabaseConnection,
    ids: &[Uuid],
    drafted: &[Uuid],
) -> Result<HashMap<Uuid, Subject>, crate::store::StoreError> {
    let messages = webhooks::messages_by_id(db, ids).await?;
    let mut drafts = if drafted.is_empty() {
        HashMap::new()
    } else {
        crate::store::ai::drafts_by_message(db, drafted).await?
    };
    Ok(messages
        .into_iter()
        .map(|(id, message)| {
            let draft = drafts.remove(&id);
            (id, Subject { message, draft })
        })
        .collect())
}

/// The JSON body of one attempt, rebuilt from the current message record (the whole record,
/// as the API shows it, docs/api.md, Messages).
pub fn payload<'a>(delivery: &'a PendingDelivery, subject: &'a Subject) -> Payload<'a> {
    Payload {
        event: &delivery.event,
        event_id: delivery.event_id,
        message: subject.message.view(),
        timestamp: format_ms(delivery.created_at),
        draft: subject
            .draft
            .as_ref()
            .filter(|_| delivery.event == EventKind::AiDraftCreated.as_str())
            .map(|d| DraftOut {
                id: d.id,
                content: &d.content,
            }),
    }
}

/// A webhook body (docs/api.md, Webhooks), serialized straight to the bytes that are
/// signed and sent.
#[derive(Debug, serde::Serialize)]
pub struct Payload<'a> {
    event: &'a str,
    event_id: Uuid,
    message: messages::Record<'a>,
    timestamp: String,
    /// Only in `ai.draft.created`.
    #[serde(skip_serializing_if = "Option::is_none")]
    draft: Option<DraftOut<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct DraftOut<'a> {
    id: Uuid,
    content: &'a str,
}

/// What one attempt ended with, before the retry decision.
struct Answer {
    status_code: Option<u16>,
    error: Option<AttemptError>,
    detail: Option<String>,
}

/// Makes one attempt and decides what follows (succeeded, failed, or the next retry time).
async fn attempt(
    deps: Deps,
    client: awc::Client,
    endpoint: EndpointRecord,
    smsgate_key: Option<String>,
    delivery: PendingDelivery,
    message: Result<Option<Subject>, String>,
) -> AttemptRecord {
    let settings = &deps.settings.webhooks;
    let attempt_no = delivery.attempts + 1;
    let attempted_at = deps.clock.now_ms();
    let started = tokio::time::Instant::now();
    let answer = send(&deps, &client, &endpoint, smsgate_key, &delivery, message).await;
    let duration = started.elapsed();
    let duration_ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
    let (state, retryable) = match (answer.status_code, answer.error) {
        (Some(code), None) if (200..300).contains(&code) => (DeliveryState::Succeeded, false),
        (Some(code), _) if code >= 500 => (DeliveryState::Pending, true),
        (_, Some(error)) if error.is_retryable() => (DeliveryState::Pending, true),
        _ => (DeliveryState::Failed, false),
    };
    let delay = retryable
        .then(|| {
            settings
                .retry_schedule
                .get(usize::try_from(attempt_no.saturating_sub(1)).unwrap_or(usize::MAX))
        })
        .flatten();
    let (state, next_attempt_at) = match (state, delay) {
        (DeliveryState::Pending, Some(delay)) => (
            DeliveryState::Pending,
            Some(deps.clock.now_ms() + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)),
        ),
        (DeliveryState::Pending, None) => (DeliveryState::Failed, None),
        (other, _) => (other, None),
    };
    crate::telemetry::record_webhook_attempt(
        metric_outcome(answer.status_code, answer.error),
        duration.as_secs_f64(),
    );
    AttemptRecord {
        delivery,
        attempt: attempt_no,
        status_code: answer.status_code,
        error: answer.error.map(AttemptError::as_str),
        error_detail: answer.detail,
        duration_ms,
        attempted_at,
        next_attempt_at,
        state,
    }
}

/// The `outcome` label of an attempt.
fn metric_outcome(status_code: Option<u16>, error: Option<AttemptError>) -> WebhookOutcome {
    match (status_code, error) {
        (Some(code), _) if code >= 500 => WebhookOutcome::ServerError,
        (Some(code), None) if (200..300).contains(&code) => WebhookOutcome::Success,
        (Some(_), _) => WebhookOutcome::Rejected,
        (None, Some(AttemptError::Timeout)) => WebhookOutcome::Timeout,
        (None, Some(AttemptError::BlockedAddress | AttemptError::InvalidUrl)) => {
            WebhookOutcome::Blocked
        }
        (None, Some(AttemptError::MessageDeleted)) => WebhookOutcome::MessageDeleted,
        (None, _) => WebhookOutcome::ConnectionError,
    }
}

/// Builds, signs and posts the body; never panics, every failure becomes a typed error.
async fn send(
    deps: &Deps,
    client: &awc::Client,
    endpoint: &EndpointRecord,
    smsgate_key: Option<String>,
    delivery: &PendingDelivery,
    message: Result<Option<Subject>, String>,
) -> Answer {
    let settings = &deps.settings.webhooks;
    let message = match message {
        Ok(Some(message)) => message,
        Ok(None) => {
            return Answer {
                status_code: None,
                error: Some(AttemptError::MessageDeleted),
                detail: Some("the message record was removed by retention".into()),
            };
        }
        Err(err) => {
            // A storage hiccup is not the endpoint's fault: retried like a connection error.
            return Answer {
                status_code: None,
                error: Some(AttemptError::Connect),
                detail: Some(format!("message not read: {err}")),
            };
        }
    };
    if let Err(error) =
        webhook_target::check_literal(&endpoint.url, settings.allow_insecure_targets)
    {
        let detail = match error {
            AttemptError::BlockedAddress => "the URL targets a blocked address",
            _ => "the URL is not one a request can be made to",
        };
        return Answer {
            status_code: None,
            error: Some(error),
            detail: Some(detail.into()),
        };
    }
    if endpoint.format == WebhookFormat::Smsgate {
        return send_smsgate(
            deps,
            client,
            endpoint,
            smsgate_key,
            delivery,
            &message.message,
        )
        .await;
    }
    let body = match serde_json::to_vec(&payload(delivery, &message)) {
        Ok(body) => body,
        Err(err) => {
            return Answer {
                status_code: None,
                error: Some(AttemptError::Connect),
                detail: Some(format!("body not serialized: {err}")),
            };
        }
    };
    let event_id = delivery.event_id.to_string();
    let timestamp = deps.clock.now().timestamp();
    // Opened per attempt, so the clear key lives only for the request. Start-up checked that
    // every stored key opens; a failure here means the row changed under a running server.
    let signing_key = match deps
        .webhooks
        .secrets
        .open(&endpoint.sealed_signing_key, endpoint.id.as_bytes())
    {
        Ok(key) => key,
        Err(err) => {
            return Answer {
                status_code: None,
                error: Some(AttemptError::Connect),
                detail: Some(format!("signing key not opened: {err}")),
            };
        }
    };
    let signed = signing::sign(&signing_key, &event_id, timestamp, &body);
    let mut request = client
        .post(&endpoint.url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("user-agent", USER_AGENT))
        .insert_header(("x-signature", signed.signature))
        .insert_header(("x-timestamp", timestamp.to_string()))
        .insert_header(("x-event-id", event_id.clone()))
        .insert_header(("webhook-id", event_id))
        .insert_header(("webhook-timestamp", timestamp.to_string()));
    if !signed.webhook_signature.is_empty() {
        request = request.insert_header(("webhook-signature", signed.webhook_signature));
    }
    post(settings, request, body).await
}

/// Builds, signs (as the SMSGate app signs, with the workspace's key) and posts the body of a
/// delivery to an SMSGate-format endpoint (docs/compat.md, Webhooks).
async fn send_smsgate(
    deps: &Deps,
    client: &awc::Client,
    endpoint: &EndpointRecord,
    sealed_key: Option<String>,
    delivery: &PendingDelivery,
    message: &messages::Message,
) -> Answer {
    let fail = |detail: String| Answer {
        status_code: None,
        error: Some(AttemptError::Connect),
        detail: Some(detail),
    };
    let body = match smsgate_body::body(endpoint, delivery, message) {
        Some(Ok(body)) => body,
        Some(Err(err)) => return fail(format!("body not serialized: {err}")),
        None => return fail(format!("{} is never delivered", delivery.event)),
    };
    let scope = Scope {
        workspace_id: endpoint.workspace_id,
        mode: endpoint.mode,
    };
    let Some(sealed_key) = sealed_key else {
        return fail("the workspace's webhooks.signing_key was not read".into());
    };
    let signing_key = match deps
        .webhooks
        .secrets
        .open(&sealed_key, &SettingsSecret::SigningKey.context(scope))
    {
        Ok(key) => key,
        Err(err) => return fail(format!("signing key not opened: {err}")),
    };
    let timestamp = deps.clock.now().timestamp();
    let request = client
        .post(&endpoint.url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("user-agent", USER_AGENT))
        .insert_header((
            "x-signature",
            signing::smsgate_signature(&signing_key, &body, timestamp),
        ))
        .insert_header(("x-timestamp", timestamp.to_string()));
    post(&deps.settings.webhooks, request, body).await
}

/// Posts a signed body and classifies the answer.
async fn post(
    settings: &crate::config::WebhookSettings,
    request: awc::ClientRequest,
    body: Vec<u8>,
) -> Answer {
    match request.send_body(body).await {
        Ok(mut response) => {
            let status = response.status().as_u16();
            // Drain a little of the body so the connection can be reused; its content is ignored.
            let _ =
                tokio::time::timeout(settings.timeout, response.body().limit(MAX_RESPONSE_BYTES))
                    .await;
            let error = match status {
                200..=299 => None,
                300..=399 => Some(AttemptError::Redirect),
                _ => Some(AttemptError::HttpStatus),
            };
            Answer {
                status_code: Some(status),
                error,
                detail: error.map(|_| format!("HTTP {status}")),
            }
        }
        Err(err) => Answer {
            status_code: None,
            error: Some(webhook_target::classify(&err)),
            detail: Some(err.to_string()),
        },
    }
}
