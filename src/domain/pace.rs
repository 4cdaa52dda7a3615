//! Per-phone send pace: owns the exact two-window sliding-log rule that decides when a paired
//! phone may send its next SMS (at most `per_minute` sends in every 60 s interval and at most
//! `per_30_minutes` sends in every 30 min interval; excess messages wait, never rejected).
//!
//! # What "window" means
//!
//! A send at instant `t` is allowed iff, among the recorded sends, fewer than `per_minute` lie in
//! the half-open interval `(t - 60 s, t]` and fewer than `per_30_minutes` lie in
//! `(t - 1800 s, t]`. A send therefore leaves the minute window exactly 60 s after it happened:
//! six sends at `0 s` allow the seventh at exactly `60 s`, not a moment earlier. Because every
//! send is checked against the window that ends at itself, every interval of 60 s (resp. 30 min)
//! of the resulting schedule holds at most `per_minute` (resp. `per_30_minutes`) sends.
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

/// Upper bound accepted for [`Pace::per_30_minutes`] (sends per 30 minutes); it also bounds the
/// number of timestamps a [`PaceLog`] keeps.
pub const MAX_PER_30_MINUTES: u32 = 100_000;

/// Most timestamps a [`PaceLog`] ever holds: enough for the largest valid pace.
const MAX_LOG_LEN: usize = MAX_PER_30_MINUTES as usize;

/// The pace of one phone: two exact sliding-window limits that must both hold.
///
/// Deserialization validates through [`Pace::new`]; the public fields allow building an
/// unvalidated value, which [`PaceLog`] tolerates by clamping each limit to
/// `1..=MAX_PER_30_MINUTES` (it never panics and never stalls forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PaceFields")]
pub struct Pace {
    /// Maximum number of sends in any interval of 60 seconds.
    pub per_minute: u32,
    /// Maximum number of sends in any interval of 30 minutes (1800 seconds).
    pub per_30_minutes: u32,
}

/// The unvalidated wire/config shape of [`Pace`]; a field left out keeps its [`Pace::DEFAULT`]
/// value (so a configuration may set `pace.per_minute` alone), an unknown field is refused.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PaceFields {
    per_minute: u32,
    per_30_minutes: u32,
}

impl Default for PaceFields {
    fn default() -> Self {
        PaceFields {
            per_minute: Pace::DEFAULT.per_minute,
            per_30_minutes: Pace::DEFAULT.per_30_minutes,
        }
    }
}

impl TryFrom<PaceFields> for Pace {
    type Error = PaceError;

    fn try_from(fields: PaceFields) -> Result<Self, Self::Error> {
        Pace::new(fields.per_minute, fields.per_30_minutes)
    }
}

impl Pace {
    /// The product default: 6 sends per minute and 25 sends per 30 minutes.
    pub const DEFAULT: Pace = Pace {
        per_minute: DEFAULT_PER_MINUTE,
        per_30_minutes: DEFAULT_PER_30_MINUTES,
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
        })
    }

    /// The limits as log depths, clamped to `1..=MAX_LOG_LEN` so unvalidated values are safe.
    fn depths(self) -> (usize, usize) {
        let clamp = |limit: u32| {
            usize::try_from(limit)
                .unwrap_or(MAX_LOG_LEN)
                .clamp(1, MAX_LOG_LEN)
        };
        (clamp(self.per_minute), clamp(self.per_30_minutes))
    }
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
/// It keeps only sends that can still matter (those within 30 minutes of the latest recorded
/// send) and never more than `MAX_PER_30_MINUTES` (100 000) timestamps.
///
/// Sends are expected in non-decreasing time order. If the clock steps backwards, the log stays
/// conservative: [`PaceLog::next_allowed`] never allows a send before the latest recorded one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaceLog {
    sends: VecDeque<DateTime<Utc>>,
}

impl PaceLog {
    /// An empty log: the first send is allowed at any time.
    pub fn new() -> Self {
        PaceLog::default()
    }

    /// Rebuilds a log from recorded send times (any order, any age), e.g. after a restart.
    ///
    /// Keeps only sends within the last 30 minutes of `now` (strictly after `now - 30 min`; sends
    /// later than `now` are kept too, to stay conservative), sorted ascending. The result gives
    /// the same [`PaceLog::next_allowed`] at `now` as the live log that recorded those sends.
    pub fn from_sends(sends: impl IntoIterator<Item = DateTime<Utc>>, now: DateTime<Utc>) -> Self {
        let cutoff = saturating_sub(now, THIRTY_MINUTE_WINDOW);
        let mut kept: Vec<DateTime<Utc>> = sends.into_iter().filter(|s| *s > cutoff).collect();
        kept.sort_unstable();
        let mut log = PaceLog {
            sends: VecDeque::from(kept),
        };
        log.prune();
        log
    }

