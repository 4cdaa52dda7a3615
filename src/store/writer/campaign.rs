//! Campaign operations of the writer. They run inside its transaction like every other job,
//! so a campaign's status, its recipients and the messages it queues change together, and
//! the new-workspace count stays exact (a launch counts every recipient at once).
//!
//! Each operation starts with the batch's earlier moves and inserts written, so it sees what
//! the jobs before it did (a pause right after a feed withdraws the messages that feed made).
//!
//! The operations: `Create` (the campaign quotas checked first: stored campaigns counted and
//! their recipients summed, under the workspace's lock on PostgreSQL; the recipients in
//! multi-row INSERTs), `Control` (launch, pause, resume, cancel: pause withdraws the queued
//! messages and makes their recipients pending again, cancel cancels them through the
//! ordinary grouped moves), `Delete` (a draft or finished campaign with its recipients), and
//! the campaign actor's `Start`, `Feed` and `Complete`, each fenced by the campaign's lease in
//! a cluster. A `Feed` re-checks opt-outs and that each recipient is still pending, and asks
//! the message-quota counts how many of its messages fit (`QuotaCounts::room`): it stores
//! those and, when the test-mode daily quota held the rest back, pauses the campaign with its
//! `paused_reason` in the same transaction. The new-workspace count of sends adds the totals
//! of campaigns launched in the window and leaves campaign messages out.

use sea_orm::DatabaseTransaction;
use uuid::Uuid;

use super::NewMessage;
use super::accept::{LimitCheck, NewWorkspaceLimit, lock_to_count};
use super::task::{Batch, WriterTask, flush_inserts};
use super::transition::{self, Move, Transition};
use crate::domain::campaign::{CampaignStatus, Control, PauseReason};
use crate::domain::ids::CampaignId;
use crate::domain::quota::{CountQuota, Quota};
use crate::domain::status::MessageStatus;
use crate::store::StoreError;
use crate::store::campaigns::{self, Campaign, CampaignQuotas, NewCampaign, Removal, Stamps};
use crate::store::cluster::Lease;
use crate::store::contacts;
use crate::store::messages::Message;
use crate::store::scoped::Scope;

/// A campaign operation (see [`super::Writer::campaign`]).
#[derive(Debug, Clone)]
pub enum CampaignOp {
    /// Store a new campaign; `launch` starts it (running, or scheduled when it starts later).
    Create {
        campaign: NewCampaign,
        launch: bool,
        limit: Option<NewWorkspaceLimit>,
        quotas: CampaignQuotas,
    },
    /// Remove a draft or finished campaign with its recipients (`DELETE /v1/campaigns/{id}`).
    Delete { scope: Scope, id: CampaignId },
    /// Launch, pause, resume or cancel through the API.
    Control {
        scope: Scope,
        id: CampaignId,
        control: Control,
        limit: Option<NewWorkspaceLimit>,
    },
    /// A scheduled campaign whose start time came: running.
    Start {
        id: CampaignId,
        lease: Option<Lease>,
    },
    /// Queue these pending recipients as these messages (recipient id, message), if the
    /// campaign is still running; recipients who opted out since are canceled instead.
    Feed {
        id: CampaignId,
        scope: Scope,
        messages: Vec<(Uuid, NewMessage)>,
        lease: Option<Lease>,
    },
    /// A running campaign with nothing pending and nothing open: completed.
    Complete {
        id: CampaignId,
        lease: Option<Lease>,
    },
}

impl CampaignOp {
    /// The campaign's lease a step of its actor acts under (a cluster node): the step is
    /// written only while the lease is still held with this fence. None for the API's
    /// operations and on a single node.
    fn lease(&self) -> Option<&Lease> {
        match self {
            CampaignOp::Start { lease, .. }
            | CampaignOp::Feed { lease, .. }
            | CampaignOp::Complete { lease, .. } => lease.as_ref(),
            CampaignOp::Create { .. } | CampaignOp::Control { .. } | CampaignOp::Delete { .. } => {
                None
            }
        }
    }
}

