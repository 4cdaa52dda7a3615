//! A campaign's next step, as a plain type: what its actor should do after each event (its
//! campaign read, a feed answered, messages changed, a tick), given what it knows. The actor
//! ([`super::CampaignActor`]) only does what a [`Action`] names: the reads, the writer's
//! operations, the feed and the start timer. One read or write runs at a time: an event that
//! asks for another while one runs is remembered (`again`, `reload`) and acted on after it.

use std::collections::HashSet;

use crate::domain::campaign::CampaignStatus;
use crate::domain::ids::MessageId;
use crate::domain::quota::Quota;
use crate::domain::status::MessageStatus;

/// Most of a campaign's messages `queued` (not yet handed to a phone) at once. Feeding tops
/// the window up once it is half empty, so a message is created shortly before its phone can
/// take it: its expiry counts from then, and a pause withdraws few.
pub const FEED_WINDOW: usize = 100;
/// Every this many ticks the actor reloads its open messages from the database, in case a
/// change notification was missed.
pub const RESYNC_TICKS: u32 = 10;

/// What one read of the campaign found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub status: CampaignStatus,
    /// When a scheduled campaign starts (ms since the epoch); None: at once.
    pub scheduled_for: Option<i64>,
    /// The campaign's messages not terminal yet, with their status.
    pub open: Vec<(MessageId, MessageStatus)>,
    /// Whether recipients are still pending (no message made for them yet).
    pub pending_left: bool,
}

/// What a feed did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fed {
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
    /// The feed failed (logged by the actor); the next tick tries again.
    Failed,
}

/// How a start or completion through the writer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpDone {
    /// Applied (or refused because the campaign changed meanwhile): read it again.
    Done,
    /// The write failed (logged by the actor): read it again.
    Failed,
    /// Another node owns the campaign now.
    LeaseLost,
}

/// What the actor should do, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read the campaign, its open messages and whether recipients are pending; answer with
    /// [`CampaignStep::loaded`] (or [`CampaignStep::load_failed`], [`CampaignStep::gone`]).
    Load,
    /// Read the campaign again at `at` (ms since the epoch), replacing any timer set before.
    WaitUntil(i64),
    /// Cancel the start timer, if any.
    StopWaiting,
    /// Start the scheduled campaign (writer); answer with [`CampaignStep::op_done`].
    Start,
    /// Queue up to `room` pending recipients; answer with [`CampaignStep::fed`].
    Feed { room: usize },
    /// Complete the campaign (writer); answer with [`CampaignStep::op_done`].
    Complete,
    /// The campaign is no longer live here: tell the supervisor to drop this actor.
    Finish,
}

/// What the actor knows from its last read.
#[derive(Debug, Clone)]
struct Known {
    status: CampaignStatus,
    scheduled_for: Option<i64>,
    /// Messages of the campaign not terminal yet.
    open: HashSet<MessageId>,
    /// Of those, the ones still `queued` (the feed window).
    queued: HashSet<MessageId>,
    pending_left: bool,
}

/// The decisions of one campaign's actor.
#[derive(Debug, Clone, Default)]
pub struct CampaignStep {
    known: Option<Known>,
    /// Messages that ended while a read or feed was running (it may not see their end).
    ended: HashSet<MessageId>,
    /// A read, feed or writer operation is running.
    busy: bool,
    /// Another step is asked for after the running one.
    again: bool,
    /// Another read is asked for after the running one.
    reload: bool,
    ticks: u32,
    finished: bool,
}

impl CampaignStep {
    /// Nothing known yet; the actor asks for [`CampaignStep::load`] when it starts.
    pub fn new() -> CampaignStep {
        CampaignStep::default()
    }

    /// Whether the actor told its supervisor it is done (or was stopped).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Whether the campaign has work for the timers (running, waiting for its start, or not
    /// read yet).
    pub fn is_live(&self) -> bool {
        self.known.as_ref().is_none_or(|k| k.status.is_live())
    }

    /// Whether a read or write is running.
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// Read the campaign (started, a change through the API, the start time came).
    pub fn load(&mut self) -> Vec<Action> {
        if self.finished {
            return Vec::new();
        }
        if self.busy {
            self.reload = true;
            return Vec::new();
        }
        self.busy = true;
        vec![Action::Load]
    }

    /// The read answered; `now` in ms since the epoch.
    pub fn loaded(&mut self, snapshot: Snapshot, now: i64) -> Vec<Action> {
        self.busy = false;
        let mut known = Known {
            status: snapshot.status,
            scheduled_for: snapshot.scheduled_for,
            queued: snapshot
                .open
                .iter()
                .filter(|(_, s)| *s == MessageStatus::Queued)
                .map(|(id, _)| *id)
                .collect(),
            open: snapshot.open.into_iter().map(|(id, _)| id).collect(),
            pending_left: snapshot.pending_left,
        };
        // Messages that ended while the read was running may have ended after it.
        for id in self.ended.drain() {
            known.open.remove(&id);
            known.queued.remove(&id);
        }
        self.known = Some(known);
        let mut actions = self.act(now);
        actions.extend(self.after_step());
        actions
    }

    /// The campaign is gone (deleted): the actor is done.
    pub fn gone(&mut self) -> Vec<Action> {
        self.busy = false;
        let mut actions = self.finish();
        actions.extend(self.after_step());
        actions
    }

    /// The read failed (logged); the next tick or change tries again.
    pub fn load_failed(&mut self) -> Vec<Action> {
        self.busy = false;
        self.after_step()
    }

