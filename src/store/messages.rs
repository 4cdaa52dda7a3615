//! Message reads: by id with its timeline, cursor-paged listing, batch status, queue rebuilds.
//!
//! Writes go through [`super::writer`], which batches them into group commits.

use std::collections::HashMap;

use entity::{message_events, messages};
use sea_orm::{
    ColumnTrait, Condition, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::StoreError;
use super::scoped::Scope;
use crate::domain::change::{ChangeKind, FailureReason};
use crate::domain::ids::{CampaignId, WorkspaceId};
use crate::domain::sms::Encoding;
use crate::domain::status::{Direction, MessageStatus, Mode, QueueClass};

/// A stored message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub id: Uuid,
    pub workspace_id: WorkspaceId,
    pub mode: Mode,
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
    pub scheduled_for: Option<i64>,
    pub expires_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub sent_at: Option<i64>,
    pub delivered_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub failure_reason: Option<FailureReason>,
    pub send_attempts: u32,
    /// Set on messages of the client API (docs/compat.md, Messages).
    pub client: Option<ClientOptions>,
    /// The sender pool it was sent through (docs/api.md, "Pools"); only such a message moves
    /// to another line.
    pub pool_id: Option<Uuid>,
}

/// What a message sent through the SMSGate-compatible client API keeps of its request
/// (docs/compat.md, Messages): the client's message id, shared by one message per recipient,
/// and the options an SMSGate-app phone is handed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    pub group_id: String,
    /// SIM slot, 1 to 3; `None` lets the phone choose.
    pub sim_number: Option<u8>,
    /// The SMSGate priority, -128 to 127.
    pub priority: i8,
    pub with_delivery_report: bool,
}

impl Message {
    /// The client API's message id, for messages created through it.
    pub fn group_id(&self) -> Option<&str> {
        self.client.as_ref().map(|c| c.group_id.as_str())
    }
}

/// A row read as a [`Message`]; a direction, status or encoding outside its enum is a
/// [`StoreError::CorruptRow`].
impl TryFrom<messages::Model> for Message {
    type Error = StoreError;

    fn try_from(m: messages::Model) -> Result<Message, StoreError> {
        let corrupt = |column, value: &str| StoreError::corrupt("messages", column, m.id, value);
        let direction =
            Direction::parse(&m.direction).ok_or_else(|| corrupt("direction", &m.direction))?;
        let status = MessageStatus::parse(&m.status).ok_or_else(|| corrupt("status", &m.status))?;
        let encoding =
            Encoding::parse(&m.encoding).ok_or_else(|| corrupt("encoding", &m.encoding))?;
        Ok(Message {
            id: m.id,
            workspace_id: m.workspace_id.into(),
            mode: Mode::from_test_flag(m.test_mode),
            direction,
            status,
            class: QueueClass::from_i16(m.priority),
            from_number: m.from_number,
            to_number: m.to_number,
            content: m.content,
            segments: u32::try_from(m.segments).unwrap_or(0),
            encoding,
            device_id: m.device_id,
            pinned: m.pinned,
            campaign_id: m.campaign_id.map(CampaignId::from),
            request_id: m.request_id,
            scheduled_for: m.scheduled_for,
            expires_at: m.expires_at,
            created_at: m.created_at,
            updated_at: m.updated_at,
            sent_at: m.sent_at,
            delivered_at: m.delivered_at,
            failed_at: m.failed_at,
            failure_reason: m.failure_reason.map(FailureReason::from_stored),
            send_attempts: u32::try_from(m.send_attempts).unwrap_or(0),
            client: m.group_id.map(|group_id| ClientOptions {
                group_id,
                sim_number: m.sim_number.and_then(|n| u8::try_from(n).ok()),
                priority: m
                    .sms_priority
                    .and_then(|p| i8::try_from(p).ok())
                    .unwrap_or(0),
                with_delivery_report: m.with_delivery_report,
            }),
            pool_id: m.pool_id,
        })
    }
}

impl Message {
    /// The workspace and mode the message belongs to.
    pub fn scope(&self) -> Scope {
        Scope {
            workspace_id: self.workspace_id,
            mode: self.mode,
        }
    }

