//! Per-phone send pace: owns the exact sliding-log rule that decides when a paired phone may
//! send its next SMS (at most `per_minute` sends in every 60 s interval, at most
//! `per_30_minutes` in every 30 min interval and, when set, at most `per_day` in every 24 h
//! interval; excess messages wait, never rejected). The pace also carries `jitter_seconds`, the
//! random extra wait before each hand-over, which the Phone actor draws; the windows never
//! depend on it.
//!
//! # What "window" means
//!
//! A send at instant `t` is allowed iff, among the recorded sends, fewer than `per_minute` lie in
//! the half-open interval `(t - 60 s, t]`, fewer than `per_30_minutes` lie in `(t - 1800 s, t]`
//! and (with a `per_day`) fewer than `per_day` lie in `(t - 24 h, t]`. A send therefore leaves
//! the minute window exactly 60 s after it happened: six sends at `0 s` allow the seventh at
//! exactly `60 s`, not a moment earlier. Because every send is checked against the windows that
//! end at itself, every interval of 60 s (resp. 30 min, 24 h) of the resulting schedule holds
//! at most `per_minute` (resp. `per_30_minutes`, `per_day`) sends.
//!
//! This is an exact log, not a refilling token bucket (which overshoots the 30 min bound), and it
//! is also never slower than the rule: a sender that always sends at [`PaceLog::next_allowed`]
//! achieves exactly `per_30_minutes` per 30 min (or `per_minute` per minute) in the long run.
//!
//! Time is always passed in; this module never reads a clock.

use std::collections::VecDeque;
use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// Length of the short sliding window: 60 seconds.
pub const MINUTE_WINDOW: TimeDelta = TimeDelta::seconds(60);

/// Length of the long sliding window: 1800 seconds (30 minutes).
pub const THIRTY_MINUTE_WINDOW: TimeDelta = TimeDelta::seconds(30 * 60);

/// Default maximum number of sends per phone in any 60-second interval.
pub const DEFAULT_PER_MINUTE: u32 = 6;

/// Default maximum number of sends per phone in any 30-minute interval.
pub const DEFAULT_PER_30_MINUTES: u32 = 25;

/// Length of the daily sliding window: 86 400 seconds (24 hours).
pub const DAY_WINDOW: TimeDelta = TimeDelta::seconds(24 * 3600);

/// Upper bound accepted for [`Pace::per_30_minutes`] (sends per 30 minutes); it also bounds the
/// number of timestamps a [`PaceLog`] keeps.
pub const MAX_PER_30_MINUTES: u32 = 100_000;

/// Upper bound accepted for [`Pace::per_day`] (sends per 24 hours); the same bound as the
/// 30-minute one, so the log stays as small.
pub const MAX_PER_DAY: u32 = 100_000;

/// Upper bound accepted for [`Pace::jitter_seconds`]: one hour.
pub const MAX_JITTER_SECONDS: u32 = 3600;

/// Most timestamps a [`PaceLog`] ever holds: enough for the largest valid pace.
const MAX_LOG_LEN: usize = MAX_PER_30_MINUTES as usize;

/// The pace of one phone: exact sliding-window limits that must all hold, and the jitter.
///
/// Deserialization validates through [`Pace::new`], [`Pace::with_per_day`] and
/// [`Pace::with_jitter_seconds`]; the public fields allow building an unvalidated value, which
/// [`PaceLog`] tolerates by clamping each limit to `1..=MAX_PER_30_MINUTES` (it never panics
/// and never stalls forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PaceFields")]
pub struct Pace {
    /// Maximum number of sends in any interval of 60 seconds.
    pub per_minute: u32,
    /// Maximum number of sends in any interval of 30 minutes (1800 seconds).
    pub per_30_minutes: u32,
    /// Maximum number of sends in any interval of 24 hours; None: no daily cap.
    pub per_day: Option<u32>,
    /// Each hand-over waits a further uniform random 0..=`jitter_seconds` s once the windows
    /// allow it (0: none). It only ever delays a send.
    pub jitter_seconds: u32,
}

/// The unvalidated wire/config shape of [`Pace`]; a field left out keeps its [`Pace::DEFAULT`]
/// value (so a configuration may set `pace.per_minute` alone), an unknown field is refused.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PaceFields {
    per_minute: u32,
    per_30_minutes: u32,
    per_day: Option<u32>,
    jitter_seconds: u32,
}

impl Default for PaceFields {
    fn default() -> Self {
        PaceFields {
            per_minute: Pace::DEFAULT.per_minute,
            per_30_minutes: Pace::DEFAULT.per_30_minutes,
            per_day: Pace::DEFAULT.per_day,
            jitter_seconds: Pace::DEFAULT.jitter_seconds,
        }
    }
}

impl TryFrom<PaceFields> for Pace {
    type Error = PaceError;

    fn try_from(fields: PaceFields) -> Result<Self, Self::Error> {
        Pace::new(fields.per_minute, fields.per_30_minutes)?
            .with_per_day(fields.per_day)?
            .with_jitter_seconds(fields.jitter_seconds)
    }
}

impl Pace {
    /// The product default: 6 sends per minute and 25 sends per 30 minutes, no daily cap, no
    /// jitter.
    pub const DEFAULT: Pace = Pace {
        per_minute: DEFAULT_PER_MINUTE,
        per_30_minutes: DEFAULT_PER_30_MINUTES,
        per_day: None,
        jitter_seconds: 0,
    };

