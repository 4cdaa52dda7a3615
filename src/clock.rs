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
    at.format("%Y-%m-%dT%H:%M:%S%.3f+00:00").to_string()
}

/// [`format_ts`] for a stored millisecond value.
pub fn format_ms(ms: i64) -> String {
    format_ts(from_ms(ms))
}
