//! The writer task: where it runs (its own thread and CPU on SQLite), the queue of typed
//! requests, and the batching loop (one transaction per batch, retried while the database is
//! busy, replayed job by job when it fails as a whole).
//!
//! What each request does inside the transaction lives beside this file (`accept`,
//! `transition`, `inbound`, `campaign`); this file only orders them and answers them.

use std::collections::{HashMap, HashSet};

use entity::{message_events, messages};
use sea_orm::{DatabaseConnection, DatabaseTransaction};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::accept::{self, Accept, AcceptOutcome, NewWorkspaceCounts};
use super::campaign::{CampaignOp, CampaignOutcome};
use super::inbound::{self, Inbound, InboundOutcome};
use super::quotas::{MessageQuotas, QuotaCounts};
use super::transition::{self, Move, Reroute, Transition};
use super::{Change, ChangeListener, NewMessage, SharedCommitHook, rows, sql};
use crate::clock::SharedClock;
use crate::domain::ids::WorkspaceId;
use crate::domain::status::{Direction, MessageStatus};
use crate::store::StoreError;
use crate::store::ai::NewDraft;
use crate::store::contacts::{self, Consent, ContactKey};
use crate::store::messages::Message;
use crate::store::scoped::Scope;
use crate::store::webhooks::{self, AttemptRecord, PendingDelivery, Recorded};

/// Jobs waiting for the writer; senders wait (backpressure) when it is full.
const QUEUE_CAPACITY: usize = 16_384;
/// Most jobs committed in one transaction.
const MAX_BATCH: usize = 512;

/// A request to the writer and the type of its answer: a job can only be answered with its
/// own request's answer.
pub(super) trait Request: Sized {
    type Answer;
    /// The job that carries this request.
    fn into_job(submitted: Submitted<Self>) -> Job;
}

/// A request waiting in the writer, its answer once a batch computed it, and where to send it.
pub(super) struct Submitted<R: Request> {
    pub(super) request: R,
    /// Set by the transaction that handles the request; kept only if that transaction commits.
    pub(super) answer: Option<R::Answer>,
    reply: oneshot::Sender<Result<R::Answer, StoreError>>,
}

/// Where a requester waits for its answer.
pub(super) type Answer<R> = oneshot::Receiver<Result<<R as Request>::Answer, StoreError>>;

impl<R: Request> Submitted<R> {
    /// The job for `request` and the receiver of its answer.
    pub(super) fn job(request: R) -> (Job, Answer<R>) {
        let (reply, answer) = oneshot::channel();
        let submitted = Submitted {
            request,
            answer: None,
            reply,
        };
        (R::into_job(submitted), answer)
    }

    /// The answer, given how the job's transaction ended.
    fn outcome(&mut self, committed: Result<(), StoreError>) -> Result<R::Answer, StoreError> {
        committed?;
        self.answer.take().ok_or_else(unanswered)
    }

    /// Sends `outcome`; the requester may have gone away (client disconnected): the write stands.
    fn reply(self, outcome: Result<R::Answer, StoreError>) {
        let _ = self.reply.send(outcome);
    }

    fn finish(mut self, committed: Result<(), StoreError>) {
        let outcome = self.outcome(committed);
        self.reply(outcome);
    }
}

/// A job handled without an answer (a bug): its transaction does not commit.
fn unanswered() -> StoreError {
    StoreError::Db(sea_orm::DbErr::Custom(
        "the writer left a request unanswered".into(),
    ))
}

/// One queued request of each kind. Large requests are boxed to keep the queue's slots small.
pub(super) enum Job {
    Accept(Submitted<Accept>),
    Transition(Submitted<Transition>),
    Reroute(Submitted<Reroute>),
    Inbound(Submitted<Inbound>),
    /// A finished webhook attempt (see [`super::AttemptRecorder`]).
    RecordAttempt(Box<Submitted<AttemptRecord>>),
    Campaign(Box<Submitted<CampaignOp>>),
    /// Store an AI draft (pending: with its `ai.draft.created` deliveries).
    Draft(Box<Submitted<NewDraft>>),
}