/// The answer to a [`CampaignOp`].
#[derive(Debug, Clone)]
pub enum CampaignOutcome {
    /// The campaign after the operation, with the messages it took off phones' queues (pause
    /// removes its queued messages, cancel cancels them).
    Done {
        campaign: Box<Campaign>,
        dropped: Vec<Message>,
        /// Pending recipients a cancel canceled (for the recipient metrics, counted by the
        /// caller once the commit is certain: a batch may be replayed).
        canceled_pending: u64,
    },
    /// Recipients queued as these messages; `opted_out` recipients were canceled instead.
    /// `held`: the message quota that kept the rest pending (docs/api.md, "Campaigns"): the
    /// test-mode daily quota paused the campaign, the queued one makes it wait.
    Fed {
        messages: Vec<Message>,
        opted_out: usize,
        held: Option<Quota>,
    },
    /// The campaign was removed.
    Deleted,
    NotFound,
    /// The operation does not apply to a campaign in this status.
    InvalidState(CampaignStatus),
    LimitReached {
        limit: u32,
        window_ends_at: i64,
    },
    /// A new campaign does not fit this quota of its scope's stored campaigns: nothing written.
    QuotaExceeded(CountQuota),
    /// The campaign's lease moved to another node (or expired): nothing was written, and the
    /// actor that asked no longer owns the campaign.
    LeaseLost,
}

impl WriterTask {
    pub(super) async fn campaign(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        op: &CampaignOp,
        now: i64,
    ) -> Result<CampaignOutcome, StoreError> {
        flush_inserts(txn, batch).await?;
        // A step of the campaign's actor is fenced: `holds` locks the lease row (`FOR SHARE`)
        // until this transaction ends, so it cannot be taken over before the step commits.
        if let Some(lease) = op.lease()
            && !crate::store::cluster::holds(txn, lease).await?
        {
            tracing::warn!(campaign_id = %lease.key, "campaign step refused: its lease moved to another node");
            return Ok(CampaignOutcome::LeaseLost);
        }
        let outcome = match op {
            CampaignOp::Create {
                campaign,
                launch,
                limit,
                quotas,
            } => {
                self.create(txn, batch, campaign, *launch, *limit, *quotas, now)
                    .await?
            }
            CampaignOp::Delete { scope, id } => {
                let deletable: Vec<CampaignStatus> = CampaignStatus::ALL
                    .into_iter()
                    .filter(|s| s.is_deletable())
                    .collect();
                match campaigns::delete(txn, *scope, *id, &deletable).await? {
                    Removal::Deleted => CampaignOutcome::Deleted,
                    Removal::NotFound => CampaignOutcome::NotFound,
                    Removal::Refused(status) => CampaignOutcome::InvalidState(status),
                }
            }
            CampaignOp::Control {
                scope,
                id,
                control,
                limit,
            } => {
                self.control(txn, batch, *scope, *id, *control, *limit, now)
                    .await?
            }
            CampaignOp::Start { id, .. } => advance(txn, *id, ActorStep::Start, now).await?,
            CampaignOp::Feed {
                id,
                scope,
                messages,
                ..
            } => self.feed(txn, batch, *id, *scope, messages, now).await?,
            CampaignOp::Complete { id, .. } => advance(txn, *id, ActorStep::Complete, now).await?,
        };
        Ok(outcome)
    }

