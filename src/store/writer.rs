//! The group-commit writer: every message write of the hot path goes through one task that
//! batches concurrent requests into one transaction and answers each once its batch commits.
//!
//! Why: one commit per request tops out at a few thousand rows/s on SQLite, while one
//! transaction for many rows reaches tens of thousands. The writer is also the only inserter
//! of messages, which makes the new-workspace count exact. Idempotency still rests on the
//! unique index: a batch that fails as a whole is replayed job by job, so one bad job never
//! fails its neighbours.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use entity::{message_events, messages};
use sea_orm::sea_query::{Expr, ExprTrait, Func};
use sea_orm::{
    ActiveValue::NotSet, ColumnTrait, Condition, DatabaseConnection, DatabaseTransaction,
    EntityTrait, PaginatorTrait, QueryFilter, QuerySelect, Set,
};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

mod campaign;

pub use campaign::{CampaignOp, CampaignOutcome};

use super::StoreError;
use super::ai::NewDraft;
use super::messages::{Message, Scope};
use super::webhooks::{self, AttemptRecord, PendingDelivery};
use crate::clock::SharedClock;
use crate::domain::ai::DraftStatus;
use crate::domain::phone_number::PhoneNumber;
use crate::domain::quota::{self, CountQuota, Quota};
use crate::domain::status::{Direction, MessageStatus, QueueClass};

/// Jobs waiting for the writer; senders wait (backpressure) when it is full.
const QUEUE_CAPACITY: usize = 16_384;
/// Most jobs committed in one transaction.
const MAX_BATCH: usize = 512;
/// Most rows per multi-row INSERT (SQLite binds at most 32,766 parameters per statement); a
/// power of two, see [`super::shaped_chunks`].
const ROWS_PER_INSERT: usize = 256;

/// The WHERE of the partial index `idx_messages_queued`, written as literals: a planner uses a
/// partial index only when the query's terms match its own, and a bound parameter does not.
const QUEUED_OUTBOUND: &str = "status = 'queued' AND direction = 'outbound'";

/// A message ready to be stored (already validated by the domain layer).
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub id: Uuid,
    pub direction: Direction,
    pub status: MessageStatus,
    pub class: QueueClass,
    pub from_number: String,
    pub to_number: String,
    pub content: String,
    pub segments: u32,
    pub encoding: String,
    pub device_id: Option<Uuid>,
    pub pinned: bool,
    pub campaign_id: Option<Uuid>,
    pub request_id: Option<String>,
    pub inbound_ref: Option<String>,
    pub scheduled_for: Option<i64>,
    pub expires_at: i64,
}

impl NewMessage {
    /// A single outbound message of `class`, queued now: the replies of AI drafts and the
    /// like (no campaign, no idempotency key, no schedule, not pinned to its phone).
    pub fn outbound(
        class: QueueClass,
        from_number: String,
        to_number: String,
        text: crate::domain::sms::SmsText,
        device_id: Option<Uuid>,
        expires_at: i64,
    ) -> NewMessage {
        NewMessage {
            id: Uuid::now_v7(),
            direction: Direction::Outbound,
            status: MessageStatus::Queued,
            class,
            from_number,
            to_number,
            segments: text.segments(),
            encoding: text.encoding().as_str().to_string(),
            content: text.into_string(),
            device_id,
            pinned: false,
            campaign_id: None,
            request_id: None,
            inbound_ref: None,
            scheduled_for: None,
            expires_at,
        }
    }
}

/// The new-workspace limit, when it applies to this request.
#[derive(Debug, Clone, Copy)]
pub struct NewWorkspaceLimit {
    pub max: u32,
    pub window_starts_at: i64,
    pub window_ends_at: i64,
}

impl NewWorkspaceLimit {
    /// The limit of a workspace created at `created_at` (contract §8): live mode only.
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

/// Store outbound messages after the checks of contract §3 that need the database, in order:
/// idempotency, device availability, the message quotas, new-workspace limit.
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
    /// A message quota would be passed; a daily one resets at `resets_at`, in
    /// `retry_after_secs`.
    QuotaExceeded {
        quota: CountQuota,
        resets_at: Option<i64>,
        retry_after_secs: u64,
    },
    /// The draft to send is not pending: its status, or None when it does not exist.
    DraftNotPending(Option<DraftStatus>),
}

/// Move a message to another status if its current status allows it.
#[derive(Debug, Clone)]
pub struct Transition {
    pub id: Uuid,
    pub to: MessageStatus,
    /// Only when the message is currently assigned to this phone (status reports).
    pub expect_device: Option<Uuid>,
    /// A phone's report: only an outbound message handed over at least once may move.
    pub reported: bool,
    /// Assign the message to this phone (hand-over).
    pub set_device: Option<Uuid>,
    /// Count a send attempt (hand-over).
    pub count_attempt: bool,
    pub failure_reason: Option<String>,
    /// Timeline kind; the target status when None.
    pub event_kind: Option<&'static str>,
    pub detail: Option<String>,
}

impl Transition {
    /// A plain move to `to`, recorded under its own name.
    pub fn to(id: Uuid, to: MessageStatus) -> Transition {
        Transition {
            id,
            to,
            expect_device: None,
            reported: false,
            set_device: None,
            count_attempt: false,
            failure_reason: None,
            event_kind: None,
            detail: None,
        }
    }
}

/// Move a queued, unpinned message from one phone to another with the same number.
#[derive(Debug, Clone)]
pub struct Reroute {
    pub id: Uuid,
    pub from_device: Uuid,
    pub to_device: Uuid,
    pub detail: String,
}

/// A committed change, published after its batch commits (the webhook fan-out listens).
#[derive(Debug, Clone)]
pub struct Change {
    pub kind: &'static str,
    pub message: Message,
}

/// Called with every committed change, in commit order.
pub type ChangeListener = Arc<dyn Fn(Vec<Change>) + Send + Sync>;

/// Writes webhook deliveries in the same transaction as the changes that fire them, so an
/// event is never lost even if the process dies right after the commit.
pub trait CommitHook: Send + Sync {
    /// The deliveries a batch's changes fire (no I/O: called inside the write transaction).
    fn stage(&self, changes: &[Change], now_ms: i64) -> Vec<PendingDelivery>;
    /// Called after the commit with what [`CommitHook::stage`] returned.
    fn committed(&self, deliveries: Vec<PendingDelivery>);
}

/// The commit hook in use, if any.
pub type SharedCommitHook = Arc<dyn CommitHook>;

/// What one committed transaction produced.
struct Committed {
    outcomes: Vec<OpResult>,
    changes: Vec<Change>,
    deltas: HashMap<Uuid, u64>,
    /// Outbound messages stored per scope.
    staged: HashMap<Scope, u64>,
    deliveries: Vec<PendingDelivery>,
}

enum Op {
    Accept(Accept),
    Transition(Transition),
    Inbound(NewMessage, Scope),
    Reroute(Reroute),
    /// A finished webhook attempt (see [`webhooks::AttemptRecorder`]).
    RecordAttempt(Box<AttemptRecord>),
    Campaign(Box<CampaignOp>),
    /// Store an AI draft (pending: with its `ai.draft.created` deliveries).
    Draft(Box<NewDraft>),
}

