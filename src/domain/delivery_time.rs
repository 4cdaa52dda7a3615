//! Times from hand-over to delivery kept as a small histogram of log-spaced buckets, so a
//! phone's daily median costs a few counters instead of one row per message (docs/api.md,
//! "Phone stats").
//!
//! Bucket 0 holds everything under [`FIRST_BOUND_MS`]; bucket `k ≥ 1` holds
//! `[100 ms · 2^((k-1)/4), 100 ms · 2^(k/4))`, four buckets per doubling, up to
//! [`LAST_BUCKET`], which holds everything from about 8 days on. A median is reported as the
//! geometric middle of its bucket, so it is within a factor 2^(1/8) (about ±9 %) of the true
//! median of the counted times, or within 50 ms below 100 ms.

use std::collections::BTreeMap;

/// Upper bound of bucket 0, in milliseconds.
pub const FIRST_BOUND_MS: i64 = 100;
/// Buckets per doubling of the time.
const PER_DOUBLING: f64 = 4.0;
/// The last bucket, open-ended (from 100 ms · 2^(91/4), about 8.2 days).
pub const LAST_BUCKET: i32 = 92;

/// The lower bound of bucket `k ≥ 1`, in milliseconds.
fn lower_bound_ms(k: i32) -> f64 {
    FIRST_BOUND_MS as f64 * 2f64.powf(f64::from(k - 1) / PER_DOUBLING)
}

/// The bucket of a time from hand-over to delivery of `ms` milliseconds (a negative time, a
/// clock step back, counts as 0).
pub fn bucket_of(ms: i64) -> i32 {
    if ms < FIRST_BOUND_MS {
        return 0;
    }
    let estimate = (PER_DOUBLING * (ms as f64 / FIRST_BOUND_MS as f64).log2()).floor() as i32 + 1;
    // Floating point may land one bucket off at a bound: settle it against the bounds.
    let mut k = estimate.clamp(1, LAST_BUCKET);
    while k > 1 && (ms as f64) < lower_bound_ms(k) {
        k -= 1;
    }
    while k < LAST_BUCKET && (ms as f64) >= lower_bound_ms(k + 1) {
        k += 1;
    }
    k
}

/// The value a bucket stands for, in milliseconds: the geometric middle of its bounds (50 ms
/// for bucket 0, the lower bound for the open-ended last one).
pub fn representative_ms(bucket: i32) -> f64 {
    match bucket {
        k if k <= 0 => FIRST_BOUND_MS as f64 / 2.0,
        k if k >= LAST_BUCKET => lower_bound_ms(LAST_BUCKET),
        k => FIRST_BOUND_MS as f64 * 2f64.powf((f64::from(k) - 0.5) / PER_DOUBLING),
    }
}

/// Deliveries counted per bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryTimes {
    counts: BTreeMap<i32, u64>,
}

impl DeliveryTimes {
    /// Counts `n` deliveries in `bucket` (clamped to the buckets that exist).
    pub fn add(&mut self, bucket: i32, n: u64) {
        if n > 0 {
            *self.counts.entry(bucket.clamp(0, LAST_BUCKET)).or_default() += n;
        }
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &DeliveryTimes) {
        for (bucket, n) in &other.counts {
            self.add(*bucket, *n);
        }
    }

    /// The buckets that counted any, `(bucket, deliveries)`, shortest times first.
    pub fn buckets(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        self.counts.iter().map(|(bucket, n)| (*bucket, *n))
    }

    /// Deliveries counted.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// The median time to deliver in milliseconds, as its bucket's [`representative_ms`] (the
    /// lower median of an even count); None with nothing counted.
    pub fn median_ms(&self) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = total.div_ceil(2);
        let mut seen = 0;
        for (bucket, n) in &self.counts {
            seen += n;
            if seen >= rank {
                return Some(representative_ms(*bucket));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn buckets_start_at_their_bounds() {
        assert_eq!(bucket_of(-5), 0);
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(99), 0);
        assert_eq!(bucket_of(100), 1);
        assert_eq!(bucket_of(118), 1);
        assert_eq!(bucket_of(119), 2, "100 · 2^(1/4) ≈ 118.9");
        assert_eq!(bucket_of(200), 5, "a doubling is four buckets");
        assert_eq!(bucket_of(i64::MAX), LAST_BUCKET);
    }

    #[test]
    fn the_median_is_the_middle_count() {
        let mut times = DeliveryTimes::default();
        assert_eq!(times.median_ms(), None);
        for ms in [1_000, 2_000, 90_000] {
            times.add(bucket_of(ms), 1);
        }
        let median = times.median_ms().unwrap_or_default();
        assert!((median / 2_000.0 - 1.0).abs() < 0.091, "{median}");
        let mut other = DeliveryTimes::default();
        other.add(bucket_of(90_000), 2);
        times.merge(&other);
        assert_eq!(times.total(), 5);
        let median = times.median_ms().unwrap_or_default();
        assert!((median / 90_000.0 - 1.0).abs() < 0.091, "{median}");
    }

    proptest! {
        /// Every time up to a week reads back within the documented precision: ±9 %, or
        /// within 50 ms under 100 ms.
        #[test]
        fn a_bucket_stands_for_its_times(ms in 0_i64..7 * 24 * 3600 * 1000) {
            let back = representative_ms(bucket_of(ms));
            if ms < FIRST_BOUND_MS {
                prop_assert!((back - ms as f64).abs() <= 50.0);
            } else {
                let ratio = back / ms as f64;
                prop_assert!((2f64.powf(-0.125) - 1e-9..=2f64.powf(0.125) + 1e-9).contains(&ratio),
                    "{ms} ms read back as {back}");
            }
        }

        /// Buckets grow with the time.
        #[test]
        fn buckets_are_monotonic(a in 0_i64..1_000_000_000, b in 0_i64..1_000_000_000) {
            let (low, high) = (a.min(b), a.max(b));
            prop_assert!(bucket_of(low) <= bucket_of(high));
        }
    }
}
