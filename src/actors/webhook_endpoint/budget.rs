//! The delivery budgets of workspaces (docs/api.md, "Quotas").

use std::collections::HashMap;
use std::sync::Mutex;

use crate::config::QuotaSettings;
use crate::domain::quota::SlidingBudget;
use crate::store::scoped::Scope;

/// Scopes with a delivery budget kept before the idle ones are dropped.
const BUDGETS_BEFORE_PRUNE: usize = 1024;

/// The outbound delivery budget of every workspace and mode (docs/api.md, "Quotas"): at most
/// `quotas.webhook_deliveries` attempts start within any `quotas.webhook_delivery_window`,
/// over all its endpoints. An attempt over the budget waits in its endpoint's queue (the
/// delivery stays pending in the database), it is never dropped.
pub struct DeliveryBudgets {
    max: u32,
    window_ms: i64,
    scopes: Mutex<HashMap<Scope, SlidingBudget>>,
}

impl DeliveryBudgets {
    /// Budgets as configured; `webhook_deliveries` 0 means none.
    pub fn new(quotas: &QuotaSettings) -> DeliveryBudgets {
        DeliveryBudgets {
            max: quotas.webhook_deliveries,
            window_ms: i64::try_from(quotas.webhook_delivery_window.as_millis())
                .unwrap_or(i64::MAX),
            scopes: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one attempt of `scope` at `now_ms`, or says from when the budget allows one.
    pub fn take(&self, scope: Scope, now_ms: i64) -> Result<(), i64> {
        if self.max == 0 {
            return Ok(());
        }
        // A poisoned lock only means another thread panicked mid-update: the log is still a
        // list of times, so keep using it.
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        if scopes.len() >= BUDGETS_BEFORE_PRUNE {
            scopes.retain(|_, budget| !budget.is_idle(now_ms));
        }
        scopes
            .entry(scope)
            .or_insert_with(|| SlidingBudget::new(self.max, self.window_ms))
            .take(now_ms)
    }
}
