//! The webhook endpoints' actors: one `WebhookEndpoint` per endpoint with work, which owns the
//! endpoint's queue of due deliveries and their retry timers and runs up to [`MAX_IN_FLIGHT`]
//! attempts at once, so a slow or dead endpoint never delays another; and their supervisor
//! [`WebhookEndpoints`], started once, which starts them, routes work to them and, in a
//! cluster, holds their leases.
//!
//! Mailboxes: the endpoint's commands `Deliver`, `Reload`, `LoadPending`, `LoadDeliveries`,
//! `StopDeliveries`; the supervisor's commands `DeliveriesCreated`, `EndpointChanged`,
//! `EndpointDeleted`, `StopEndpoints` and the cluster's endpoint notices and lost endpoint
//! leases. Deliveries are written by the writer's commit hook ([`WebhookFanout`]) in the
//! transaction of the change that fires them; the actor only reads them, so a restart (of the
//! actor or the process) rebuilds the queue from the database.
//!
//! One concern per file: `queue.rs` the endpoint's decisions ([`EndpointQueue`]: what is due,
//! read, in flight, recorded), `actor.rs` the actor (its I/O and timers), `attempt.rs` one
//! attempt (build, sign, post), `retry.rs` the pure decisions on an answer (retry or not,
//! when, the metric label), `budget.rs` the delivery budgets, `fanout.rs` the writer's commit
//! hook, `supervisor.rs` the supervisor; this file the messages. What a request carries and
//! where it may go are in `crate::outbound`.

mod actor;
mod attempt;
mod budget;
mod fanout;
mod queue;
mod retry;
mod supervisor;

use std::sync::Arc;

use actix::prelude::*;

use crate::domain::ids::EndpointId;
use crate::outbound::target::SharedResolver;
use crate::store::webhooks::{PendingDelivery, Subscriptions};
use crate::store::writer::AttemptRecorder;

pub use actor::WebhookEndpoint;
pub use budget::DeliveryBudgets;
pub use fanout::WebhookFanout;
pub use queue::EndpointQueue;
pub use supervisor::WebhookEndpoints;

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

/// Supervisor command: deliveries were committed; hand them to their endpoints' actors.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DeliveriesCreated {
    pub deliveries: Vec<PendingDelivery>,
}

/// Supervisor command: an endpoint was updated, its key rotated, or a delivery retried by hand.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndpointChanged {
    pub endpoint_id: EndpointId,
    /// A delivery made due now (manual retry).
    pub retry: Option<PendingDelivery>,
}

/// Supervisor command: an endpoint was deleted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndpointDeleted {
    pub endpoint_id: EndpointId,
}

/// Supervisor command: stop every endpoint actor and the supervisor (shutdown); pending
/// deliveries stay in the database.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopEndpoints;