enum OpResult {
    Accept(AcceptOutcome),
    Transition(Option<Box<Message>>),
    Inbound(InboundOutcome),
    Recorded(bool),
    Campaign(Box<CampaignOutcome>),
    Drafted,
}

/// The answer to storing an inbound message.
#[derive(Debug, Clone)]
pub enum InboundOutcome {
    Stored(Box<Message>),
    /// The phone reported this ref before; nothing was stored.
    Repeat,
}

struct Job {
    op: Op,
    reply: oneshot::Sender<Result<OpResult, StoreError>>,
}

/// Handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
}

impl Writer {
    /// Opens the writer's own connection to `url` and starts the writer on it. On SQLite the
    /// connection is opened on the writer's thread, which first binds itself to the CPU it
    /// runs on: the connection's thread (sqlx starts one per SQLite connection) inherits that
    /// CPU, and the two hand every statement and every returned row back and forth without a
    /// wake-up crossing CPUs (an inter-processor interrupt, a VM exit under KVM: +8–17 %
    /// sends/s in the send scenario, BENCHMARKS.md). The scheduler moves the other threads off
    /// that CPU.
    pub async fn connect(
        url: &str,
        clock: SharedClock,
        listener: ChangeListener,
        hook: Option<SharedCommitHook>,
        quotas: MessageQuotas,
    ) -> Result<Writer, StoreError> {
        if !sea_orm::DbBackend::Sqlite.is_prefix_of(url) {
            let db = super::connect_writer(url).await?;
            let task = WriterTask::new(db, clock, listener, hook, quotas);
            return Ok(Writer::start_here(task));
        }
        let (ready, opened) = oneshot::channel();
        let url_owned = url.to_string();
        std::thread::Builder::new()
            .name("smsgw-writer".into())
            .spawn(move || {
                let cpu = share_one_cpu();
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = ready.send(Err(StoreError::Db(sea_orm::DbErr::Custom(format!(
                            "writer runtime: {err}"
                        )))));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let db = match super::connect_writer(&url_owned).await {
                        Ok(db) => db,
                        Err(err) => {
                            let _ = ready.send(Err(err));
                            return;
                        }
                    };
                    tracing::debug!(?cpu, "writer started on its own thread");
                    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
                    let task = WriterTask::new(db, clock, listener, hook, quotas);
                    if ready.send(Ok(Writer { tx })).is_ok() {
                        task.run(rx).await;
                    }
                });
            })
            .map_err(|err| {
                StoreError::Db(sea_orm::DbErr::Custom(format!(
                    "cannot start the writer thread: {err}"
                )))
            })?;
        let writer = opened.await.map_err(|_| StoreError::WriterGone)??;
        super::start_checkpoints(url).await?;
        Ok(writer)
    }

    /// Starts the writer as a task of the current runtime (PostgreSQL: its connection is a
    /// socket of that runtime).
    fn start_here(task: WriterTask) -> Writer {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(task.run(rx));
        Writer { tx }
    }

    async fn submit(&self, op: Op) -> Result<OpResult, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { op, reply })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Stores outbound messages (send, bulk send, campaign, AI reply); see [`Accept`].
    pub async fn accept(&self, accept: Accept) -> Result<AcceptOutcome, StoreError> {
        match self.submit(Op::Accept(accept)).await? {
            OpResult::Accept(outcome) => Ok(outcome),
            _ => Err(StoreError::WriterGone),
        }
    }

    /// Applies a transition; `None` when the message is unknown or its status does not allow it.
    pub async fn transition(&self, transition: Transition) -> Result<Option<Message>, StoreError> {
        match self.submit(Op::Transition(transition)).await? {
            OpResult::Transition(message) => Ok(message.map(|m| *m)),
            _ => Err(StoreError::WriterGone),
        }
    }

    /// Reassigns a queued, unpinned message to another phone; `None` when it is no longer
    /// queued on `from_device`.
    pub async fn reroute(&self, reroute: Reroute) -> Result<Option<Message>, StoreError> {
        match self.submit(Op::Reroute(reroute)).await? {
            OpResult::Transition(message) => Ok(message.map(|m| *m)),
            _ => Err(StoreError::WriterGone),
        }
    }

    /// Records a finished webhook attempt and its delivery's new state; false when the delivery
    /// had moved on (deleted, or this attempt number was recorded already).
    pub async fn record_attempt(&self, record: AttemptRecord) -> Result<bool, StoreError> {
        match self.submit(Op::RecordAttempt(Box::new(record))).await? {
            OpResult::Recorded(applied) => Ok(applied),
            _ => Err(StoreError::WriterGone),
        }
    }

    /// Runs a campaign operation (create, control, start, feed, complete).
    pub async fn campaign(&self, op: CampaignOp) -> Result<CampaignOutcome, StoreError> {
        match self.submit(Op::Campaign(Box::new(op))).await? {
            OpResult::Campaign(outcome) => Ok(*outcome),
            _ => Err(StoreError::WriterGone),
        }
    }

    /// Stores an AI draft (see [`Op::Draft`]); a second draft for one message is a `Conflict`.
    pub async fn draft(&self, draft: NewDraft) -> Result<(), StoreError> {
        match self.submit(Op::Draft(Box::new(draft))).await? {
            OpResult::Drafted => Ok(()),
            _ => Err(StoreError::WriterGone),
        }
    }

    /// Stores an inbound message once per (phone, ref).
    pub async fn inbound(
        &self,
        message: NewMessage,
        scope: Scope,
    ) -> Result<InboundOutcome, StoreError> {
        match self.submit(Op::Inbound(message, scope)).await? {
            OpResult::Inbound(outcome) => Ok(outcome),
            _ => Err(StoreError::WriterGone),
        }
    }
}

struct WriterTask {
    db: DatabaseConnection,
    clock: SharedClock,
    listener: ChangeListener,
    hook: Option<SharedCommitHook>,
    /// Live outbound messages counted per workspace still inside its first window.
    new_workspace_counts: HashMap<Uuid, u64>,
    quotas: MessageQuotas,
    /// Per scope, at least the number of its committed `queued` outbound messages (kept up by
    /// every commit; moves out of `queued` are not subtracted, so it only errs high, and a
    /// send it would refuse counts again first). Only scopes that came near their quota.
    queued_counts: HashMap<Scope, u64>,
    /// Per test-mode workspace: the UTC day counted and its outbound messages stored that day.
    test_day_counts: HashMap<Uuid, (i64, u64)>,
}