    /// A start or completion answered.
    pub fn op_done(&mut self, done: OpDone) -> Vec<Action> {
        self.busy = false;
        match done {
            OpDone::LeaseLost => self.lease_lost(),
            OpDone::Done | OpDone::Failed => self.load(),
        }
    }

    /// A feed answered.
    pub fn fed(&mut self, fed: Fed) -> Vec<Action> {
        self.busy = false;
        let mut actions = Vec::new();
        match fed {
            Fed::Queued { ids, held } => {
                let ended = std::mem::take(&mut self.ended);
                if let Some(known) = &mut self.known {
                    for id in ids {
                        if !ended.contains(&id) && known.open.insert(id) {
                            known.queued.insert(id);
                        }
                    }
                }
                match held {
                    // The daily quota paused the campaign: read it again (idle).
                    Some(Quota::TestMessagesPerDay) => self.reload = true,
                    // The queued quota is full: the next tick tries again.
                    Some(_) => {}
                    None => self.again = true,
                }
            }
            Fed::Exhausted => {
                if let Some(known) = &mut self.known {
                    known.pending_left = false;
                }
                self.again = true;
            }
            Fed::NoPhone | Fed::Failed => {}
            Fed::Stopped => actions = self.load(),
            Fed::LeaseLost => return self.lease_lost(),
        }
        actions.extend(self.after_step());
        actions
    }

    /// Committed changes of the campaign's messages.
    pub fn messages_changed(
        &mut self,
        changes: impl IntoIterator<Item = (MessageId, MessageStatus)>,
    ) -> Vec<Action> {
        let Some(known) = &mut self.known else {
            return Vec::new();
        };
        for (id, status) in changes {
            if status.is_terminal() {
                known.open.remove(&id);
                known.queued.remove(&id);
                if self.busy {
                    self.ended.insert(id);
                }
            } else {
                known.open.insert(id);
                if status == MessageStatus::Queued {
                    known.queued.insert(id);
                } else {
                    known.queued.remove(&id);
                }
            }
        }
        self.step()
    }

    /// The actor's tick: a step, and every [`RESYNC_TICKS`] a read instead.
    pub fn tick(&mut self) -> Vec<Action> {
        if !self.is_live() {
            // Paused or a draft: nothing to do until the API wakes it.
            return Vec::new();
        }
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks.is_multiple_of(RESYNC_TICKS) {
            self.load()
        } else {
            self.step()
        }
    }

    /// The supervisor stopped the actor for good: nothing more is done.
    pub fn stop(&mut self) {
        self.finished = true;
    }

    /// The actor restarts (supervised): what ran in the old context is gone.
    pub fn restart(&mut self) {
        self.known = None;
        self.ended.clear();
        self.busy = false;
        self.again = false;
        self.reload = false;
    }

    /// Another node owns the campaign now: act no more, the new owner carries on from the
    /// database.
    fn lease_lost(&mut self) -> Vec<Action> {
        self.known = None;
        self.finish()
    }

    /// Does what the read status asks for.
    fn act(&mut self, now: i64) -> Vec<Action> {
        let Some(known) = &self.known else {
            return Vec::new();
        };
        match known.status {
            CampaignStatus::Scheduled => {
                let at = known.scheduled_for.unwrap_or(now);
                if at > now {
                    return vec![Action::WaitUntil(at)];
                }
                let mut actions = vec![Action::StopWaiting];
                actions.extend(self.run_op(Action::Start));
                actions
            }
            CampaignStatus::Running => self.step(),
            // Paused (or a draft): idle until resumed; only an ended campaign lets its actor
            // go, so a quick pause and resume cannot race the actor's removal.
            CampaignStatus::Draft | CampaignStatus::Paused => vec![Action::StopWaiting],
            CampaignStatus::Completed | CampaignStatus::Canceled => self.finish(),
        }
    }

    /// A start or completion through the writer, unless another read or write runs.
    fn run_op(&mut self, op: Action) -> Vec<Action> {
        if self.busy {
            self.again = true;
            return Vec::new();
        }
        self.busy = true;
        vec![op]
    }

    /// Feeds the window, or completes the campaign when nothing is left.
    fn step(&mut self) -> Vec<Action> {
        if self.finished {
            return Vec::new();
        }
        if self.busy {
            self.again = true;
            return Vec::new();
        }
        let Some(known) = &self.known else {
            return Vec::new();
        };
        if known.status != CampaignStatus::Running {
            return Vec::new();
        }
        if known.pending_left {
            let room = FEED_WINDOW.saturating_sub(known.queued.len());
            if room >= FEED_WINDOW / 2 || known.queued.is_empty() {
                self.busy = true;
                return vec![Action::Feed { room }];
            }
            Vec::new()
        } else if known.open.is_empty() {
            self.run_op(Action::Complete)
        } else {
            Vec::new()
        }
    }

    /// After a read or write answered: the read or step asked for meanwhile.
    fn after_step(&mut self) -> Vec<Action> {
        if self.busy {
            return Vec::new();
        }
        if self.reload {
            self.reload = false;
            self.again = false;
            self.load()
        } else if self.again {
            self.again = false;
            self.step()
        } else {
            Vec::new()
        }
    }

    /// The campaign is no longer live: the supervisor drops this actor (once).
    fn finish(&mut self) -> Vec<Action> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        vec![Action::Finish]
    }
}

#[cfg(test)]
mod tests;
