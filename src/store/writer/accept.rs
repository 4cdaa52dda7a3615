//! Accepting outbound messages inside the writer's transaction: the checks of `docs/api.md`
//! that need the database, in order (idempotency, phone availability, the new-workspace limit,
//! the AI draft a reply sends), each a function with a small outcome, then the staging of the
//! accepted messages.

use std::collections::HashMap;

use sea_orm::{DatabaseConnection, DatabaseTransaction};
use uuid::Uuid;

use super::NewMessage;
use super::quotas::QuotaCounts;
use super::sql;
use super::task::Batch;
use crate::domain::ai::DraftStatus;
use crate::domain::ids::WorkspaceId;
use crate::domain::quota::CountQuota;
use crate::store::StoreError;
use crate::store::ai::NewDraft;
use crate::store::messages::Message;
use crate::store::scoped::Scope;

/// The new-workspace limit, when it applies to this request.
#[derive(Debug, Clone, Copy)]
pub struct NewWorkspaceLimit {
    pub max: u32,
    pub window_starts_at: i64,
    pub window_ends_at: i64,
}

impl NewWorkspaceLimit {
    /// The limit of a workspace created at `created_at` (docs/api.md, Messages): live mode only.
    pub fn of(
        limits: &crate::config::LimitSettings,
        mode: crate::domain::status::Mode,
        created_at: i64,
    ) -> Option<NewWorkspaceLimit> {
        if mode.is_test() {
            return None;
        }
        let window = i64::try_from(limits.new_workspace_window.as_millis()).ok()?;
        Some(NewWorkspaceLimit {
            max: limits.new_workspace_messages,
            window_starts_at: created_at,
            window_ends_at: created_at.saturating_add(window),
        })
    }
}

/// Store outbound messages after the checks of docs/api.md, Messages, that need the database, in order:
/// idempotency, the recipients' opt-outs (docs/api.md "Messages"; for an AI reply also its
/// `ai_replies`), device availability, the message quotas, new-workspace limit.
#[derive(Debug, Clone)]
pub struct Accept {
    pub scope: Scope,
    pub request_id: Option<String>,
    pub messages: Vec<NewMessage>,
    /// Whether routing found a phone; checked after idempotency so a repeat is still a 409.
    pub device_available: bool,
    pub limit: Option<NewWorkspaceLimit>,
    /// The AI draft this message sends (it is marked sent in the same transaction).
    pub draft: Option<DraftLink>,
}

/// How an accepted reply relates to an AI draft.
#[derive(Debug, Clone)]
pub enum DraftLink {
    /// A stored draft, sent now: refused unless it is still pending.
    Existing(Uuid),
    /// A draft made by auto mode, stored as sent with its reply.
    New(Box<NewDraft>),
}

/// The answer to an [`Accept`].
#[derive(Debug, Clone)]
pub enum AcceptOutcome {
    Accepted(Vec<Message>),
    /// The request_id was used before: the original message id.
    Duplicate(Uuid),
    NoDevice,
    LimitReached {
        limit: u32,
        window_ends_at: i64,
    },
    /// The draft to send is not pending: its status, or None when it does not exist.
    DraftNotPending(Option<DraftStatus>),
    /// A message quota would be passed; a daily one resets at `resets_at`, in
    /// `retry_after_secs`.
    QuotaExceeded {
        quota: CountQuota,
        resets_at: Option<i64>,
        retry_after_secs: u64,
    },
    /// The recipient of `messages[index]` opted out (STOP): nothing was stored.
    OptedOut {
        index: usize,
    },
    /// The recipient of an AI reply turned AI replies off (STOP AI): nothing was stored.
    AiRepliesOff,
}

/// Before a count of `workspace`'s messages or campaigns that other nodes' writers may change
/// (PostgreSQL): locks the workspace's row until this batch commits, once per batch, and
/// forgets the counts kept for it, so everything counts again under the lock. Nothing on SQLite.
pub(super) async fn lock_to_count(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    counts: &mut NewWorkspaceCounts,
    quotas: &mut QuotaCounts,
    workspace: WorkspaceId,
) -> Result<(), StoreError> {
    if counts.shared && batch.locked_workspaces.insert(workspace) {
        crate::store::quotas::lock_workspace(txn, workspace).await?;
        counts.counts.remove(&workspace);
        quotas.forget(workspace);
    }
    Ok(())
}