    /// `None` when one send is allowed at `now`; otherwise `Some(t)` with the earliest instant
    /// `t > now` at which both windows allow one send (exact, no rounding).
    ///
    /// That instant is the latest of: the latest recorded send; the `per_minute`-th most recent
    /// send + 60 s; the `per_30_minutes`-th most recent send + 1800 s.
    pub fn next_allowed(&self, pace: Pace, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let (minute_depth, long_depth) = pace.depths();
        let mut earliest = *self.sends.back()?;
        if let Some(oldest) = self.nth_most_recent(minute_depth) {
            earliest = earliest.max(saturating_add(oldest, MINUTE_WINDOW));
        }
        if let Some(oldest) = self.nth_most_recent(long_depth) {
            earliest = earliest.max(saturating_add(oldest, THIRTY_MINUTE_WINDOW));
        }
        (earliest > now).then_some(earliest)
    }

    /// Records one send at `now` and prunes entries that can no longer matter (30 minutes or
    /// more before the latest send). Callers record only allowed sends, normally with
    /// non-decreasing times; an earlier time is still inserted in order.
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

    /// How many recorded sends lie in `(now - 60 s, now]` and in `(now - 30 min, now]`, in that
    /// order.
    pub fn used(&self, now: DateTime<Utc>) -> (u32, u32) {
        (
            self.count_in_window(now, MINUTE_WINDOW),
            self.count_in_window(now, THIRTY_MINUTE_WINDOW),
        )
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

    /// Drops sends at or before `latest - 30 min` and keeps at most `MAX_LOG_LEN` timestamps.
    fn prune(&mut self) {
        let Some(latest) = self.sends.back().copied() else {
            return;
        };
        let cutoff = saturating_sub(latest, THIRTY_MINUTE_WINDOW);
        while self.sends.front().is_some_and(|s| *s <= cutoff) {
            self.sends.pop_front();
        }
        while self.sends.len() > MAX_LOG_LEN {
            self.sends.pop_front();
        }
    }
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
        }
        None
    }

    /// A sender with an endless backlog that always sends at the earliest allowed instant.
    fn greedy(pace: Pace, start: DateTime<Utc>, end: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut log = PaceLog::new();
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
        assert_eq!(log.used(t0()), (0, 0));
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
        assert_eq!(log.used(at_secs(59)), (2, 2));
        assert_eq!(log.used(at_secs(60)), (0, 2));
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
        assert_eq!(log.used(at_secs(1799)), (0, 2));
        assert_eq!(log.used(at_secs(1800)), (0, 1));
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
                let rebuilt = PaceLog::from_sends(all.iter().rev().copied(), q);
                assert_eq!(rebuilt.next_allowed(p, q), live.next_allowed(p, q));
                assert_eq!(rebuilt.used(q), live.used(q));
            }
        }
        let rebuilt = PaceLog::from_sends(all.iter().rev().copied(), now);
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
        assert_eq!(log.used(at_secs(8)), (2, 2));
    }

    #[test]
    fn unvalidated_pace_never_panics() {
        let mut log = PaceLog::new();
        log.record(at_secs(0));
        let zero = Pace {
            per_minute: 0,
            per_30_minutes: 0,
        };
        // Treated as 1 per minute and 1 per 30 minutes.
        assert_eq!(log.next_allowed(zero, at_secs(0)), Some(at_secs(1800)));
        let huge = Pace {
            per_minute: u32::MAX,
            per_30_minutes: u32::MAX,
        };
        assert_eq!(log.next_allowed(huge, at_secs(0)), None);
        let mut far = PaceLog::new();
        far.record(DateTime::<Utc>::MAX_UTC);
        assert_eq!(
            far.next_allowed(zero, DateTime::<Utc>::MAX_UTC),
            None,
            "saturates instead of overflowing"
        );
        assert_eq!(far.used(DateTime::<Utc>::MIN_UTC), (0, 0));
    }

    #[test]
    fn log_is_bounded() {
        let mut log = PaceLog::new();
        for _ in 0..(MAX_LOG_LEN + 10) {
            log.record(t0());
        }
        assert_eq!(log.sends().len(), MAX_LOG_LEN);
    }

    fn pace_strategy() -> impl Strategy<Value = Pace> {
        (1_u32..20).prop_flat_map(|per_minute| {
            (per_minute..=200).prop_map(move |per_30| Pace::new(per_minute, per_30).unwrap())
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
            let mut log = PaceLog::new();
            let mut sent: Vec<DateTime<Utc>> = Vec::new();
            for gap in gaps {
                arrival += TimeDelta::milliseconds(gap);
                // The message reaches the head of the FIFO queue when it has arrived and the
                // previous message has been sent.
                let ready = sent.last().map_or(arrival, |prev| (*prev).max(arrival));

                // Restart safety: a log rebuilt from stored send times agrees with the live one.
                let rebuilt = PaceLog::from_sends(sent.iter().rev().copied(), ready);
                prop_assert_eq!(rebuilt.next_allowed(p, ready), log.next_allowed(p, ready));
                prop_assert_eq!(rebuilt.used(ready), log.used(ready));

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
}