/// What one batch will write and answer once it commits.
#[derive(Default)]
struct Batch {
    rows: Vec<messages::ActiveModel>,
    events: Vec<message_events::ActiveModel>,
    changes: Vec<Change>,
    request_ids: HashMap<(Uuid, bool, String), Uuid>,
    inbound_refs: HashSet<(Uuid, String)>,
    /// The (phone, ref) pairs of this batch's inbound messages already stored before it.
    stored_refs: HashSet<(Uuid, String)>,
    count_deltas: HashMap<Uuid, u64>,
    /// Outbound messages staged per scope in this batch.
    staged: HashMap<Scope, u64>,
    /// Messages moved to `sent` in this batch.
    sent: HashSet<Uuid>,
    /// Webhook attempt rows of this batch.
    attempts: Vec<entity::webhook_attempts::ActiveModel>,
}

/// Binds the calling thread to the CPU it runs on, when the process may use more than one;
/// threads it starts afterwards inherit the binding. Returns the CPU. The CPU the scheduler
/// picked, not a fixed one: several servers on one host (or the test suite's many) do not all
/// put their writers on the same CPU.
#[cfg(target_os = "linux")]
fn share_one_cpu() -> Option<usize> {
    use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
    use nix::unistd::Pid;
    let this_thread = Pid::from_raw(0);
    let allowed = sched_getaffinity(this_thread).ok()?;
    let count = (0..CpuSet::count())
        .filter(|&cpu| allowed.is_set(cpu).unwrap_or(false))
        .count();
    let current = sched_getcpu().ok()?;
    if count < 2 || !allowed.is_set(current).unwrap_or(false) {
        return None;
    }
    let mut one = CpuSet::new();
    one.set(current).ok()?;
    match sched_setaffinity(this_thread, &one) {
        Ok(()) => Some(current),
        Err(err) => {
            tracing::warn!(error = %err, "the writer runs on any CPU");
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn share_one_cpu() -> Option<usize> {
    None
}

impl WriterTask {
    fn new(
        db: DatabaseConnection,
        clock: SharedClock,
        listener: ChangeListener,
        hook: Option<SharedCommitHook>,
        quotas: MessageQuotas,
    ) -> WriterTask {
        WriterTask {
            db,
            clock,
            listener,
            hook,
            new_workspace_counts: HashMap::new(),
            quotas,
            queued_counts: HashMap::new(),
            test_day_counts: HashMap::new(),
        }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        let mut jobs = Vec::with_capacity(MAX_BATCH);
        while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
            self.process(std::mem::take(&mut jobs)).await;
        }
        tracing::info!("writer stopped: every handle is dropped");
    }

    async fn process(&mut self, jobs: Vec<Job>) {
        let mut results = Vec::with_capacity(jobs.len());
        let started = std::time::Instant::now();
        let mut first = self.commit(jobs.iter().map(|j| &j.op)).await;
        metrics::histogram!(crate::telemetry::names::WRITER_BATCH_JOBS).record(jobs.len() as f64);
        metrics::histogram!(crate::telemetry::names::WRITER_COMMIT_DURATION)
            .record(started.elapsed().as_secs_f64());
        let mut delay = std::time::Duration::from_millis(20);
        for _ in 0..5 {
            let Err(StoreError::Busy(detail)) = &first else {
                break;
            };
            tracing::warn!(%detail, "database busy; retrying the batch");
            tokio::time::sleep(delay).await;
            delay *= 2;
            first = self.commit(jobs.iter().map(|j| &j.op)).await;
        }
        match first {
            Ok(committed) => {
                results.extend(self.published(committed).into_iter().map(Ok));
            }
            Err(err) if jobs.len() == 1 => {
                results.push(Err(err));
            }
            Err(err) => {
                tracing::warn!(error = %err, jobs = jobs.len(), "batch failed; replaying its jobs one by one");
                for job in &jobs {
                    match self.commit(std::iter::once(&job.op)).await {
                        Ok(committed) => {
                            let mut outcomes = self.published(committed);
                            results.push(outcomes.pop().ok_or(StoreError::WriterGone));
                        }
                        Err(err) => results.push(Err(err)),
                    }
                }
            }
        }
        for (job, result) in jobs.into_iter().zip(results) {
            let result = match (result, &job.op) {
                // A unique index refused a keyed send that raced another writer: answer as a repeat.
                (Err(StoreError::Conflict(_)), Op::Accept(accept)) => {
                    self.lookup_duplicate(accept).await
                }
                (Err(StoreError::Conflict(_)), Op::Inbound(..)) => {
                    Ok(OpResult::Inbound(InboundOutcome::Repeat))
                }
                (other, _) => other,
            };
            // The requester may have gone away (client disconnected); the write stands.
            let _ = job.reply.send(result);
        }
    }

    /// Publishes a committed batch (counts, listener, hook) and returns its outcomes.
    fn published(&mut self, committed: Committed) -> Vec<OpResult> {
        self.apply_deltas(committed.deltas);
        self.count_queued(&committed.staged, &committed.changes);
        (self.listener)(committed.changes);
        if let Some(hook) = &self.hook
            && !committed.deliveries.is_empty()
        {
            hook.committed(committed.deliveries);
        }
        committed.outcomes
    }

    fn apply_deltas(&mut self, deltas: HashMap<Uuid, u64>) {
        for (workspace, delta) in deltas {
            if let Some(count) = self.new_workspace_counts.get_mut(&workspace) {
                *count += delta;
            }
        }
    }

    /// Adds a commit's stored messages to the test-mode day counts, and its changes that leave
    /// a message `queued` to the queued counts.
    fn count_queued(&mut self, staged: &HashMap<Scope, u64>, changes: &[Change]) {
        for (scope, n) in staged {
            if let Some((_, count)) = self.test_day_counts.get_mut(&scope.workspace_id)
                && scope.mode.is_test()
            {
                *count += n;
            }
        }
        if self.queued_counts.is_empty() {
            return;
        }
        for change in changes {
            let message = &change.message;
            // Every change that leaves a message `queued` (stored, back from a phone after a
            // failed attempt or a disconnect, rerouted): counted, erring high.
            if message.status == MessageStatus::Queued
                && message.direction == Direction::Outbound
                && let Some(count) = self.queued_counts.get_mut(&Scope {
                    workspace_id: message.workspace_id,
                    mode: message.mode,
                })
            {
                *count += 1;
            }
        }
    }

    async fn lookup_duplicate(&self, accept: &Accept) -> Result<OpResult, StoreError> {
        let Some(request_id) = &accept.request_id else {
            return Err(StoreError::Conflict("message id collision".into()));
        };
        match find_request_id(&self.db, accept.scope, request_id).await? {
            Some(id) => Ok(OpResult::Accept(AcceptOutcome::Duplicate(id))),
            None => Err(StoreError::Conflict("request_id".into())),
        }
    }

    async fn commit<'a>(
        &mut self,
        ops: impl Iterator<Item = &'a Op> + Clone,
    ) -> Result<Committed, StoreError> {
        let now = self.clock.now_ms();
        let txn = super::begin_write(&self.db).await?;
        let mut batch = Batch::default();
        let refs: Vec<(Uuid, &str)> = ops
            .clone()
            .filter_map(|op| match op {
                Op::Inbound(new, _) => new.device_id.zip(new.inbound_ref.as_deref()),
                _ => None,
            })
            .collect();
        batch.stored_refs = stored_refs(&txn, &refs).await?;
        // Transitions and webhook attempts are gathered and written in grouped statements (one
        // round trip per group instead of per op); each op keeps its slot in `outcomes`.
        let mut outcomes: Vec<Option<OpResult>> = Vec::new();
        let mut moves: Vec<(usize, &Transition)> = Vec::new();
        let mut attempts: Vec<(usize, &AttemptRecord)> = Vec::new();
        for op in ops {
            let slot = outcomes.len();
            let outcome = match op {
                Op::Accept(accept) => Some(OpResult::Accept(
                    self.accept(&txn, &mut batch, accept, now).await?,
                )),
                Op::Transition(t) => {
                    moves.push((slot, t));
                    None
                }
                Op::Reroute(r) => {
                    // A reroute reads the message's status: the moves before it go first.
                    apply_moves(
                        &txn,
                        &mut batch,
                        &mut outcomes,
                        std::mem::take(&mut moves),
                        now,
                    )
                    .await?;
                    Some(OpResult::Transition(
                        reroute(&txn, &mut batch, r, now).await?.map(Box::new),
                    ))
                }
                Op::Inbound(message, scope) => Some(OpResult::Inbound(
                    inbound(&txn, &mut batch, message, *scope, now).await?,
                )),
                Op::RecordAttempt(record) => {
                    attempts.push((slot, record));
                    None
                }
                Op::Draft(draft) => {
                    super::ai::insert(&txn, draft, now).await?;
                    if draft.status == DraftStatus::Pending {
                        batch.changes.push(Change {
                            kind: crate::domain::webhook_event::DRAFT_CHANGE,
                            message: draft.message.clone(),
                        });
                    }
                    Some(OpResult::Drafted)
                }
                Op::Campaign(op) => {
                    // It reads and changes messages: the moves before it go first.
                    apply_moves(
                        &txn,
                        &mut batch,
                        &mut outcomes,
                        std::mem::take(&mut moves),
                        now,
                    )
                    .await?;
                    Some(self.campaign(&txn, &mut batch, op, now).await?)
                }
            };
            outcomes.push(outcome);
        }
        apply_moves(&txn, &mut batch, &mut outcomes, moves, now).await?;
        let records: Vec<&AttemptRecord> = attempts.iter().map(|(_, r)| *r).collect();
        let rows = webhooks::apply_attempts(&txn, &records, now).await?;
        for ((slot, _), row) in attempts.into_iter().zip(rows) {
            outcomes[slot] = Some(OpResult::Recorded(row.is_some()));
            batch.attempts.extend(row);
        }
        let outcomes = outcomes
            .into_iter()
            .map(|o| o.ok_or(StoreError::WriterGone))
            .collect::<Result<Vec<_>, _>>()?;
        flush_inserts(&txn, &mut batch).await?;
        webhooks::insert_attempts(&txn, &batch.attempts).await?;
        let deliveries = match &self.hook {
            Some(hook) => hook.stage(&batch.changes, now),
            None => Vec::new(),
        };
        webhooks::insert_deliveries(&txn, &deliveries).await?;
        txn.commit().await?;
        Ok(Committed {
            outcomes,
            changes: batch.changes,
            deltas: batch.count_deltas,
            staged: batch.staged,
            deliveries,
        })
    }

    async fn accept(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        accept: &Accept,
        now: i64,
    ) -> Result<AcceptOutcome, StoreError> {
        let scope = accept.scope;
        if let Some(request_id) = &accept.request_id {
            let key = (scope.workspace_id, scope.mode.is_test(), request_id.clone());
            if let Some(id) = batch.request_ids.get(&key) {
                return Ok(AcceptOutcome::Duplicate(*id));
            }
            if let Some(id) = find_request_id(txn, scope, request_id).await? {
                return Ok(AcceptOutcome::Duplicate(id));
            }
        }
        if !accept.device_available {
            return Ok(AcceptOutcome::NoDevice);
        }
        let counted = accept.messages.len() as u64;
        if let Some(refused) = self.within_quotas(txn, batch, scope, counted, now).await? {
            return Ok(refused);
        }
        if let Some(limit) = accept.limit
            && !self
                .within_limit(txn, batch, scope, limit, counted, now)
                .await?
        {
            return Ok(AcceptOutcome::LimitReached {
                limit: limit.max,
                window_ends_at: limit.window_ends_at,
            });
        }
        if let (Some(link), Some(reply)) = (&accept.draft, accept.messages.first())
            && let Err(status) = link_draft(txn, scope, link, reply, now).await?
        {
            // Not sent after all: take back what the limit counted for it.
            if accept.limit.is_some()
                && let Some(delta) = batch.count_deltas.get_mut(&scope.workspace_id)
            {
                *delta = delta.saturating_sub(counted);
            }
            return Ok(AcceptOutcome::DraftNotPending(status));
        }
        if let Some(request_id) = &accept.request_id
            && let Some(first) = accept.messages.first()
        {
            batch.request_ids.insert(
                (scope.workspace_id, scope.mode.is_test(), request_id.clone()),
                first.id,
            );
        }
        let stored = accept
            .messages
            .iter()
            .map(|new| stage(batch, new, scope, now))
            .collect();
        Ok(AcceptOutcome::Accepted(stored))
    }

    /// Whether `n` more outbound messages of this scope fit its message quotas: None when they
    /// do, else the refusal. Exact and race-free: the writer stores every message, so the
    /// counts of this task plus this batch's staged messages are all there is; a stored count
    /// is read (bounded by the quota) only when the kept count says the quota is full.
    async fn within_quotas(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        n: u64,
        now: i64,
    ) -> Result<Option<AcceptOutcome>, StoreError> {
        let staged = batch.staged.get(&scope).copied().unwrap_or(0);
        let daily = self.quotas.test_per_day;
        if scope.mode.is_test() && daily.limit > 0 {
            let day = quota::day_start(now);
            let counted = match self.test_day_counts.get(&scope.workspace_id) {
                Some((counted_day, count)) if *counted_day == day => *count,
                _ => {
                    flush_inserts(txn, batch).await?;
                    let stored = messages::Entity::find()
                        .filter(messages::Column::WorkspaceId.eq(scope.workspace_id))
                        .filter(messages::Column::TestMode.eq(true))
                        .filter(messages::Column::CreatedAt.gte(day))
                        .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()));
                    let bound = u64::from(daily.limit);
                    let in_txn = super::quotas::bounded_count(txn, stored, bound).await?;
                    let committed = in_txn.saturating_sub(staged);
                    self.test_day_counts
                        .insert(scope.workspace_id, (day, committed));
                    committed
                }
            };
            if !daily.allows(counted + staged, n) {
                let resets_at = quota::next_day_start(now);
                let wait_ms = u64::try_from(resets_at.saturating_sub(now)).unwrap_or(0);
                return Ok(Some(AcceptOutcome::QuotaExceeded {
                    quota: daily,
                    resets_at: Some(resets_at),
                    retry_after_secs: wait_ms.div_ceil(1000),
                }));
            }
        }
        let queued = self.quotas.queued;
        if queued.limit == 0 {
            return Ok(None);
        }
        if let Some(kept) = self.queued_counts.get(&scope)
            && queued.allows(kept + staged, n)
        {
            return Ok(None);
        }
        // Not counted yet, or the kept count says full and may be high (messages left
        // `queued` since): count them.
        flush_inserts(txn, batch).await?;
        let stored = messages::Entity::find()
            .filter(messages::Column::WorkspaceId.eq(scope.workspace_id))
            .filter(messages::Column::TestMode.eq(scope.mode.is_test()))
            .filter(Expr::cust(QUEUED_OUTBOUND));
        let in_txn = super::quotas::bounded_count(txn, stored, u64::from(queued.limit)).await?;
        self.queued_counts
            .insert(scope, in_txn.saturating_sub(staged));
        if queued.allows(in_txn, n) {
            return Ok(None);
        }
        Ok(Some(AcceptOutcome::QuotaExceeded {
            quota: queued,
            resets_at: None,
            retry_after_secs: 0,
        }))
    }

    /// Whether `n` more live outbound messages of this workspace fit its new-workspace limit;
    /// when they do, they are counted in this batch.
    async fn within_limit(
        &mut self,
        txn: &DatabaseTransaction,
        batch: &mut Batch,
        scope: Scope,
        limit: NewWorkspaceLimit,
        n: u64,
        now: i64,
    ) -> Result<bool, StoreError> {
        if now >= limit.window_ends_at {
            return Ok(true);
        }
        let counted = match self.new_workspace_counts.get(&scope.workspace_id) {
            Some(count) => *count,
            None => {
                let count = count_new_workspace_messages(txn, scope.workspace_id, limit).await?;
                self.new_workspace_counts.insert(scope.workspace_id, count);
                count
            }
        };
        let pending = batch
            .count_deltas
            .get(&scope.workspace_id)
            .copied()
            .unwrap_or(0);
        if counted + pending + n > u64::from(limit.max) {
            return Ok(false);
        }
        *batch.count_deltas.entry(scope.workspace_id).or_insert(0) += n;
        Ok(true)
    }
}