    /// Builds a validated pace: both limits at least 1, `per_minute <= per_30_minutes` and
    /// `per_30_minutes <= MAX_PER_30_MINUTES` (so the log stays bounded).
    ///
    /// The error names the offending field (`pace.per_minute` or `pace.per_30_minutes`).
    pub fn new(per_minute: u32, per_30_minutes: u32) -> Result<Pace, PaceError> {
        if per_minute < 1 {
            return Err(PaceError::new(
                "pace.per_minute",
                format!("must be at least 1 (got {per_minute})"),
            ));
        }
        if per_30_minutes < 1 {
            return Err(PaceError::new(
                "pace.per_30_minutes",
                format!("must be at least 1 (got {per_30_minutes})"),
            ));
        }
        if per_30_minutes > MAX_PER_30_MINUTES {
            return Err(PaceError::new(
                "pace.per_30_minutes",
                format!("must be at most {MAX_PER_30_MINUTES} (got {per_30_minutes})"),
            ));
        }
        if per_minute > per_30_minutes {
            return Err(PaceError::new(
                "pace.per_minute",
                format!(
                    "must not exceed pace.per_30_minutes ({per_30_minutes}) (got {per_minute})"
                ),
            ));
        }
        Ok(Pace {
            per_minute,
            per_30_minutes,
            per_day: None,
            jitter_seconds: 0,
        })
    }

    /// This pace with a daily cap: `1..=MAX_PER_DAY` sends in any 24 hours, or None for none.
    /// A cap below `per_30_minutes` (or `per_minute`) is legal: the smallest window wins.
    ///
    /// The error names `pace.per_day`.
    pub fn with_per_day(self, per_day: Option<u32>) -> Result<Pace, PaceError> {
        if let Some(limit) = per_day
            && !(1..=MAX_PER_DAY).contains(&limit)
        {
            return Err(PaceError::new(
                "pace.per_day",
                format!("must be between 1 and {MAX_PER_DAY}, or null for none (got {limit})"),
            ));
        }
        Ok(Pace { per_day, ..self })
    }

    /// This pace with a random extra wait of 0..=`jitter_seconds` s before each hand-over
    /// (`0..=MAX_JITTER_SECONDS`).
    ///
    /// The error names `pace.jitter_seconds`.
    pub fn with_jitter_seconds(self, jitter_seconds: u32) -> Result<Pace, PaceError> {
        if jitter_seconds > MAX_JITTER_SECONDS {
            return Err(PaceError::new(
                "pace.jitter_seconds",
                format!("must be between 0 and {MAX_JITTER_SECONDS} (got {jitter_seconds})"),
            ));
        }
        Ok(Pace {
            jitter_seconds,
            ..self
        })
    }

    /// The limits as log depths (minute, 30 minutes, day), clamped to `1..=MAX_LOG_LEN` so
    /// unvalidated values are safe.
    fn depths(self) -> (usize, usize, Option<usize>) {
        (
            clamp_depth(self.per_minute),
            clamp_depth(self.per_30_minutes),
            self.per_day.map(clamp_depth),
        )
    }

    /// How many of the most recent sends a decision for this pace can need at most: the
    /// deepest window's limit (clamped like the log's). A rebuild reads no more.
    pub fn history_len(self) -> usize {
        let (minute, long, day) = self.depths();
        minute.max(long).max(day.unwrap_or(0))
    }

    /// How many of the most recent sends older than 30 minutes a log must keep for this pace:
    /// the daily cap's depth, 0 without one.
    fn day_depth(self) -> usize {
        self.depths().2.unwrap_or(0)
    }
}

/// A limit as a log depth, clamped to `1..=MAX_LOG_LEN`.
fn clamp_depth(limit: u32) -> usize {
    usize::try_from(limit)
        .unwrap_or(MAX_LOG_LEN)
        .clamp(1, MAX_LOG_LEN)
}

impl Default for Pace {
    /// Same as [`Pace::DEFAULT`] (6 per minute, 25 per 30 minutes).
    fn default() -> Self {
        Pace::DEFAULT
    }
}

/// Why a [`Pace`] is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaceError {
    /// The offending configuration field, e.g. `"pace.per_minute"`.
    pub field: &'static str,
    /// A human explanation of what is wrong with the field's value.
    pub message: String,
}

impl PaceError {
    fn new(field: &'static str, message: String) -> Self {
        PaceError { field, message }
    }
}

impl fmt::Display for PaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.message)
    }
}

impl std::error::Error for PaceError {}

/// `t + d`, saturating at the representable range instead of panicking.
fn saturating_add(t: DateTime<Utc>, d: TimeDelta) -> DateTime<Utc> {
    t.checked_add_signed(d).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `t - d`, saturating at the representable range instead of panicking.
fn saturating_sub(t: DateTime<Utc>, d: TimeDelta) -> DateTime<Utc> {
    t.checked_sub_signed(d).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The exact log of one phone's recent send times, sorted ascending.
///
/// It keeps only sends that can still matter: those within 30 minutes of the latest recorded
/// send and, when the pace it was made for has a `per_day`, of the older sends within 24 hours
/// only as many as the most recent `per_day` sends need (a phone without a daily cap keeps no
/// day of history). Never more than `MAX_PER_30_MINUTES` (100 000) timestamps.
///
/// Sends are expected in non-decreasing time order. If the clock steps backwards, the log stays
/// conservative: [`PaceLog::next_allowed`] never allows a send before the latest recorded one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaceLog {
    sends: VecDeque<DateTime<Utc>>,
    /// How many of the most recent sends the log keeps up to 24 h back (the pace's `per_day`
    /// depth; 0: only the last 30 minutes).
    day_depth: usize,
}

/// How many recorded sends lie in each window ending at an instant ([`PaceLog::used`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    /// Sends in the last 60 s.
    pub minute: u32,
    /// Sends in the last 30 minutes.
    pub thirty_minutes: u32,
    /// Sends in the last 24 h the log keeps: exact up to the pace's `per_day`, which is all a
    /// decision needs.
    pub day: u32,
}