    /// The message record as the API and webhooks show it (docs/api.md, Messages): every field,
    /// null where it does not apply (`expires_at` of an inbound message among them); a borrowed
    /// view that serializes straight to JSON text.
    pub fn view(&self) -> Record<'_> {
        use crate::clock::format_ms;
        Record {
            id: self.id,
            direction: self.direction,
            status: self.status,
            from_number: &self.from_number,
            to_number: &self.to_number,
            content: &self.content,
            segments: self.segments,
            encoding: self.encoding,
            device_id: self.device_id,
            pool_id: self.pool_id,
            campaign_id: self.campaign_id.map(CampaignId::as_uuid),
            request_id: self.request_id.as_deref(),
            scheduled_for: self.scheduled_for.map(format_ms),
            expires_at: (self.direction == Direction::Outbound).then(|| format_ms(self.expires_at)),
            created_at: format_ms(self.created_at),
            sent_at: self.sent_at.map(format_ms),
            delivered_at: self.delivered_at.map(format_ms),
            failed_at: self.failed_at.map(format_ms),
            failure_reason: self.failure_reason.as_ref().map(FailureReason::as_str),
            send_attempts: self.send_attempts,
            test_mode: self.mode.is_test(),
        }
    }
}

/// A message record (docs/api.md, Messages), the wire format of every API answer and webhook
/// that carries a message, and its OpenAPI schema (`MessageOut`); fields in the order they
/// serialize, timestamps RFC 3339 with milliseconds.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[schema(as = MessageOut)]
pub struct Record<'a> {
    pub id: Uuid,
    pub direction: Direction,
    pub status: MessageStatus,
    pub from_number: &'a str,
    pub to_number: &'a str,
    /// Empty once retention removed it.
    pub content: &'a str,
    pub segments: u32,
    pub encoding: Encoding,
    /// The phone that sends (or sent) it.
    pub device_id: Option<Uuid>,
    /// The sender pool it was sent through (`from_pool`); null otherwise.
    pub pool_id: Option<Uuid>,
    pub campaign_id: Option<Uuid>,
    pub request_id: Option<&'a str>,
    #[schema(format = DateTime)]
    pub scheduled_for: Option<String>,
    /// Outbound only (null for inbound messages).
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub sent_at: Option<String>,
    #[schema(format = DateTime)]
    pub delivered_at: Option<String>,
    #[schema(format = DateTime)]
    pub failed_at: Option<String>,
    pub failure_reason: Option<&'a str>,
    pub send_attempts: u32,
    pub test_mode: bool,
}

/// One timeline entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageEvent {
    pub kind: String,
    pub status: String,
    pub at: i64,
    pub detail: Option<String>,
}

/// A message of this scope, with its timeline oldest first.
#[tracing::instrument(skip_all, fields(message_id = %id))]
pub async fn get_with_events(
    db: &DatabaseConnection,
    scope: Scope,
    id: Uuid,
) -> Result<(Message, Vec<MessageEvent>), StoreError> {
    let message = super::scoped::find_in_scope::<messages::Entity>(db, scope, id).await?;
    let events = message_events::Entity::find()
        .filter(message_events::Column::MessageId.eq(id))
        .order_by_asc(message_events::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(|e| MessageEvent {
            kind: e.kind,
            status: e.status,
            at: e.at,
            detail: e.detail,
        })
        .collect();
    Ok((message.try_into()?, events))
}

/// A message by id regardless of scope (internal use by actors).
pub async fn get(db: &DatabaseConnection, id: Uuid) -> Result<Option<Message>, StoreError> {
    messages::Entity::find_by_id(id)
        .one(db)
        .await?
        .map(Message::try_from)
        .transpose()
}

/// Filters of the list operation.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub direction: Option<Direction>,
    pub status: Option<MessageStatus>,
    pub phone_number: Option<String>,
}

/// Position after which a page starts: the (created_at, id) of the last item of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub created_at: i64,
    pub id: Uuid,
}

/// Newest first by (created_at, id), strictly after `after`; fetches `limit + 1` to learn has_more.
#[tracing::instrument(skip_all)]
pub async fn list(
    db: &DatabaseConnection,
    scope: Scope,
    filter: &ListFilter,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<Message>, bool), StoreError> {
    let mut condition = scope.condition();
    if let Some(direction) = filter.direction {
        condition = condition.add(messages::Column::Direction.eq(direction.as_str()));
    }
    if let Some(status) = filter.status {
        condition = condition.add(messages::Column::Status.eq(status.as_str()));
    }
    if let Some(number) = &filter.phone_number {
        condition = condition.add(
            Condition::any()
                .add(messages::Column::FromNumber.eq(number.as_str()))
                .add(messages::Column::ToNumber.eq(number.as_str())),
        );
    }
    super::newest_first(
        db,
        messages::Entity::find().filter(condition),
        (messages::Column::CreatedAt, messages::Column::Id),
        after,
        limit,
    )
    .await
}

