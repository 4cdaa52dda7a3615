//! `WebhookEndpoints`, the supervisor of the endpoint actors, started once in startup.rs: it
//! starts one supervised [`WebhookEndpoint`] per endpoint with work, hands it the deliveries
//! the writer's commit hook reports, tells it when its endpoint changed, stops it when the
//! endpoint is deleted, and rebuilds them all from the database at start-up. In a cluster
//! (docs/architecture.md, "Cluster") an endpoint runs on the node holding its lease: this
//! actor takes the lease or tells the owner, handles the endpoint notices and lost endpoint
//! leases, and every [`TAKE_OVER_EVERY`] takes over the endpoints nobody holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use uuid::Uuid;

use super::{
    Deliver, DeliveriesCreated, EndpointChanged, EndpointDeleted, LoadDeliveries, LoadPending,
    Reload, StopDeliveries, StopEndpoints, WebhookEndpoint,
};
use crate::actors::Deps;
use crate::cluster::{LeasesLost, Notice, Noticed};
use crate::domain::ids::EndpointId;
use crate::store::cluster::{LeaseKey, LeaseKind};
use crate::store::webhooks::{self, PendingDelivery};

/// Most delivery ids one `deliveries` notice names (its payload stays far below PostgreSQL's
/// 8,000 bytes); more go in several notices, so the owner reads what is new by id.
const NOTICE_IDS: usize = 64;

/// How often a cluster node looks for webhook endpoints with pending deliveries that no node
/// holds.
const TAKE_OVER_EVERY: Duration = Duration::from_secs(2);

/// The supervisor of the webhook endpoint actors (one per node).
pub struct WebhookEndpoints {
    deps: Deps,
    actors: EndpointActors,
}

impl WebhookEndpoints {
    /// The supervisor; it starts the actors of endpoints with pending deliveries when started.
    pub fn new(deps: Deps) -> WebhookEndpoints {
        WebhookEndpoints {
            deps,
            actors: EndpointActors::default(),
        }
    }