impl PaceLog {
    /// An empty log keeping the last 30 minutes: the first send is allowed at any time.
    pub fn new() -> Self {
        PaceLog::default()
    }

    /// An empty log keeping what `pace` needs (a day of history when it has a `per_day`).
    pub fn for_pace(pace: Pace) -> Self {
        PaceLog {
            sends: VecDeque::new(),
            day_depth: pace.day_depth(),
        }
    }

    /// Rebuilds a log for `pace` from recorded send times (any order, any age), e.g. after a
    /// restart or a hand-over to another node.
    ///
    /// Keeps only sends within the last 30 minutes of `now` (24 hours when `pace` has a
    /// `per_day`; strictly after `now - window`; sends later than `now` are kept too, to stay
    /// conservative), sorted ascending. The result gives the same [`PaceLog::next_allowed`] at
    /// `now` as the live log that recorded those sends.
    pub fn from_sends(
        sends: impl IntoIterator<Item = DateTime<Utc>>,
        pace: Pace,
        now: DateTime<Utc>,
    ) -> Self {
        let cutoff = saturating_sub(now, PaceLog::horizon(pace));
        let mut kept: Vec<DateTime<Utc>> = sends.into_iter().filter(|s| *s > cutoff).collect();
        kept.sort_unstable();
        let mut log = PaceLog {
            sends: VecDeque::from(kept),
            day_depth: pace.day_depth(),
        };
        log.prune();
        log
    }

    /// How far back a log for `pace` must know the sends: 24 h with a `per_day`, else 30 min.
    pub fn horizon(pace: Pace) -> TimeDelta {
        if pace.per_day.is_some() {
            DAY_WINDOW
        } else {
            THIRTY_MINUTE_WINDOW
        }
    }

    /// True when this log holds all the history `pace` needs; false when `pace` asks for more
    /// days' depth than the log kept (a `per_day` was set or raised), and the log must be
    /// rebuilt from the stored sends before it decides for `pace`.
    pub fn covers(&self, pace: Pace) -> bool {
        pace.day_depth() <= self.day_depth
    }

    /// Keeps what `pace` needs from now on; a smaller depth than before drops the older sends
    /// at once. Use [`PaceLog::covers`] first: a deeper need cannot be met by the log alone.
    pub fn keep_for(&mut self, pace: Pace) {
        self.day_depth = pace.day_depth();
        self.prune();
    }

    /// `None` when one send is allowed at `now`; otherwise `Some(t)` with the earliest instant
    /// `t > now` at which every window allows one send (exact, no rounding).
    ///
    /// That instant is the latest of: the latest recorded send; the `per_minute`-th most recent
    /// send + 60 s; the `per_30_minutes`-th most recent send + 1800 s; the `per_day`-th most
    /// recent send + 24 h. A `per_day` deeper than the log keeps ([`PaceLog::covers`]) counts
    /// only the sends kept.
    pub fn next_allowed(&self, pace: Pace, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let (minute_depth, long_depth, day_depth) = pace.depths();
        let mut earliest = *self.sends.back()?;
        if let Some(oldest) = self.nth_most_recent(minute_depth) {
            earliest = earliest.max(saturating_add(oldest, MINUTE_WINDOW));
        }
        if let Some(oldest) = self.nth_most_recent(long_depth) {
            earliest = earliest.max(saturating_add(oldest, THIRTY_MINUTE_WINDOW));
        }
        if let Some(oldest) = day_depth.and_then(|depth| self.nth_most_recent(depth)) {
            earliest = earliest.max(saturating_add(oldest, DAY_WINDOW));
        }
        (earliest > now).then_some(earliest)
    }

    /// Records one send at `now` and prunes entries that can no longer matter. Callers record
    /// only allowed sends, normally with non-decreasing times; an earlier time is still
    /// inserted in order.
    pub fn record(&mut self, now: DateTime<Utc>) {
        match self.sends.back() {
            Some(last) if *last > now => {
                let at = self.sends.partition_point(|s| *s <= now);
                self.sends.insert(at, now);
            }
            _ => self.sends.push_back(now),
        }
        self.prune();
    }

    /// Removes one send recorded at exactly `at` (a reserved send that did not happen); false
    /// when none is there (already pruned). Removing only ever allows fewer sends to count, so
    /// it is used for the caller's own reservation and nothing else.
    pub fn unrecord(&mut self, at: DateTime<Utc>) -> bool {
        match self.sends.iter().rposition(|s| *s == at) {
            Some(index) => {
                self.sends.remove(index);
                true
            }
            None => false,
        }
    }

    /// How many recorded sends lie in each window ending at `now`.
    pub fn used(&self, now: DateTime<Utc>) -> Used {
        Used {
            minute: self.count_in_window(now, MINUTE_WINDOW),
            thirty_minutes: self.count_in_window(now, THIRTY_MINUTE_WINDOW),
            day: self.count_in_window(now, DAY_WINDOW),
        }
    }

    /// The retained send times, oldest first.
    pub fn sends(&self) -> impl ExactSizeIterator<Item = DateTime<Utc>> + '_ {
        self.sends.iter().copied()
    }

    /// The `n`-th most recent send (`n >= 1`), if the log holds that many.
    fn nth_most_recent(&self, n: usize) -> Option<DateTime<Utc>> {
        let index = self.sends.len().checked_sub(n)?;
        self.sends.get(index).copied()
    }

    /// Number of sends in `(now - window, now]`.
    fn count_in_window(&self, now: DateTime<Utc>, window: TimeDelta) -> u32 {
        let start = saturating_sub(now, window);
        let upto_now = self.sends.partition_point(|s| *s <= now);
        let upto_start = self.sends.partition_point(|s| *s <= start);
        u32::try_from(upto_now.saturating_sub(upto_start)).unwrap_or(u32::MAX)
    }

    /// Drops sends at or before `latest - 24 h`, and those at or before `latest - 30 min`
    /// beyond the most recent `day_depth`; keeps at most `MAX_LOG_LEN` timestamps.
    fn prune(&mut self) {
        let Some(latest) = self.sends.back().copied() else {
            return;
        };
        let long_cutoff = saturating_sub(latest, THIRTY_MINUTE_WINDOW);
        let day_cutoff = saturating_sub(latest, DAY_WINDOW);
        while let Some(oldest) = self.sends.front().copied() {
            let past_day = oldest <= day_cutoff;
            let beyond_depth = oldest <= long_cutoff && self.sends.len() > self.day_depth;
            if !(past_day || beyond_depth) {
                break;
            }
            self.sends.pop_front();
        }
        while self.sends.len() > MAX_LOG_LEN {
            self.sends.pop_front();
        }
    }
}