/// Status of each id of this scope that exists.
pub async fn statuses(
    db: &DatabaseConnection,
    scope: Scope,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, MessageStatus, i64)>, StoreError> {
    let rows: Vec<(Uuid, String, i64)> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .column(messages::Column::Status)
        .column(messages::Column::UpdatedAt)
        .filter(scope.condition())
        .filter(messages::Column::Id.is_in(ids.iter().copied()))
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, status, at)| MessageStatus::parse(&status).map(|s| (id, s, at)))
        .collect())
}

/// How many messages are stored in each status (every workspace and mode).
pub async fn count_by_status(
    db: &DatabaseConnection,
) -> Result<Vec<(MessageStatus, u64)>, StoreError> {
    let rows: Vec<(String, i64)> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Status)
        .column_as(messages::Column::Id.count(), "n")
        .group_by(messages::Column::Status)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(s, n)| MessageStatus::parse(&s).map(|s| (s, u64::try_from(n).unwrap_or(0))))
        .collect())
}

/// Outbound messages not yet handed over for good (queued or sending), oldest first: the
/// queues rebuilt at start-up. Messages left `sending` by a stopped server are re-sent.
pub async fn unfinished_outbound(db: &DatabaseConnection) -> Result<Vec<Message>, StoreError> {
    unfinished(db, Unfinished::All).await
}

/// The test-mode outbound messages still `queued` or `sending`, oldest first: what the node
/// taking test mode over rebuilds the simulated phones from (docs/architecture.md, "Cluster").
pub async fn unfinished_in_test_mode(db: &DatabaseConnection) -> Result<Vec<Message>, StoreError> {
    unfinished(db, Unfinished::TestMode).await
}

/// Test-mode outbound messages still `queued`: those of `ids`, or every one (None), oldest
/// first (a `simulate` notice from another node).
pub async fn queued_in_test_mode(
    db: &DatabaseConnection,
    ids: Option<&[Uuid]>,
) -> Result<Vec<Message>, StoreError> {
    let mut query = messages::Entity::find();
    if let Some(ids) = ids {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        query = query.filter(messages::Column::Id.is_in(super::id_list(ids)));
    }
    let query = query
        .filter(messages::Column::TestMode.eq(true))
        .filter(messages::Column::Status.eq(MessageStatus::Queued.as_str()))
        .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()));
    oldest_first(db, query).await
}

/// The outbound messages of one phone still `queued` or `sending`, oldest first: what a node
/// taking the phone over rebuilds its queue from (docs/architecture.md, "Cluster").
pub async fn unfinished_of_phone(
    db: &DatabaseConnection,
    device: Uuid,
) -> Result<Vec<Message>, StoreError> {
    unfinished(db, Unfinished::Phone(device)).await
}

/// Whose unfinished messages [`unfinished`] reads.
enum Unfinished {
    All,
    Phone(Uuid),
    TestMode,
}

/// Outbound messages `queued` or `sending` (all, of one phone, or of test mode), oldest first.
async fn unfinished(
    db: &DatabaseConnection,
    whose: Unfinished,
) -> Result<Vec<Message>, StoreError> {
    let mut query = messages::Entity::find();
    match whose {
        Unfinished::All => {}
        Unfinished::Phone(device) => {
            // A test-mode message names a test-mode phone of its number, but the simulated
            // phone sends it: a phone's own queue is live messages only.
            query = query
                .filter(messages::Column::DeviceId.eq(device))
                .filter(messages::Column::TestMode.eq(false));
        }
        Unfinished::TestMode => query = query.filter(messages::Column::TestMode.eq(true)),
    }
    let query = query
        .filter(messages::Column::Status.is_in([
            MessageStatus::Queued.as_str(),
            MessageStatus::Sending.as_str(),
        ]))
        .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()));
    oldest_first(db, query).await
}

