//! Which line of a sender pool takes a send (docs/api.md, "Pools"): the recipient's sticky
//! line while it can send; otherwise the line that can send soonest under its pace and daily
//! cap, counting what it already has queued; ties go to the line with fewest queued, then
//! round robin. A plain type the Registry holds per pool; it does no I/O.

use uuid::Uuid;

/// A line whose next send is further away than this (ms) is out of its daily cap: every other
/// window of a pace is at most 30 minutes long.
pub const DAILY_CAP_WAIT_MS: i64 = 30 * 60 * 1000;

/// One online line of the pool as the choice sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub phone_id: Uuid,
    /// When its pace next allows a send (ms since the epoch; `now` or earlier: at once).
    pub next_send_at: i64,
    /// Messages waiting in its queue.
    pub queued: u32,
    /// Its steady spacing between sends under its pace (ms; 0: no pace).
    pub spacing_ms: i64,
    /// Its stall watchdog marked it (docs/api.md, "Phone health"): chosen only when no line
    /// can send, like a line out of its daily cap.
    pub stalled: bool,
}

impl Candidate {
    /// Whether it can send within its short windows (not held by its daily cap) and is not
    /// stalled.
    pub fn can_send(&self, now: i64) -> bool {
        !self.stalled && self.next_send_at.saturating_sub(now) <= DAILY_CAP_WAIT_MS
    }

    /// When a message given to it now would leave: after its pace allows and its queue ahead
    /// of the message has gone out.
    fn leaves_at(&self, now: i64) -> i64 {
        self.next_send_at
            .max(now)
            .saturating_add(self.spacing_ms.saturating_mul(i64::from(self.queued)))
    }
}

/// The choice of lines for the sends of one request, over the pool's online lines in the
/// pool's order; each choice counts the message as queued on its line, so a bulk send spreads.
#[derive(Debug, Clone)]
pub struct PoolChoice {
    candidates: Vec<Candidate>,
    /// Round robin: ties go to the first tied line at or after this place.
    next: usize,
    now: i64,
}

impl PoolChoice {
    /// A choice over `candidates` (the online lines, in pool order) at `now`; `round_robin`
    /// is where the pool's round robin stands (kept by the caller between requests).
    pub fn new(candidates: Vec<Candidate>, round_robin: usize, now: i64) -> PoolChoice {
        let next = match candidates.len() {
            0 => 0,
            n => round_robin % n,
        };
        PoolChoice {
            candidates,
            next,
            now,
        }
    }

    /// Where the round robin stands after the choices made, for the next request.
    pub fn round_robin(&self) -> usize {
        self.next
    }

    /// The line for one message to a recipient whose sticky line is `sticky`; None when the
    /// pool has no online line.
    pub fn choose(&mut self, sticky: Option<Uuid>) -> Option<Uuid> {
        let now = self.now;
        let place = sticky
            .and_then(|id| self.candidates.iter().position(|c| c.phone_id == id))
            .filter(|&i| self.candidates[i].can_send(now))
            .or_else(|| self.soonest())?;
        let chosen = &mut self.candidates[place];
        chosen.queued = chosen.queued.saturating_add(1);
        Some(chosen.phone_id)
    }