impl Job {
    /// Forgets an answer left by a transaction that did not commit.
    fn forget_answer(&mut self) {
        match self {
            Job::Accept(s) => s.answer = None,
            Job::Transition(s) => s.answer = None,
            Job::Reroute(s) => s.answer = None,
            Job::Inbound(s) => s.answer = None,
            Job::RecordAttempt(s) => s.answer = None,
            Job::Campaign(s) => s.answer = None,
            Job::Draft(s) => s.answer = None,
        }
    }

    fn answered(&self) -> bool {
        match self {
            Job::Accept(s) => s.answer.is_some(),
            Job::Transition(s) => s.answer.is_some(),
            Job::Reroute(s) => s.answer.is_some(),
            Job::Inbound(s) => s.answer.is_some(),
            Job::RecordAttempt(s) => s.answer.is_some(),
            Job::Campaign(s) => s.answer.is_some(),
            Job::Draft(s) => s.answer.is_some(),
        }
    }
}

impl Request for Accept {
    type Answer = AcceptOutcome;
    fn into_job(submitted: Submitted<Self>) -> Job {
        Job::Accept(submitted)
    }
}

impl Request for Transition {
    type Answer = Option<Message>;
    fn into_job(submitted: Submitted<Self>) -> Job {
        Job::Transition(submitted)
    }
}

impl Request for Reroute {
    type Answer = Option<Message>;
    fn into_job(submitted: Submitted<Self>) -> Job {
        Job::Reroute(submitted)
    }
}

impl Request for Inbound {
    type Answer = InboundOutcome;
    fn into_job(submitted: Submitted<Self>) -> Job {
        Job::Inbound(submitted)
    }
}

impl Request for AttemptRecord {
    type Answer = Recorded;
    fn into_job(submitted: Submitted<Self>) -> Job {
        Job::RecordAttempt(Box::new(submitted))
    }
}

impl Request for CampaignOp {
    type Answer = CampaignOutcome;
    fn into_job(submitted: Submitted<Self>) -> Job {
        Job::Campaign(Box::new(submitted))
    }
}

impl Request for NewDraft {
    type Answer = bool;
    fn into_job(submitted: Submitted<Self>) -> Job {
        Job::Draft(Box::new(submitted))
    }
}

/// Starts the writer on its own connection to `url` and returns its queue. On SQLite the
/// connection is opened on the writer's thread, which first binds itself to the CPU it runs
/// on: the connection's thread (sqlx starts one per SQLite connection) inherits that CPU, and
/// the two hand every statement and every returned row back and forth without a wake-up
/// crossing CPUs (an inter-processor interrupt, a VM exit under KVM; docs/performance.md, "The
/// write path (SQLite)"). The scheduler moves the other threads off that CPU. On PostgreSQL the writer is a task of the
/// current runtime (its connection is a socket of that runtime).
pub(super) async fn start(
    options: &crate::store::DbOptions,
    clock: SharedClock,
    listener: ChangeListener,
    hook: Option<SharedCommitHook>,
    quotas: MessageQuotas,
) -> Result<mpsc::Sender<Job>, StoreError> {
    let url = options.url.as_str();
    if !sea_orm::DbBackend::Sqlite.is_prefix_of(url) {
        let db = crate::store::connect_writer(options).await?;
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(WriterTask::new(db, clock, listener, hook, quotas).run(rx));
        return Ok(tx);
    }
    let (ready, opened) = oneshot::channel();
    let options_owned = options.clone();
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
                let db = match crate::store::connect_writer(&options_owned).await {
                    Ok(db) => db,
                    Err(err) => {
                        let _ = ready.send(Err(err));
                        return;
                    }
                };
                tracing::debug!(?cpu, "writer started on its own thread");
                let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
                let task = WriterTask::new(db, clock, listener, hook, quotas);
                if ready.send(Ok(tx)).is_ok() {
                    task.run(rx).await;
                }
            });
        })
        .map_err(|err| {
            StoreError::Db(sea_orm::DbErr::Custom(format!(
                "cannot start the writer thread: {err}"
            )))
        })?;
    let tx = opened.await.map_err(|_| StoreError::WriterGone)??;
    crate::store::start_checkpoints(url).await?;
    Ok(tx)
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