/// Those of `ids` still `queued` on phone `device` (an enqueue notice from another node).
pub async fn queued_of_phone(
    db: &DatabaseConnection,
    device: Uuid,
    ids: &[Uuid],
) -> Result<Vec<Message>, StoreError> {
    on_phone(db, &[device], ids, MessageStatus::Queued).await
}

/// The ids of every live outbound message still `queued`, by phone: one read of the queued
/// partial index (its predicate is this query's; no `ORDER BY id … LIMIT`, which would walk the
/// primary key through every message instead) rather than one read per phone when a node must
/// learn what waits for its phones (a cluster resync).
pub async fn queued_live_by_phone(
    db: &DatabaseConnection,
) -> Result<HashMap<Uuid, Vec<Uuid>>, StoreError> {
    let rows: Vec<(Uuid, Option<Uuid>)> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .column(messages::Column::DeviceId)
        .filter(messages::Column::Status.eq(MessageStatus::Queued.as_str()))
        .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()))
        .filter(messages::Column::TestMode.eq(false))
        .into_tuple()
        .all(db)
        .await?;
    let mut by_phone: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    for (id, device) in rows {
        if let Some(device) = device {
            by_phone.entry(device).or_default().push(id);
        }
    }
    Ok(by_phone)
}

/// Those of `ids` on phone `device` in `status`, oldest first, in one query.
async fn on_phone(
    db: &DatabaseConnection,
    devices: &[Uuid],
    ids: &[Uuid],
    status: MessageStatus,
) -> Result<Vec<Message>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let query = messages::Entity::find()
        .filter(messages::Column::Id.is_in(super::id_list(ids)))
        .filter(messages::Column::DeviceId.is_in(devices.iter().copied()))
        .filter(messages::Column::Status.eq(status.as_str()));
    oldest_first(db, query).await
}

/// The messages `query` selects, oldest first.
async fn oldest_first(
    db: &DatabaseConnection,
    query: sea_orm::Select<messages::Entity>,
) -> Result<Vec<Message>, StoreError> {
    let query = query
        .order_by_asc(messages::Column::CreatedAt)
        .order_by_asc(messages::Column::Id);
    super::rows_as(db, query).await
}

/// Those of `ids` still `sending` on one of `devices` (a device and its SIM lines): what one
/// device-API fetch serves, read in one query however many messages the phone's outbox holds.
pub async fn sending_on_phone(
    db: &DatabaseConnection,
    devices: &[Uuid],
    ids: &[Uuid],
) -> Result<Vec<Message>, StoreError> {
    on_phone(db, devices, ids, MessageStatus::Sending).await
}

/// The timeline detail of a hand-over to `device` (None: the test-mode simulated phone).
pub fn handover_detail(device: Option<Uuid>) -> String {
    match device {
        Some(device) => format!("handed to phone {device}"),
        None => "handed to the test-mode simulated phone".into(),
    }
}

/// Queued messages whose expires_at has passed (handed to the writer to expire).
pub async fn expired_candidates(
    db: &DatabaseConnection,
    now_ms: i64,
    limit: u64,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .filter(messages::Column::Status.eq(MessageStatus::Queued.as_str()))
        .filter(messages::Column::ExpiresAt.lte(now_ms))
        .limit(limit)
        .into_tuple()
        .all(db)
        .await?)
}

/// How many of this message's attempts failed and were retried (its `attempt_failed` timeline
/// entries). The device API names each new send after a failure with it.
pub async fn failed_attempts(db: &DatabaseConnection, id: Uuid) -> Result<u32, StoreError> {
    let count = message_events::Entity::find()
        .filter(message_events::Column::MessageId.eq(id))
        .filter(message_events::Column::Kind.eq(ChangeKind::AttemptFailed.as_str()))
        .count(db)
        .await?;
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}

/// [`failed_attempts`] of several messages in one query; a message without failures is left
/// out.
pub async fn failed_attempts_of(
    db: &DatabaseConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, u32>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(Uuid, i64)> = message_events::Entity::find()
        .select_only()
        .column(message_events::Column::MessageId)
        .column_as(message_events::Column::MessageId.count(), "n")
        .filter(message_events::Column::MessageId.is_in(super::id_list(ids)))
        .filter(message_events::Column::Kind.eq(ChangeKind::AttemptFailed.as_str()))
        .group_by(message_events::Column::MessageId)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, n)| (id, u32::try_from(n).unwrap_or(u32::MAX)))
        .collect())
}