    #[allow(clippy::too_many_arguments)]
    async fn create(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        new: &NewCampaign,
        launch: bool,
        limit: Option<NewWorkspaceLimit>,
        quotas: CampaignQuotas,
        now: i64,
    ) -> Result<CampaignOutcome, StoreError> {
        // The campaign quotas first (like a send's message quotas, before the new-workspace
        // limit), counted under the workspace's lock where other nodes create campaigns too.
        if quotas.campaigns.limit > 0 || quotas.recipients.limit > 0 {
            let workspace = new.scope.workspace_id;
            lock_to_count(txn, batch, &mut self.counts, &mut self.quotas, workspace).await?;
            let recipients = new.recipients.len() as u64;
            if let Some(quota) = campaigns::over_quota(txn, new.scope, quotas, recipients).await? {
                return Ok(CampaignOutcome::QuotaExceeded(quota));
            }
        }
        let status = if !launch {
            CampaignStatus::Draft
        } else if new.scheduled_for.is_some_and(|at| at > now) {
            CampaignStatus::Scheduled
        } else {
            CampaignStatus::Running
        };
        if launch
            && let Some(refused) = self
                .reserve(txn, batch, new.scope, limit, u64::from(new.total()), now)
                .await?
        {
            return Ok(refused);
        }
        campaigns::insert(txn, new, status, now).await?;
        done(txn, new.id, Vec::new(), 0).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn control(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        id: CampaignId,
        control: Control,
        limit: Option<NewWorkspaceLimit>,
        now: i64,
    ) -> Result<CampaignOutcome, StoreError> {
        let campaign = match campaigns::get(txn, scope, id).await {
            Ok(campaign) => campaign,
            Err(StoreError::NotFound) => return Ok(CampaignOutcome::NotFound),
            Err(err) => return Err(err),
        };
        let starts_later = campaign.scheduled_for.is_some_and(|at| at > now);
        let Some(to) = campaign.status.after(control, starts_later) else {
            return Ok(CampaignOutcome::InvalidState(campaign.status));
        };
        if control == Control::Launch
            && let Some(refused) = self
                .reserve(txn, batch, scope, limit, u64::from(campaign.total), now)
                .await?
        {
            return Ok(refused);
        }
        let stamps = Stamps {
            launched: control == Control::Launch,
            started: to == CampaignStatus::Running,
            finished: to == CampaignStatus::Canceled,
            paused_reason: None,
        };
        if !campaigns::set_status(txn, id, &[campaign.status], to, stamps, now).await? {
            return Ok(CampaignOutcome::InvalidState(campaign.status));
        }
        let (dropped, canceled_pending) = match control {
            Control::Pause => (withdraw_queued(txn, id).await?, 0),
            Control::Cancel => {
                let canceled = campaigns::cancel_pending(txn, id).await?;
                (cancel_queued(txn, batch, id, now).await?, canceled)
            }
            Control::Launch | Control::Resume => (Vec::new(), 0),
        };
        done(txn, id, dropped, canceled_pending).await
    }

    /// Counts `n` messages against the new-workspace limit; the refusal when they do not fit.
    async fn reserve(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        limit: Option<NewWorkspaceLimit>,
        n: u64,
        now: i64,
    ) -> Result<Option<CampaignOutcome>, StoreError> {
        match limit {
            Some(limit)
                if self.counts.check(txn, batch, scope, limit, n, now).await?
                    == LimitCheck::Reached =>
            {
                Ok(Some(CampaignOutcome::LimitReached {
                    limit: limit.max,
                    window_ends_at: limit.window_ends_at,
                }))
            }
            _ => Ok(None),
        }
    }
}

async fn done(
    txn: &DatabaseTransaction,
    id: CampaignId,
    dropped: Vec<Message>,
    canceled_pending: u64,
) -> Result<CampaignOutcome, StoreError> {
    Ok(CampaignOutcome::Done {
        campaign: Box::new(campaigns::by_id(txn, id).await?),
        dropped,
        canceled_pending,
    })
}

/// The campaign, or None when it does not exist (any more).
async fn find(txn: &DatabaseTransaction, id: CampaignId) -> Result<Option<Campaign>, StoreError> {
    match campaigns::by_id(txn, id).await {
        Ok(campaign) => Ok(Some(campaign)),
        Err(StoreError::NotFound) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The moves the campaign's actor makes on its own: start when due, complete when nothing is
/// left to send.
#[derive(Debug, Clone, Copy)]
enum ActorStep {
    Start,
    Complete,
}

impl ActorStep {
    /// The status it leaves and the one it enters.
    fn statuses(self) -> (CampaignStatus, CampaignStatus) {
        match self {
            ActorStep::Start => (CampaignStatus::Scheduled, CampaignStatus::Running),
            ActorStep::Complete => (CampaignStatus::Running, CampaignStatus::Completed),
        }
    }

    /// The time it stamps.
    fn stamps(self) -> Stamps {
        Stamps {
            started: matches!(self, ActorStep::Start),
            finished: matches!(self, ActorStep::Complete),
            ..Stamps::default()
        }
    }

    /// Whether `campaign` (in the status the step leaves) is ready for it: a start once its
    /// time has come, a completion once no recipient is pending and no message open.
    async fn ready(
        self,
        txn: &DatabaseTransaction,
        campaign: &Campaign,
        now: i64,
    ) -> Result<bool, StoreError> {
        Ok(match self {
            ActorStep::Start => campaign.scheduled_for.is_none_or(|at| at <= now),
            ActorStep::Complete => {
                !campaigns::has_pending(txn, campaign.id).await?
                    && !campaigns::has_open_messages(txn, campaign.id).await?
            }
        })
    }
}

/// Makes `step` on campaign `id`, then answers the campaign; `InvalidState` when the campaign
/// is not in the status the step leaves or not ready for it.
async fn advance(
    txn: &DatabaseTransaction,
    id: CampaignId,
    step: ActorStep,
    now: i64,
) -> Result<CampaignOutcome, StoreError> {
    let Some(campaign) = find(txn, id).await? else {
        return Ok(CampaignOutcome::NotFound);
    };
    let (from, to) = step.statuses();
    if campaign.status != from || !step.ready(txn, &campaign, now).await? {
        return Ok(CampaignOutcome::InvalidState(campaign.status));
    }
    campaigns::set_status(txn, id, &[from], to, step.stamps(), now).await?;
    done(txn, id, Vec::new(), 0).await
}

impl WriterTask {
    /// Queues what fits of `items` (pending recipients, each with its message): recipients who
    /// opted out since are canceled, and the message quotas count the rest like a send's. What
    /// the test-mode daily quota holds back stays pending and pauses the campaign
    /// (`paused_reason` daily_quota_exceeded; a resume tries again); what the queued quota
    /// holds back stays pending for a later feed.
    async fn feed(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        id: CampaignId,
        scope: Scope,
        items: &[(Uuid, NewMessage)],
        now: i64,
    ) -> Result<CampaignOutcome, StoreError> {
        let Some(campaign) = find(txn, id).await? else {
            return Ok(CampaignOutcome::NotFound);
        };
        if campaign.status != CampaignStatus::Running {
            return Ok(CampaignOutcome::InvalidState(campaign.status));
        }
        let ids: Vec<Uuid> = items.iter().map(|(r, _)| *r).collect();
        let pending = campaigns::still_pending(txn, id, &ids).await?;
        let numbers: Vec<String> = items.iter().map(|(_, m)| m.to_number.clone()).collect();
        let opted_out = contacts::opted_out_among(txn, scope, &numbers).await?;
        let mut sendable = Vec::new();
        let mut canceled = Vec::new();
        for (recipient, new) in items {
            if !pending.contains(recipient) {
                continue;
            }
            if opted_out.contains(&new.to_number) {
                canceled.push(*recipient);
                continue;
            }
            sendable.push((*recipient, new));
        }
        let mut held = None;
        if self.quotas.enforced() && !sendable.is_empty() {
            let workspace = scope.workspace_id;
            lock_to_count(txn, batch, &mut self.counts, &mut self.quotas, workspace).await?;
            let wanted = sendable.len() as u64;
            let (fit, quota) = self.quotas.room(txn, batch, scope, wanted, now).await?;
            sendable.truncate(usize::try_from(fit).unwrap_or(usize::MAX));
            held = quota;
        }
        let mut queued = Vec::new();
        let mut pairs = Vec::new();
        for (recipient, new) in sendable {
            queued.push(batch.stage(new, scope, now));
            pairs.push((recipient, new.id));
        }
        flush_inserts(txn, batch).await?;
        campaigns::mark_queued(txn, &pairs).await?;
        campaigns::mark_opted_out(txn, id, &canceled, now).await?;
        if held == Some(Quota::TestMessagesPerDay) {
            let stamps = Stamps {
                paused_reason: Some(PauseReason::DailyQuotaExceeded),
                ..Stamps::default()
            };
            let running = [CampaignStatus::Running];
            campaigns::set_status(txn, id, &running, CampaignStatus::Paused, stamps, now).await?;
        }
        Ok(CampaignOutcome::Fed {
            messages: queued,
            opted_out: canceled.len(),
            held,
        })
    }
}

/// Pause: the campaign's queued messages never handed to a phone are removed and their
/// recipients are pending again (one queued again after an attempt may have been sent, so it
/// stays and finishes).
async fn withdraw_queued(
    txn: &DatabaseTransaction,
    id: CampaignId,
) -> Result<Vec<Message>, StoreError> {
    let queued = campaigns::messages_in(txn, id, MessageStatus::Queued, true).await?;
    let ids: Vec<Uuid> = queued.iter().map(|m| m.id).collect();
    let removed = campaigns::withdraw(txn, &ids).await?;
    Ok(queued
        .into_iter()
        .filter(|m| removed.contains(&m.id))
        .collect())
}

/// Cancel: the campaign's queued messages are canceled like a `DELETE /v1/messages/{id}`.
async fn cancel_queued(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    id: CampaignId,
    now: i64,
) -> Result<Vec<Message>, StoreError> {
    let queued = campaigns::messages_in(txn, id, MessageStatus::Queued, false).await?;
    let moves: Vec<Transition> = queued
        .iter()
        .map(|m| Transition::cancel(m.id, "the campaign was canceled"))
        .collect();
    let mut answers: Vec<Option<Option<Message>>> = vec![None; moves.len()];
    let batch_moves = moves
        .iter()
        .zip(answers.iter_mut())
        .map(|(transition, answer)| Move { transition, answer })
        .collect();
    transition::apply_moves(txn, batch, batch_moves, now).await?;
    Ok(answers.into_iter().flatten().flatten().collect())
}