/// Marks the draft a reply sends (or stores auto mode's draft as sent); the draft's status
/// when it cannot be sent.
async fn link_draft(
    txn: &DatabaseTransaction,
    scope: Scope,
    link: &DraftLink,
    reply: &NewMessage,
    now: i64,
) -> Result<Result<(), Option<DraftStatus>>, StoreError> {
    match link {
        DraftLink::Existing(id) => {
            super::ai::mark_sent(txn, scope, *id, reply.id, &reply.content, now).await
        }
        DraftLink::New(draft) => {
            let pending = NewDraft {
                status: DraftStatus::Pending,
                ..(**draft).clone()
            };
            super::ai::insert(txn, &pending, now).await?;
            super::ai::mark_sent(txn, scope, pending.id, reply.id, &reply.content, now).await
        }
    }
}

/// Stages a new message of the batch: its row, its `queued` timeline entry and change (and
/// `sending`'s, for a reserved hand-over).
fn stage(batch: &mut Batch, new: &NewMessage, scope: Scope, now: i64) -> Message {
    let message = to_message(new, scope, now);
    if new.direction == Direction::Outbound {
        *batch.staged.entry(scope).or_insert(0) += 1;
    }
    batch.rows.push(to_row(&message, new));
    batch.events.push(event_row(
        message.id,
        MessageStatus::Queued.as_str(),
        MessageStatus::Queued,
        now,
        new.scheduled_for
            .filter(|at| *at > now)
            .map(|at| format!("held until {}", crate::clock::format_ms(at))),
    ));
    batch.changes.push(Change {
        kind: MessageStatus::Queued.as_str(),
        message: message.clone(),
    });
    if message.status == MessageStatus::Sending {
        // Accepted straight into a phone's hands (a reserved hand-over): the timeline
        // still reads queued, then sending, and the pace rebuild finds the `sending`.
        batch.events.push(event_row(
            message.id,
            MessageStatus::Sending.as_str(),
            MessageStatus::Sending,
            now,
            Some(super::messages::handover_detail(message.device_id)),
        ));
        batch.changes.push(Change {
            kind: MessageStatus::Sending.as_str(),
            message: message.clone(),
        });
    }
    message
}