    /// Starts the actors of endpoints with pending deliveries (after a restart).
    fn rebuild(&mut self, ctx: &mut Context<Self>) {
        let db = self.deps.db.clone();
        ctx.spawn(
            async move { webhooks::endpoints_with_pending(&db).await }
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(ids) => {
                        for id in ids {
                            act.ensure_endpoint(ctx, id, None);
                        }
                    }
                    Err(err) => {
                        tracing::error!(error = %err, "pending webhook deliveries not reloaded")
                    }
                }),
        );
    }

    /// Hands `deliveries` (None: those pending in the database) to the endpoint's actor. In a
    /// cluster the actor runs on the node holding the endpoint's lease: this node takes the
    /// lease when it is free, else tells the owner (a `deliveries` notice), which reads the
    /// pending deliveries from the database.
    fn ensure_endpoint(
        &mut self,
        ctx: &mut Context<Self>,
        endpoint_id: EndpointId,
        deliveries: Option<Vec<PendingDelivery>>,
    ) {
        let Some(cluster) = self.deps.cluster.clone() else {
            let addr = self.actors.addr(&self.deps, endpoint_id);
            if let Some(deliveries) = deliveries {
                addr.do_send(Deliver { deliveries });
            }
            return;
        };
        let key = LeaseKey::WebhookEndpoint(endpoint_id);
        if cluster.lease(key).is_some() {
            let addr = self.actors.addr(&self.deps, endpoint_id);
            if let Some(deliveries) = deliveries {
                addr.do_send(Deliver { deliveries });
            }
            return;
        }
        // The owner reads the deliveries named (by id, in notices of at most NOTICE_IDS), or
        // all its pending ones when none are given.
        let named: Vec<Option<Vec<Uuid>>> = match &deliveries {
            Some(d) => d
                .chunks(NOTICE_IDS)
                .map(|chunk| Some(chunk.iter().map(|d| d.id).collect()))
                .collect(),
            None => vec![None],
        };
        ctx.spawn(
            async move {
                let owned = cluster.acquire(key).await.is_some();
                if !owned {
                    for deliveries in named {
                        cluster
                            .notify(&Notice::Deliveries {
                                endpoint: endpoint_id,
                                deliveries,
                            })
                            .await;
                    }
                }
                owned
            }
            .into_actor(self)
            .map(move |owned, act, _| {
                if owned {
                    // A new actor loads every pending delivery when it starts.
                    let addr = act.actors.addr(&act.deps, endpoint_id);
                    if let Some(deliveries) = deliveries {
                        addr.do_send(Deliver { deliveries });
                    }
                }
            }),
        );
    }

    /// Takes over, in a cluster, the webhook endpoints with pending deliveries that no node
    /// holds (their node died or stopped): one read of the list and of the live leases, then a
    /// lease attempt only for the free ones. An endpoint with pending deliveries whose lease
    /// this node holds and whose actor does not run here (it stopped when a record made under
    /// the lease's previous fence was refused, after the node had taken the lease again) gets
    /// a new actor: no other node takes it, and no scan would.
    fn take_over(&mut self, ctx: &mut Context<Self>) {
        let Some(cluster) = self.deps.cluster.clone() else {
            return;
        };
        let db = self.deps.db.clone();
        ctx.spawn(
            async move {
                let pending = webhooks::endpoints_with_pending(&db).await?;
                let leases = cluster
                    .live_keys(LeaseKind::WebhookEndpoint)
                    .await
                    .unwrap_or_default();
                let mut taken = Vec::new();
                for &id in &pending {
                    let key = LeaseKey::WebhookEndpoint(id);
                    if !leases.contains(&key)
                        && cluster
                            .acquire(key)
                            .await
                            .is_some()
                    {
                        taken.push(id);
                    }
                }
                Ok::<_, crate::store::StoreError>((taken, pending))
            }
            .into_actor(self)
            .map(|result, act, _| match result {
                Ok((taken, pending)) => {
                    if !taken.is_empty() {
                        tracing::info!(endpoints = taken.len(), "took over work no node held");
                    }
                    for id in taken {
                        act.actors.addr(&act.deps, id);
                    }
                    let Some(cluster) = act.deps.cluster.clone() else {
                        return;
                    };
                    for id in pending {
                        if !act.actors.running(id)
                            && cluster
                                .lease(LeaseKey::WebhookEndpoint(id))
                                .is_some()
                        {
                            tracing::info!(endpoint_id = %id, "endpoint held here without an actor: restarted");
                            act.actors.addr(&act.deps, id);
                        }
                    }
                }
                Err(err) => tracing::warn!(error = %err, "take-over scan failed"),
            }),
        );
    }

    /// An endpoint changed on some node (this one included): the subscription index reads it
    /// again, and the endpoint's actor, if it runs here, reads the endpoint and its pending
    /// deliveries again.
    fn endpoint_noticed(&mut self, endpoint: EndpointId) {
        let (db, subscriptions) = (
            self.deps.db.clone(),
            self.deps.webhooks.subscriptions.clone(),
        );
        actix::spawn(async move {
            match webhooks::find(&db, endpoint).await {
                Ok(Some(record)) => subscriptions.upsert(&record),
                Ok(None) => subscriptions.remove(endpoint),
                Err(err) => {
                    tracing::warn!(endpoint_id = %endpoint, error = %err, "subscriptions not refreshed")
                }
            }
        });
        if let Some(addr) = self.actors.get(endpoint) {
            addr.do_send(Reload);
            addr.do_send(LoadPending);
        }
    }
}

impl Actor for WebhookEndpoints {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(65_536);
        if let Some(cluster) = &self.deps.cluster {
            cluster.route_endpoints(ctx.address());
            ctx.run_interval(TAKE_OVER_EVERY, |act, ctx| act.take_over(ctx));
        }
        self.rebuild(ctx);
    }
}

impl Handler<DeliveriesCreated> for WebhookEndpoints {
    type Result = ();

    fn handle(&mut self, msg: DeliveriesCreated, ctx: &mut Self::Context) {
        let mut per_endpoint: HashMap<EndpointId, Vec<PendingDelivery>> = HashMap::new();
        for d in msg.deliveries {
            per_endpoint.entry(d.endpoint_id).or_default().push(d);
        }
        for (endpoint_id, deliveries) in per_endpoint {
            self.ensure_endpoint(ctx, endpoint_id, Some(deliveries));
        }
    }
}

impl Handler<EndpointChanged> for WebhookEndpoints {
    type Result = ();

