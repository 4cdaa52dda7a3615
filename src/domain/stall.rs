//! The stall watchdog of one line (docs/api.md, "Phone health"): an online line is `stalled`
//! when the messages handed to it got no report for `phones.stall_after`, or when its last
//! `phones.stall_failures` attempts in a row failed (a blocked SIM); its next successful
//! report (`sent` or `delivered`) unmarks it. The Phone actor holds a [`StallWatch`], tells it
//! what happens and arms one timer at [`StallWatch::next_check_at`]; the decision is here.

/// Why a line was marked stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum StallCause {
    /// Handed-over messages got no report for `stall_after`.
    NoReport,
    /// `stall_failures` attempts in a row failed.
    Failures,
}

impl StallCause {
    /// The log and wire name (`no_report`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What an event changed about the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallChange {
    /// The line is stalled since `since` (ms), because of `cause`.
    Marked { since: i64, cause: StallCause },
    /// A success ended the stall.
    Unmarked,
}

/// The limits of the watchdog (`phones.stall_after`, `phones.stall_failures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallLimits {
    pub after_ms: i64,
    pub failures: u32,
}

/// One line's watchdog state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StallWatch {
    /// Since when handed-over messages wait for a report with none heard (None: nothing
    /// handed over waits, or the line is offline).
    waiting_since: Option<i64>,
    /// Failed attempts in a row.
    failures: u32,
    /// Since when the line is stalled.
    stalled_since: Option<i64>,
}

impl StallWatch {
    /// A line starts unmarked; a mark stored before a restart is given back with
    /// [`StallWatch::restore`].
    pub fn new() -> StallWatch {
        StallWatch::default()
    }

    /// A watch that is already stalled since `since` (read back from the database).
    pub fn restore(since: i64) -> StallWatch {
        StallWatch {
            stalled_since: Some(since),
            ..StallWatch::default()
        }
    }

    /// Whether the line is stalled, and since when.
    pub fn stalled_since(&self) -> Option<i64> {
        self.stalled_since
    }

    /// A message was handed over at `now`: the clock starts unless it already runs.
    pub fn handed(&mut self, now: i64) {
        self.waiting_since.get_or_insert(now);
    }

    /// A report arrived at `now`; `still_waiting` when other handed-over messages still wait
    /// for theirs (their clock restarts: the phone is alive). A success resets the failures
    /// and unmarks; a failure counts, and marks at the limit.
    pub fn reported(
        &mut self,
        success: bool,
        still_waiting: bool,
        now: i64,
        limits: StallLimits,
    ) -> Option<StallChange> {
        self.waiting_since = still_waiting.then_some(now);
        if success {
            self.failures = 0;
            return self.stalled_since.take().map(|_| StallChange::Unmarked);
        }
        self.failures = self.failures.saturating_add(1);
        if self.failures >= limits.failures && self.stalled_since.is_none() {
            self.stalled_since = Some(now);
            return Some(StallChange::Marked {
                since: now,
                cause: StallCause::Failures,
            });
        }
        None
    }

    /// The line went offline: no report is awaited from it (its messages go back to the
    /// queue). A mark stays until a success.
    pub fn offline(&mut self) {
        self.waiting_since = None;
    }

    /// The timer fired at `now`: marks the line when reports are overdue.
    pub fn check(&mut self, now: i64, limits: StallLimits) -> Option<StallChange> {
        let since = self.waiting_since?;
        if self.stalled_since.is_some() || now < since + limits.after_ms {
            return None;
        }
        self.stalled_since = Some(now);
        Some(StallChange::Marked {
            since: now,
            cause: StallCause::NoReport,
        })
    }