/// Writes the batch's staged message rows and timeline entries (multi-row INSERTs in shaped
/// chunks) and empties them.
async fn flush_inserts(txn: &DatabaseTransaction, batch: &mut Batch) -> Result<(), StoreError> {
    for chunk in super::shaped_chunks(&batch.rows, ROWS_PER_INSERT) {
        messages::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(txn)
            .await?;
    }
    batch.rows.clear();
    for chunk in super::shaped_chunks(&batch.events, ROWS_PER_INSERT * 4) {
        message_events::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(txn)
            .await?;
    }
    batch.events.clear();
    Ok(())
}

async fn find_request_id<C: sea_orm::ConnectionTrait>(
    conn: &C,
    scope: Scope,
    request_id: &str,
) -> Result<Option<Uuid>, StoreError> {
    Ok(messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .filter(messages::Column::WorkspaceId.eq(scope.workspace_id))
        .filter(messages::Column::TestMode.eq(scope.mode.is_test()))
        .filter(messages::Column::RequestId.eq(request_id))
        .into_tuple()
        .one(conn)
        .await?)
}

/// Live outbound messages of the workspace's first window: the messages accepted then, plus
/// every recipient of the campaigns launched then (counted at launch, so their messages are
/// not counted again).
async fn count_new_workspace_messages(
    txn: &DatabaseTransaction,
    workspace_id: Uuid,
    limit: NewWorkspaceLimit,
) -> Result<u64, StoreError> {
    let messages = messages::Entity::find()
        .filter(messages::Column::WorkspaceId.eq(workspace_id))
        .filter(messages::Column::TestMode.eq(false))
        .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()))
        .filter(messages::Column::CampaignId.is_null())
        .filter(messages::Column::CreatedAt.gte(limit.window_starts_at))
        .filter(messages::Column::CreatedAt.lt(limit.window_ends_at))
        .count(txn)
        .await?;
    let campaigns = super::campaigns::launched_recipients(
        txn,
        workspace_id,
        limit.window_starts_at,
        limit.window_ends_at,
    )
    .await?;
    Ok(messages + campaigns)
}

fn to_message(new: &NewMessage, scope: Scope, now: i64) -> Message {
    Message {
        id: new.id,
        workspace_id: scope.workspace_id,
        mode: scope.mode,
        direction: new.direction,
        status: new.status,
        class: new.class,
        from_number: new.from_number.clone(),
        to_number: new.to_number.clone(),
        content: new.content.clone(),
        segments: new.segments,
        encoding: new.encoding.clone(),
        device_id: new.device_id,
        pinned: new.pinned,
        campaign_id: new.campaign_id,
        request_id: new.request_id.clone(),
        scheduled_for: new.scheduled_for,
        expires_at: new.expires_at,
        created_at: now,
        updated_at: now,
        sent_at: None,
        delivered_at: (new.status == MessageStatus::Delivered).then_some(now),
        failed_at: None,
        failure_reason: None,
        send_attempts: u32::from(new.status == MessageStatus::Sending),
    }
}

