//! One actor per running or scheduled campaign: it starts the campaign at `scheduled_for`,
//! feeds its recipients to a phone a window at a time, and completes it once every message it
//! queued ended. The database is the truth: the actor (re)loads everything it knows from it,
//! and every change it makes goes through the writer (`writer::CampaignOp`), which checks the
//! campaign is still running in the same transaction. So a pause or cancel never races a feed,
//! and a restart carries on from the first pending recipient without sending anyone twice.
//! The writer also counts each feed against the message quotas: the test-mode daily quota
//! pauses the campaign (the actor then idles like after any pause), the queued quota makes it
//! wait for the next tick. A deleted campaign reads as not found: its actor, on any node, stops.
//!
//! What to do next is decided by [`CampaignStep`] (`step.rs`); the actor only reads, writes
//! and keeps the timers. A feed goes through the send use case, injected as a [`Feeder`] (the
//! use case sits above the actors). The supervisor, [`Campaigns`] (`supervisor.rs`), starts
//! the actors, hands them the changes of their messages and, in a cluster, holds their leases.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;

use super::Deps;
use crate::domain::ids::{CampaignId, MessageId};
use crate::domain::status::MessageStatus;
use crate::store::StoreError;
use crate::store::campaigns::{self, Campaign};
use crate::store::cluster::{Lease, LeaseKey};
use crate::store::writer::{CampaignOp, CampaignOutcome};

mod step;
mod supervisor;

pub use step::{Action, CampaignStep, FEED_WINDOW, Fed, OpDone, Snapshot};
pub use supervisor::{Campaigns, StopAll};

/// How often a campaign checks on itself: a phone came online, a start time passed unnoticed.
const TICK: Duration = Duration::from_secs(1);

/// The campaign changed through the API (launch, pause, resume, cancel): read it again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reload;

/// Changes of the campaign's messages, as committed: (message, its new status).
#[derive(Message)]
#[rtype(result = "()")]
pub struct MessagesChanged(pub Vec<(MessageId, MessageStatus)>);

/// Stop the campaign actor for good (the campaign ended, or the server is stopping).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopCampaign;

/// Told to the supervisor by an actor whose campaign ended (completed or canceled) or moved
/// to another node.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Finished {
    pub id: CampaignId,
}

/// Tell the supervisor a campaign changed: it starts the campaign's actor if needed and makes
/// it reload (sent by the API after create and after each control operation).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake {
    pub id: CampaignId,
}

/// Committed changes of campaign messages, for the supervisor to hand to the campaigns' actors.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CampaignChanges(pub Vec<CampaignChange>);

/// A committed change of one campaign message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CampaignChange {
    pub campaign: CampaignId,
    pub message: MessageId,
    /// The message's new status.
    pub status: MessageStatus,
}

impl CampaignChange {
    /// `changes` grouped by campaign, each campaign's in their order.
    pub fn by_campaign(
        changes: impl IntoIterator<Item = CampaignChange>,
    ) -> HashMap<CampaignId, Vec<(MessageId, MessageStatus)>> {
        let mut per_campaign: HashMap<CampaignId, Vec<(MessageId, MessageStatus)>> = HashMap::new();
        for change in changes {
            per_campaign
                .entry(change.campaign)
                .or_default()
                .push((change.message, change.status));
        }
        per_campaign
    }
}

/// One feed: up to `room` pending recipients of `campaign`, under `lease` in a cluster.
#[derive(Debug, Clone)]
pub struct FeedRequest {
    pub campaign: Campaign,
    pub room: usize,
    pub lease: Option<Lease>,
}

/// Queues pending recipients of a campaign as messages and hands them on: the send use case
/// (`send::feed_campaign`), injected at start-up.
pub type Feeder =
    Arc<dyn Fn(FeedRequest) -> LocalBoxFuture<'static, Result<Fed, StoreError>> + Send + Sync>;

/// The actor of one campaign.
pub struct CampaignActor {
    deps: Deps,
    feeder: Feeder,
    supervisor: Recipient<Finished>,
    id: CampaignId,
    step: CampaignStep,
    /// The campaign as last read (what a feed needs).
    campaign: Option<Campaign>,
    start_timer: Option<SpawnHandle>,
}

impl CampaignActor {
    /// The actor of campaign `id`, telling `supervisor` when it is done.
    pub fn new(
        deps: Deps,
        feeder: Feeder,
        supervisor: Recipient<Finished>,
        id: CampaignId,
    ) -> CampaignActor {
        CampaignActor {
            deps,
            feeder,
            supervisor,
            id,
            step: CampaignStep::new(),
            campaign: None,
            start_timer: None,
        }
    }

    /// Does what the step asked for, in order.
    fn run(&mut self, actions: Vec<Action>, ctx: &mut Context<Self>) {
        for action in actions {
            match action {
                Action::Load => self.load(ctx),
                Action::WaitUntil(at) => self.wait_until(at, ctx),
                Action::StopWaiting => {
                    if let Some(handle) = self.start_timer.take() {
                        ctx.cancel_future(handle);
                    }
                }
                Action::Start => {
                    let lease = self.lease();
                    self.write(ctx, CampaignOp::Start { id: self.id, lease });
                }
                Action::Complete => {
                    let lease = self.lease();
                    self.write(ctx, CampaignOp::Complete { id: self.id, lease });
                }
                Action::Feed { room } => self.feed(room, ctx),
                Action::Finish => {
                    self.supervisor.do_send(Finished { id: self.id });
                }
            }
        }
    }

