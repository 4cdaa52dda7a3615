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
//! Registry side: [`CampaignActors`] starts the actors (supervised), forwards them the changes
//! of their messages, and stops them once their campaign is no longer live.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use actix::prelude::*;

use super::Deps;
use super::registry::{Enqueue, Registry, Route};
use crate::domain::campaign::CampaignStatus;
use crate::domain::ids::{CampaignId, MessageId};
use crate::domain::quota::Quota;
use crate::domain::status::{MessageStatus, Mode, QueueClass};
use crate::store::campaigns::{self, Campaign};
use crate::store::cluster::{Lease, LeaseKey};
use crate::store::writer::{CampaignOp, CampaignOutcome, Content, NewMessage};

/// Most of a campaign's messages `queued` (not yet handed to a phone) at once. Feeding tops
/// the window up once it is half empty, so a message is created shortly before its phone can
/// take it: its expiry counts from then, and a pause withdraws few.
pub const FEED_WINDOW: usize = 100;
/// How often a campaign checks on itself: a phone came online, a start time passed unnoticed.
const TICK: Duration = Duration::from_secs(1);
/// Every this many ticks the actor reloads its open messages from the database, in case a
/// change notification was missed.
const RESYNC_TICKS: u32 = 10;

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

/// Told to the registry by an actor whose campaign ended (completed or canceled).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Finished {
    pub id: CampaignId,
}

/// Tell the registry a campaign changed: it starts the campaign's actor if needed and makes it
/// reload (sent by the API after create and after each control operation).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake {
    pub id: CampaignId,
}

/// Committed changes of campaign messages, for the registry to hand to the campaigns' actors.
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

/// What the actor knows from its last load.
struct Loaded {
    campaign: Campaign,
    /// Messages of the campaign not terminal yet.
    open: HashSet<MessageId>,
    /// Of those, the ones still `queued` (the feed window).
    queued: HashSet<MessageId>,
    pending_left: bool,
}

/// What a feed did.
enum Fed {
    /// These recipients were queued; `held`: a message quota kept the rest pending.
    Queued {
        ids: Vec<MessageId>,
        held: Option<Quota>,
    },
    /// No pending recipient is left.
    Exhausted,
    /// No online phone has the campaign's number; try again later.
    NoPhone,
    /// The campaign is no longer running.
    Stopped,
    /// Another node owns the campaign now.
    LeaseLost,
}

/// The actor of one campaign.
pub struct CampaignActor {
    deps: Deps,
    registry: Addr<Registry>,
    id: CampaignId,
    state: Option<Loaded>,
    /// Messages that ended while their feed was still being answered.
    ended: HashSet<MessageId>,
    /// A load, feed or completion is running; `again` asks for another step after it, and
    /// `reload` for another load.
    busy: bool,
    again: bool,
    reload: bool,
    ticks: u32,
    start_timer: Option<SpawnHandle>,
    finished: bool,
}

impl CampaignActor {
    pub fn new(deps: Deps, registry: Addr<Registry>, id: CampaignId) -> CampaignActor {
        CampaignActor {
            deps,
            registry,
            id,
            state: None,
            ended: HashSet::new(),
            busy: false,
            again: false,
            reload: false,
            ticks: 0,
            start_timer: None,
            finished: false,
        }
    }

    fn load(&mut self, ctx: &mut Context<Self>) {
        if self.finished {
            return;
        }
        if self.busy {
            self.reload = true;
            return;
        }
        self.busy = true;
        let (db, id) = (self.deps.db.clone(), self.id);
        let load = async move {
            let campaign = campaigns::by_id(&db, id).await?;
            let open = campaigns::open_messages(&db, id).await?;
            let pending_left = campaigns::has_pending(&db, id).await?;
            Ok::<_, crate::store::StoreError>(Loaded {
                campaign,
                queued: open
                    .iter()
                    .filter(|(_, s)| *s == MessageStatus::Queued)
                    .map(|(id, _)| *id)
                    .collect(),
                open: open.into_iter().map(|(id, _)| id).collect(),
                pending_left,
            })
        };
        ctx.spawn(fut::wrap_future::<_, Self>(load).map(|result, act, ctx| {
            act.busy = false;
            match result {
                Ok(mut loaded) => {
                    // Messages that ended while the read was running may have ended after it.
                    for id in act.ended.drain() {
                        loaded.open.remove(&id);
                        loaded.queued.remove(&id);
                    }
                    act.state = Some(loaded);
                    act.act(ctx);
                }
                Err(crate::store::StoreError::NotFound) => act.finish(),
                Err(err) => {
                    tracing::error!(campaign_id = %act.id, error = %err, "campaign not loaded; retrying");
                }
            }
            act.after_step(ctx);
        }));
    }