    /// When [`StallWatch::check`] could next mark the line (None: it cannot).
    pub fn next_check_at(&self, limits: StallLimits) -> Option<i64> {
        match (self.waiting_since, self.stalled_since) {
            (Some(since), None) => Some(since + limits.after_ms),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: StallLimits = StallLimits {
        after_ms: 1_000,
        failures: 3,
    };

    #[test]
    fn no_report_for_stall_after_marks_once() {
        let mut watch = StallWatch::new();
        watch.handed(100);
        watch.handed(500);
        assert_eq!(watch.next_check_at(LIMITS), Some(1_100));
        assert_eq!(watch.check(1_099, LIMITS), None);
        assert_eq!(
            watch.check(1_100, LIMITS),
            Some(StallChange::Marked {
                since: 1_100,
                cause: StallCause::NoReport
            })
        );
        assert_eq!(watch.check(5_000, LIMITS), None);
        assert_eq!(watch.next_check_at(LIMITS), None);
    }

    #[test]
    fn a_report_restarts_the_clock_and_nothing_waiting_stops_it() {
        let mut watch = StallWatch::new();
        watch.handed(0);
        assert_eq!(watch.reported(true, true, 900, LIMITS), None);
        assert_eq!(watch.check(1_000, LIMITS), None);
        assert_eq!(watch.next_check_at(LIMITS), Some(1_900));
        watch.reported(true, false, 1_000, LIMITS);
        assert_eq!(watch.next_check_at(LIMITS), None);
    }

    #[test]
    fn failures_in_a_row_mark_and_a_success_unmarks() {
        let mut watch = StallWatch::new();
        assert_eq!(watch.reported(false, false, 1, LIMITS), None);
        assert_eq!(watch.reported(true, false, 2, LIMITS), None);
        assert_eq!(watch.reported(false, false, 3, LIMITS), None);
        assert_eq!(watch.reported(false, false, 4, LIMITS), None);
        assert_eq!(
            watch.reported(false, false, 5, LIMITS),
            Some(StallChange::Marked {
                since: 5,
                cause: StallCause::Failures
            })
        );
        assert_eq!(watch.reported(false, false, 6, LIMITS), None);
        assert_eq!(watch.stalled_since(), Some(5));
        assert_eq!(
            watch.reported(true, false, 7, LIMITS),
            Some(StallChange::Unmarked)
        );
        assert_eq!(watch.stalled_since(), None);
    }

    /// One thing that can happen to a line.
    #[derive(Debug, Clone)]
    enum Event {
        Handed,
        Reported { success: bool, still_waiting: bool },
        Offline,
        Check,
    }

    fn event() -> impl proptest::strategy::Strategy<Value = Event> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Event::Handed),
            (any::<bool>(), any::<bool>()).prop_map(|(success, still_waiting)| Event::Reported {
                success,
                still_waiting
            }),
            Just(Event::Offline),
            Just(Event::Check),
        ]
    }

    proptest::proptest! {
        /// Whatever happens, marks and unmarks alternate (an episode is marked once), the
        /// watch is stalled exactly after a mark, and only a success unmarks.
        #[test]
        fn marks_and_unmarks_alternate(
            events in proptest::collection::vec((event(), 0..2_000_i64), 0..60)
        ) {
            let mut watch = StallWatch::new();
            let mut now = 0;
            let mut stalled = false;
            for (event, step) in events {
                now += step;
                let change = match event {
                    Event::Handed => { watch.handed(now); None }
                    Event::Reported { success, still_waiting } => {
                        let change = watch.reported(success, still_waiting, now, LIMITS);
                        if change == Some(StallChange::Unmarked) {
                            proptest::prop_assert!(success);
                        }
                        change
                    }
                    Event::Offline => { watch.offline(); None }
                    Event::Check => watch.check(now, LIMITS),
                };
                match change {
                    Some(StallChange::Marked { since, .. }) => {
                        proptest::prop_assert!(!stalled);
                        proptest::prop_assert_eq!(since, now);
                        stalled = true;
                    }
                    Some(StallChange::Unmarked) => {
                        proptest::prop_assert!(stalled);
                        stalled = false;
                    }
                    None => {}
                }
                proptest::prop_assert_eq!(watch.stalled_since().is_some(), stalled);
            }
        }
    }

    #[test]
    fn offline_stops_the_clock_but_keeps_the_mark() {
        let mut watch = StallWatch::restore(10);
        watch.handed(20);
        watch.offline();
        assert_eq!(watch.check(1_000_000, LIMITS), None);
        assert_eq!(watch.stalled_since(), Some(10));
    }
}
