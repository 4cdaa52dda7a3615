//! Per-workspace quotas (docs/api.md, "Quotas"): their names, the UTC day the test-mode quota
//! counts, and the sliding window that paces a workspace's webhook deliveries.

use std::collections::VecDeque;

/// A quota a request can hit; its name is `data.quota` of the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quota {
    Phones,
    WebhookEndpoints,
    Contacts,
    QueuedMessages,
    TestMessagesPerDay,
    /// Stored campaigns, whatever their status.
    Campaigns,
    /// Recipients over all stored campaigns (skipped ones included).
    CampaignRecipients,
    /// Active (unrevoked) API keys.
    ApiKeys,
}

impl Quota {
    /// The name in `data.quota` (also the key under `[quotas]`).
    pub fn as_str(self) -> &'static str {
        match self {
            Quota::Phones => "phones",
            Quota::WebhookEndpoints => "webhook_endpoints",
            Quota::Contacts => "contacts",
            Quota::QueuedMessages => "queued_messages",
            Quota::TestMessagesPerDay => "test_messages_per_day",
            Quota::Campaigns => "campaigns",
            Quota::CampaignRecipients => "campaign_recipients",
            Quota::ApiKeys => "api_keys",
        }
    }
}

/// A stored-count quota: `limit` things at most, 0 meaning no quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountQuota {
    pub quota: Quota,
    pub limit: u32,
}

impl CountQuota {
    /// Whether `stored + adding` stays within the quota.
    pub fn allows(self, stored: u64, adding: u64) -> bool {
        self.limit == 0 || stored.saturating_add(adding) <= u64::from(self.limit)
    }
}

/// One day in milliseconds.
const DAY_MS: i64 = 24 * 3600 * 1000;

/// The start (ms since the epoch) of the UTC day holding `now_ms`.
pub fn day_start(now_ms: i64) -> i64 {
    now_ms.div_euclid(DAY_MS) * DAY_MS
}

/// The start of the UTC day after the one holding `now_ms`: when a daily quota resets.
pub fn next_day_start(now_ms: i64) -> i64 {
    day_start(now_ms).saturating_add(DAY_MS)
}

/// At most `max` events within any `window_ms`, exactly (a sliding log of the last `max`
/// event times, not a refilling bucket: a burst cannot pass the budget at a window's edge).
#[derive(Debug, Clone)]
pub struct SlidingBudget {
    max: usize,
    window_ms: i64,
    taken: VecDeque<i64>,
}

impl SlidingBudget {
    /// A budget of `max` events per `window_ms`; `max` 0 allows everything.
    pub fn new(max: u32, window_ms: i64) -> SlidingBudget {
        SlidingBudget {
            max: usize::try_from(max).unwrap_or(usize::MAX),
            window_ms: window_ms.max(1),
            taken: VecDeque::new(),
        }
    }

    /// Takes one event at `now_ms` when the budget allows it; otherwise the time from which
    /// it will.
    pub fn take(&mut self, now_ms: i64) -> Result<(), i64> {
        if self.max == 0 {
            return Ok(());
        }
        while self
            .taken
            .front()
            .is_some_and(|at| now_ms.saturating_sub(*at) >= self.window_ms)
        {
            self.taken.pop_front();
        }
        if self.taken.len() < self.max {
            self.taken.push_back(now_ms);
            return Ok(());
        }
        let oldest = self.taken.front().copied().unwrap_or(now_ms);
        Err(oldest.saturating_add(self.window_ms))
    }

    /// Whether the budget has forgotten every event (it can be dropped).
    pub fn is_idle(&self, now_ms: i64) -> bool {
        self.taken
            .back()
            .is_none_or(|at| now_ms.saturating_sub(*at) >= self.window_ms)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_count_quota_of_zero_is_no_quota() {
        let quota = CountQuota {
            quota: Quota::Phones,
            limit: 0,
        };
        assert!(quota.allows(u64::MAX, 1));
        let quota = CountQuota { limit: 3, ..quota };
        assert!(quota.allows(2, 1));
        assert!(!quota.allows(2, 2));
    }

    #[test]
    fn days_are_utc_days() {
        let noon = 1_764_072_000_000; // 2025-11-25T12:00:00Z
        assert_eq!(day_start(noon), 1_764_028_800_000);
        assert_eq!(next_day_start(noon), 1_764_115_200_000);
        assert_eq!(day_start(1_764_028_800_000), 1_764_028_800_000);
    }

    #[test]
    fn a_full_budget_says_when_it_frees_up() {
        let mut budget = SlidingBudget::new(2, 1000);
        assert_eq!(budget.take(0), Ok(()));
        assert_eq!(budget.take(400), Ok(()));
        assert_eq!(budget.take(999), Err(1000));
        assert_eq!(budget.take(1000), Ok(()));
        assert_eq!(budget.take(1200), Err(1400));
        assert!(!budget.is_idle(1999));
        assert!(budget.is_idle(2000));
    }

    proptest! {
        #[test]
        fn no_window_holds_more_than_the_budget(
            max in 1u32..8,
            window in 1i64..500,
            gaps in proptest::collection::vec(0i64..100, 1..200),
        ) {
            let mut budget = SlidingBudget::new(max, window);
            let mut now = 0;
            let mut taken = Vec::new();
            for gap in gaps {
                now += gap;
                match budget.take(now) {
                    Ok(()) => taken.push(now),
                    Err(at) => prop_assert!(at > now),
                }
            }
            for (i, start) in taken.iter().enumerate() {
                let within = taken[i..].iter().take_while(|t| **t - start < window).count();
                prop_assert!(within <= max as usize);
            }
        }
    }
}