    /// Does what the loaded status asks for.
    fn act(&mut self, ctx: &mut Context<Self>) {
        let Some(state) = &self.state else { return };
        match state.campaign.status {
            CampaignStatus::Scheduled => self.wait_for_start(ctx),
            CampaignStatus::Running => self.step(ctx),
            // Paused (or a draft): idle until resumed; only an ended campaign lets its actor
            // go, so a quick pause and resume cannot race the actor's removal.
            CampaignStatus::Draft | CampaignStatus::Paused => {
                if let Some(handle) = self.start_timer.take() {
                    ctx.cancel_future(handle);
                }
            }
            CampaignStatus::Completed | CampaignStatus::Canceled => self.finish(),
        }
    }

    fn wait_for_start(&mut self, ctx: &mut Context<Self>) {
        let Some(state) = &self.state else { return };
        let now = self.deps.clock.now_ms();
        let at = state.campaign.scheduled_for.unwrap_or(now);
        if let Some(handle) = self.start_timer.take() {
            ctx.cancel_future(handle);
        }
        if at > now {
            let delay = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
            self.start_timer = Some(ctx.run_later(delay, |act, ctx| {
                act.start_timer = None;
                act.load(ctx);
            }));
            return;
        }
        let lease = self.lease();
        self.run_op(ctx, CampaignOp::Start { id: self.id, lease });
    }

    /// Runs a start or completion through the writer, then reloads.
    fn run_op(&mut self, ctx: &mut Context<Self>, op: CampaignOp) {
        if self.busy {
            self.again = true;
            return;
        }
        self.busy = true;
        let writer = self.deps.writer.clone();
        ctx.spawn(
            fut::wrap_future::<_, Self>(async move { writer.campaign(op).await }).map(
                |result, act, ctx| {
                    act.busy = false;
                    match result {
                        Ok(CampaignOutcome::LeaseLost) => return act.ownership_lost(),
                        Ok(_) => {}
                        Err(err) => {
                            tracing::error!(campaign_id = %act.id, error = %err, "campaign update failed; retrying");
                        }
                    }
                    act.load(ctx);
                },
            ),
        );
    }

    /// Feeds the window, or completes the campaign when nothing is left.
    fn step(&mut self, ctx: &mut Context<Self>) {
        if self.finished {
            return;
        }
        if self.busy {
            self.again = true;
            return;
        }
        let Some(state) = &self.state else { return };
        if state.campaign.status != CampaignStatus::Running {
            return;
        }
        if state.pending_left {
            let room = FEED_WINDOW.saturating_sub(state.queued.len());
            if room >= FEED_WINDOW / 2 || state.queued.is_empty() {
                self.feed(ctx, room);
            }
        } else if state.open.is_empty() {
            let lease = self.lease();
            self.run_op(ctx, CampaignOp::Complete { id: self.id, lease });
        }
    }

