//! The group-commit writer's handle and the requests it takes: every message write of the hot
//! path goes through one task that batches concurrent requests into one transaction and answers
//! each once its batch commits.
//!
//! Why: one commit per request tops out at a few thousand rows/s on SQLite, while one
//! transaction for many rows reaches tens of thousands. The writer is also the only inserter
//! of messages, which makes the new-workspace count exact. Idempotency still rests on the
//! unique index: a batch that fails as a whole is replayed job by job, so one bad job never
//! fails its neighbours.
//!
//! The files: `task` runs the writer (its thread, the batching loop, the replay); `accept`,
//! `transition`, `inbound` and `campaign` apply one kind of request each inside a batch;
//! `quotas` counts the message quotas; `sql` builds the statements; `rows` maps between
//! requests, rows and [`Message`]s.
//!
//! After each commit the writer calls the [`ChangeListener`] with every change in commit
//! order; deliveries of webhook events are staged before it, inside the transaction, by the
//! [`CommitHook`]. A change's kind is a `domain::change::ChangeKind`, why a message failed a
//! `domain::change::FailureReason`. Each batch's size and commit time are exported
//! (`smsgw_writer_batch_jobs`, `smsgw_writer_commit_duration_seconds`): when the commit times
//! add up to nearly the wall clock, the writer is the limit.
//!
//! # What a batch costs
//!
//! A handful of statements, not a few per job (each statement is a round trip to sqlx's
//! SQLite worker thread, which dominated the profile):
//!
//! - **Moves are grouped** (`transition::apply_moves`): round k holds each message's k-th move
//!   of the batch, and inside a round the moves with the same target and guards share one
//!   `UPDATE … WHERE id IN (…) RETURNING *`, the guards inside a `CASE` so SQLite's planner
//!   keeps the primary key (`sql`). Timeline rows and changes come out in job order.
//! - **Webhook attempts** are grouped the same way by outcome (`store::webhooks`'
//!   `apply_attempts`); **inbound refs** are checked for repeats in one query
//!   (`sql::stored_refs`); the **recipients' opt-outs** are read once per workspace and mode
//!   before the batch's ops (`contacts::consent::restrictions`), and a keyword stored in the
//!   batch updates that map.
//! - **Statement shapes**: id lists and `CASE` arms are padded to a power of two and multi-row
//!   INSERTs go in power-of-two chunks (`store::id_list`, `store::shaped_chunks`).
//! - **Placement** (`task::start`): the writer has a connection of its own; on SQLite it runs
//!   on a thread of its own (`smsgw-writer`, a current-thread runtime) bound to the CPU it
//!   started on, and opens its connection there so sqlx's thread for it inherits the binding
//!   (every statement is a hand-off between the two). On PostgreSQL it stays a task of the
//!   runtime that opened its connection. docs/performance.md, "The write path (SQLite)".

use std::sync::Arc;

use uuid::Uuid;

mod accept;
mod campaign;
mod inbound;
mod quotas;
mod rows;
mod sql;
mod task;
mod transition;

pub use accept::{Accept, AcceptOutcome, DraftLink, NewWorkspaceLimit};
pub use campaign::{CampaignOp, CampaignOutcome};
pub use inbound::InboundOutcome;
pub use quotas::MessageQuotas;
pub use transition::{Reroute, Transition};

pub use super::change::Change;

use super::StoreError;
use super::ai::NewDraft;
use super::messages::Message;
use super::scoped::Scope;
use super::webhooks::{AttemptRecord, PendingDelivery, Recorded, Subscriptions};
use crate::clock::SharedClock;
use crate::domain::ids::CampaignId;
use crate::domain::sms::Encoding;
use crate::domain::status::{Direction, MessageStatus, QueueClass};
use task::{Request, Submitted};

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
    pub encoding: Encoding,
    pub device_id: Option<Uuid>,
    pub pinned: bool,
    pub campaign_id: Option<CampaignId>,
    pub request_id: Option<String>,
    pub inbound_ref: Option<String>,
    pub scheduled_for: Option<i64>,
    pub expires_at: i64,
    /// Set for messages of the client API (docs/compat.md, Messages).
    pub client: Option<crate::store::messages::ClientOptions>,
    /// The sender pool the message goes out through (docs/api.md, "Pools").
    pub pool_id: Option<Uuid>,
}

