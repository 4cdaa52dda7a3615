//! Campaigns and their recipients: the reads of the API and the campaign actors. The
//! statements the writer runs for campaign operations inside its transaction
//! (see `writer::campaign`) are `writes`.
//!
//! A recipient's status lives in its row until it is queued; from then on the status of its
//! message is the truth, and retention copies that status back into the row before it removes
//! the message. So counts are the recipient rows not `queued` plus the campaign's messages.

mod writes;

pub(crate) use writes::{
    Removal, Stamps, cancel_pending, delete, has_open_messages, has_pending, insert,
    keep_final_status, launched_recipients, mark_opted_out, mark_queued, messages_in, over_quota,
    set_status, still_pending, withdraw,
};

use std::collections::HashMap;

use entity::{campaign_recipients, campaigns, messages};
use sea_orm::sea_query::{Alias, Expr, ExprTrait, Query, UnionType};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::Position;
use super::scoped::Scope;
use super::scoped::find_in_scope;
use crate::domain::campaign::{CampaignStatus, PauseReason, RecipientStatus, SkipReason};
use crate::domain::ids::{CampaignId, MessageId};
use crate::domain::quota::{CountQuota, Quota};
use crate::domain::sms::Encoding;
use crate::domain::status::{MessageStatus, Mode};

/// A stored campaign (without its counts).
#[derive(Debug, Clone, PartialEq)]
pub struct Campaign {
    pub id: CampaignId,
    pub scope: Scope,
    pub name: String,
    pub from_number: String,
    pub body: String,
    pub status: CampaignStatus,
    pub scheduled_for: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub launched_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// Recipients to send (skipped ones excluded).
    pub total: u32,
    pub skipped_opted_out: u32,
    pub skipped_premium_rate: u32,
    /// Why it paused itself; None for any other status, or a pause through the API.
    pub paused_reason: Option<PauseReason>,
    /// The sender pool it sends from (docs/api.md, "Pools"); `from_number` is then empty.
    pub pool_id: Option<Uuid>,
}

/// A row read as a [`Campaign`]; a status outside its enum is a [`StoreError::CorruptRow`].
impl TryFrom<campaigns::Model> for Campaign {
    type Error = StoreError;

    fn try_from(m: campaigns::Model) -> Result<Campaign, StoreError> {
        let status = CampaignStatus::parse(&m.status)
            .ok_or_else(|| StoreError::corrupt("campaigns", "status", m.id, &m.status))?;
        Ok(Campaign {
            id: m.id.into(),
            scope: Scope {
                workspace_id: m.workspace_id.into(),
                mode: Mode::from_test_flag(m.test_mode),
            },
            name: m.name,
            pool_id: m.pool_id,
            from_number: m.from_number,
            body: m.body,
            status,
            scheduled_for: m.scheduled_for,
            created_at: m.created_at,
            updated_at: m.updated_at,
            launched_at: m.launched_at,
            started_at: m.started_at,
            finished_at: m.finished_at,
            total: u32::try_from(m.total).unwrap_or(0),
            skipped_opted_out: u32::try_from(m.skipped_opted_out).unwrap_or(0),
            skipped_premium_rate: u32::try_from(m.skipped_premium_rate).unwrap_or(0),
            paused_reason: m.paused_reason.and_then(|r| r.parse().ok()),
        })
    }
}

/// How many recipients are in each state; they add up to the campaign's `total`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub pending: u64,
    pub queued: u64,
    pub sent: u64,
    pub delivered: u64,
    pub failed: u64,
    pub canceled: u64,
}

impl Counts {
    fn add(&mut self, status: RecipientStatus, n: u64) {
        match status {
            RecipientStatus::Pending => self.pending += n,
            RecipientStatus::Queued => self.queued += n,
            RecipientStatus::Sent => self.sent += n,
            RecipientStatus::Delivered => self.delivered += n,
            RecipientStatus::Failed => self.failed += n,
            RecipientStatus::Canceled => self.canceled += n,
            RecipientStatus::Skipped => {}
        }
    }
}

/// The quotas on a scope's stored campaigns (docs/api.md, "Quotas"), checked when one is
/// created.
#[derive(Debug, Clone, Copy)]
pub struct CampaignQuotas {
    /// Stored campaigns.
    pub campaigns: CountQuota,
    /// Recipient rows over all stored campaigns.
    pub recipients: CountQuota,
}