fn to_row(message: &Message, new: &NewMessage) -> messages::ActiveModel {
    messages::ActiveModel {
        id: Set(message.id),
        workspace_id: Set(message.workspace_id),
        test_mode: Set(message.mode.is_test()),
        direction: Set(message.direction.as_str().to_string()),
        status: Set(message.status.as_str().to_string()),
        priority: Set(message.class.as_i16()),
        from_number: Set(message.from_number.clone()),
        to_number: Set(message.to_number.clone()),
        content: Set(message.content.clone()),
        segments: Set(i32::try_from(message.segments).unwrap_or(i32::MAX)),
        encoding: Set(message.encoding.clone()),
        device_id: Set(message.device_id),
        pinned: Set(message.pinned),
        campaign_id: Set(message.campaign_id),
        request_id: Set(message.request_id.clone()),
        inbound_ref: Set(new.inbound_ref.clone()),
        scheduled_for: Set(message.scheduled_for),
        expires_at: Set(message.expires_at),
        created_at: Set(message.created_at),
        updated_at: Set(message.updated_at),
        sent_at: Set(message.sent_at),
        delivered_at: Set(message.delivered_at),
        failed_at: Set(None),
        failure_reason: Set(None),
        send_attempts: Set(i32::try_from(message.send_attempts).unwrap_or(i32::MAX)),
        content_removed_at: Set(None),
    }
}

fn event_row(
    message_id: Uuid,
    kind: &str,
    status: MessageStatus,
    at: i64,
    detail: Option<String>,
) -> message_events::ActiveModel {
    message_events::ActiveModel {
        id: NotSet,
        message_id: Set(message_id),
        kind: Set(kind.to_string()),
        status: Set(status.as_str().to_string()),
        at: Set(at),
        detail: Set(detail),
    }
}

/// Writes `moves` (the batch's transitions, with their outcome slots) in grouped statements:
/// round k holds each message's k-th move of the batch, so one message's moves keep their
/// order; inside a round, moves that set and check the same things share one
/// `UPDATE … WHERE id IN (…) RETURNING *`. The timeline and change bookkeeping then runs in
/// op order, exactly as if each move had been its own statement.
async fn apply_moves(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    outcomes: &mut [Option<OpResult>],
    moves: Vec<(usize, &Transition)>,
    now: i64,
) -> Result<(), StoreError> {
    if moves.is_empty() {
        return Ok(());
    }
    let mut seen: HashMap<Uuid, usize> = HashMap::new();
    let rounds: Vec<usize> = moves
        .iter()
        .map(|(_, t)| {
            let next = seen.entry(t.id).or_insert(0);
            *next += 1;
            *next - 1
        })
        .collect();
    let last_round = rounds.iter().copied().max().unwrap_or(0);
    let mut rows: Vec<Option<Message>> = vec![None; moves.len()];
    for round in 0..=last_round {
        let mut groups: Vec<(UpdateKey<'_>, Vec<usize>)> = Vec::new();
        for (i, (_, t)) in moves.iter().enumerate() {
            if rounds[i] != round {
                continue;
            }
            let key = UpdateKey::of(t);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        for (_, members) in groups {
            for chunk in members.chunks(super::IDS_PER_STATEMENT) {
                let group: Vec<&Transition> = chunk.iter().map(|&i| moves[i].1).collect();
                let ids: Vec<Uuid> = group.iter().map(|t| t.id).collect();
                let ids = super::id_list(&ids);
                let mut returned: HashMap<Uuid, Message> = move_statement(&group, &ids, now)
                    .exec_with_returning(txn)
                    .await?
                    .into_iter()
                    .map(|row| {
                        let message = Message::from(row);
                        (message.id, message)
                    })
                    .collect();
                for &i in chunk {
                    rows[i] = returned.remove(&moves[i].1.id);
                }
            }
        }
    }
    for ((slot, t), row) in moves.into_iter().zip(rows) {
        if let Some(message) = &row {
            record_move(txn, batch, t, message, now).await?;
        }
        outcomes[slot] = Some(OpResult::Transition(row.map(Box::new)));
    }
    Ok(())
}

/// What a move's UPDATE sets and checks besides the message id and its phone: moves with equal
/// keys share one statement (the phone, which differs between moves of one batch, is matched
/// per id inside it).
#[derive(PartialEq)]
struct UpdateKey<'a> {
    to: MessageStatus,
    expects_device: bool,
    reported: bool,
    sets_device: bool,
    count_attempt: bool,
    failure_reason: Option<&'a str>,
}

impl UpdateKey<'_> {
    fn of(t: &Transition) -> UpdateKey<'_> {
        UpdateKey {
            to: t.to,
            expects_device: t.expect_device.is_some(),
            reported: t.reported,
            sets_device: t.set_device.is_some(),
            count_attempt: t.count_attempt,
            failure_reason: t.failure_reason.as_deref(),
        }
    }
}

/// The phone of each move, as one value when they all share it, else
/// `CASE WHEN id = ? THEN ? … END` with as many arms as `ids` (padded like it by repeating the
/// first arm, so the statement keeps one of a handful of shapes).
fn device_by_id(
    group: &[&Transition],
    ids: &[Uuid],
    device: impl Fn(&Transition) -> Option<Uuid>,
) -> Expr {
    let first = device(group[0]);
    if group.iter().all(|t| device(t) == first) {
        return Expr::value(first);
    }
    let mut case = sea_orm::sea_query::CaseStatement::new();
    let padding = std::iter::repeat_n(group[0], ids.len().saturating_sub(group.len()));
    for t in group.iter().copied().chain(padding) {
        case = case.case(messages::Column::Id.eq(t.id), Expr::value(device(t)));
    }
    case.finally(Expr::value(Option::<Uuid>::None)).into()
}