/// An idempotency key as the unique index sees it: the request_id within one scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct RequestKey {
    scope: Scope,
    request_id: String,
}

/// Applies the checks to `accept` and stages its messages when they pass.
pub(super) async fn accept(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    counts: &mut NewWorkspaceCounts,
    quotas: &mut QuotaCounts,
    accept: &Accept,
    now: i64,
) -> Result<AcceptOutcome, StoreError> {
    let scope = accept.scope;
    if let Some(request_id) = &accept.request_id
        && let Idempotency::Repeat(id) = idempotency(txn, batch, scope, request_id).await?
    {
        return Ok(AcceptOutcome::Duplicate(id));
    }
    if let Some(refused) = refused_recipient(batch, accept) {
        return Ok(refused);
    }
    if !accept.device_available {
        return Ok(AcceptOutcome::NoDevice);
    }
    let counted = accept.messages.len() as u64;
    let limited = accept.limit.is_some_and(|l| now < l.window_ends_at);
    if limited || quotas.enforced() {
        lock_to_count(txn, batch, counts, quotas, scope.workspace_id).await?;
    }
    if let Some(refused) = quotas.check(txn, batch, scope, counted, now).await? {
        return Ok(refused);
    }
    if let Some(limit) = accept.limit
        && counts.check(txn, batch, scope, limit, counted, now).await? == LimitCheck::Reached
    {
        return Ok(AcceptOutcome::LimitReached {
            limit: limit.max,
            window_ends_at: limit.window_ends_at,
        });
    }
    if let (Some(link), Some(reply)) = (&accept.draft, accept.messages.first())
        && let DraftCheck::NotPending(status) = link_draft(txn, scope, link, reply, now).await?
    {
        // Not sent after all: take back what the limit counted for it.
        if accept.limit.is_some() {
            counts.take_back(batch, scope, counted);
        }
        return Ok(AcceptOutcome::DraftNotPending(status));
    }
    if let Some(request_id) = &accept.request_id
        && let Some(first) = accept.messages.first()
    {
        let key = RequestKey {
            scope,
            request_id: request_id.clone(),
        };
        batch.request_ids.insert(key, first.id);
    }
    let stored = accept
        .messages
        .iter()
        .map(|new| batch.stage(new, scope, now))
        .collect();
    Ok(AcceptOutcome::Accepted(stored))
}

/// Whether a request_id was used before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idempotency {
    First,
    /// Used before, by this message.
    Repeat(Uuid),
}

/// The idempotency rule: a request_id seen earlier in this batch or stored before is a repeat.
async fn idempotency(
    txn: &DatabaseTransaction,
    batch: &Batch,
    scope: Scope,
    request_id: &str,
) -> Result<Idempotency, StoreError> {
    let key = RequestKey {
        scope,
        request_id: request_id.to_string(),
    };
    if let Some(id) = batch.request_ids.get(&key) {
        return Ok(Idempotency::Repeat(*id));
    }
    Ok(match sql::find_request_id(txn, scope, request_id).await? {
        Some(id) => Idempotency::Repeat(id),
        None => Idempotency::First,
    })
}

/// The answer to an accept whose transaction a unique index refused: a keyed send that raced
/// another writer is a repeat.
pub(super) async fn after_conflict(
    db: &DatabaseConnection,
    accept: &Accept,
) -> Result<AcceptOutcome, StoreError> {
    let Some(request_id) = &accept.request_id else {
        return Err(StoreError::Conflict("message id collision".into()));
    };
    match sql::find_request_id(db, accept.scope, request_id).await? {
        Some(id) => Ok(AcceptOutcome::Duplicate(id)),
        None => Err(StoreError::Conflict("request_id".into())),
    }
}

/// Whether messages fit the new-workspace limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LimitCheck {
    /// They fit and are counted in this batch.
    Fits,
    Reached,
}