    /// The line that sends a new message soonest; ties: fewest queued, then round robin.
    fn soonest(&mut self) -> Option<usize> {
        let n = self.candidates.len();
        let now = self.now;
        let place = (0..n).map(|k| (self.next + k) % n).min_by_key(|&i| {
            let c = &self.candidates[i];
            // Out of its daily cap: only when no line can send.
            (!c.can_send(now), c.leaves_at(now), c.queued)
        })?;
        self.next = (place + 1) % n;
        Some(place)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn line(n: u128, next_send_at: i64, queued: u32) -> Candidate {
        Candidate {
            phone_id: Uuid::from_u128(n),
            next_send_at,
            queued,
            spacing_ms: 30_000,
            stalled: false,
        }
    }

    fn ids(choice: &mut PoolChoice, times: usize) -> Vec<u128> {
        (0..times)
            .map(|_| choice.choose(None).unwrap().as_u128())
            .collect()
    }

    #[test]
    fn idle_lines_take_sends_in_turn() {
        let mut choice = PoolChoice::new(vec![line(1, 0, 0), line(2, 0, 0), line(3, 0, 0)], 0, NOW);
        assert_eq!(ids(&mut choice, 6), [1, 2, 3, 1, 2, 3]);
        assert_eq!(choice.round_robin(), 0);
    }

    #[test]
    fn the_round_robin_carries_over_between_requests() {
        let lines = vec![line(1, 0, 0), line(2, 0, 0), line(3, 0, 0)];
        let mut first = PoolChoice::new(lines.clone(), 0, NOW);
        assert_eq!(ids(&mut first, 1), [1]);
        let mut second = PoolChoice::new(lines, first.round_robin(), NOW);
        assert_eq!(ids(&mut second, 1), [2]);
    }

    #[test]
    fn the_line_that_can_send_soonest_wins() {
        let mut choice = PoolChoice::new(
            vec![line(1, NOW + 20_000, 0), line(2, NOW + 5_000, 0)],
            0,
            NOW,
        );
        assert_eq!(ids(&mut choice, 1), [2]);
    }

    #[test]
    fn a_queue_counts_against_a_line() {
        // Line 1 can send now but has three waiting (90 s of its pace); line 2 sends in 10 s.
        let mut choice = PoolChoice::new(vec![line(1, 0, 3), line(2, NOW + 10_000, 0)], 0, NOW);
        assert_eq!(ids(&mut choice, 1), [2]);
    }

    #[test]
    fn ties_go_to_the_fewest_queued() {
        let mut lines = vec![line(1, 0, 1), line(2, 0, 0)];
        lines[0].spacing_ms = 0;
        lines[1].spacing_ms = 0;
        let mut choice = PoolChoice::new(lines, 0, NOW);
        assert_eq!(ids(&mut choice, 1), [2]);
    }

    #[test]
    fn a_sticky_line_keeps_its_recipient_while_it_can_send() {
        let mut choice = PoolChoice::new(vec![line(1, 0, 0), line(2, NOW + 60_000, 5)], 0, NOW);
        assert_eq!(
            choice.choose(Some(Uuid::from_u128(2))),
            Some(Uuid::from_u128(2))
        );
        // Out of its daily cap: the recipient goes elsewhere.
        let mut capped = PoolChoice::new(
            vec![line(1, 0, 0), line(2, NOW + DAILY_CAP_WAIT_MS + 1, 0)],
            0,
            NOW,
        );
        assert_eq!(
            capped.choose(Some(Uuid::from_u128(2))),
            Some(Uuid::from_u128(1))
        );
        // Offline (not a candidate): elsewhere too.
        let mut gone = PoolChoice::new(vec![line(1, 0, 0)], 0, NOW);
        assert_eq!(
            gone.choose(Some(Uuid::from_u128(9))),
            Some(Uuid::from_u128(1))
        );
    }

    #[test]
    fn a_capped_line_is_chosen_only_when_every_line_is() {
        let far = NOW + DAILY_CAP_WAIT_MS + 1;
        let mut choice = PoolChoice::new(vec![line(1, far, 0), line(2, NOW + 60_000, 50)], 0, NOW);
        assert_eq!(ids(&mut choice, 1), [2]);
        let mut all_capped = PoolChoice::new(vec![line(1, far, 0)], 0, NOW);
        assert_eq!(ids(&mut all_capped, 1), [1]);
    }

    #[test]
    fn a_stalled_line_is_chosen_only_when_every_line_is_and_loses_its_sticky_recipients() {
        let mut stalled = line(1, 0, 0);
        stalled.stalled = true;
        let mut choice = PoolChoice::new(vec![stalled.clone(), line(2, NOW + 60_000, 9)], 0, NOW);
        assert_eq!(
            choice.choose(Some(Uuid::from_u128(1))),
            Some(Uuid::from_u128(2))
        );
        let mut alone = PoolChoice::new(vec![stalled], 0, NOW);
        assert_eq!(ids(&mut alone, 1), [1]);
    }

    #[test]
    fn no_online_line_is_no_choice() {
        let mut choice = PoolChoice::new(Vec::new(), 3, NOW);
        assert_eq!(choice.choose(None), None);
        assert_eq!(choice.choose(Some(Uuid::from_u128(1))), None);
    }

    #[test]
    fn a_bulk_send_spreads_by_pace() {
        // Two lines at the same pace: six messages go three and three.
        let mut choice = PoolChoice::new(vec![line(1, 0, 0), line(2, 0, 0)], 0, NOW);
        let chosen = ids(&mut choice, 6);
        assert_eq!(chosen.iter().filter(|&&id| id == 1).count(), 3);
        assert_eq!(chosen.iter().filter(|&&id| id == 2).count(), 3);
    }
}
