//! The Registry's side of sender pools (docs/api.md, "Pools"): which online line of a pool
//! takes each send ([`ChooseLines`], deciding with `domain::pool_choice::PoolChoice`).

use actix::prelude::*;
use uuid::Uuid;

use super::*;
use crate::domain::pool_choice::{Candidate, PoolChoice};

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
                true => self.phone_addr(*id).map(|addr| addr.send(phone::GetLineLoad)),
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
                    })
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
