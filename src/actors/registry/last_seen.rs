//! When a phone was last heard from, as this node knows it and as the database holds it: the
//! registry's rule for writing `phones.last_seen_at` (docs/api.md, Phones): at connect and
//! disconnect at once, and while connected at most once per [`STORE_EVERY`], batched by the
//! registry's [`FLUSH_EVERY`] tick, never on a frame's path.

use std::time::Duration;

/// The least a connected phone's last-seen time moves between two writes of it: the database
/// value (which another node of a cluster reads) is at most this plus [`FLUSH_EVERY`] older
/// than the live one.
pub const STORE_EVERY: Duration = Duration::from_secs(60);

/// How often the registry writes the last-seen times that are due.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// A phone's last-seen time (ms since the epoch): the live value and the last one written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LastSeen {
    live: Option<i64>,
    stored: Option<i64>,
}

impl LastSeen {
    /// As read from the database.
    pub fn loaded(stored: Option<i64>) -> LastSeen {
        LastSeen {
            live: stored,
            stored,
        }
    }

    /// The phone was heard from at `at` (a clock step back never moves it back).
    pub fn heard(&mut self, at: i64) {
        self.live = self.live.max(Some(at));
    }

    /// The latest time this node heard from the phone (or read from the database).
    pub fn live(&self) -> Option<i64> {
        self.live
    }

    /// The value to write now, if any is newer than the one written; counts it as written.
    pub fn take_newer(&mut self) -> Option<i64> {
        let newer = self.live.filter(|live| self.stored < Some(*live))?;
        self.stored = Some(newer);
        Some(newer)
    }

    /// The value to write on the periodic flush: the live one once it moved by `every` since
    /// the last write (or was never written); counts it as written.
    pub fn take_due(&mut self, every: Duration) -> Option<i64> {
        let every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
        let live = self.live?;
        let due = self
            .stored
            .is_none_or(|stored| live.saturating_sub(stored) >= every_ms);
        due.then(|| self.take_newer()).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE_MS: i64 = 60_000;

    #[test]
    fn a_connected_phone_is_written_once_a_minute_at_most() {
        let mut seen = LastSeen::loaded(None);
        seen.heard(1_000);
        // Never written: due at once.
        assert_eq!(seen.take_due(STORE_EVERY), Some(1_000));
        assert_eq!(seen.take_due(STORE_EVERY), None);
        seen.heard(1_000 + MINUTE_MS - 1);
        assert_eq!(
            seen.take_due(STORE_EVERY),
            None,
            "moved by less than a minute"
        );
        seen.heard(1_000 + MINUTE_MS);
        assert_eq!(seen.take_due(STORE_EVERY), Some(1_000 + MINUTE_MS));
        assert_eq!(seen.live(), Some(1_000 + MINUTE_MS));
    }

    #[test]
    fn connect_and_disconnect_write_whatever_is_newer() {
        let mut seen = LastSeen::loaded(Some(5_000));
        assert_eq!(seen.take_newer(), None, "the database already has it");
        seen.heard(6_000);
        assert_eq!(seen.take_newer(), Some(6_000));
        assert_eq!(seen.take_newer(), None);
        // After that write the minute counts from 6 000.
        seen.heard(6_000 + MINUTE_MS - 1);
        assert_eq!(seen.take_due(STORE_EVERY), None);
    }

    #[test]
    fn a_clock_step_back_never_moves_it_back() {
        let mut seen = LastSeen::loaded(Some(10_000));
        seen.heard(9_000);
        assert_eq!(seen.live(), Some(10_000));
        assert_eq!(seen.take_newer(), None);
    }

    #[test]
    fn nothing_heard_writes_nothing() {
        let mut seen = LastSeen::loaded(None);
        assert_eq!(seen.take_due(STORE_EVERY), None);
        assert_eq!(seen.take_newer(), None);
        assert_eq!(seen.live(), None);
    }
}