impl CampaignQuotas {
    /// The campaign quotas as configured.
    pub fn of(quotas: &crate::config::QuotaSettings) -> CampaignQuotas {
        CampaignQuotas {
            campaigns: quotas.count(Quota::Campaigns),
            recipients: quotas.count(Quota::CampaignRecipients),
        }
    }
}

/// A new campaign, validated and expanded, ready to store.
#[derive(Debug, Clone)]
pub struct NewCampaign {
    pub id: CampaignId,
    pub scope: Scope,
    pub name: String,
    /// Empty with `pool_id`.
    pub from_number: String,
    pub pool_id: Option<Uuid>,
    pub body: String,
    pub scheduled_for: Option<i64>,
    pub recipients: Vec<NewRecipient>,
}

impl NewCampaign {
    /// Recipients that will be sent (not skipped).
    pub fn total(&self) -> u32 {
        self.recipients
            .iter()
            .filter(|r| r.status != RecipientStatus::Skipped)
            .count() as u32
    }

    fn skipped(&self, reason: SkipReason) -> u32 {
        self.recipients
            .iter()
            .filter(|r| r.skip_reason.as_deref() == Some(reason.as_str()))
            .count() as u32
    }
}

/// One recipient of a new campaign, with its rendered text.
#[derive(Debug, Clone)]
pub struct NewRecipient {
    pub to_number: String,
    pub content: String,
    pub segments: u32,
    pub encoding: String,
    /// Pending, or Skipped / Failed from the start.
    pub status: RecipientStatus,
    pub skip_reason: Option<String>,
    pub failure_reason: Option<String>,
}

/// A recipient as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipient {
    pub id: Uuid,
    pub position: i64,
    pub to_number: String,
    pub status: RecipientStatus,
    pub message_id: Option<Uuid>,
    pub skip_reason: Option<String>,
    pub failure_reason: Option<String>,
}

/// A pending recipient, ready to be queued.
#[derive(Debug, Clone)]
pub struct PendingRecipient {
    pub id: Uuid,
    pub to_number: String,
    pub content: String,
    pub segments: u32,
    pub encoding: Encoding,
}

/// A campaign of this scope.
pub async fn get<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    id: CampaignId,
) -> Result<Campaign, StoreError> {
    let row = find_in_scope::<campaigns::Entity>(conn, scope, id.as_uuid()).await?;
    row.try_into()
}

/// A campaign by id regardless of scope (its actor).
pub async fn by_id<C: ConnectionTrait>(conn: &C, id: CampaignId) -> Result<Campaign, StoreError> {
    campaigns::Entity::find_by_id(id.as_uuid())
        .one(conn)
        .await?
        .ok_or(StoreError::NotFound)?
        .try_into()
}

/// Newest first by (created_at, id), optionally of one status.
pub async fn list(
    db: &DatabaseConnection,
    scope: Scope,
    status: Option<CampaignStatus>,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<Campaign>, bool), StoreError> {
    let mut condition = scope.of::<campaigns::Entity>();
    if let Some(status) = status {
        condition = condition.add(campaigns::Column::Status.eq(status.as_str()));
    }
    super::newest_first(
        db,
        campaigns::Entity::find().filter(condition),
        (campaigns::Column::CreatedAt, campaigns::Column::Id),
        after,
        limit,
    )
    .await
}

/// The counts of a campaign (see [`counts_of`]).
pub async fn counts(db: &DatabaseConnection, id: CampaignId) -> Result<Counts, StoreError> {
    Ok(counts_of(db, &[id]).await?.remove(&id).unwrap_or_default())
}

/// Which half of the counts statement a row comes from (its `source` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
enum CountSource {
    Recipient,
    Message,
}