/// The running writer: its connection and what it publishes to.
pub(super) struct WriterTask {
    db: DatabaseConnection,
    clock: SharedClock,
    listener: ChangeListener,
    hook: Option<SharedCommitHook>,
    /// PostgreSQL: other nodes may write the same database, so the commit hook is given the
    /// webhook subscriptions read inside each batch's transaction.
    shared: bool,
    pub(super) counts: NewWorkspaceCounts,
    pub(super) quotas: QuotaCounts,
}

/// What one batch will write and answer once it commits.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) rows: Vec<messages::ActiveModel>,
    pub(super) events: Vec<message_events::ActiveModel>,
    pub(super) changes: Vec<Change>,
    pub(super) request_ids: HashMap<accept::RequestKey, Uuid>,
    pub(super) inbound_refs: HashSet<(Uuid, String)>,
    /// The (phone, ref) pairs of this batch's inbound messages already stored before it.
    pub(super) stored_refs: HashSet<(Uuid, String)>,
    pub(super) count_deltas: HashMap<WorkspaceId, u64>,
    /// Workspaces whose row this batch locked to count their new-workspace limit (PostgreSQL).
    pub(super) locked_workspaces: HashSet<WorkspaceId>,
    /// Outbound messages staged per scope in this batch.
    pub(super) staged: HashMap<Scope, u64>,
    /// Messages moved to `sent` in this batch.
    pub(super) sent: HashSet<Uuid>,
    /// Webhook attempt rows of this batch.
    pub(super) attempts: Vec<entity::webhook_attempts::ActiveModel>,
    /// The recipients of this batch's sends and drafts whose contact restricts something, read
    /// once before its jobs and kept current by the opt-out keywords the batch applies.
    pub(super) restricted: HashMap<ContactKey, Consent>,
}

impl Batch {
    /// What the recipient `phone_number` of `scope` allows, as of this point of the batch.
    pub(super) fn consent(&self, scope: Scope, phone_number: &str) -> Consent {
        self.restricted
            .get(&ContactKey {
                scope,
                phone_number: phone_number.to_string(),
            })
            .copied()
            .unwrap_or(Consent::ALL)
    }

    /// Stages a new message of the batch: its row, its `queued` timeline entry and change (and
    /// `sending`'s, for a reserved hand-over).
    pub(super) fn stage(&mut self, new: &NewMessage, scope: Scope, now: i64) -> Message {
        let message = rows::to_message(new, scope, now);
        if new.direction == Direction::Outbound {
            *self.staged.entry(scope).or_insert(0) += 1;
        }
        self.rows.push(rows::to_row(&message, new));
        self.events.push(rows::event_row(
            message.id,
            MessageStatus::Queued.into(),
            MessageStatus::Queued,
            now,
            new.scheduled_for
                .filter(|at| *at > now)
                .map(|at| format!("held until {}", crate::clock::format_ms(at))),
        ));
        self.changes.push(Change {
            kind: MessageStatus::Queued.into(),
            message: message.clone(),
        });
        if message.status == MessageStatus::Sending {
            // Accepted straight into a phone's hands (a reserved hand-over): the timeline
            // still reads queued, then sending, and the pace rebuild finds the `sending`.
            self.events.push(rows::event_row(
                message.id,
                MessageStatus::Sending.into(),
                MessageStatus::Sending,
                now,
                Some(crate::store::messages::handover_detail(message.device_id)),
            ));
            self.changes.push(Change {
                kind: MessageStatus::Sending.into(),
                message: message.clone(),
            });
        }
        message
    }
}

/// What one committed transaction produced (its answers stay in the jobs).
struct Committed {
    changes: Vec<Change>,
    deltas: HashMap<WorkspaceId, u64>,
    /// Outbound messages stored per scope.
    staged: HashMap<Scope, u64>,
    deliveries: Vec<PendingDelivery>,
}

