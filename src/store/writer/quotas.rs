//! The message quotas inside the writer's transaction (docs/api.md, "Quotas"): queued outbound
//! messages per workspace and mode, and test-mode messages per UTC day. Sends are refused whole
//! ([`QuotaCounts::check`]); a campaign's feed stores what fits ([`QuotaCounts::room`]). Exact and race-free:
//! on one node the writer stores every message, so its own counts plus the batch's staged
//! messages are all there is; the database is counted (bounded by the quota) only when a kept
//! count says full. On PostgreSQL other nodes' writers store messages too: each batch locks the
//! workspace's row first (`accept::accept`) and its kept counts are [`QuotaCounts::forget`]ten,
//! so the count is read under the lock and no two nodes can both take the last place.

use std::collections::HashMap;

use entity::messages;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, DatabaseTransaction, EntityTrait, QueryFilter};

use super::task::{Batch, flush_inserts};
use super::{AcceptOutcome, Change};
use crate::domain::ids::WorkspaceId;
use crate::domain::quota::{self, CountQuota, Quota};
use crate::domain::status::{Direction, MessageStatus};
use crate::store::StoreError;
use crate::store::scoped::Scope;

/// The WHERE of the partial index `idx_messages_queued`, written as literals: a planner uses a
/// partial index only when the query's terms match its own, and a bound parameter does not.
const QUEUED_OUTBOUND: &str = "status = 'queued' AND direction = 'outbound'";

/// The message quotas the writer enforces on every accept (docs/api.md, "Quotas").
#[derive(Debug, Clone, Copy)]
pub struct MessageQuotas {
    /// Outbound messages `queued` per scope.
    pub queued: CountQuota,
    /// Test-mode outbound messages accepted per workspace and UTC day.
    pub test_per_day: CountQuota,
}

impl MessageQuotas {
    /// The message quotas as configured.
    pub fn of(quotas: &crate::config::QuotaSettings) -> MessageQuotas {
        MessageQuotas {
            queued: quotas.count(Quota::QueuedMessages),
            test_per_day: quotas.count(Quota::TestMessagesPerDay),
        }
    }

    /// No quota (unit tests and tools).
    pub fn none() -> MessageQuotas {
        MessageQuotas {
            queued: CountQuota {
                quota: Quota::QueuedMessages,
                limit: 0,
            },
            test_per_day: CountQuota {
                quota: Quota::TestMessagesPerDay,
                limit: 0,
            },
        }
    }
}

/// The writer's kept counts for the message quotas.
pub(super) struct QuotaCounts {
    quotas: MessageQuotas,
    /// Per scope, at least the number of its committed `queued` outbound messages (kept up by
    /// every commit; moves out of `queued` are not subtracted, so it only errs high, and a
    /// send it would refuse counts again first). Only scopes that came near their quota.
    queued: HashMap<Scope, u64>,
    /// Per test-mode workspace: the UTC day counted and its outbound messages stored that day.
    test_day: HashMap<WorkspaceId, (i64, u64)>,
}

impl QuotaCounts {
    pub(super) fn new(quotas: MessageQuotas) -> QuotaCounts {
        QuotaCounts {
            quotas,
            queued: HashMap::new(),
            test_day: HashMap::new(),
        }
    }

    /// Whether any message quota is set.
    pub(super) fn enforced(&self) -> bool {
        self.quotas.queued.limit > 0 || self.quotas.test_per_day.limit > 0
    }

    /// Drops the kept counts of `workspace`: other writers may have stored messages since
    /// (nodes of a cluster), so its next check counts the database again.
    pub(super) fn forget(&mut self, workspace: WorkspaceId) {
        self.queued
            .retain(|scope, _| scope.workspace_id != workspace);
        self.test_day.remove(&workspace);
    }

    /// Whether `n` more outbound messages of this scope fit its message quotas: None when they
    /// do, else the refusal.
    pub(super) async fn check(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        n: u64,
        now: i64,
    ) -> Result<Option<AcceptOutcome>, StoreError> {
        if let Some(room) = self.daily_room(txn, batch, scope, now).await?
            && room < n
        {
            let resets_at = quota::next_day_start(now);
            let wait_ms = u64::try_from(resets_at.saturating_sub(now)).unwrap_or(0);
            return Ok(Some(AcceptOutcome::QuotaExceeded {
                quota: self.quotas.test_per_day,
                resets_at: Some(resets_at),
                retry_after_secs: wait_ms.div_ceil(1000),
            }));
        }
        if let Some(room) = self.queued_room(txn, batch, scope, n).await?
            && room < n
        {
            return Ok(Some(AcceptOutcome::QuotaExceeded {
                quota: self.quotas.queued,
                resets_at: None,
                retry_after_secs: 0,
            }));
        }
        Ok(None)
    }