impl CountSource {
    fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The counts of these campaigns: their recipient rows that are not `queued`, plus their
/// messages. One statement (`UNION ALL` of the two groupings), so both halves come from one
/// snapshot: read as two, a feed committing in between counted its recipients as pending and
/// queued at once. A page of campaigns is one statement, not one per campaign.
pub async fn counts_of(
    db: &DatabaseConnection,
    ids: &[CampaignId],
) -> Result<HashMap<CampaignId, Counts>, StoreError> {
    let mut out: HashMap<CampaignId, Counts> = HashMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let mut by_recipient = Query::select()
        .expr_as(
            Expr::value(CountSource::Recipient.as_str()),
            Alias::new("source"),
        )
        .expr_as(
            Expr::col(campaign_recipients::Column::CampaignId),
            Alias::new("campaign_id"),
        )
        .column(campaign_recipients::Column::Status)
        .expr_as(
            Expr::col(campaign_recipients::Column::Id).count(),
            Alias::new("n"),
        )
        .from(campaign_recipients::Entity)
        .and_where(campaign_recipients::Column::CampaignId.is_in(ids.iter().copied()))
        .group_by_col(campaign_recipients::Column::CampaignId)
        .group_by_col(campaign_recipients::Column::Status)
        .to_owned();
    let by_message = Query::select()
        .expr_as(
            Expr::value(CountSource::Message.as_str()),
            Alias::new("source"),
        )
        .expr_as(
            Expr::col(messages::Column::CampaignId),
            Alias::new("campaign_id"),
        )
        .column(messages::Column::Status)
        .expr_as(Expr::col(messages::Column::Id).count(), Alias::new("n"))
        .from(messages::Entity)
        .and_where(messages::Column::CampaignId.is_in(ids.iter().copied()))
        .group_by_col(messages::Column::CampaignId)
        .group_by_col(messages::Column::Status)
        .to_owned();
    let statement = by_recipient.union(UnionType::All, by_message).to_owned();
    for row in db.query_all(&statement).await? {
        let source: String = row.try_get("", "source")?;
        let campaign = CampaignId::from(row.try_get::<Uuid>("", "campaign_id")?);
        let status: String = row.try_get("", "status")?;
        let n = u64::try_from(row.try_get::<i64>("", "n")?).unwrap_or(0);
        let status = if source.parse() == Ok(CountSource::Message) {
            MessageStatus::parse(&status).map(RecipientStatus::of_message)
        } else {
            // A queued recipient's status is its message's, counted by the other half.
            RecipientStatus::parse(&status).filter(|s| *s != RecipientStatus::Queued)
        };
        if let Some(status) = status {
            out.entry(campaign).or_default().add(status, n);
        }
    }
    Ok(out)
}

/// A page of a campaign's recipients in order, after position `after`, with the live status
/// of those queued.
pub async fn recipients(
    db: &DatabaseConnection,
    campaign_id: CampaignId,
    after: Option<i64>,
    limit: u64,
) -> Result<(Vec<Recipient>, bool), StoreError> {
    let mut select = campaign_recipients::Entity::find()
        .filter(campaign_recipients::Column::CampaignId.eq(campaign_id));
    if let Some(after) = after {
        select = select.filter(campaign_recipients::Column::Position.gt(after));
    }
    let mut rows = select
        .order_by_asc(campaign_recipients::Column::Position)
        .limit(limit + 1)
        .all(db)
        .await?;
    let has_more = rows.len() as u64 > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let queued: Vec<Uuid> = rows
        .iter()
        .filter(|r| r.status == RecipientStatus::Queued.as_str())
        .filter_map(|r| r.message_id)
        .collect();
    let live: HashMap<Uuid, (MessageStatus, Option<String>)> = if queued.is_empty() {
        HashMap::new()
    } else {
        let found: Vec<(Uuid, String, Option<String>)> = messages::Entity::find()
            .select_only()
            .column(messages::Column::Id)
            .column(messages::Column::Status)
            .column(messages::Column::FailureReason)
            .filter(messages::Column::Id.is_in(queued))
            .into_tuple()
            .all(db)
            .await?;
        found
            .into_iter()
            .filter_map(|(id, s, reason)| MessageStatus::parse(&s).map(|s| (id, (s, reason))))
            .collect()
    };
    let out = rows
        .into_iter()
        .map(|r| {
            let stored = RecipientStatus::parse(&r.status).ok_or_else(|| {
                StoreError::corrupt("campaign_recipients", "status", r.id, &r.status)
            })?;
            let (status, failure_reason) = match r.message_id.and_then(|id| live.get(&id)) {
                Some((message, reason)) if stored == RecipientStatus::Queued => {
                    (RecipientStatus::of_message(*message), reason.clone())
                }
                _ => (stored, r.failure_reason),
            };
            Ok(Recipient {
                id: r.id,
                position: i64::from(r.position),
                to_number: r.to_number,
                status,
                message_id: r.message_id,
                skip_reason: r.skip_reason,
                failure_reason,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok((out, has_more))
}

/// The first `limit` pending recipients of a campaign, in order.
pub async fn pending<C: ConnectionTrait>(
    conn: &C,
    campaign_id: CampaignId,
    limit: u64,
) -> Result<Vec<PendingRecipient>, StoreError> {
    campaign_recipients::Entity::find()
        .filter(campaign_recipients::Column::CampaignId.eq(campaign_id))
        .filter(campaign_recipients::Column::Status.eq(RecipientStatus::Pending.as_str()))
        .order_by_asc(campaign_recipients::Column::Position)
        .limit(limit)
        .all(conn)
        .await?
        .into_iter()
        .map(|r| {
            Ok(PendingRecipient {
                encoding: Encoding::parse(&r.encoding).ok_or_else(|| {
                    StoreError::corrupt("campaign_recipients", "encoding", r.id, &r.encoding)
                })?,
                id: r.id,
                to_number: r.to_number,
                content: r.content,
                segments: u32::try_from(r.segments).unwrap_or(0),
            })
        })
        .collect()
}

/// The message statuses that are not terminal (a campaign waits for its messages in them).
fn open_statuses() -> impl Iterator<Item = &'static str> {
    MessageStatus::ALL
        .into_iter()
        .filter(|s| !s.is_terminal())
        .map(MessageStatus::as_str)
}

/// The campaign's messages that are not terminal yet, with their status.
pub async fn open_messages(
    db: &DatabaseConnection,
    campaign_id: CampaignId,
) -> Result<Vec<(MessageId, MessageStatus)>, StoreError> {
    let rows: Vec<(Uuid, String)> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .column(messages::Column::Status)
        .filter(messages::Column::CampaignId.eq(campaign_id))
        .filter(messages::Column::Status.is_in(open_statuses()))
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, s)| MessageStatus::parse(&s).map(|s| (id.into(), s)))
        .collect())
}

/// Ids of the campaigns that need an actor: running or waiting for their start.
pub async fn live(db: &DatabaseConnection) -> Result<Vec<CampaignId>, StoreError> {
    let ids: Vec<Uuid> = campaigns::Entity::find()
        .select_only()
        .column(campaigns::Column::Id)
        .filter(campaigns::Column::Status.is_in([
            CampaignStatus::Scheduled.as_str(),
            CampaignStatus::Running.as_str(),
        ]))
        .into_tuple()
        .all(db)
        .await?;
    Ok(ids.into_iter().map(CampaignId::from).collect())
}

/// One line's share of a campaign (docs/api.md, "Pools"): its messages by status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineProgress {
    pub phone_id: Option<Uuid>,
    pub from_number: String,
    pub queued: u64,
    pub sent: u64,
    pub delivered: u64,
    pub failed: u64,
}