/// Times at which this phone was handed messages since `since_ms`, the most recent `limit` of
/// them (ascending): its pace log after a restart. Each chunk of messages reads at most
/// `limit` times, so the answer stays bounded whatever the phone did before.
pub async fn handoffs_since(
    db: &DatabaseConnection,
    device_id: Uuid,
    since_ms: i64,
    limit: usize,
) -> Result<Vec<i64>, StoreError> {
    let ids: Vec<Uuid> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .filter(messages::Column::DeviceId.eq(device_id))
        .filter(messages::Column::UpdatedAt.gte(since_ms))
        .into_tuple()
        .all(db)
        .await?;
    let mut times = Vec::new();
    for chunk in ids.chunks(500) {
        let at: Vec<i64> = message_events::Entity::find()
            .select_only()
            .column(message_events::Column::At)
            .filter(message_events::Column::MessageId.is_in(chunk.iter().copied()))
            .filter(message_events::Column::Kind.eq(MessageStatus::Sending.as_str()))
            .filter(message_events::Column::At.gte(since_ms))
            .order_by_desc(message_events::Column::At)
            .limit(u64::try_from(limit).unwrap_or(u64::MAX))
            .into_tuple()
            .all(db)
            .await?;
        times.extend(at);
        if times.len() > limit {
            times.sort_unstable();
            times.drain(..times.len() - limit);
        }
    }
    times.sort_unstable();
    Ok(times)
}

/// Test-mode outbound messages left `sent` (their simulated delivery was pending when the
/// server stopped); the simulator delivers them again after a restart.
pub async fn sent_in_test_mode(db: &DatabaseConnection) -> Result<Vec<Message>, StoreError> {
    let query = messages::Entity::find()
        .filter(messages::Column::Status.eq(MessageStatus::Sent.as_str()))
        .filter(messages::Column::TestMode.eq(true))
        .filter(messages::Column::Direction.eq(Direction::Outbound.as_str()));
    super::rows_as(db, query).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> messages::Model {
        messages::Model {
            id: Uuid::now_v7(),
            workspace_id: Uuid::now_v7(),
            test_mode: false,
            direction: "outbound".into(),
            status: "failed".into(),
            priority: QueueClass::Single.as_i16(),
            from_number: "+15550100".into(),
            to_number: "+15550101".into(),
            content: "hi".into(),
            segments: 1,
            encoding: "UCS-2".into(),
            device_id: None,
            pinned: false,
            campaign_id: None,
            request_id: None,
            inbound_ref: None,
            scheduled_for: None,
            expires_at: 2,
            created_at: 1,
            updated_at: 1,
            sent_at: None,
            delivered_at: None,
            failed_at: Some(1),
            failure_reason: Some("expired".into()),
            send_attempts: 0,
            content_removed_at: None,
            group_id: None,
            sim_number: None,
            sms_priority: None,
            with_delivery_report: false,
            pool_id: None,
        }
    }

    #[test]
    fn a_row_reads_with_its_encoding_and_failure_reason_typed() {
        let message = Message::try_from(row()).ok();
        let message = message.as_ref();
        assert_eq!(message.map(|m| m.encoding), Some(Encoding::Ucs2));
        assert_eq!(
            message.and_then(|m| m.failure_reason.clone()),
            Some(FailureReason::Expired)
        );
        assert_eq!(message.map(|m| m.status), Some(MessageStatus::Failed));
    }

    #[test]
    fn a_value_outside_its_enum_is_a_corrupt_row_not_a_guess() {
        for (column, corrupt) in [
            (
                "status",
                messages::Model {
                    status: "lost".into(),
                    ..row()
                },
            ),
            (
                "direction",
                messages::Model {
                    direction: "sideways".into(),
                    ..row()
                },
            ),
            (
                "encoding",
                messages::Model {
                    encoding: "utf8".into(),
                    ..row()
                },
            ),
        ] {
            match Message::try_from(corrupt) {
                Err(StoreError::CorruptRow {
                    table,
                    column: which,
                    ..
                }) => {
                    assert_eq!((table, which), ("messages", column));
                }
                other => panic!("{column}: {other:?}"),
            }
        }
    }
}