    fn feed(&mut self, ctx: &mut Context<Self>, room: usize) {
        let Some(state) = &self.state else { return };
        self.busy = true;
        let campaign = state.campaign.clone();
        let (db, writer, registry) = (
            self.deps.db.clone(),
            self.deps.writer.clone(),
            self.registry.clone(),
        );
        let ttl = i64::try_from(self.deps.settings.messages.ttl.as_millis()).unwrap_or(i64::MAX);
        let lease = self.lease();
        let clock = self.deps.clock.clone();
        let feed = async move {
            let device_id = if campaign.scope.mode == Mode::Test {
                None
            } else {
                let routed = registry
                    .send(Route {
                        scope: campaign.scope,
                        from_number: campaign.from_number.clone(),
                        device_id: None,
                    })
                    .await;
                match routed {
                    Ok(Ok(Some(routed))) => Some(routed.device_id),
                    _ => return Ok(Fed::NoPhone),
                }
            };
            let pending = campaigns::pending(&db, campaign.id, room as u64).await?;
            if pending.is_empty() {
                return Ok(Fed::Exhausted);
            }
            let now = clock.now_ms();
            let messages = pending
                .into_iter()
                .map(|r| {
                    let content = Content {
                        content: r.content,
                        segments: r.segments,
                        encoding: r.encoding,
                    };
                    let message = NewMessage::outbound(
                        QueueClass::Campaign,
                        campaign.from_number.clone(),
                        r.to_number,
                        content,
                        now.saturating_add(ttl),
                    )
                    .with_device(device_id, false)
                    .with_campaign(campaign.id);
                    (r.id, message)
                })
                .collect();
            let op = CampaignOp::Feed {
                id: campaign.id,
                scope: campaign.scope,
                messages,
                lease,
            };
            match writer.campaign(op).await? {
                CampaignOutcome::Fed {
                    messages,
                    opted_out,
                    held,
                } => {
                    crate::telemetry::count_campaign_recipients(
                        crate::domain::campaign::RecipientStatus::Canceled,
                        opted_out as u64,
                    );
                    let ids = messages.iter().map(|m| MessageId::from(m.id)).collect();
                    if !messages.is_empty() {
                        registry.do_send(Enqueue { messages });
                    }
                    Ok(Fed::Queued { ids, held })
                }
                CampaignOutcome::LeaseLost => Ok(Fed::LeaseLost),
                _ => Ok(Fed::Stopped),
            }
        };
        ctx.spawn(
            fut::wrap_future::<_, Self>(feed).map(|result: Result<Fed, crate::store::StoreError>, act, ctx| {
                act.busy = false;
                match result {
                    Ok(Fed::Queued { ids, held }) => {
                        let ended = std::mem::take(&mut act.ended);
                        if let Some(state) = &mut act.state {
                            for id in ids {
                                if !ended.contains(&id) && state.open.insert(id) {
                                    state.queued.insert(id);
                                }
                            }
                        }
                        match held {
                            // The daily quota paused the campaign: read it again (idle).
                            Some(Quota::TestMessagesPerDay) => act.reload = true,
                            // The queued quota is full: the next tick tries again.
                            Some(_) => {}
                            None => act.again = true,
                        }
                    }
                    Ok(Fed::Exhausted) => {
                        if let Some(state) = &mut act.state {
                            state.pending_left = false;
                        }
                        act.again = true;
                    }
                    Ok(Fed::NoPhone) => {}
                    Ok(Fed::Stopped) => act.load(ctx),
                    Ok(Fed::LeaseLost) => return act.ownership_lost(),
                    Err(err) => {
                        tracing::error!(campaign_id = %act.id, error = %err, "campaign feed failed; retrying");
                    }
                }
                act.after_step(ctx);
            }),
        );
    }

    fn after_step(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        if self.reload {
            self.reload = false;
            self.again = false;
            self.load(ctx);
        } else if self.again {
            self.again = false;
            self.step(ctx);
        }
    }

    /// The campaign's lease a step carries in a cluster (fence 0 once lost here); None on a
    /// single node.
    fn lease(&self) -> Option<Lease> {
        self.deps
            .cluster
            .as_ref()
            .map(|cluster| cluster.fence(LeaseKey::Campaign(self.id)))
    }

    /// Another node owns the campaign now (its step was refused): act no more from now on,
    /// and have the Registry drop this actor (`Finished`: it cannot stop itself, a supervised
    /// actor whose address the Registry holds is restarted at once); the new owner carries on
    /// from the database.
    fn ownership_lost(&mut self) {
        tracing::warn!(campaign_id = %self.id, "campaign lease lost: its actor stops here");
        if let (Some(cluster), Some(lease)) = (&self.deps.cluster, self.lease()) {
            cluster.lost(&lease);
        }
        self.state = None;
        self.finish();
    }