/// Live outbound messages counted per workspace still inside its first window; a workspace's
/// count is read from the database once, then kept up to date by every commit.
///
/// On PostgreSQL several nodes may write (docs/architecture.md, "Cluster"), so a count kept
/// by one writer misses the others' messages: there each batch locks the workspace's row
/// (`FOR UPDATE`, held until its commit) and counts again, once per workspace and batch, and
/// only for workspaces still inside their window. Writers of other nodes take turns on that
/// row, so the limit is exact across nodes.
#[derive(Default)]
pub(super) struct NewWorkspaceCounts {
    counts: HashMap<WorkspaceId, u64>,
    /// Count under the workspace's lock in every batch (PostgreSQL).
    shared: bool,
}

impl NewWorkspaceCounts {
    /// Counts for a writer that may share the database with other nodes' writers.
    pub(super) fn shared(shared: bool) -> NewWorkspaceCounts {
        NewWorkspaceCounts {
            counts: HashMap::new(),
            shared,
        }
    }

    /// The new-workspace limit rule: whether `n` more live outbound messages of this workspace
    /// fit its limit; when they do, they are counted in this batch.
    pub(super) async fn check(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        limit: NewWorkspaceLimit,
        n: u64,
        now: i64,
    ) -> Result<LimitCheck, StoreError> {
        if now >= limit.window_ends_at {
            return Ok(LimitCheck::Fits);
        }
        let counted = match self.counts.get(&scope.workspace_id) {
            Some(count) => *count,
            None => {
                let count =
                    sql::count_new_workspace_messages(txn, scope.workspace_id, limit).await?;
                self.counts.insert(scope.workspace_id, count);
                count
            }
        };
        let pending = batch
            .count_deltas
            .get(&scope.workspace_id)
            .copied()
            .unwrap_or(0);
        if counted + pending + n > u64::from(limit.max) {
            return Ok(LimitCheck::Reached);
        }
        *batch.count_deltas.entry(scope.workspace_id).or_insert(0) += n;
        Ok(LimitCheck::Fits)
    }

    /// Takes back `n` messages this batch counted and then did not accept.
    fn take_back(&self, batch: &mut Batch, scope: Scope, n: u64) {
        if let Some(delta) = batch.count_deltas.get_mut(&scope.workspace_id) {
            *delta = delta.saturating_sub(n);
        }
    }

    /// Adds what a committed batch counted.
    pub(super) fn apply(&mut self, deltas: HashMap<WorkspaceId, u64>) {
        for (workspace, delta) in deltas {
            if let Some(count) = self.counts.get_mut(&workspace) {
                *count += delta;
            }
        }
    }
}

/// Whether the draft a reply sends could be marked sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DraftCheck {
    Linked,
    /// It is not pending: its status, or None when it does not exist.
    NotPending(Option<DraftStatus>),
}

/// The draft rule: marks the draft a reply sends (or stores auto mode's draft as sent).
async fn link_draft(
    txn: &DatabaseTransaction,
    scope: Scope,
    link: &DraftLink,
    reply: &NewMessage,
    now: i64,
) -> Result<DraftCheck, StoreError> {
    let marked = match link {
        DraftLink::Existing(id) => {
            crate::store::ai::mark_sent(txn, scope, *id, reply.id, &reply.content, now).await?
        }
        DraftLink::New(draft) => {
            let pending = NewDraft {
                status: DraftStatus::Pending,
                ..(**draft).clone()
            };
            crate::store::ai::insert(txn, &pending, now).await?;
            crate::store::ai::mark_sent(txn, scope, pending.id, reply.id, &reply.content, now)
                .await?
        }
    };
    Ok(match marked {
        Ok(()) => DraftCheck::Linked,
        Err(status) => DraftCheck::NotPending(status),
    })
}

/// The opt-out check of an accept: the first message whose recipient opted out; for an AI
/// reply, also a recipient with AI replies off. Single and bulk sends refuse an opted-out
/// recipient like Twilio's error 21610 (docs/api.md "Messages").
fn refused_recipient(batch: &Batch, accept: &Accept) -> Option<AcceptOutcome> {
    if batch.restricted.is_empty() {
        return None;
    }
    for (index, message) in accept.messages.iter().enumerate() {
        let consent = batch.consent(accept.scope, &message.to_number);
        if !consent.texts {
            return Some(AcceptOutcome::OptedOut { index });
        }
        if accept.draft.is_some() && !consent.ai_replies {
            return Some(AcceptOutcome::AiRepliesOff);
        }
    }
    None
}