/// The text of a message as it is stored: the content and its measure.
#[derive(Debug, Clone)]
pub struct Content {
    pub content: String,
    pub segments: u32,
    pub encoding: Encoding,
}

impl From<crate::domain::sms::SmsText> for Content {
    fn from(text: crate::domain::sms::SmsText) -> Content {
        Content {
            segments: text.segments(),
            encoding: text.encoding(),
            content: text.into_string(),
        }
    }
}

impl Content {
    /// Measures `content` as it arrived from a phone (no length limit applies to what arrived).
    pub fn received(content: String) -> Content {
        let measure = crate::domain::sms::measure(&content);
        Content {
            content,
            segments: measure.segments,
            encoding: measure.encoding,
        }
    }
}

impl NewMessage {
    /// An outbound message of `class`, queued now: no phone, campaign, idempotency key or
    /// schedule until the `with_…` methods add them. Every outbound message starts here.
    pub fn outbound(
        class: QueueClass,
        from_number: String,
        to_number: String,
        content: Content,
        expires_at: i64,
    ) -> NewMessage {
        NewMessage {
            id: Uuid::now_v7(),
            direction: Direction::Outbound,
            status: MessageStatus::Queued,
            class,
            from_number,
            to_number,
            content: content.content,
            segments: content.segments,
            encoding: content.encoding,
            device_id: None,
            pinned: false,
            campaign_id: None,
            request_id: None,
            inbound_ref: None,
            scheduled_for: None,
            expires_at,
            client: None,
            pool_id: None,
        }
    }

    /// An inbound message, delivered at `received_at` (it never expires: it is already here).
    pub fn inbound(
        from_number: String,
        to_number: String,
        content: Content,
        received_at: i64,
    ) -> NewMessage {
        NewMessage {
            direction: Direction::Inbound,
            status: MessageStatus::Delivered,
            ..NewMessage::outbound(
                QueueClass::Single,
                from_number,
                to_number,
                content,
                received_at,
            )
        }
    }

    /// The phone it goes through (or came in on); `pinned` when the caller chose that phone.
    /// Sent through the sender pool `pool_id` (the line is its `device_id`).
    pub fn with_pool(self, pool_id: Option<Uuid>) -> NewMessage {
        NewMessage { pool_id, ..self }
    }

    /// On the phone `device_id`; `pinned` when the caller chose it.
    pub fn with_device(self, device_id: Option<Uuid>, pinned: bool) -> NewMessage {
        NewMessage {
            device_id,
            pinned,
            ..self
        }
    }

    /// Stored as `status` instead of `queued` (a hand-over reserved before the accept).
    pub fn with_status(self, status: MessageStatus) -> NewMessage {
        NewMessage { status, ..self }
    }

    /// The campaign it belongs to.
    pub fn with_campaign(self, campaign_id: CampaignId) -> NewMessage {
        NewMessage {
            campaign_id: Some(campaign_id),
            ..self
        }
    }

    /// The caller's idempotency key.
    pub fn with_request_id(self, request_id: Option<String>) -> NewMessage {
        NewMessage { request_id, ..self }
    }

    /// Held until `scheduled_for` (ms since the epoch).
    pub fn with_schedule(self, scheduled_for: Option<i64>) -> NewMessage {
        NewMessage {
            scheduled_for,
            ..self
        }
    }

    /// What the client API keeps of its request.
    pub fn with_client(self, client: Option<crate::store::messages::ClientOptions>) -> NewMessage {
        NewMessage { client, ..self }
    }

    /// The phone's reference of an inbound message, which makes a repeat recognisable.
    pub fn with_inbound_ref(self, inbound_ref: String) -> NewMessage {
        NewMessage {
            inbound_ref: Some(inbound_ref),
            ..self
        }
    }
}

/// Called with every committed change, in commit order.
pub type ChangeListener = Arc<dyn Fn(Vec<Change>) + Send + Sync>;