    fn handle(&mut self, msg: EndpointChanged, ctx: &mut Self::Context) {
        if let Some(cluster) = &self.deps.cluster {
            // Every node refreshes its subscription index; the node running the endpoint's
            // actor reads the endpoint again.
            cluster.tell(Notice::Endpoint {
                endpoint: msg.endpoint_id,
            });
            if !self.actors.running(msg.endpoint_id) {
                // The retried delivery, now due: to the owner, or this node takes the endpoint.
                if let Some(delivery) = msg.retry {
                    self.ensure_endpoint(ctx, msg.endpoint_id, Some(vec![delivery]));
                }
                return;
            }
        }
        match msg.retry {
            Some(delivery) => {
                let addr = self.actors.addr(&self.deps, msg.endpoint_id);
                addr.do_send(Reload);
                addr.do_send(Deliver {
                    deliveries: vec![delivery],
                });
            }
            None => self.actors.reload(msg.endpoint_id),
        }
    }
}

impl Handler<EndpointDeleted> for WebhookEndpoints {
    type Result = ();

    fn handle(&mut self, msg: EndpointDeleted, _: &mut Self::Context) {
        self.actors.stop(msg.endpoint_id);
        if let Some(cluster) = &self.deps.cluster {
            cluster.tell(Notice::Endpoint {
                endpoint: msg.endpoint_id,
            });
            let (cluster, key) = (cluster.clone(), LeaseKey::WebhookEndpoint(msg.endpoint_id));
            actix::spawn(async move { cluster.release(key).await });
        }
    }
}

impl Handler<StopEndpoints> for WebhookEndpoints {
    type Result = ();

    fn handle(&mut self, _: StopEndpoints, ctx: &mut Self::Context) {
        self.actors.stop_all();
        ctx.stop();
    }
}

impl Handler<Noticed> for WebhookEndpoints {
    type Result = ();

    /// The cluster's notices about endpoints (the others go to the Registry).
    fn handle(&mut self, msg: Noticed, _: &mut Self::Context) {
        match msg.0 {
            Notice::Endpoint { endpoint } => self.endpoint_noticed(endpoint),
            Notice::Deliveries {
                endpoint,
                deliveries,
            } => {
                if let Some(addr) = self.actors.get(endpoint) {
                    match deliveries {
                        Some(ids) => addr.do_send(LoadDeliveries { ids }),
                        None => addr.do_send(LoadPending),
                    }
                }
            }
            _ => {}
        }
    }
}

impl Handler<LeasesLost> for WebhookEndpoints {
    type Result = ();

    /// Stops at once the actors of endpoints whose lease this node lost: the new owner
    /// rebuilds their queues from the database.
    fn handle(&mut self, msg: LeasesLost, _: &mut Self::Context) {
        for lease in msg.0 {
            let LeaseKey::WebhookEndpoint(id) = lease.key else {
                continue;
            };
            tracing::warn!(endpoint_id = %id, "endpoint lease lost: its actor stops here");
            self.actors.stop(id);
        }
    }
}

/// One supervised actor per endpoint with work.
#[derive(Default)]
struct EndpointActors {
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
    /// The endpoint's actor, started (supervised) on first use, or again after it lost the
    /// endpoint's lease.
    fn addr(&mut self, deps: &Deps, endpoint_id: EndpointId) -> Addr<WebhookEndpoint> {
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
    fn reload(&self, endpoint_id: EndpointId) {
        if let Some(addr) = self.get(endpoint_id) {
            addr.do_send(Reload);
        }
    }

    /// Stops the endpoint's actor, if it runs (the endpoint was deleted).
    fn stop(&mut self, endpoint_id: EndpointId) {
        if let Some(running) = self.actors.remove(&endpoint_id) {
            running.addr.do_send(StopDeliveries);
        }
    }

    /// Whether the endpoint's actor runs here.
    fn running(&self, endpoint_id: EndpointId) -> bool {
        self.get(endpoint_id).is_some()
    }

    /// The endpoint's actor, if it runs here (and still owns the endpoint).
    fn get(&self, endpoint_id: EndpointId) -> Option<Addr<WebhookEndpoint>> {
        self.actors
            .get(&endpoint_id)
            .and_then(Running::live)
            .cloned()
    }

    /// Stops every endpoint actor.
    fn stop_all(&mut self) {
        for (_, running) in self.actors.drain() {
            running.addr.do_send(StopDeliveries);
        }
    }
}