    /// How many of `wanted` more outbound messages of this scope fit its message quotas (a
    /// campaign's feed stores that many), and the quota that holds back the rest when fewer
    /// fit: the test-mode daily quota when it does, even if the queued one holds back more.
    pub(super) async fn room(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        wanted: u64,
        now: i64,
    ) -> Result<(u64, Option<Quota>), StoreError> {
        let mut fit = wanted;
        let mut held = None;
        if let Some(room) = self.daily_room(txn, batch, scope, now).await?
            && room < fit
        {
            fit = room;
            held = Some(Quota::TestMessagesPerDay);
        }
        if let Some(room) = self.queued_room(txn, batch, scope, fit).await?
            && room < fit
        {
            fit = room;
            held = held.or(Some(Quota::QueuedMessages));
        }
        Ok((fit, held))
    }

    /// How many more test-mode outbound messages this scope may store today; None when the
    /// daily quota does not apply (live mode, or no quota).
    async fn daily_room(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        now: i64,
    ) -> Result<Option<u64>, StoreError> {
        let daily = self.quotas.test_per_day;
        if !scope.mode.is_test() || daily.limit == 0 {
            return Ok(None);
        }
        let staged = batch.staged.get(&scope).copied().unwrap_or(0);
        let day = quota::day_start(now);
        let counted = match self.test_day.get(&scope.workspace_id) {
            Some((counted_day, count)) if *counted_day == day => *count,
            _ => {
                flush_inserts(txn, batch).await?;
                let stored = messages::Entity::find()
                    .filter(messages::Column::WorkspaceId.eq(scope.workspace_id))
                    .filter(messages::Column::TestMode.eq(true))
                    .filter(messages::Column::CreatedAt.gte(day))
                    .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()));
                let bound = u64::from(daily.limit);
                let in_txn = crate::store::quotas::bounded_count(txn, stored, bound).await?;
                let committed = in_txn.saturating_sub(staged);
                self.test_day.insert(scope.workspace_id, (day, committed));
                committed
            }
        };
        Ok(Some(
            u64::from(daily.limit).saturating_sub(counted.saturating_add(staged)),
        ))
    }

    /// How many more outbound messages of this scope may be `queued`, or at least `wanted`
    /// when the kept count already shows room for them; None when there is no such quota.
    async fn queued_room(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        wanted: u64,
    ) -> Result<Option<u64>, StoreError> {
        let queued = self.quotas.queued;
        if queued.limit == 0 {
            return Ok(None);
        }
        let staged = batch.staged.get(&scope).copied().unwrap_or(0);
        if let Some(kept) = self.queued.get(&scope)
            && queued.allows(kept + staged, wanted)
        {
            return Ok(Some(wanted));
        }
        // Not counted yet, or the kept count says full and may be high (messages left
        // `queued` since): count them.
        flush_inserts(txn, batch).await?;
        let stored = messages::Entity::find()
            .filter(scope.of::<messages::Entity>())
            .filter(Expr::cust(QUEUED_OUTBOUND));
        let in_txn =
            crate::store::quotas::bounded_count(txn, stored, u64::from(queued.limit)).await?;
        self.queued.insert(scope, in_txn.saturating_sub(staged));
        Ok(Some(u64::from(queued.limit).saturating_sub(in_txn)))
    }

    /// Adds a commit's stored messages to the test-mode day counts, and its changes that leave
    /// a message `queued` to the queued counts.
    pub(super) fn apply(&mut self, staged: &HashMap<Scope, u64>, changes: &[Change]) {
        for (scope, n) in staged {
            if let Some((_, count)) = self.test_day.get_mut(&scope.workspace_id)
                && scope.mode.is_test()
            {
                *count += n;
            }
        }
        if self.queued.is_empty() {
            return;
        }
        for change in changes {
            let message = &change.message;
            // Every change that leaves a message `queued` (stored, back from a phone after a
            // failed attempt or a disconnect, rerouted): counted, erring high.
            if message.status == MessageStatus::Queued
                && message.direction == Direction::Outbound
                && let Some(count) = self.queued.get_mut(&Scope {
                    workspace_id: message.workspace_id,
                    mode: message.mode,
                })
            {
                *count += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literal WHERE of the queued count is the partial index's, spelled from the enums.
    #[test]
    fn the_queued_count_matches_its_partial_index() {
        let expected = format!(
            "status = '{}' AND direction = '{}'",
            MessageStatus::Queued.as_str(),
            Direction::Outbound.as_str()
        );
        assert_eq!(QUEUED_OUTBOUND, expected);
    }
}