/// The UPDATE of a group of moves with one [`UpdateKey`] (their target status, guards and
/// columns), applied to each of `ids`.
fn move_statement(
    group: &[&Transition],
    ids: &[Uuid],
    now: i64,
) -> sea_orm::UpdateMany<messages::Entity> {
    let t = group[0];
    let from: Vec<&str> = t.to.allowed_from().iter().map(|s| s.as_str()).collect();
    let mut guard = Condition::all().add(messages::Column::Status.is_in(from));
    if t.expect_device.is_some() {
        let expected = device_by_id(group, ids, |t| t.expect_device);
        guard = guard.add(Expr::col(messages::Column::DeviceId).eq(expected));
    }
    if t.reported {
        guard = guard
            .add(messages::Column::Direction.eq(Direction::Outbound.as_str()))
            .add(messages::Column::SendAttempts.gt(0));
    }
    // The guards sit inside a CASE so no index on them can be picked over the primary key:
    // given `id IN (…)` and `device_id = ?` side by side, SQLite's planner chose the
    // (device_id, inbound_ref) index and scanned every message of the phone.
    let mut update = messages::Entity::update_many()
        .col_expr(messages::Column::Status, Expr::value(t.to.as_str()))
        .col_expr(messages::Column::UpdatedAt, Expr::value(now))
        .filter(messages::Column::Id.is_in(ids.iter().copied()))
        .filter(guarded(guard));
    if t.set_device.is_some() {
        update = update.col_expr(
            messages::Column::DeviceId,
            device_by_id(group, ids, |t| t.set_device),
        );
    }
    if t.count_attempt {
        update = update.col_expr(
            messages::Column::SendAttempts,
            Expr::col(messages::Column::SendAttempts).add(1),
        );
    }
    match t.to {
        MessageStatus::Sent => {
            update = update.col_expr(messages::Column::SentAt, Expr::value(now));
        }
        MessageStatus::Delivered => {
            update = update
                .col_expr(messages::Column::DeliveredAt, Expr::value(now))
                .col_expr(
                    messages::Column::SentAt,
                    Expr::from(Func::coalesce([
                        Expr::col(messages::Column::SentAt),
                        Expr::value(now),
                    ])),
                );
        }
        MessageStatus::Failed | MessageStatus::Expired => {
            update = update.col_expr(messages::Column::FailedAt, Expr::value(now));
        }
        _ => {}
    }
    if let Some(reason) = &t.failure_reason {
        update = update.col_expr(messages::Column::FailureReason, Expr::value(reason.clone()));
    }
    update
}

/// `CASE WHEN guard THEN TRUE ELSE FALSE END = TRUE`: the guard as an opaque expression.
fn guarded(guard: Condition) -> Expr {
    let case: Expr = Expr::case(guard, true).finally(false).into();
    case.eq(true)
}

/// The timeline entry and published change of a move that was written.
async fn record_move(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    t: &Transition,
    message: &Message,
    now: i64,
) -> Result<(), StoreError> {
    if t.to == MessageStatus::Sent {
        batch.sent.insert(message.id);
    }
    if t.to == MessageStatus::Delivered && implied_sent(txn, batch, message, now).await? {
        // A delivery report that overtook its `sent` report (or came alone): the message was
        // sent, so the timeline and the event channel record `sent` first, exactly once.
        batch.sent.insert(message.id);
        batch.events.push(event_row(
            message.id,
            MessageStatus::Sent.as_str(),
            MessageStatus::Sent,
            now,
            None,
        ));
        let mut sent = message.clone();
        sent.status = MessageStatus::Sent;
        sent.delivered_at = None;
        batch.changes.push(Change {
            kind: MessageStatus::Sent.as_str(),
            message: sent,
        });
    }
    let kind = t.event_kind.unwrap_or(t.to.as_str());
    batch
        .events
        .push(event_row(message.id, kind, t.to, now, t.detail.clone()));
    batch.changes.push(Change {
        kind,
        message: message.clone(),
    });
    Ok(())
}

/// Whether a message just moved to `delivered` never recorded `sent`: its `sent_at` was
/// only now filled in by the delivery (see [`transition`]) and no `sent` entry exists.
async fn implied_sent(
    txn: &DatabaseTransaction,
    batch: &Batch,
    message: &Message,
    now: i64,
) -> Result<bool, StoreError> {
    if message.sent_at != Some(now) || batch.sent.contains(&message.id) {
        return Ok(false);
    }
    let recorded = message_events::Entity::find()
        .filter(message_events::Column::MessageId.eq(message.id))
        .filter(message_events::Column::Kind.eq(MessageStatus::Sent.as_str()))
        .count(txn)
        .await?;
    Ok(recorded == 0)
}

/// Which of `refs` (phone, inbound ref) are stored already: one query per chunk, each pair an
/// `OR` term the (device_id, inbound_ref) unique index answers.
async fn stored_refs(
    txn: &DatabaseTransaction,
    refs: &[(Uuid, &str)],
) -> Result<HashSet<(Uuid, String)>, StoreError> {
    let mut stored = HashSet::new();
    for chunk in refs.chunks(REFS_PER_QUERY) {
        let mut any = Condition::any();
        for (device, reference) in chunk {
            any = any.add(
                Condition::all()
                    .add(messages::Column::DeviceId.eq(*device))
                    .add(messages::Column::InboundRef.eq(*reference)),
            );
        }
        let found: Vec<(Option<Uuid>, Option<String>)> = messages::Entity::find()
            .select_only()
            .column(messages::Column::DeviceId)
            .column(messages::Column::InboundRef)
            .filter(any)
            .into_tuple()
            .all(txn)
            .await?;
        stored.extend(
            found
                .into_iter()
                .filter_map(|(device, reference)| device.zip(reference)),
        );
    }
    Ok(stored)
}

/// Most (phone, ref) pairs one [`stored_refs`] query names.
const REFS_PER_QUERY: usize = 200;

async fn inbound(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    new: &NewMessage,
    scope: Scope,
    now: i64,
) -> Result<InboundOutcome, StoreError> {
    if let (Some(device), Some(reference)) = (new.device_id, &new.inbound_ref) {
        let key = (device, reference.clone());
        if batch.inbound_refs.contains(&key) {
            return Ok(InboundOutcome::Repeat);
        }
        if batch.stored_refs.contains(&key) {
            return Ok(InboundOutcome::Repeat);
        }
        batch.inbound_refs.insert(key);
    }
    // Opt-out keywords take effect in the same transaction as the message they arrive in.
    if let Some(keyword) = crate::domain::keywords::classify(&new.content)
        && PhoneNumber::parse(&new.from_number).is_ok()
    {
        super::contacts::apply_keyword(txn, scope, &new.from_number, keyword, now).await?;
    }
    let message = to_message(new, scope, now);
    batch.rows.push(to_row(&message, new));
    batch.events.push(event_row(
        message.id,
        "received",
        MessageStatus::Delivered,
        now,
        None,
    ));
    batch.changes.push(Change {
        kind: "received",
        message: message.clone(),
    });
    Ok(InboundOutcome::Stored(Box::new(message)))
}

