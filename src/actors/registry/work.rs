//! Webhook endpoints in the Registry: the handlers of their messages (declared beside their
//! actors: `webhook_endpoint::{DeliveriesCreated, EndpointChanged, EndpointDeleted}`), and, in
//! a cluster, which node runs each (its lease) and the take-over of those no node holds.
//! Campaigns have their own supervisor (`campaign::Campaigns`).

use std::collections::HashMap;

use actix::prelude::*;

use super::*;
use crate::actors::cluster::Notice;
use crate::actors::webhook_endpoint::{
    self, Deliver, DeliveriesCreated, EndpointChanged, EndpointDeleted,
};
use crate::domain::ids::EndpointId;
use crate::store::cluster::LeaseKind;
use crate::store::webhooks::PendingDelivery;

// Webhook endpoints.

impl Handler<DeliveriesCreated> for Registry {
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

impl Handler<EndpointChanged> for Registry {
    type Result = ();

    fn handle(&mut self, msg: EndpointChanged, ctx: &mut Self::Context) {
        let deps = self.deps().clone();
        if let Some(cluster) = &self.deps.cluster {
            // Every node refreshes its subscription index; the node running the endpoint's
            // actor reads the endpoint again.
            cluster.tell(Notice::Endpoint {
                endpoint: msg.endpoint_id,
            });
        }
        if self.deps.cluster.is_some() && !self.webhooks.running(msg.endpoint_id) {
            // The retried delivery, now due: to the owner, or this node takes the endpoint.
            if let Some(delivery) = msg.retry {
                self.ensure_endpoint(ctx, msg.endpoint_id, Some(vec![delivery]));
            }
            return;
        }
        match msg.retry {
            Some(delivery) => {
                let addr = self.webhooks.addr(&deps, msg.endpoint_id);
                addr.do_send(webhook_endpoint::Reload);
                addr.do_send(Deliver {
                    deliveries: vec![delivery],
                });
            }
            None => {
                self.webhooks.reload(msg.endpoint_id);
            }
        }
    }
}

impl Handler<EndpointDeleted> for Registry {
    type Result = ();

    fn handle(&mut self, msg: EndpointDeleted, _: &mut Self::Context) {
        self.webhooks.stop(msg.endpoint_id);
        if let Some(cluster) = &self.deps.cluster {
            cluster.tell(Notice::Endpoint {
                endpoint: msg.endpoint_id,
            });
            let (cluster, key) = (cluster.clone(), msg.endpoint_id.to_string());
            actix::spawn(async move { cluster.release(LeaseKind::WebhookEndpoint, &key).await });
        }
    }
}

impl Registry {
    /// Hands `deliveries` (None: those pending in the database) to the endpoint's actor. In a
    /// cluster the actor runs on the node holding the endpoint's lease: this node takes the
    /// lease when it is free, else tells the owner (a `deliveries` notice), which reads the
    /// pending deliveries from the database.
    pub(crate) fn ensure_endpoint(
        &mut self,
        ctx: &mut Context<Self>,
        endpoint_id: EndpointId,
        deliveries: Option<Vec<PendingDelivery>>,
    ) {
        let deps = self.deps().clone();
        let Some(cluster) = deps.cluster.clone() else {
            let addr = self.webhooks.addr(&deps, endpoint_id);
            if let Some(deliveries) = deliveries {
                addr.do_send(Deliver { deliveries });
            }
            return;
        };
        let key = endpoint_id.to_string();
        if cluster.lease(LeaseKind::WebhookEndpoint, &key).is_some() {
            let addr = self.webhooks.addr(&deps, endpoint_id);
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
                let owned = cluster
                    .acquire(LeaseKind::WebhookEndpoint, &key)
                    .await
                    .is_some();
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
                    let deps = act.deps().clone();
                    let addr = act.webhooks.addr(&deps, endpoint_id);
                    if let Some(deliveries) = deliveries {
                        addr.do_send(Deliver { deliveries });
                    }
                }
            }),
        );
    }

    /// Takes over, in a cluster, the webhook endpoints with pending deliveries that no node
    /// holds (their node died or stopped): one read of each list and of
    /// the live leases, then a lease attempt only for the free ones. An endpoint with pending
    /// deliveries whose lease this node holds and whose actor does not run here (it stopped
    /// when a record made under the lease's previous fence was refused, after the node had
    /// taken the lease again) gets a new actor: no other node takes it, and no scan would. It
    /// also reads the live nodes ([`Registry::nodes_seen`]).
    pub(super) fn take_over(&mut self, ctx: &mut Context<Self>) {
        let Some(cluster) = self.deps.cluster.clone() else {
            return;
        };
        let db = self.deps.db.clone();
        ctx.spawn(
            async move {
                let nodes = cluster.live_node_ids().await?;
                let pending = crate::store::webhooks::endpoints_with_pending(&db).await?;
                let held = |kind| {
                    let cluster = cluster.clone();
                    async move { cluster.live_keys(kind).await.unwrap_or_default() }
                };
                let endpoint_leases = held(LeaseKind::WebhookEndpoint).await;
                let mut taken = Vec::new();
                for &id in &pending {
                    let key = id.to_string();
                    if !endpoint_leases.contains(&key)
                        && cluster
                            .acquire(LeaseKind::WebhookEndpoint, &key)
                            .await
                            .is_some()
                    {
                        taken.push(id);
                    }
                }
                Ok::<_, crate::store::StoreError>((nodes, taken, pending))
            }
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok((nodes, endpoints, pending)) => {
                    act.nodes_seen(nodes, ctx);
                    if !endpoints.is_empty() {
                        tracing::info!(
                            endpoints = endpoints.len(),
                            "took over work no node held"
                        );
                    }
                    let deps = act.deps().clone();
                    for id in endpoints {
                        act.webhooks.addr(&deps, id);
                    }
                    let Some(cluster) = deps.cluster.clone() else {
                        return;
                    };
                    for id in pending {
                        if !act.webhooks.running(id)
                            && cluster
                                .lease(LeaseKind::WebhookEndpoint, &id.to_string())
                                .is_some()
                        {
                            tracing::info!(endpoint_id = %id, "endpoint held here without an actor: restarted");
                            act.webhooks.addr(&deps, id);
                        }
                    }
                }
                Err(err) => tracing::warn!(error = %err, "take-over scan failed"),
            }),
        );
    }

    /// Notes the live nodes of a take-over scan. When one has left since the last scan (died,
    /// or stopping), every phone owned here and test mode load their queued messages again:
    /// a node killed between its commit and its `enqueue` (or `simulate`) notice left messages
    /// queued for phones of other nodes with nobody told (docs/architecture.md, "Cluster").
    pub(super) fn nodes_seen(&mut self, nodes: HashSet<Uuid>, ctx: &mut Context<Self>) {
        let left: Vec<Uuid> = match &self.live_nodes {
            Some(before) => before.difference(&nodes).copied().collect(),
            None => Vec::new(),
        };
        self.live_nodes = Some(nodes);
        if !left.is_empty() {
            tracing::info!(nodes = ?left, "nodes left the cluster: queues load again");
            self.resync(ctx);
        }
    }
}