/// The jitter wait of a phone's next hand-over (`Pace::jitter_seconds`): drawn once, when the
/// next message may go as far as the windows are concerned, and kept until that message is
/// handed over. The windows are checked again at the actual send time, so a jitter wait only
/// ever delays a send, never lets one break a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Jitter {
    /// The drawn wait ends here; None: nothing drawn yet for the next message.
    until: Option<DateTime<Utc>>,
}

impl Jitter {
    /// Nothing drawn yet.
    pub fn new() -> Self {
        Jitter::default()
    }

    /// Call when the windows allow the next message at `now`: `None` when it may go now,
    /// otherwise `Some(t)`, the end of its wait. The first call for a message draws the wait
    /// with `draw(max)`, which must answer a delay in `0..=max` (uniform in production); later
    /// calls keep that draw.
    pub fn hold(
        &mut self,
        pace: Pace,
        now: DateTime<Utc>,
        draw: impl FnOnce(TimeDelta) -> TimeDelta,
    ) -> Option<DateTime<Utc>> {
        if pace.jitter_seconds == 0 {
            self.until = None;
            return None;
        }
        let until = *self.until.get_or_insert_with(|| {
            let max = TimeDelta::seconds(i64::from(pace.jitter_seconds.min(MAX_JITTER_SECONDS)));
            saturating_add(now, draw(max).clamp(TimeDelta::zero(), max))
        });
        (until > now).then_some(until)
    }

    /// The drawn wait, if one is running (for [`next_send_at`]).
    pub fn until(&self) -> Option<DateTime<Utc>> {
        self.until
    }

    /// The message was handed over (or none waits any more): the next one draws anew.
    pub fn clear(&mut self) {
        self.until = None;
    }
}

