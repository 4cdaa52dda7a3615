//! One `WebhookEndpoint` actor per endpoint, started and supervised by the Registry: it owns
//! the endpoint's queue of due deliveries and their retry timers, and runs up to
//! [`MAX_IN_FLIGHT`] attempts at once, so a slow or dead endpoint never delays another.
//!
//! Mailbox: commands `Deliver`, `Reload`, `LoadPending`, `LoadDeliveries`, `StopDeliveries`; registry commands `DeliveriesCreated`,
//! `EndpointChanged`, `EndpointDeleted`. Deliveries are written by the writer's commit hook
//! ([`WebhookFanout`]) in the transaction of the change that fires them; the actor only reads
//! them, so a restart (of the actor or the process) rebuilds the queue from the database.
//!
//! One concern per file: `actor.rs` the actor (queue, timers, in-flight slots, recording),
//! `attempt.rs` one attempt (build, sign, post), `body.rs` what a body is built from,
//! `retry.rs` the pure decisions on an answer (retry or not, when, the metric label),
//! `budget.rs` the delivery budgets, `fanout.rs` the writer's commit hook; this file the
//! messages and the Registry's side.

mod actor;
mod attempt;
mod body;
mod budget;
mod fanout;
mod retry;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actix::prelude::*;

use super::Deps;
use super::registry::Registry;
use super::webhook_target::SharedResolver;
use crate::domain::ids::EndpointId;
use crate::store::webhooks::{self, PendingDelivery, Subscriptions};
use crate::store::writer::AttemptRecorder;

pub use actor::WebhookEndpoint;
pub use body::{Payload, Subject, payload};
pub use budget::DeliveryBudgets;
pub use fanout::WebhookFanout;

/// Most attempts one endpoint has in flight (HTTP requests open) at once.
pub const MAX_IN_FLIGHT: usize = 16;

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

/// Read the endpoint's pending deliveries again (another node of the cluster stored some):
/// those this actor does not hold yet join its queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LoadPending;

/// Read these pending deliveries of the endpoint, by id (another node of the cluster stored
/// them and named them in its notice): those this actor does not hold yet join its queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LoadDeliveries {
    pub ids: Vec<uuid::Uuid>,
}

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
    pub endpoint_id: EndpointId,
    /// A delivery made due now (manual retry).
    pub retry: Option<PendingDelivery>,
}

/// Registry command: an endpoint was deleted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndpointDeleted {
    pub endpoint_id: EndpointId,
}

/// The registry's side: one supervised actor per endpoint with work.
#[derive(Default)]
pub struct EndpointActors {
    actors: HashMap<EndpointId, Running>,
}

/// An endpoint's actor and its flag of lost ownership.
struct Running {
    addr: Addr<WebhookEndpoint>,
    /// Set by the actor when a record was refused because the endpoint's lease moved on: it
    /// idles from then on, and is replaced (stopped, a new one started) when this node is to
    /// run the endpoint again. It cannot stop itself: a supervised actor whose address is still
    /// held here is restarted at once.
    lost: Arc<AtomicBool>,
}

impl Running {
    fn live(&self) -> Option<&Addr<WebhookEndpoint>> {
        (self.addr.connected() && !self.lost.load(Ordering::Relaxed)).then_some(&self.addr)
    }
}

impl EndpointActors {
    /// The endpoint's actor, started (supervised) on first use.
    /// The endpoint's actor, started (supervised) on first use, or again after it lost the
    /// endpoint's lease.
    pub fn addr(&mut self, deps: &Deps, endpoint_id: EndpointId) -> Addr<WebhookEndpoint> {
        if let Some(addr) = self.actors.get(&endpoint_id).and_then(Running::live) {
            return addr.clone();
        }
        self.stop(endpoint_id);
        let deps = deps.clone();
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        let addr = Supervisor::start(move |_| WebhookEndpoint::new(deps, endpoint_id, flag));
        self.actors.insert(
            endpoint_id,
            Running {
                addr: addr.clone(),
                lost,
            },
        );
        addr
    }

    /// Makes the endpoint's actor, if it runs, read its endpoint again.
    pub fn reload(&self, endpoint_id: EndpointId) {
        if let Some(addr) = self.get(endpoint_id) {
            addr.do_send(Reload);
        }
    }

    /// Stops the endpoint's actor, if it runs (the endpoint was deleted).
    pub fn stop(&mut self, endpoint_id: EndpointId) {
        if let Some(running) = self.actors.remove(&endpoint_id) {
            running.addr.do_send(StopDeliveries);
        }
    }

    /// Whether the endpoint's actor runs here.
    pub fn running(&self, endpoint_id: EndpointId) -> bool {
        self.get(endpoint_id).is_some()
    }

    /// The endpoint's actor, if it runs here (and still owns the endpoint).
    pub fn get(&self, endpoint_id: EndpointId) -> Option<Addr<WebhookEndpoint>> {
        self.actors
            .get(&endpoint_id)
            .and_then(Running::live)
            .cloned()
    }

    /// Stops every endpoint actor.
    pub fn stop_all(&mut self) {
        for (_, running) in self.actors.drain() {
            running.addr.do_send(StopDeliveries);
        }
    }

    /// Starts the actors of endpoints with pending deliveries (after a restart).
    pub fn rebuild(ctx: &mut Context<Registry>, deps: Deps) {
        let load = async move { webhooks::endpoints_with_pending(&deps.db).await };
        ctx.spawn(
            actix::fut::wrap_future::<_, Registry>(load).map(
                |result, registry, ctx| match result {
                    Ok(ids) => {
                        for id in ids {
                            registry.ensure_endpoint(ctx, id, None);
                        }
                    }
                    Err(err) => {
                        tracing::error!(error = %err, "pending webhook deliveries not reloaded")
                    }
                },
            ),
        );
    }
}