/// Writes webhook deliveries in the same transaction as the changes that fire them, so an
/// event is never lost even if the process dies right after the commit.
pub trait CommitHook: Send + Sync {
    /// The deliveries a batch's changes fire (no I/O: called inside the write transaction).
    /// `current` is the subscriptions read in that transaction when the database is shared
    /// with other nodes ([`Subscriptions::read_for`]); None means the hook's own index is
    /// current (one node: every endpoint change goes through it).
    fn stage(
        &self,
        changes: &[Change],
        now_ms: i64,
        current: Option<&Subscriptions>,
    ) -> Vec<PendingDelivery>;
    /// Called after the commit with what [`CommitHook::stage`] returned.
    fn committed(&self, deliveries: Vec<PendingDelivery>);
}

/// The commit hook in use, if any.
pub type SharedCommitHook = Arc<dyn CommitHook>;

/// Handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    tx: tokio::sync::mpsc::Sender<task::Job>,
}

impl Writer {
    /// Opens the writer's own connection to `url` and starts the writer on it: on SQLite on a
    /// thread of its own that shares one CPU with its connection (see `task::start`), on
    /// PostgreSQL as a task of the current runtime.
    pub async fn connect(
        options: &crate::store::DbOptions,
        clock: SharedClock,
        listener: ChangeListener,
        hook: Option<SharedCommitHook>,
        quotas: MessageQuotas,
    ) -> Result<Writer, StoreError> {
        let tx = task::start(options, clock, listener, hook, quotas).await?;
        Ok(Writer { tx })
    }

    /// Queues `request` and waits for its answer; `WriterGone` only when the writer stopped.
    async fn submit<R: Request>(&self, request: R) -> Result<R::Answer, StoreError> {
        let (job, answer) = Submitted::job(request);
        self.tx
            .send(job)
            .await
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Stores outbound messages (send, bulk send, campaign, AI reply); see [`Accept`].
    pub async fn accept(&self, accept: Accept) -> Result<AcceptOutcome, StoreError> {
        self.submit(accept).await
    }

    /// Applies a transition; `None` when the message is unknown or its status does not allow it.
    pub async fn transition(&self, transition: Transition) -> Result<Option<Message>, StoreError> {
        self.submit(transition).await
    }

    /// Reassigns a queued, unpinned message to another phone; `None` when it is no longer
    /// queued on `from_device`.
    pub async fn reroute(&self, reroute: Reroute) -> Result<Option<Message>, StoreError> {
        self.submit(reroute).await
    }

    /// Records a finished webhook attempt and its delivery's new state, unless the delivery had
    /// moved on (deleted, or this attempt number was recorded already) or the endpoint's lease
    /// the attempt carries did.
    pub async fn record_attempt(&self, record: AttemptRecord) -> Result<Recorded, StoreError> {
        self.submit(record).await
    }

    /// Runs a campaign operation (create, control, start, feed, complete).
    pub async fn campaign(&self, op: CampaignOp) -> Result<CampaignOutcome, StoreError> {
        self.submit(op).await
    }

    /// Stores an AI draft (pending: with its `ai.draft.created` deliveries); a second draft for
    /// one message is a `Conflict`. False when it was not stored: its sender has opted out or
    /// turned AI replies off since the provider was asked.
    pub async fn draft(&self, draft: NewDraft) -> Result<bool, StoreError> {
        self.submit(draft).await
    }

    /// Stores an inbound message once per (phone, ref).
    pub async fn inbound(
        &self,
        message: NewMessage,
        scope: Scope,
    ) -> Result<InboundOutcome, StoreError> {
        self.submit(inbound::Inbound { message, scope }).await
    }
}

/// Records attempts through the one [`Writer`]: each attempt row and its
/// delivery's new state are written in the writer's group commit, so on SQLite there is one
/// writer and no second transaction waiting for the write lock. Cheap to clone.
#[derive(Clone)]
pub struct AttemptRecorder {
    writer: Writer,
}

impl AttemptRecorder {
    /// A recorder writing through `writer`.
    pub fn new(writer: Writer) -> AttemptRecorder {
        AttemptRecorder { writer }
    }

    /// Writes the attempt and the delivery's new state, unless the delivery had moved on or,
    /// in a cluster, the endpoint's lease did.
    pub async fn record(&self, record: AttemptRecord) -> Result<Recorded, StoreError> {
        self.writer.record_attempt(record).await
    }
}