/// When a phone could next hand a message over as far as its pace goes: `None` when now (or
/// when it has no pace), otherwise the earliest instant every window allows a send, or the
/// end of a jitter wait already drawn, whichever is later. A jitter wait not drawn yet is not
/// counted: it is random.
pub fn next_send_at(
    pace: Option<Pace>,
    log: &PaceLog,
    jitter: &Jitter,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let pace = pace?;
    let windows = log.next_allowed(pace, now);
    let jitter = jitter.until().filter(|until| *until > now);
    windows.max(jitter)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    fn at_secs(secs: i64) -> DateTime<Utc> {
        t0() + TimeDelta::seconds(secs)
    }

    fn pace(per_minute: u32, per_30_minutes: u32) -> Pace {
        Pace::new(per_minute, per_30_minutes).unwrap()
    }

    fn daily(per_minute: u32, per_30_minutes: u32, per_day: u32) -> Pace {
        pace(per_minute, per_30_minutes)
            .with_per_day(Some(per_day))
            .unwrap()
    }

    /// The minute and 30-minute counts of a [`Used`].
    fn windows(used: Used) -> (u32, u32) {
        (used.minute, used.thirty_minutes)
    }

    /// Brute force, independent of `PaceLog`: number of `sends` in `(t - window, t]`.
    fn brute_count(sends: &[DateTime<Utc>], t: DateTime<Utc>, window: TimeDelta) -> u32 {
        let n = sends
            .iter()
            .filter(|s| **s > t - window && **s <= t)
            .count();
        u32::try_from(n).unwrap()
    }

    /// Brute force: would one more send at `t` be allowed after `prior`?
    fn brute_allowed(prior: &[DateTime<Utc>], pace: Pace, t: DateTime<Utc>) -> bool {
        brute_count(prior, t, MINUTE_WINDOW) < pace.per_minute
            && brute_count(prior, t, THIRTY_MINUTE_WINDOW) < pace.per_30_minutes
            && pace
                .per_day
                .is_none_or(|per_day| brute_count(prior, t, DAY_WINDOW) < per_day)
    }

    /// Checks every 60 s and every 30 min interval of a schedule: the busiest interval of a given
    /// length ends at a send, so counting `(s - window, s]` for every send `s` covers them all.
    fn window_violation(schedule: &[DateTime<Utc>], pace: Pace) -> Option<String> {
        let mut sorted = schedule.to_vec();
        sorted.sort_unstable();
        for s in &sorted {
            let in_minute = brute_count(&sorted, *s, MINUTE_WINDOW);
            if in_minute > pace.per_minute {
                return Some(format!("{in_minute} sends in the 60 s ending at {s}"));
            }
            let in_long = brute_count(&sorted, *s, THIRTY_MINUTE_WINDOW);
            if in_long > pace.per_30_minutes {
                return Some(format!("{in_long} sends in the 30 min ending at {s}"));
            }
            let in_day = brute_count(&sorted, *s, DAY_WINDOW);
            if pace.per_day.is_some_and(|per_day| in_day > per_day) {
                return Some(format!("{in_day} sends in the 24 h ending at {s}"));
            }
        }
        None
    }

    /// A sender with an endless backlog that always sends at the earliest allowed instant.
    fn greedy(pace: Pace, start: DateTime<Utc>, end: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut log = PaceLog::for_pace(pace);
        let mut sends = Vec::new();
        let mut now = start;
        loop {
            let t = log.next_allowed(pace, now).unwrap_or(now);
            if t >= end {
                return sends;
            }
            log.record(t);
            sends.push(t);
            now = t;
        }
    }

    /// Every greedy send after the first instant could not have happened 1 ns earlier.
    fn assert_greedy_earliest(sends: &[DateTime<Utc>], pace: Pace) {
        for i in 1..sends.len() {
            if sends[i] > sends[i - 1] {
                let just_before = sends[i] - TimeDelta::nanoseconds(1);
                assert!(
                    !brute_allowed(&sends[..i], pace, just_before),
                    "send {i} at {} was late",
                    sends[i]
                );
            }
        }
    }

    fn count_before(sends: &[DateTime<Utc>], end: DateTime<Utc>) -> usize {
        sends.iter().filter(|s| **s < end).count()
    }

    #[test]
    fn unrecord_gives_back_exactly_one_reserved_send() {
        let pace = pace(2, 25);
        let mut log = PaceLog::new();
        log.record(at_secs(0));
        log.record(at_secs(1));
        assert_eq!(log.next_allowed(pace, at_secs(2)), Some(at_secs(60)));
        assert!(log.unrecord(at_secs(1)));
        assert_eq!(log.next_allowed(pace, at_secs(2)), None);
        assert_eq!(log.sends().collect::<Vec<_>>(), [at_secs(0)]);
        assert!(
            !log.unrecord(at_secs(1)),
            "only what was recorded comes back"
        );
    }

    #[test]
    fn constants_have_expected_lengths() {
        assert_eq!(MINUTE_WINDOW.num_seconds(), 60);
        assert_eq!(THIRTY_MINUTE_WINDOW.num_seconds(), 1800);
        assert_eq!(Pace::default(), pace(6, 25));
    }

    #[test]
    fn new_validates_each_field() {
        assert_eq!(Pace::new(0, 25).unwrap_err().field, "pace.per_minute");
        assert_eq!(Pace::new(1, 0).unwrap_err().field, "pace.per_30_minutes");
        assert_eq!(Pace::new(7, 6).unwrap_err().field, "pace.per_minute");
        let too_big = Pace::new(1, MAX_PER_30_MINUTES + 1).unwrap_err();
        assert_eq!(too_big.field, "pace.per_30_minutes");
        assert_eq!(
            too_big.to_string(),
            "pace.per_30_minutes must be at most 100000 (got 100001)"
        );
        assert_eq!(
            Pace::new(0, 25).unwrap_err().to_string(),
            "pace.per_minute must be at least 1 (got 0)"
        );
        assert!(Pace::new(1, 1).is_ok());
        assert!(Pace::new(MAX_PER_30_MINUTES, MAX_PER_30_MINUTES).is_ok());
    }

    #[test]
    fn deserialization_validates() {
        use serde::de::IntoDeserializer;
        use serde::de::value::{Error, MapDeserializer};

        fn parse(per_minute: u32, per_30_minutes: u32) -> Result<Pace, Error> {
            let fields = vec![
                ("per_minute", per_minute.into_deserializer()),
                ("per_30_minutes", per_30_minutes.into_deserializer()),
            ];
            Pace::deserialize(MapDeserializer::new(fields.into_iter()))
        }

        assert_eq!(parse(6, 25).unwrap(), pace(6, 25));
        let err = parse(30, 25).unwrap_err().to_string();
        assert!(err.contains("pace.per_minute"), "{err}");
    }

    #[test]
    fn empty_log_allows_immediately() {
        let log = PaceLog::new();
        assert_eq!(log.next_allowed(Pace::DEFAULT, t0()), None);
        assert_eq!(windows(log.used(t0())), (0, 0));
    }

    #[test]
    fn boundary_two_per_minute_waits_exactly_sixty_seconds() {
        let p = pace(2, 25);
        let mut log = PaceLog::new();
        log.record(at_secs(0));
        assert_eq!(log.next_allowed(p, at_secs(0)), None);
        log.record(at_secs(0));
        assert_eq!(log.next_allowed(p, at_secs(0)), Some(at_secs(60)));
        assert_eq!(log.next_allowed(p, at_secs(30)), Some(at_secs(60)));
        assert_eq!(
            log.next_allowed(p, at_secs(60) - TimeDelta::nanoseconds(1)),
            Some(at_secs(60))
        );
        assert_eq!(log.next_allowed(p, at_secs(60)), None);
        assert_eq!(windows(log.used(at_secs(59))), (2, 2));
        assert_eq!(windows(log.used(at_secs(60))), (0, 2));
    }

    #[test]
    fn six_at_zero_then_seventh_at_exactly_sixty() {
        let mut log = PaceLog::new();
        for _ in 0..6 {
            assert_eq!(log.next_allowed(Pace::DEFAULT, at_secs(0)), None);
            log.record(at_secs(0));
        }
        assert_eq!(
            log.next_allowed(Pace::DEFAULT, at_secs(0)),
            Some(at_secs(60))
        );
        assert_eq!(log.next_allowed(Pace::DEFAULT, at_secs(60)), None);
    }

    #[test]
    fn thirty_minute_window_boundary_is_exact() {
        let p = pace(1, 2);
        let mut log = PaceLog::new();
        log.record(at_secs(0));
        assert_eq!(log.next_allowed(p, at_secs(1)), Some(at_secs(60)));
        log.record(at_secs(60));
        assert_eq!(log.next_allowed(p, at_secs(60)), Some(at_secs(1800)));
        assert_eq!(windows(log.used(at_secs(1799))), (0, 2));
        assert_eq!(windows(log.used(at_secs(1800))), (0, 1));
        assert_eq!(log.next_allowed(p, at_secs(1800)), None);
    }

    #[test]
    fn greedy_default_thirty_minutes_sends_exactly_25() {
        let p = Pace::DEFAULT;
        let sends = greedy(p, t0(), at_secs(1800));
        assert_eq!(sends.len(), 25);
        assert_eq!(count_before(&sends, at_secs(60)), 6);
        assert_eq!(window_violation(&sends, p), None);
        assert_greedy_earliest(&sends, p);
    }

    #[test]
    fn greedy_long_run_hits_the_30_minute_bound() {
        let p = Pace::DEFAULT;
        let sends = greedy(p, t0(), at_secs(10 * 3600));
        assert!((495..=505).contains(&sends.len()), "{}", sends.len());
        assert_eq!(sends.len(), 500);
        for half_hour in 0..20 {
            let start = at_secs(half_hour * 1800);
            let end = at_secs((half_hour + 1) * 1800);
            let n = sends.iter().filter(|s| **s >= start && **s < end).count();
            assert_eq!(n, 25, "half hour {half_hour}");
        }
        assert_eq!(window_violation(&sends, p), None);
        assert_greedy_earliest(&sends, p);
    }

    #[test]
    fn greedy_long_run_hits_the_minute_bound() {
        let p = pace(6, 1000);
        let sends = greedy(p, t0(), at_secs(10 * 3600));
        assert!((3564..=3636).contains(&sends.len()), "{}", sends.len());
        assert_eq!(sends.len(), 3600);
        assert_eq!(window_violation(&sends, p), None);
        assert_greedy_earliest(&sends, p);
    }

    #[test]
    fn rebuilt_log_matches_live_log() {
        let p = pace(4, 30);
        let mut live = PaceLog::new();
        let mut all = Vec::new();
        let mut now = t0();
        // Irregular backlog over two hours: bursts every ~7 min plus stragglers.
        for step in 0..400_i64 {
            now += TimeDelta::seconds((step * 37) % 420);
            let t = live.next_allowed(p, now).unwrap_or(now);
            live.record(t);
            all.push(t);
            now = t;
            for probe in [0, 1, 59, 60, 61, 900, 1799, 1800] {
                let q = now + TimeDelta::seconds(probe);
                let rebuilt = PaceLog::from_sends(all.iter().rev().copied(), p, q);
                assert_eq!(rebuilt.next_allowed(p, q), live.next_allowed(p, q));
                assert_eq!(windows(rebuilt.used(q)), windows(live.used(q)));
            }
        }
        let rebuilt = PaceLog::from_sends(all.iter().rev().copied(), p, now);
        assert!(rebuilt.sends().all(|s| s > now - THIRTY_MINUTE_WINDOW));
        assert!(rebuilt.sends().len() <= 30);
        assert!(
            rebuilt
                .sends()
                .zip(rebuilt.sends().skip(1))
                .all(|(a, b)| a <= b)
        );
    }

    #[test]
    fn record_prunes_old_entries() {
        let mut log = PaceLog::new();
        log.record(at_secs(0));
        log.record(at_secs(100));
        log.record(at_secs(1800));
        assert_eq!(
            log.sends().collect::<Vec<_>>(),
            vec![at_secs(100), at_secs(1800)]
        );
    }

    #[test]
    fn out_of_order_record_is_inserted_in_order_and_stays_conservative() {
        let p = pace(6, 25);
        let mut log = PaceLog::new();
        log.record(at_secs(10));
        log.record(at_secs(5));
        log.record(at_secs(7));
        assert_eq!(
            log.sends().collect::<Vec<_>>(),
            vec![at_secs(5), at_secs(7), at_secs(10)]
        );
        // The clock stepped back: never allow a send before the latest recorded one.
        assert_eq!(log.next_allowed(p, at_secs(8)), Some(at_secs(10)));
        assert_eq!(log.next_allowed(p, at_secs(10)), None);
        assert_eq!(windows(log.used(at_secs(8))), (2, 2));
    }

    #[test]
    fn unvalidated_pace_never_panics() {
        let mut log = PaceLog::new();
        log.record(at_secs(0));
        let zero = Pace {
            per_minute: 0,
            per_30_minutes: 0,
            per_day: None,
            jitter_seconds: 0,
        };
        // Treated as 1 per minute and 1 per 30 minutes.
        assert_eq!(log.next_allowed(zero, at_secs(0)), Some(at_secs(1800)));
        let huge = Pace {
            per_minute: u32::MAX,
            per_30_minutes: u32::MAX,
            per_day: Some(u32::MAX),
            jitter_seconds: u32::MAX,
        };
        assert_eq!(log.next_allowed(huge, at_secs(0)), None);
        let mut far = PaceLog::new();
        far.record(DateTime::<Utc>::MAX_UTC);
        assert_eq!(
            far.next_allowed(zero, DateTime::<Utc>::MAX_UTC),
            None,
            "saturates instead of overflowing"
        );
        assert_eq!(windows(far.used(DateTime::<Utc>::MIN_UTC)), (0, 0));
    }

    #[test]
    fn log_is_bounded() {
        let mut log = PaceLog::new();
        for _ in 0..(MAX_LOG_LEN + 10) {
            log.record(t0());
        }
        assert_eq!(log.sends().len(), MAX_LOG_LEN);
    }

    /// Paces with and without a daily cap; the caps are small enough to bind within a run.
    fn pace_strategy() -> impl Strategy<Value = Pace> {
        (1_u32..20).prop_flat_map(|per_minute| {
            (per_minute..=200, prop::option::of(1_u32..80)).prop_map(move |(per_30, per_day)| {
                Pace::new(per_minute, per_30)
                    .unwrap()
                    .with_per_day(per_day)
                    .unwrap()
            })
        })
    }

    /// Gaps between arrivals in milliseconds: bursts (0), sub-second, minutes, tens of minutes.
    fn gaps_strategy() -> impl Strategy<Value = Vec<i64>> {
        prop::collection::vec(
            prop_oneof![
                4 => Just(0_i64),
                3 => 0_i64..2_000,
                2 => 0_i64..120_000,
                1 => 0_i64..1_800_000,
            ],
            1..300,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn queued_dispatch_is_exact_and_never_late(p in pace_strategy(), gaps in gaps_strategy()) {
            let mut arrival = t0();
            let mut log = PaceLog::for_pace(p);
            let mut sent: Vec<DateTime<Utc>> = Vec::new();
            for gap in gaps {
                arrival += TimeDelta::milliseconds(gap);
                // The message reaches the head of the FIFO queue when it has arrived and the
                // previous message has been sent.
                let ready = sent.last().map_or(arrival, |prev| (*prev).max(arrival));

                // Restart safety: a log rebuilt from stored send times agrees with the live one.
                let rebuilt = PaceLog::from_sends(sent.iter().rev().copied(), p, ready);
                prop_assert_eq!(rebuilt.next_allowed(p, ready), log.next_allowed(p, ready));
                prop_assert_eq!(windows(rebuilt.used(ready)), windows(log.used(ready)));

                let t = log.next_allowed(p, ready).unwrap_or(ready);
                prop_assert!(t >= ready);
                prop_assert!(log.next_allowed(p, t).is_none());
                prop_assert!(brute_allowed(&sent, p, t), "module allowed a send the rule forbids");
                // Earliest: at the send time, either the message had just arrived or one
                // millisecond earlier the log would not allow it.
                prop_assert!(t == arrival || log.next_allowed(p, t - TimeDelta::milliseconds(1)).is_some());
                // Earliest, checked independently of the module.
                if t > ready {
                    prop_assert!(!brute_allowed(&sent, p, t - TimeDelta::nanoseconds(1)), "late send at {}", t);
                }

                log.record(t);
                sent.push(t);
            }
            prop_assert_eq!(window_violation(&sent, p), None);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Jitter: each send waits a further random delay once the windows allow it; the
        /// schedule still never breaks a window and the log stays within its bound.
        #[test]
        fn delayed_sends_never_break_a_window(
            p in pace_strategy(),
            gaps in gaps_strategy(),
            delays in prop::collection::vec(0_i64..5_000, 300),
        ) {
            let mut arrival = t0();
            let mut log = PaceLog::for_pace(p);
            let mut sent: Vec<DateTime<Utc>> = Vec::new();
            for (gap, delay) in gaps.into_iter().zip(delays) {
                arrival += TimeDelta::milliseconds(gap);
                let ready = sent.last().map_or(arrival, |prev| (*prev).max(arrival));
                let allowed = log.next_allowed(p, ready).unwrap_or(ready);
                let t = allowed + TimeDelta::milliseconds(delay);
                prop_assert!(log.next_allowed(p, t).is_none());
                prop_assert!(brute_allowed(&sent, p, t));
                log.record(t);
                sent.push(t);
                let day_depth = p.per_day.map_or(0, |d| d as usize);
                let recent = brute_count(&sent, t, THIRTY_MINUTE_WINDOW) as usize;
                prop_assert!(log.sends().len() <= recent.max(day_depth), "log holds more than it needs");
            }
            prop_assert_eq!(window_violation(&sent, p), None);
        }
    }

    #[test]
    fn per_day_and_jitter_are_validated() {
        let base = pace(6, 25);
        assert_eq!(base.per_day, None);
        assert_eq!(base.jitter_seconds, 0);
        let zero = base.with_per_day(Some(0)).unwrap_err();
        assert_eq!(zero.field, "pace.per_day");
        assert_eq!(
            zero.to_string(),
            "pace.per_day must be between 1 and 100000, or null for none (got 0)"
        );
        assert_eq!(
            base.with_per_day(Some(MAX_PER_DAY + 1)).unwrap_err().field,
            "pace.per_day"
        );
        // A day cap below the 30-minute limit is legal: the smallest window wins.
        assert_eq!(base.with_per_day(Some(1)).unwrap().per_day, Some(1));
        assert!(base.with_per_day(Some(MAX_PER_DAY)).is_ok());
        assert_eq!(base.with_per_day(None).unwrap(), base);
        let jitter = base
            .with_jitter_seconds(MAX_JITTER_SECONDS + 1)
            .unwrap_err();
        assert_eq!(jitter.field, "pace.jitter_seconds");
        assert_eq!(
            jitter.to_string(),
            "pace.jitter_seconds must be between 0 and 3600 (got 3601)"
        );
        assert_eq!(base.with_jitter_seconds(3600).unwrap().jitter_seconds, 3600);
    }

    #[test]
    fn deserialization_reads_per_day_and_jitter() {
        let parsed: Pace =
            serde_json::from_str(r#"{"per_day": 500, "jitter_seconds": 30}"#).unwrap();
        assert_eq!(
            parsed,
            Pace::DEFAULT
                .with_per_day(Some(500))
                .unwrap()
                .with_jitter_seconds(30)
                .unwrap()
        );
        let err = serde_json::from_str::<Pace>(r#"{"per_day": 0}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pace.per_day"), "{err}");
        let err = serde_json::from_str::<Pace>(r#"{"jitter_seconds": 4000}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pace.jitter_seconds"), "{err}");
    }

    #[test]
    fn day_window_boundary_is_exact() {
        let p = daily(10, 100, 3);
        let mut log = PaceLog::for_pace(p);
        for secs in [0, 1, 2] {
            assert_eq!(log.next_allowed(p, at_secs(secs)), None);
            log.record(at_secs(secs));
        }
        // The fourth waits until the first leaves the 24 h window, not a moment less.
        assert_eq!(log.next_allowed(p, at_secs(3)), Some(at_secs(86_400)));
        assert_eq!(
            log.next_allowed(p, at_secs(86_400) - TimeDelta::nanoseconds(1)),
            Some(at_secs(86_400))
        );
        assert_eq!(log.next_allowed(p, at_secs(86_400)), None);
        assert_eq!(log.used(at_secs(3_600)).day, 3);
        assert_eq!(windows(log.used(at_secs(3_600))), (0, 0));
        log.record(at_secs(86_400));
        assert_eq!(log.next_allowed(p, at_secs(86_400)), Some(at_secs(86_401)));
    }

    #[test]
    fn greedy_day_sends_exactly_per_day() {
        let p = daily(6, 25, 40);
        let sends = greedy(p, t0(), at_secs(3 * 86_400));
        assert_eq!(sends.len(), 120, "40 a day for three days");
        for day in 0..3 {
            let start = at_secs(day * 86_400);
            let end = at_secs((day + 1) * 86_400);
            let n = sends.iter().filter(|s| **s >= start && **s < end).count();
            assert_eq!(n, 40, "day {day}");
        }
        assert_eq!(window_violation(&sends, p), None);
        assert_greedy_earliest(&sends, p);
    }

    #[test]
    fn a_day_log_keeps_only_what_per_day_needs() {
        // 25 per 30 min for a day: 1200 sends, of which the log keeps the 500 the cap needs.
        let p = daily(6, 25, 500);
        let mut log = PaceLog::for_pace(pace(6, 25));
        let without_cap = pace(6, 25);
        let mut now = t0();
        for _ in 0..1200 {
            now = log.next_allowed(without_cap, now).unwrap_or(now);
            log.record(now);
        }
        assert!(log.sends().len() <= 25, "no day of history without a cap");
        assert!(!log.covers(p));
        let mut capped = PaceLog::for_pace(p);
        let mut now = t0();
        for _ in 0..1200 {
            now = capped.next_allowed(without_cap, now).unwrap_or(now);
            capped.record(now);
        }
        assert_eq!(capped.sends().len(), 500);
        assert!(capped.covers(p) && capped.covers(without_cap));
        // Dropping the cap drops the day of history at once.
        capped.keep_for(without_cap);
        assert!(capped.sends().len() <= 25);
    }

    #[test]
    fn rebuilt_day_log_matches_live_log() {
        let p = daily(3, 20, 30);
        let mut live = PaceLog::for_pace(p);
        let mut all = Vec::new();
        let mut now = t0();
        for step in 0..200_i64 {
            now += TimeDelta::seconds((step * 997) % 5_000);
            let t = live.next_allowed(p, now).unwrap_or(now);
            live.record(t);
            all.push(t);
            now = t;
            for probe in [0, 59, 60, 1800, 86_399, 86_400] {
                let q = now + TimeDelta::seconds(probe);
                let rebuilt = PaceLog::from_sends(all.iter().copied(), p, q);
                assert_eq!(rebuilt.next_allowed(p, q), live.next_allowed(p, q));
            }
        }
        assert_eq!(window_violation(&all, p), None);
    }

    #[test]
    fn jitter_is_drawn_once_per_message_and_only_delays() {
        let p = pace(6, 25).with_jitter_seconds(10).unwrap();
        let mut jitter = Jitter::new();
        let mut drawn = Vec::new();
        let mut draw = |max: TimeDelta| {
            drawn.push(max);
            TimeDelta::seconds(4)
        };
        assert_eq!(jitter.hold(p, at_secs(0), &mut draw), Some(at_secs(4)));
        // The same message keeps its draw.
        assert_eq!(jitter.hold(p, at_secs(3), &mut draw), Some(at_secs(4)));
        assert_eq!(jitter.hold(p, at_secs(4), &mut draw), None);
        assert_eq!(drawn, [TimeDelta::seconds(10)]);
        jitter.clear();
        // A draw outside 0..=max is clamped; 0 lets the message go at once.
        assert_eq!(
            jitter.hold(p, at_secs(5), |_| TimeDelta::seconds(99)),
            Some(at_secs(15))
        );
        jitter.clear();
        assert_eq!(jitter.hold(p, at_secs(5), |_| TimeDelta::zero()), None);
        jitter.clear();
        // Without jitter nothing is drawn.
        assert_eq!(
            jitter.hold(pace(6, 25), at_secs(5), |_| unreachable!()),
            None
        );
    }

    #[test]
    fn next_send_at_counts_every_window_and_a_drawn_jitter() {
        let p = daily(2, 25, 3).with_jitter_seconds(30).unwrap();
        let mut log = PaceLog::for_pace(p);
        let mut jitter = Jitter::new();
        assert_eq!(next_send_at(Some(p), &log, &jitter, at_secs(0)), None);
        assert_eq!(next_send_at(None, &log, &jitter, at_secs(0)), None);
        log.record(at_secs(0));
        log.record(at_secs(0));
        assert_eq!(
            next_send_at(Some(p), &log, &jitter, at_secs(1)),
            Some(at_secs(60))
        );
        jitter.hold(p, at_secs(60), |_| TimeDelta::seconds(20));
        assert_eq!(
            next_send_at(Some(p), &log, &jitter, at_secs(61)),
            Some(at_secs(80))
        );
        log.record(at_secs(80));
        jitter.clear();
        // The day cap: the fourth waits for the first to leave the 24 h window.
        assert_eq!(
            next_send_at(Some(p), &log, &jitter, at_secs(81)),
            Some(at_secs(86_400))
        );
    }
}
