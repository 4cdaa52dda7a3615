//! The source of wall-clock time, injected so tests can control it.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};

/// Wall-clock time. Timers use tokio time instead (see `actix::clock`), so tests can pause them.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;

    /// The current instant in integer milliseconds since the Unix epoch (the storage format).
    fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Shared handle to the clock in use.
pub type SharedClock = Arc<dyn Clock>;

/// Converts stored milliseconds to a timestamp (out-of-range values clamp to the epoch).
pub fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
}

/// Renders a timestamp the way every API response and webhook does:
/// `2026-11-22T10:15:30.123+00:00` (milliseconds, numeric offset).
pub fn format_ts(at: DateTime<Utc>) -> String {
    // chrono's RFC 3339 writer, not a strftime pattern parsed at every call (a message record
    // has up to six timestamps, and one is formatted for every reply and webhook).
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

/// [`format_ts`] for a stored millisecond value.
pub fn format_ms(ms: i64) -> String {
    format_ts(from_ms(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RFC 3339 writer gives exactly the documented shape (`2026-11-25T10:00:00.250+00:00`)
    /// over the whole range of stored times, milliseconds included.
    #[test]
    fn timestamps_keep_their_shape() {
        let last = from_ms(253_402_300_799_999).timestamp_millis(); // 9999-12-31T23:59:59.999
        let mut ms = 0_i64;
        while ms <= last {
            let at = from_ms(ms);
            assert_eq!(
                format_ts(at),
                at.format("%Y-%m-%dT%H:%M:%S%.3f+00:00").to_string(),
                "{ms}"
            );
            ms += 99_991_999_937;
        }
        assert_eq!(
            format_ms(1_764_064_800_250),
            "2025-11-25T10:00:00.250+00:00"
        );
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000+00:00");
    }
}
