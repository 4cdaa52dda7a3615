//! Campaigns and webhook endpoints in the Registry: the handlers of their messages (declared
//! beside their actors: `campaign::{Wake, CampaignChanges, Finished}` and
//! `webhook_endpoint::{DeliveriesCreated, EndpointChanged, EndpointDeleted}`), and, in a
//! cluster, which node runs each (its lease) and the take-over of those no node holds.

use std::collections::HashMap;

use actix::prelude::*;

use super::*;
use crate::actors::campaign::{self, CampaignChange, CampaignChanges, Finished, Wake};
use crate::actors::cluster::Notice;
use crate::actors::webhook_endpoint::{
    self, Deliver, DeliveriesCreated, EndpointChanged, EndpointDeleted,
};
use crate::domain::ids::{CampaignId, EndpointId};
use crate::store::cluster::{LeaseKey, LeaseKind};
use crate::store::webhooks::PendingDelivery;

/// Most message changes a `campaign_messages` notice carries (about 60 bytes each: the
/// payload stays far below PostgreSQL's 8,000 bytes).
const CAMPAIGN_NOTICE_CHANGES: usize = 64;

// Campaigns.

impl Handler<Wake> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Wake, ctx: &mut Self::Context) {
        self.wake_campaign(ctx, msg.id);
    }
}

impl Handler<CampaignChanges> for Registry {
    type Result = ();

    fn handle(&mut self, msg: CampaignChanges, _: &mut Self::Context) {
        let Some(cluster) = &self.deps.cluster else {
            self.campaigns.changed(msg.0);
            return;
        };
        // The changes of campaigns run by other nodes go to their owners (`campaign_messages`
        // notices), so they follow their messages as promptly as on one node.
        let cluster = cluster.clone();
        let (here, elsewhere): (Vec<_>, Vec<_>) = msg
            .0
            .into_iter()
            .partition(|change| self.runs_campaign(change.campaign));
        let per_campaign = CampaignChange::by_campaign(elsewhere);
        for (campaign, changes) in per_campaign {
            for chunk in changes.chunks(CAMPAIGN_NOTICE_CHANGES) {
                cluster.tell(Notice::CampaignMessages {
                    campaign,
                    changes: chunk.to_vec(),
                });
            }
        }
        self.campaigns.changed(here);
    }
}

impl Handler<Finished> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Finished, _: &mut Self::Context) {
        self.campaigns.finished(msg.id);
        if let Some(cluster) = self.deps.cluster.clone() {
            let key = LeaseKey::Campaign(msg.id);
            actix::spawn(async move { cluster.release(key).await });
        }
    }
}

impl Registry {
    /// Whether, in a cluster, this node runs the campaign (holds its lease).
    pub(super) fn runs_campaign(&self, campaign: CampaignId) -> bool {
        self.deps
            .cluster
            .as_ref()
            .is_some_and(|c| c.lease(LeaseKey::Campaign(campaign)).is_some())
    }

    /// Starts the campaign's actor if needed and makes it read the campaign again. In a
    /// cluster the campaign runs on the node holding its lease: this node takes the lease when
    /// it is free, else tells its owner (a `campaign` notice).
    pub(crate) fn wake_campaign(&mut self, ctx: &mut Context<Self>, id: CampaignId) {
        let Some(cluster) = self.deps.cluster.clone() else {
            self.run_campaign(id, ctx);
            return;
        };
        let key = LeaseKey::Campaign(id);
        if cluster.lease(key).is_some() {
            self.run_campaign(id, ctx);
            return;
        }
        ctx.spawn(
            async move {
                let owned = cluster.acquire(key).await.is_some();
                if !owned {
                    cluster.notify(&Notice::Campaign { campaign: id }).await;
                }
                owned
            }
            .into_actor(self)
            .map(move |owned, act, ctx| {
                if owned {
                    act.run_campaign(id, ctx);
                }
            }),
        );
    }

    pub(super) fn run_campaign(&mut self, id: CampaignId, ctx: &mut Context<Self>) {
        let deps = self.deps().clone();
        let addr = self.campaigns.addr(&deps, ctx.address(), id);
        addr.do_send(campaign::Reload);
    }
}

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
            let (cluster, key) = (cluster.clone(), LeaseKey::WebhookEndpoint(msg.endpoint_id));
            actix::spawn(async move { cluster.release(key).await });
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
        let key = LeaseKey::WebhookEndpoint(endpoint_id);
        if cluster.lease(key).is_some() {
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
                    let deps = act.deps().clone();
                    let addr = act.webhooks.addr(&deps, endpoint_id);
                    if let Some(deliveries) = deliveries {
                        addr.do_send(Deliver { deliveries });
                    }
                }
            }),
        );
    }

    /// Takes over, in a cluster, the live campaigns and the webhook endpoints with pending
    /// deliveries that no node holds (their node died or stopped): one read of each list and of
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
                let campaigns = crate::store::campaigns::live(&db).await?;
                let pending = crate::store::webhooks::endpoints_with_pending(&db).await?;
                let held = |kind| {
                    let cluster = cluster.clone();
                    async move { cluster.live_keys(kind).await.unwrap_or_default() }
                };
                let campaign_leases = held(LeaseKind::Campaign).await;
                let endpoint_leases = held(LeaseKind::WebhookEndpoint).await;
                let mut taken = (Vec::new(), Vec::new());
                for id in campaigns {
                    let key = LeaseKey::Campaign(id);
                    if !campaign_leases.contains(&key) && cluster.acquire(key).await.is_some()
                    {
                        taken.0.push(id);
                    }
                }
                for &id in &pending {
                    let key = LeaseKey::WebhookEndpoint(id);
                    if !endpoint_leases.contains(&key) && cluster.acquire(key).await.is_some()
                    {
                        taken.1.push(id);
                    }
                }
                Ok::<_, crate::store::StoreError>((nodes, taken, pending))
            }
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok((nodes, (campaigns, endpoints), pending)) => {
                    act.nodes_seen(nodes, ctx);
                    if !campaigns.is_empty() || !endpoints.is_empty() {
                        tracing::info!(
                            campaigns = campaigns.len(),
                            endpoints = endpoints.len(),
                            "took over work no node held"
                        );
                    }
                    for id in campaigns {
                        act.run_campaign(id, ctx);
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
                            && cluster.lease(LeaseKey::WebhookEndpoint(id)).is_some()
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
