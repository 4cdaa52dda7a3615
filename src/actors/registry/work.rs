//! Campaigns in the Registry: the handlers of their messages (declared beside their actor:
//! `campaign::{Wake, CampaignChanges, Finished}`), and, in a cluster, which node runs each
//! (its lease) and the take-over of those no node holds. Webhook endpoints have their own
//! supervisor (`webhook_endpoint::WebhookEndpoints`).

use actix::prelude::*;

use super::*;
use crate::actors::campaign::{self, CampaignChange, CampaignChanges, Finished, Wake};
use crate::cluster::Notice;
use crate::domain::ids::CampaignId;
use crate::store::cluster::LeaseKind;

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
            let key = msg.id.to_string();
            actix::spawn(async move { cluster.release(LeaseKind::Campaign, &key).await });
        }
    }
}

impl Registry {
    /// Whether, in a cluster, this node runs the campaign (holds its lease).
    pub(super) fn runs_campaign(&self, campaign: CampaignId) -> bool {
        self.deps.cluster.as_ref().is_some_and(|c| {
            c.lease(LeaseKind::Campaign, &campaign.to_string())
                .is_some()
        })
    }

    /// Starts the campaign's actor if needed and makes it read the campaign again. In a
    /// cluster the campaign runs on the node holding its lease: this node takes the lease when
    /// it is free, else tells its owner (a `campaign` notice).
    pub(crate) fn wake_campaign(&mut self, ctx: &mut Context<Self>, id: CampaignId) {
        let Some(cluster) = self.deps.cluster.clone() else {
            self.run_campaign(id, ctx);
            return;
        };
        let key = id.to_string();
        if cluster.lease(LeaseKind::Campaign, &key).is_some() {
            self.run_campaign(id, ctx);
            return;
        }
        ctx.spawn(
            async move {
                let owned = cluster.acquire(LeaseKind::Campaign, &key).await.is_some();
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

impl Registry {
    /// Takes over, in a cluster, the live campaigns that no node holds (their node died or
    /// stopped): one read of the list and of the live leases, then a lease attempt only for the
    /// free ones. It also reads the live nodes ([`Registry::nodes_seen`]).
    pub(super) fn take_over(&mut self, ctx: &mut Context<Self>) {
        let Some(cluster) = self.deps.cluster.clone() else {
            return;
        };
        let db = self.deps.db.clone();
        ctx.spawn(
            async move {
                let nodes = cluster.live_node_ids().await?;
                let campaigns = crate::store::campaigns::live(&db).await?;
                let held = |kind| {
                    let cluster = cluster.clone();
                    async move { cluster.live_keys(kind).await.unwrap_or_default() }
                };
                let campaign_leases = held(LeaseKind::Campaign).await;
                let mut taken = Vec::new();
                for id in campaigns {
                    let key = id.to_string();
                    if !campaign_leases.contains(&key)
                        && cluster.acquire(LeaseKind::Campaign, &key).await.is_some()
                    {
                        taken.push(id);
                    }
                }
                Ok::<_, crate::store::StoreError>((nodes, taken))
            }
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok((nodes, campaigns)) => {
                    act.nodes_seen(nodes, ctx);
                    if !campaigns.is_empty() {
                        tracing::info!(campaigns = campaigns.len(), "took over work no node held");
                    }
                    for id in campaigns {
                        act.run_campaign(id, ctx);
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