impl WriterTask {
    fn new(
        db: DatabaseConnection,
        clock: SharedClock,
        listener: ChangeListener,
        hook: Option<SharedCommitHook>,
        quotas: MessageQuotas,
    ) -> WriterTask {
        let shared = !crate::store::is_sqlite(&db);
        WriterTask {
            db,
            clock,
            listener,
            hook,
            shared,
            counts: NewWorkspaceCounts::shared(shared),
            quotas: QuotaCounts::new(quotas),
        }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        let mut jobs = Vec::with_capacity(MAX_BATCH);
        while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
            self.process(std::mem::take(&mut jobs)).await;
        }
        tracing::info!("writer stopped: every handle is dropped");
    }

    async fn process(&mut self, mut jobs: Vec<Job>) {
        let started = std::time::Instant::now();
        let mut first = self.commit(&mut jobs).await;
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
            first = self.commit(&mut jobs).await;
        }
        let mut results = Vec::with_capacity(jobs.len());
        match first {
            Ok(committed) => {
                self.publish(committed);
                results.extend(jobs.iter().map(|_| Ok(())));
            }
            Err(err) if jobs.len() == 1 => {
                results.push(Err(err));
            }
            Err(err) => {
                tracing::warn!(error = %err, jobs = jobs.len(), "batch failed; replaying its jobs one by one");
                for job in &mut jobs {
                    match self.commit(std::slice::from_mut(job)).await {
                        Ok(committed) => {
                            self.publish(committed);
                            results.push(Ok(()));
                        }
                        Err(err) => results.push(Err(err)),
                    }
                }
            }
        }
        for (job, committed) in jobs.into_iter().zip(results) {
            self.answer(job, committed).await;
        }
    }

    /// Answers a job once its transaction ended.
    async fn answer(&self, job: Job, committed: Result<(), StoreError>) {
        match job {
            Job::Accept(mut s) => {
                let outcome = match s.outcome(committed) {
                    // A unique index refused a keyed send that raced another writer: answer
                    // as a repeat.
                    Err(StoreError::Conflict(_)) => {
                        accept::after_conflict(&self.db, &s.request).await
                    }
                    other => other,
                };
                s.reply(outcome);
            }
            Job::Inbound(mut s) => {
                let outcome = match s.outcome(committed) {
                    Err(StoreError::Conflict(_)) => Ok(InboundOutcome::Repeat),
                    other => other,
                };
                s.reply(outcome);
            }
            Job::Transition(s) => s.finish(committed),
            Job::Reroute(s) => s.finish(committed),
            Job::RecordAttempt(s) => s.finish(committed),
            Job::Campaign(s) => s.finish(committed),
            Job::Draft(s) => s.finish(committed),
        }
    }

    /// Publishes a committed batch: counts, listener, hook.
    fn publish(&mut self, committed: Committed) {
        self.counts.apply(committed.deltas);
        self.quotas.apply(&committed.staged, &committed.changes);
        (self.listener)(committed.changes);
        if let Some(hook) = &self.hook
            && !committed.deliveries.is_empty()
        {
            hook.committed(committed.deliveries);
        }
    }

    /// Handles `jobs` in one transaction, leaving each one's answer in it.
    async fn commit(&mut self, jobs: &mut [Job]) -> Result<Committed, StoreError> {
        let now = self.clock.now_ms();
        let txn = crate::store::begin_write(&self.db).await?;
        let mut batch = Batch::default();
        for job in jobs.iter_mut() {
            job.forget_answer();
        }
        let refs: Vec<(Uuid, &str)> = jobs
            .iter()
            .filter_map(|job| match job {
                Job::Inbound(s) => {
                    let new = &s.request.message;
                    new.device_id.zip(new.inbound_ref.as_deref())
                }
                _ => None,
            })
            .collect();
        batch.stored_refs = sql::stored_refs(&txn, &refs).await?;
        let recipients: Vec<ContactKey> = jobs
            .iter()
            .flat_map(|job| -> Vec<ContactKey> {
                match job {
                    Job::Accept(s) => s
                        .request
                        .messages
                        .iter()
                        .map(|m| ContactKey {
                            scope: s.request.scope,
                            phone_number: m.to_number.clone(),
                        })
                        .collect(),
                    Job::Draft(s) => vec![ContactKey {
                        scope: s.request.message.scope(),
                        phone_number: s.request.message.from_number.clone(),
                    }],
                    _ => Vec::new(),
                }
            })
            .collect();
        if !recipients.is_empty() {
            batch.restricted = contacts::restrictions(&txn, &recipients).await?;
        }
        // Transitions and webhook attempts are gathered and written in grouped statements (one
        // round trip per group instead of per job); each keeps its answer's place.
        let mut moves: Vec<Move<'_>> = Vec::new();
        let mut attempts: Vec<(&AttemptRecord, &mut Option<Recorded>)> = Vec::new();
        for job in jobs.iter_mut() {
            match job {
                Job::Accept(s) => {
                    let outcome = accept::accept(
                        &txn,
                        &mut batch,
                        &mut self.counts,
                        &mut self.quotas,
                        &s.request,
                        now,
                    )
                    .await?;
                    s.answer = Some(outcome);
                }
                Job::Transition(s) => {
                    let Submitted {
                        request, answer, ..
                    } = s;
                    moves.push(Move {
                        transition: request,
                        answer,
                    });
                }
                Job::Reroute(s) => {
                    // A reroute reads the message's status: the moves before it go first.
                    transition::apply_moves(&txn, &mut batch, std::mem::take(&mut moves), now)
                        .await?;
                    s.answer = Some(transition::reroute(&txn, &mut batch, &s.request, now).await?);
                }
                Job::Inbound(s) => {
                    s.answer = Some(inbound::inbound(&txn, &mut batch, &s.request, now).await?);
                }
                Job::RecordAttempt(s) => {
                    let Submitted {
                        request, answer, ..
                    } = &mut **s;
                    attempts.push((request, answer));
                }
                Job::Draft(s) => {
                    s.answer = Some(inbound::draft(&txn, &mut batch, &s.request, now).await?);
                }
                Job::Campaign(s) => {
                    // It reads and changes messages: the moves before it go first.
                    transition::apply_moves(&txn, &mut batch, std::mem::take(&mut moves), now)
                        .await?;
                    s.answer = Some(self.campaign(&txn, &mut batch, &s.request, now).await?);
                }
            }
        }
        transition::apply_moves(&txn, &mut batch, moves, now).await?;
        let records: Vec<&AttemptRecord> = attempts.iter().map(|(r, _)| *r).collect();
        let rows = webhooks::apply_attempts(&txn, &records, now).await?;
        for ((_, answer), (recorded, row)) in attempts.into_iter().zip(rows) {
            *answer = Some(recorded);
            batch.attempts.extend(row);
        }
        if !jobs.iter().all(Job::answered) {
            return Err(unanswered());
        }
        flush_inserts(&txn, &mut batch).await?;
        webhooks::insert_attempts(&txn, &batch.attempts).await?;
        let deliveries = match &self.hook {
            Some(hook) if self.shared => {
                let current = webhooks::Subscriptions::read_for(&txn, &batch.changes).await?;
                hook.stage(&batch.changes, now, Some(&current))
            }
            Some(hook) => hook.stage(&batch.changes, now, None),
            None => Vec::new(),
        };
        webhooks::insert_deliveries(&txn, &deliveries).await?;
        txn.commit().await?;
        Ok(Committed {
            changes: batch.changes,
            deltas: batch.count_deltas,
            staged: batch.staged,
            deliveries,
        })
    }
}

/// Writes the batch's staged message rows and timeline entries and empties them.
pub(super) async fn flush_inserts(
    txn: &DatabaseTransaction,
    batch: &mut Batch,
) -> Result<(), StoreError> {
    sql::insert_rows(txn, &batch.rows, &batch.events).await?;
    batch.rows.clear();
    batch.events.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
