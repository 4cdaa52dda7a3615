//! The campaigns' supervisor: one actor, started once, that runs one supervised
//! [`CampaignActor`] per live campaign, hands them the committed changes of their messages,
//! rebuilds them at start-up and, in a cluster, holds their leases: a campaign runs on the
//! node holding its lease, changes of campaigns run elsewhere go to their owners as notices,
//! and every [`TAKE_OVER_EVERY`] the live campaigns no node holds are taken over.

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;

use super::{
    CampaignActor, CampaignChange, CampaignChanges, Feeder, Finished, MessagesChanged, Reload,
    StopCampaign, Wake,
};
use crate::actors::Deps;
use crate::cluster::{LeasesLost, Notice, Noticed};
use crate::domain::ids::CampaignId;
use crate::store::cluster::{LeaseKey, LeaseKind};

/// How often a cluster node looks for live campaigns no node holds.
const TAKE_OVER_EVERY: Duration = Duration::from_secs(2);
/// Most message changes a `campaign_messages` notice carries (about 60 bytes each: the
/// payload stays far below PostgreSQL's 8,000 bytes).
const CAMPAIGN_NOTICE_CHANGES: usize = 64;

/// Stop every campaign actor (the server is stopping).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopAll;

/// The supervisor of the campaign actors.
pub struct Campaigns {
    deps: Deps,
    feeder: Feeder,
    actors: HashMap<CampaignId, Addr<CampaignActor>>,
}

impl Campaigns {
    /// A supervisor whose actors feed through `feeder`; it rebuilds them when started.
    pub fn new(deps: Deps, feeder: Feeder) -> Campaigns {
        Campaigns {
            deps,
            feeder,
            actors: HashMap::new(),
        }
    }

    /// Whether, in a cluster, this node runs the campaign (holds its lease).
    fn runs(&self, campaign: CampaignId) -> bool {
        self.deps
            .cluster
            .as_ref()
            .is_some_and(|c| c.lease(LeaseKey::Campaign(campaign)).is_some())
    }

    /// Starts the campaign's actor if needed and makes it read the campaign again. In a
    /// cluster the campaign runs on the node holding its lease: this node takes the lease when
    /// it is free, else tells its owner (a `campaign` notice).
    fn wake(&mut self, ctx: &mut Context<Self>, id: CampaignId) {
        let Some(cluster) = self.deps.cluster.clone() else {
            self.run(id, ctx);
            return;
        };
        let key = LeaseKey::Campaign(id);
        if cluster.lease(key).is_some() {
            self.run(id, ctx);
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
                    act.run(id, ctx);
                }
            }),
        );
    }

    /// The campaign's actor, started (supervised) on first use, told to read it again.
    fn run(&mut self, id: CampaignId, ctx: &mut Context<Self>) {
        if let Some(addr) = self.actors.get(&id)
            && addr.connected()
        {
            addr.do_send(Reload);
            return;
        }
        let (deps, feeder, me) = (
            self.deps.clone(),
            self.feeder.clone(),
            ctx.address().recipient(),
        );
        let addr = Supervisor::start(move |_| CampaignActor::new(deps, feeder, me.clone(), id));
        addr.do_send(Reload);
        self.actors.insert(id, addr);
    }

    /// Hands committed message changes to their campaigns' actors.
    fn changed(&self, changes: Vec<CampaignChange>) {
        for (campaign, changes) in CampaignChange::by_campaign(changes) {
            if let Some(addr) = self.actors.get(&campaign) {
                addr.do_send(MessagesChanged(changes));
            }
        }
    }

    /// Drops a campaign's actor.
    fn drop_actor(&mut self, id: CampaignId) {
        if let Some(addr) = self.actors.remove(&id) {
            addr.do_send(StopCampaign);
        }
    }

    /// Starts the actors of the running and scheduled campaigns (after a restart).
    fn rebuild(&mut self, ctx: &mut Context<Self>) {
        let db = self.deps.db.clone();
        ctx.spawn(
            async move { crate::store::campaigns::live(&db).await }
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(ids) => {
                        for id in ids {
                            act.wake(ctx, id);
                        }
                    }
                    Err(err) => tracing::error!(error = %err, "live campaigns not reloaded"),
                }),
        );
    }

    /// Takes over, in a cluster, the live campaigns no node holds (their node died or
    /// stopped): one read of the list and of the live leases, then a lease attempt only for
    /// the free ones.
    fn take_over(&mut self, ctx: &mut Context<Self>) {
        let Some(cluster) = self.deps.cluster.clone() else {
            return;
        };
        let db = self.deps.db.clone();
        ctx.spawn(
            async move {
                let campaigns = crate::store::campaigns::live(&db).await?;
                let held = cluster
                    .live_keys(LeaseKind::Campaign)
                    .await
                    .unwrap_or_default();
                let mut taken = Vec::new();
                for id in campaigns {
                    let key = LeaseKey::Campaign(id);
                    if !held.contains(&key) && cluster.acquire(key).await.is_some() {
                        taken.push(id);
                    }
                }
                Ok::<_, crate::store::StoreError>(taken)
            }
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok(taken) => {
                    if !taken.is_empty() {
                        tracing::info!(campaigns = taken.len(), "took over campaigns no node held");
                    }
                    for id in taken {
                        act.run(id, ctx);
                    }
                }
                Err(err) => tracing::warn!(error = %err, "campaign take-over scan failed"),
            }),
        );
    }
}

