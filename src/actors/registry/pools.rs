//! The Registry's side of sender pools (docs/api.md, "Pools"): which online line of a pool
//! takes each send ([`ChooseLines`], deciding with `domain::pool_choice::PoolChoice`), and
//! failover: the pooled messages waiting on a line that cannot send move to the pool's other
//! lines ([`DrainLine`], and the sweep every [`FAILOVER_SWEEP_EVERY`]).
//!
//! The database is the truth: the sweep reads which lines have pooled messages queued, so a
//! restart (or another node taking the sweep) loses no failover. A line is drained when it has
//! been offline (cluster-wide) for longer than `pools.failover_after` since it was last seen,
//! or when it is online here and out of its daily cap. In a cluster one node sweeps at a time:
//! the holder of the `expiry` sweep's lease.

use std::collections::HashMap;

use actix::prelude::*;
use uuid::Uuid;

use super::*;
use crate::domain::pool_choice::{Candidate, PoolChoice};
use crate::store::pools;

/// How often lines with pooled messages waiting are checked for failover.
pub(super) const FAILOVER_SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Most lines one sweep looks at.
const SWEEP_LINES: u64 = 100;
/// Most messages one drain of a line moves (the next sweep moves more).
const DRAIN_BATCH: u64 = 500;

/// Move the pooled messages waiting on this line to the other lines of their pools that can
/// send (a stalled line; docs/api.md, "Pools"). Messages sent with `from_number` or pinned
/// with `device_id` stay. Those no other line can take stay too.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DrainLine {
    pub phone_id: Uuid,
}

/// Why a line is drained, for the `rerouted` timeline entry.
#[derive(Debug, Clone, Copy)]
enum DrainReason {
    Offline,
    DailyCap,
    Stalled,
}

impl DrainReason {
    fn says(self) -> &'static str {
        match self {
            DrainReason::Offline => "offline",
            DrainReason::DailyCap => "out of its daily cap",
            DrainReason::Stalled => "stalled",
        }
    }
}

impl Handler<DrainLine> for Registry {
    type Result = ();

    fn handle(&mut self, msg: DrainLine, ctx: &mut Self::Context) {
        self.drain_line(ctx, msg.phone_id, DrainReason::Stalled);
    }
}

impl Registry {
    /// The failover sweep: reads the lines with pooled messages waiting and drains those that
    /// cannot send.
    pub(super) fn sweep_pools(&mut self, ctx: &mut Context<Self>) {
        let deps = self.deps.clone();
        ctx.spawn(
            async move {
                if let Some(cluster) = &deps.cluster
                    && cluster
                        .acquire(crate::store::cluster::LeaseKey::Sweep(
                            crate::store::cluster::Sweep::Expiry,
                        ))
                        .await
                        .is_none()
                {
                    return Ok(Vec::new());
                }
                pools::lines_with_pooled_queue(&deps.db, SWEEP_LINES).await
            }
            .into_actor(self)
            .map(|lines, act, ctx| match lines {
                Ok(lines) => act.consider_lines(ctx, lines),
                Err(err) => tracing::error!(error = %err, "pool failover sweep failed"),
            }),
        );
    }

    /// Drains each of `lines` that is offline past `pools.failover_after`, or online here and
    /// out of its daily cap.
    fn consider_lines(&mut self, ctx: &mut Context<Self>, lines: Vec<Uuid>) {
        let now = self.deps.clock.now_ms();
        let after =
            i64::try_from(self.deps.settings.pools.failover_after.as_millis()).unwrap_or(i64::MAX);
        let states = self.directory.states(lines.iter().copied());
        for line in lines {
            if self.directory.is_online(line) {
                if let Some(addr) = self.owned_addr(line) {
                    ctx.spawn(addr.send(phone::GetLineLoad).into_actor(self).map(
                        move |load, act, ctx| {
                            let now = act.deps.clock.now_ms();
                            let Ok(load) = load else { return };
                            let capped = load.next_send_at.is_some_and(|at| {
                                at.saturating_sub(now)
                                    > crate::domain::pool_choice::DAILY_CAP_WAIT_MS
                            });
                            if load.stalled {
                                act.drain_line(ctx, line, DrainReason::Stalled);
                            } else if capped {
                                act.drain_line(ctx, line, DrainReason::DailyCap);
                            }
                        },
                    ));
                }
                continue;
            }
            let stored = self.directory.record(line).and_then(|r| r.last_seen_at);
            let last_seen = PhoneState::last_seen(states.get(&line), stored);
            // Unknown here (unpaired meanwhile): the unpair fails its queue.
            if self.directory.contains(line)
                && last_seen.is_none_or(|seen| now.saturating_sub(seen) > after)
            {
                self.drain_line(ctx, line, DrainReason::Offline);
            }
        }
    }