    /// Whether the campaign has work for its timers (running, or waiting for its start).
    fn is_live(&self) -> bool {
        self.state
            .as_ref()
            .is_none_or(|s| s.campaign.status.is_live())
    }

    /// The campaign is no longer live: the registry drops this actor.
    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.registry.do_send(Finished { id: self.id });
        }
    }
}

impl Actor for CampaignActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.finished {
            // Restarted after `StopCampaign`: the registry no longer holds this address.
            ctx.stop();
            return;
        }
        ctx.set_mailbox_capacity(4096);
        self.load(ctx);
        ctx.run_interval(TICK, |act, ctx| {
            if !act.is_live() {
                // Paused or a draft: nothing to do until the API wakes it.
                return;
            }
            act.ticks = act.ticks.wrapping_add(1);
            if act.ticks.is_multiple_of(RESYNC_TICKS) {
                act.load(ctx);
            } else {
                act.step(ctx);
            }
        });
    }
}

impl Supervised for CampaignActor {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.state = None;
        self.ended.clear();
        self.busy = false;
        self.again = false;
        self.reload = false;
        self.start_timer = None;
    }
}

impl Handler<Reload> for CampaignActor {
    type Result = ();

    fn handle(&mut self, _: Reload, ctx: &mut Self::Context) {
        self.load(ctx);
    }
}

impl Handler<MessagesChanged> for CampaignActor {
    type Result = ();

    fn handle(&mut self, msg: MessagesChanged, ctx: &mut Self::Context) {
        let busy = self.busy;
        let Some(state) = &mut self.state else { return };
        for (id, status) in msg.0 {
            if status.is_terminal() {
                state.open.remove(&id);
                state.queued.remove(&id);
                if busy {
                    self.ended.insert(id);
                }
            } else {
                state.open.insert(id);
                if status == MessageStatus::Queued {
                    state.queued.insert(id);
                } else {
                    state.queued.remove(&id);
                }
            }
        }
        self.step(ctx);
    }
}

impl Handler<StopCampaign> for CampaignActor {
    type Result = ();

    fn handle(&mut self, _: StopCampaign, ctx: &mut Self::Context) {
        self.finished = true;
        ctx.stop();
    }
}

/// The registry's side: one supervised actor per live campaign.
#[derive(Default)]
pub struct CampaignActors {
    actors: HashMap<CampaignId, Addr<CampaignActor>>,
}

impl CampaignActors {
    /// The campaign's actor, started (supervised) on first use.
    pub fn addr(
        &mut self,
        deps: &Deps,
        registry: Addr<Registry>,
        id: CampaignId,
    ) -> Addr<CampaignActor> {
        if let Some(addr) = self.actors.get(&id)
            && addr.connected()
        {
            return addr.clone();
        }
        let deps = deps.clone();
        let addr = Supervisor::start(move |_| CampaignActor::new(deps, registry, id));
        self.actors.insert(id, addr.clone());
        addr
    }

    /// Hands committed message changes to their campaigns' actors.
    pub fn changed(&self, changes: Vec<CampaignChange>) {
        let per_campaign = CampaignChange::by_campaign(changes);
        for (campaign, changes) in per_campaign {
            if let Some(addr) = self.actors.get(&campaign) {
                addr.do_send(MessagesChanged(changes));
            }
        }
    }

    /// Drops a finished campaign's actor.
    pub fn finished(&mut self, id: CampaignId) {
        if let Some(addr) = self.actors.remove(&id) {
            addr.do_send(StopCampaign);
        }
    }

    /// Stops every campaign actor.
    pub fn stop_all(&mut self) {
        for (_, addr) in self.actors.drain() {
            addr.do_send(StopCampaign);
        }
    }

    /// Starts the actors of the running and scheduled campaigns (after a restart).
    pub fn rebuild(ctx: &mut Context<Registry>, deps: Deps) {
        let load = async move { campaigns::live(&deps.db).await };
        ctx.spawn(fut::wrap_future::<_, Registry>(load).map(
            |result, registry, ctx| match result {
                Ok(ids) => {
                    for id in ids {
                        registry.wake_campaign(ctx, id);
                    }
                }
                Err(err) => tracing::error!(error = %err, "live campaigns not reloaded"),
            },
        ));
    }
}