async fn reroute(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
    r: &Reroute,
    now: i64,
) -> Result<Option<Message>, StoreError> {
    let Some(row) = messages::Entity::update_many()
        .col_expr(messages::Column::DeviceId, Expr::value(r.to_device))
        .col_expr(messages::Column::UpdatedAt, Expr::value(now))
        .filter(messages::Column::Id.eq(r.id))
        .filter(messages::Column::Status.eq(MessageStatus::Queued.as_str()))
        .filter(messages::Column::DeviceId.eq(r.from_device))
        .filter(messages::Column::Pinned.eq(false))
        .exec_with_returning(txn)
        .await?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let message = Message::from(row);
    batch.events.push(event_row(
        message.id,
        "rerouted",
        MessageStatus::Queued,
        now,
        Some(r.detail.clone()),
    ));
    Ok(Some(message))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::clock::SystemClock;
    use crate::domain::status::Mode;

    /// The writer's SQLite connection is opened on the writer's thread after it bound itself
    /// to one CPU: the thread the connection starts must inherit that CPU.
    #[cfg(target_os = "linux")]
    #[test]
    fn threads_started_by_the_writer_thread_share_its_cpu() {
        use nix::sched::{CpuSet, sched_getaffinity};
        use nix::unistd::Pid;
        fn cpus(set: &CpuSet) -> Vec<usize> {
            (0..CpuSet::count())
                .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
                .collect()
        }
        let allowed = cpus(&sched_getaffinity(Pid::from_raw(0)).unwrap());
        let (cpu, child) = std::thread::spawn(|| {
            let cpu = share_one_cpu();
            let child = std::thread::spawn(|| sched_getaffinity(Pid::from_raw(0)).unwrap())
                .join()
                .unwrap();
            (cpu, cpus(&child))
        })
        .join()
        .unwrap();
        if allowed.len() > 1 {
            let cpu = cpu.unwrap();
            assert!(allowed.contains(&cpu), "{cpu} not in {allowed:?}");
            assert_eq!(child, vec![cpu]);
        } else {
            assert_eq!(cpu, None);
            assert_eq!(child, allowed);
        }
        // The test's own thread keeps every CPU.
        assert_eq!(cpus(&sched_getaffinity(Pid::from_raw(0)).unwrap()), allowed);
    }

    fn queued(id: Uuid) -> NewMessage {
        NewMessage {
            id,
            direction: Direction::Outbound,
            status: MessageStatus::Queued,
            class: QueueClass::Single,
            from_number: "+14155550100".into(),
            to_number: "+14155550123".into(),
            content: "hi".into(),
            segments: 1,
            encoding: "GSM-7".into(),
            device_id: None,
            pinned: false,
            campaign_id: None,
            request_id: None,
            inbound_ref: None,
            scheduled_for: None,
            expires_at: i64::MAX,
        }
    }

    fn handed(id: Uuid, device: Uuid) -> Transition {
        Transition {
            set_device: Some(device),
            count_attempt: true,
            ..Transition::to(id, MessageStatus::Sending)
        }
    }

    fn report(id: Uuid, device: Uuid, to: MessageStatus) -> Transition {
        Transition {
            expect_device: Some(device),
            reported: true,
            ..Transition::to(id, to)
        }
    }

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

    /// Moves submitted together land in one batch and its grouped UPDATEs: each keeps its own
    /// answer, one message's moves keep their order, and a guard refuses only its own move.
    #[test]
    fn a_batch_of_moves_keeps_each_answer_and_order() {
        crate::startup::block_on_system(async {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display());
            let db = crate::store::connect(&url, 2).await.unwrap();
            crate::store::migrate(&db).await.unwrap();
            let published: Arc<Mutex<Vec<(Uuid, &'static str)>>> = Arc::default();
            let sink = published.clone();
            let listener: ChangeListener = Arc::new(move |changes: Vec<Change>| {
                let mut sink = sink.lock().unwrap();
                sink.extend(changes.into_iter().map(|c| (c.message.id, c.kind)));
            });
            let writer = Writer::connect(
                &url,
                Arc::new(SystemClock),
                listener,
                None,
                MessageQuotas::none(),
            )
            .await
            .unwrap();
            let scope = Scope {
                workspace_id: Uuid::now_v7(),
                mode: Mode::Live,
            };
            let [a, b, c, d] = [
                Uuid::now_v7(),
                Uuid::now_v7(),
                Uuid::now_v7(),
                Uuid::now_v7(),
            ];
            let outcome = writer
                .accept(Accept {
                    scope,
                    request_id: None,
                    messages: vec![queued(a), queued(b), queued(c), queued(d)],
                    device_available: true,
                    limit: None,
                    draft: None,
                })
                .await
                .unwrap();
            assert!(matches!(outcome, AcceptOutcome::Accepted(ref m) if m.len() == 4));
            published.lock().unwrap().clear();

            let (one, two) = (Uuid::now_v7(), Uuid::now_v7());
            // Round 0: four hand-overs to two phones in one statement; round 1: reports from
            // both phones in one statement, one of them from the wrong phone; round 2: a's
            // delivery after its `sent`.
            let moves = vec![
                handed(a, one),
                handed(b, one),
                handed(c, two),
                handed(d, two),
                report(a, one, MessageStatus::Sent),
                report(d, two, MessageStatus::Sent),
                report(b, two, MessageStatus::Sent),
                report(a, one, MessageStatus::Delivered),
                report(c, two, MessageStatus::Delivered),
            ];
            let answers =
                futures_util::future::join_all(moves.into_iter().map(|t| writer.transition(t)))
                    .await;
            let statuses: Vec<Option<(Uuid, MessageStatus, u32)>> = answers
                .into_iter()
                .map(|r| r.unwrap().map(|m| (m.id, m.status, m.send_attempts)))
                .collect();
            assert_eq!(
                statuses,
                vec![
                    Some((a, MessageStatus::Sending, 1)),
                    Some((b, MessageStatus::Sending, 1)),
                    Some((c, MessageStatus::Sending, 1)),
                    Some((d, MessageStatus::Sending, 1)),
                    Some((a, MessageStatus::Sent, 1)),
                    Some((d, MessageStatus::Sent, 1)),
                    None, // b is on phone one: phone two's report is refused
                    Some((a, MessageStatus::Delivered, 1)),
                    Some((c, MessageStatus::Delivered, 1)),
                ]
            );

            let timeline = |id| {
                let db = db.clone();
                async move {
                    let (_, events) = crate::store::messages::get_with_events(&db, scope, id)
                        .await
                        .unwrap();
                    events.into_iter().map(|e| e.kind).collect::<Vec<_>>()
                }
            };
            assert_eq!(
                timeline(a).await,
                ["queued", "sending", "sent", "delivered"]
            );
            assert_eq!(timeline(b).await, ["queued", "sending"]);
            // c's delivery overtook its `sent`: recorded once, before `delivered`.
            assert_eq!(
                timeline(c).await,
                ["queued", "sending", "sent", "delivered"]
            );
            assert_eq!(timeline(d).await, ["queued", "sending", "sent"]);
            for (id, phone) in [(a, one), (b, one), (c, two), (d, two)] {
                let message = crate::store::messages::get(&db, id).await.unwrap().unwrap();
                assert_eq!(message.device_id, Some(phone), "{id}");
            }
            let published = published.lock().unwrap().clone();
            let of = |id| -> Vec<&str> {
                published
                    .iter()
                    .filter(|(m, _)| *m == id)
                    .map(|(_, k)| *k)
                    .collect()
            };
            assert_eq!(of(a), ["sending", "sent", "delivered"]);
            assert_eq!(of(b), ["sending"]);
            assert_eq!(of(c), ["sending", "sent", "delivered"]);
            assert_eq!(of(d), ["sending", "sent"]);
        })
        .unwrap();
    }
}