    /// Moves up to [`DRAIN_BATCH`] pooled messages waiting on `line` to the other lines of
    /// their pools that are online and can send, each with a `rerouted` entry naming both
    /// numbers; the sticky line of each recipient follows (in the reroute's commit).
    fn drain_line(&mut self, ctx: &mut Context<Self>, line: Uuid, reason: DrainReason) {
        let Some(me) = self.me.clone() else { return };
        let deps = self.deps.clone();
        ctx.spawn(
            async move {
                let waiting = pools::pooled_waiting_on(&deps.db, line, DRAIN_BATCH).await?;
                let mut by_pool: HashMap<Uuid, Vec<messages::Message>> = HashMap::new();
                for m in waiting {
                    if let Some(pool_id) = m.pool_id {
                        by_pool.entry(pool_id).or_default().push(m);
                    }
                }
                let mut moved = Vec::new();
                for (pool_id, messages) in by_pool {
                    let Some(scope) = messages.first().map(messages::Message::scope) else {
                        continue;
                    };
                    let lines: Vec<Uuid> = pools::lines(&deps.db, pool_id)
                        .await?
                        .into_iter()
                        .map(|l| l.phone_id)
                        .filter(|id| *id != line)
                        .collect();
                    let choose = ChooseLines {
                        scope,
                        pool_id,
                        lines,
                        sticky: vec![None; messages.len()],
                        must_send: true,
                    };
                    let Ok(Some(picks)) = me.send(choose).await else {
                        continue;
                    };
                    for (message, pick) in messages.into_iter().zip(picks) {
                        let reroute = Reroute {
                            id: message.id,
                            from_device: line,
                            to_device: pick.phone_id,
                            to_number: Some(pick.phone_number.clone()),
                            detail: format!(
                                "line {} {}; rerouted from {} to {}",
                                message.from_number,
                                reason.says(),
                                message.from_number,
                                pick.phone_number
                            ),
                        };
                        if let Some(m) = deps.writer.reroute(reroute).await? {
                            moved.push(m);
                        }
                    }
                }
                Ok::<_, crate::store::StoreError>(moved)
            }
            .into_actor(self)
            .map(move |moved, act, _| match moved {
                Ok(moved) => {
                    if !moved.is_empty() {
                        tracing::info!(phone_id = %line, messages = moved.len(), reason = reason.says(), "pooled messages moved to other lines");
                    }
                    // The old line's actor lets go of them before they reach their new line.
                    if let Some(addr) = act.directory.actor(line) {
                        for m in &moved {
                            addr.do_send(phone::Forget { message_id: m.id });
                        }
                    }
                    act.deliver(moved);
                }
                Err(err) => tracing::error!(phone_id = %line, error = %err, "pool failover failed"),
            }),
        );
    }
}

/// Which lines of the pool `pool_id` take one message to each recipient, in order: the
/// recipient's sticky line while it is online and can send, otherwise the online line that can
/// send soonest (ties: fewest queued, then round robin). None when no line of the pool is
/// online (test mode: every paired line of the pool counts as online).
#[derive(Message)]
#[rtype(result = "Option<Vec<PoolPick>>")]
pub struct ChooseLines {
    pub scope: Scope,
    pub pool_id: Uuid,
    /// The pool's lines, in its order.
    pub lines: Vec<Uuid>,
    /// One entry per recipient: its sticky line, if it has one.
    pub sticky: Vec<Option<Uuid>>,
    /// Only lines that can send (not out of their daily cap): a failover's targets.
    pub must_send: bool,
}

/// The line chosen for one recipient.
#[derive(Debug, Clone)]
pub struct PoolPick {
    pub phone_id: Uuid,
    pub phone_number: String,
    /// Its actor when the line is connected here, for an immediate hand-over; None on another
    /// node (and in test mode).
    pub phone: Option<Addr<Phone>>,
}

impl Handler<ChooseLines> for Registry {
    type Result = ResponseActFuture<Self, Option<Vec<PoolPick>>>;

    fn handle(&mut self, msg: ChooseLines, _: &mut Self::Context) -> Self::Result {
        let test = msg.scope.mode == Mode::Test;
        let online: Vec<Uuid> = msg
            .lines
            .iter()
            .copied()
            .filter(|id| {
                self.directory
                    .record(*id)
                    .is_some_and(|r| r.scope() == msg.scope)
                    && (test || self.directory.is_online(*id))
            })
            .collect();
        // A line online here answers its load; one on another node counts as idle.
        let loads: Vec<_> = online
            .iter()
            .map(|id| match self.directory.connected_here(*id) && !test {
                true => self
                    .phone_addr(*id)
                    .map(|addr| addr.send(phone::GetLineLoad)),
                false => None,
            })
            .collect();
        Box::pin(
            async move {
                let mut answered = Vec::with_capacity(loads.len());
                for load in loads {
                    answered.push(match load {
                        Some(request) => request.await.ok(),
                        None => None,
                    });
                }
                answered
            }
            .into_actor(self)
            .map(move |loads, act, _| {
                let now = act.deps.clock.now_ms();
                let candidates = online
                    .iter()
                    .zip(loads)
                    .map(|(id, load)| Candidate {
                        phone_id: *id,
                        next_send_at: load.and_then(|l| l.next_send_at).unwrap_or(now),
                        queued: load.map_or(0, |l| l.queued),
                        spacing_ms: load.map_or(0, |l| l.spacing_ms),
                        stalled: load.is_some_and(|l| l.stalled),
                    })
                    .filter(|c| !msg.must_send || c.can_send(now))
                    .collect();
                let turn = act.pool_turns.get(&msg.pool_id).copied().unwrap_or(0);
                let mut choice = PoolChoice::new(candidates, turn, now);
                let mut picks = Vec::with_capacity(msg.sticky.len());
                for sticky in msg.sticky {
                    let phone_id = choice.choose(sticky)?;
                    let phone_number = act.directory.record(phone_id)?.phone_number.clone();
                    let phone = match act.directory.connected_here(phone_id) && !test {
                        true => act.phone_addr(phone_id),
                        false => None,
                    };
                    picks.push(PoolPick {
                        phone_id,
                        phone_number,
                        phone,
                    });
                }
                act.pool_turns.insert(msg.pool_id, choice.round_robin());
                Some(picks)
            }),
        )
    }
}
