//! The Registry's part in a cluster's periodic scan: which nodes are live. Campaigns and
//! webhook endpoints have their own supervisors, each with its own take-over scan
//! (`campaign::Campaigns`, `webhook_endpoint::WebhookEndpoints`).

use actix::prelude::*;

use super::*;

impl Registry {
    /// Reads, in a cluster, the live nodes ([`Registry::nodes_seen`]).
    pub(super) fn take_over(&mut self, ctx: &mut Context<Self>) {
        let Some(cluster) = self.deps.cluster.clone() else {
            return;
        };
        ctx.spawn(
            async move { cluster.live_node_ids().await }
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(nodes) => act.nodes_seen(nodes, ctx),
                    Err(err) => tracing::warn!(error = %err, "live-node scan failed"),
                }),
        );
    }

    /// Notes the live nodes of a scan. When one has left since the last scan (died, or
    /// stopping), every phone owned here and test mode load their queued messages again: a
    /// node killed between its commit and its `enqueue` (or `simulate`) notice left messages
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