    fn load(&mut self, ctx: &mut Context<Self>) {
        let (db, id) = (self.deps.db.clone(), self.id);
        let load = async move {
            let campaign = campaigns::by_id(&db, id).await?;
            let open = campaigns::open_messages(&db, id).await?;
            let pending_left = campaigns::has_pending(&db, id).await?;
            Ok::<_, StoreError>((campaign, open, pending_left))
        };
        ctx.spawn(fut::wrap_future::<_, Self>(load).map(|result, act, ctx| {
            let actions = match result {
                Ok((campaign, open, pending_left)) => {
                    let snapshot = Snapshot {
                        status: campaign.status,
                        scheduled_for: campaign.scheduled_for,
                        open,
                        pending_left,
                    };
                    act.campaign = Some(campaign);
                    act.step.loaded(snapshot, act.deps.clock.now_ms())
                }
                Err(StoreError::NotFound) => act.step.gone(),
                Err(err) => {
                    tracing::error!(campaign_id = %act.id, error = %err, "campaign not loaded; retrying");
                    act.step.load_failed()
                }
            };
            act.run(actions, ctx);
        }));
    }

    fn wait_until(&mut self, at: i64, ctx: &mut Context<Self>) {
        if let Some(handle) = self.start_timer.take() {
            ctx.cancel_future(handle);
        }
        let now = self.deps.clock.now_ms();
        let delay = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
        self.start_timer = Some(ctx.run_later(delay, |act, ctx| {
            act.start_timer = None;
            let actions = act.step.load();
            act.run(actions, ctx);
        }));
    }

    /// Runs a start or completion through the writer.
    fn write(&mut self, ctx: &mut Context<Self>, op: CampaignOp) {
        let writer = self.deps.writer.clone();
        ctx.spawn(
            fut::wrap_future::<_, Self>(async move { writer.campaign(op).await }).map(
                |result, act, ctx| {
                    let done = match result {
                        Ok(CampaignOutcome::LeaseLost) => act.lease_lost(),
                        Ok(_) => OpDone::Done,
                        Err(err) => {
                            tracing::error!(campaign_id = %act.id, error = %err, "campaign update failed; retrying");
                            OpDone::Failed
                        }
                    };
                    let actions = act.step.op_done(done);
                    act.run(actions, ctx);
                },
            ),
        );
    }

    fn feed(&mut self, room: usize, ctx: &mut Context<Self>) {
        let Some(campaign) = self.campaign.clone() else {
            let actions = self.step.fed(Fed::Failed);
            return self.run(actions, ctx);
        };
        let request = FeedRequest {
            campaign,
            room,
            lease: self.lease(),
        };
        let feed = (self.feeder)(request);
        ctx.spawn(fut::wrap_future::<_, Self>(feed).map(|result, act, ctx| {
            let fed = match result {
                Ok(Fed::LeaseLost) => {
                    act.lease_lost();
                    Fed::LeaseLost
                }
                Ok(fed) => fed,
                Err(err) => {
                    tracing::error!(campaign_id = %act.id, error = %err, "campaign feed failed; retrying");
                    Fed::Failed
                }
            };
            let actions = act.step.fed(fed);
            act.run(actions, ctx);
        }));
    }

    /// The campaign's lease a step carries in a cluster (fence 0 once lost here); None on a
    /// single node.
    fn lease(&self) -> Option<Lease> {
        self.deps
            .cluster
            .as_ref()
            .map(|cluster| cluster.fence(LeaseKey::Campaign(self.id)))
    }

    /// Another node owns the campaign now (its step was refused): the step acts no more and
    /// has the supervisor drop this actor (`Finished`: it cannot stop itself, a supervised
    /// actor whose address the supervisor holds is restarted at once); the new owner carries
    /// on from the database.
    fn lease_lost(&mut self) -> OpDone {
        tracing::warn!(campaign_id = %self.id, "campaign lease lost: its actor stops here");
        if let (Some(cluster), Some(lease)) = (&self.deps.cluster, self.lease()) {
            cluster.lost(&lease);
        }
        self.campaign = None;
        OpDone::LeaseLost
    }
}

impl Actor for CampaignActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.step.is_finished() {
            // Restarted after `StopCampaign`: the supervisor no longer holds this address.
            ctx.stop();
            return;
        }
        ctx.set_mailbox_capacity(4096);
        let actions = self.step.load();
        self.run(actions, ctx);
        ctx.run_interval(TICK, |act, ctx| {
            let actions = act.step.tick();
            act.run(actions, ctx);
        });
    }
}

impl Supervised for CampaignActor {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.step.restart();
        self.campaign = None;
        self.start_timer = None;
    }
}

impl Handler<Reload> for CampaignActor {
    type Result = ();

    fn handle(&mut self, _: Reload, ctx: &mut Self::Context) {
        let actions = self.step.load();
        self.run(actions, ctx);
    }
}

impl Handler<MessagesChanged> for CampaignActor {
    type Result = ();

    fn handle(&mut self, msg: MessagesChanged, ctx: &mut Self::Context) {
        let actions = self.step.messages_changed(msg.0);
        self.run(actions, ctx);
    }
}

impl Handler<StopCampaign> for CampaignActor {
    type Result = ();

    fn handle(&mut self, _: StopCampaign, ctx: &mut Self::Context) {
        self.step.stop();
        ctx.stop();
    }
}