impl Actor for Campaigns {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(65_536);
        if let Some(cluster) = &self.deps.cluster {
            cluster.start_campaigns(ctx.address().recipient(), ctx.address().recipient());
            ctx.run_interval(TAKE_OVER_EVERY, |act, ctx| act.take_over(ctx));
        }
        self.rebuild(ctx);
    }
}

impl Handler<Wake> for Campaigns {
    type Result = ();

    fn handle(&mut self, msg: Wake, ctx: &mut Self::Context) {
        self.wake(ctx, msg.id);
    }
}

impl Handler<CampaignChanges> for Campaigns {
    type Result = ();

    fn handle(&mut self, msg: CampaignChanges, _: &mut Self::Context) {
        let Some(cluster) = &self.deps.cluster else {
            self.changed(msg.0);
            return;
        };
        // The changes of campaigns run by other nodes go to their owners (`campaign_messages`
        // notices), so they follow their messages as promptly as on one node.
        let cluster = cluster.clone();
        let (here, elsewhere): (Vec<_>, Vec<_>) = msg
            .0
            .into_iter()
            .partition(|change| self.runs(change.campaign));
        for (campaign, changes) in CampaignChange::by_campaign(elsewhere) {
            for chunk in changes.chunks(CAMPAIGN_NOTICE_CHANGES) {
                cluster.tell(Notice::CampaignMessages {
                    campaign,
                    changes: chunk.to_vec(),
                });
            }
        }
        self.changed(here);
    }
}

impl Handler<Finished> for Campaigns {
    type Result = ();

    fn handle(&mut self, msg: Finished, _: &mut Self::Context) {
        self.drop_actor(msg.id);
        if let Some(cluster) = self.deps.cluster.clone() {
            let key = LeaseKey::Campaign(msg.id);
            actix::spawn(async move { cluster.release(key).await });
        }
    }
}

/// The campaign notices of other nodes (`Cluster::start_campaigns` sends only those).
impl Handler<Noticed> for Campaigns {
    type Result = ();

    fn handle(&mut self, msg: Noticed, ctx: &mut Self::Context) {
        match msg.0 {
            Notice::Campaign { campaign } if self.runs(campaign) => self.run(campaign, ctx),
            Notice::CampaignMessages { campaign, changes } if self.runs(campaign) => {
                let changes = changes.into_iter().map(|(message, status)| CampaignChange {
                    campaign,
                    message,
                    status,
                });
                self.changed(changes.collect());
            }
            _ => {}
        }
    }
}

/// Campaign leases this node lost: their actors stop at once; the new owner rebuilds
/// everything from the database.
impl Handler<LeasesLost> for Campaigns {
    type Result = ();

    fn handle(&mut self, msg: LeasesLost, _: &mut Self::Context) {
        for lease in msg.0 {
            let LeaseKey::Campaign(id) = lease.key else {
                continue;
            };
            tracing::warn!(campaign_id = %id, "campaign lease lost: its actor stops here");
            self.drop_actor(id);
        }
    }
}

impl Handler<StopAll> for Campaigns {
    type Result = ();

    fn handle(&mut self, _: StopAll, ctx: &mut Self::Context) {
        for (_, addr) in self.actors.drain() {
            addr.do_send(StopCampaign);
        }
        ctx.stop();
    }
}