/// The campaign's messages counted by line (phone and number) and status, one grouped query
/// (at most lines × statuses rows); ordered by number. `sending` counts as queued (handed
/// over, not reported yet), `expired` as failed; canceled messages are left out.
pub async fn lines(
    db: &DatabaseConnection,
    id: CampaignId,
) -> Result<Vec<LineProgress>, StoreError> {
    use entity::messages;
    use sea_orm::QuerySelect;
    let rows: Vec<(Option<Uuid>, String, String, i64)> = messages::Entity::find()
        .select_only()
        .column(messages::Column::DeviceId)
        .column(messages::Column::FromNumber)
        .column(messages::Column::Status)
        .column_as(messages::Column::Id.count(), "n")
        .filter(messages::Column::CampaignId.eq(id.as_uuid()))
        .group_by(messages::Column::DeviceId)
        .group_by(messages::Column::FromNumber)
        .group_by(messages::Column::Status)
        .into_tuple()
        .all(db)
        .await?;
    let mut by_line: std::collections::BTreeMap<(String, Option<Uuid>), LineProgress> =
        std::collections::BTreeMap::new();
    for (phone_id, from_number, status, n) in rows {
        let line = by_line
            .entry((from_number.clone(), phone_id))
            .or_insert_with(|| LineProgress {
                phone_id,
                from_number,
                ..LineProgress::default()
            });
        let n = u64::try_from(n).unwrap_or(0);
        match MessageStatus::parse(&status) {
            Some(MessageStatus::Queued | MessageStatus::Sending) => line.queued += n,
            Some(MessageStatus::Sent) => line.sent += n,
            Some(MessageStatus::Delivered) => line.delivered += n,
            Some(MessageStatus::Failed | MessageStatus::Expired) => line.failed += n,
            _ => {}
        }
    }
    Ok(by_line.into_values().collect())
}
