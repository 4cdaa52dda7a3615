//! The statements of the writer's campaign operations, run inside its transaction
//! (`writer::campaign`): storing a campaign and its recipients, its status moves, queueing
//! recipients, and what a pause, cancel or retention does to them.

use std::collections::HashMap;

use entity::{campaign_recipients, campaigns, messages};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QuerySelect,
};
use uuid::Uuid;

use super::{CampaignQuotas, NewCampaign, open_statuses};
use crate::domain::campaign::{CampaignStatus, PauseReason, RecipientStatus, SkipReason};
use crate::domain::ids::{CampaignId, WorkspaceId};
use crate::domain::quota::CountQuota;
use crate::domain::status::MessageStatus;
use crate::store::StoreError;
use crate::store::scoped::Scope;

/// Recipient rows per multi-row INSERT (10 columns); a power of two, see
/// [`crate::store::shaped_chunks`].
const RECIPIENT_ROWS_PER_INSERT: usize = 256;

/// Stores a new campaign and its recipients with `status`; `launched` stamps the launch.
pub(crate) async fn insert<C: ConnectionTrait>(
    conn: &C,
    new: &NewCampaign,
    status: CampaignStatus,
    now: i64,
) -> Result<(), StoreError> {
    let launched = status != CampaignStatus::Draft;
    campaigns::Entity::insert(campaigns::ActiveModel {
        id: Set(new.id.as_uuid()),
        workspace_id: Set(new.scope.workspace_id.as_uuid()),
        test_mode: Set(new.scope.mode.is_test()),
        name: Set(new.name.clone()),
        from_number: Set(new.from_number.clone()),
        pool_id: Set(new.pool_id),
        body: Set(new.body.clone()),
        status: Set(status.as_str().to_string()),
        scheduled_for: Set(new.scheduled_for),
        created_at: Set(now),
        updated_at: Set(now),
        launched_at: Set(launched.then_some(now)),
        started_at: Set((status == CampaignStatus::Running).then_some(now)),
        finished_at: Set(None),
        total: Set(i32::try_from(new.total()).unwrap_or(i32::MAX)),
        skipped_opted_out: Set(i32::try_from(new.skipped(SkipReason::OptedOut)).unwrap_or(0)),
        skipped_premium_rate: Set(i32::try_from(new.skipped(SkipReason::PremiumRate)).unwrap_or(0)),
        recipient_count: Set(i32::try_from(new.recipients.len()).unwrap_or(i32::MAX)),
        paused_reason: Set(None),
    })
    .exec_without_returning(conn)
    .await?;
    let rows: Vec<campaign_recipients::ActiveModel> = new
        .recipients
        .iter()
        .enumerate()
        .map(|(i, r)| campaign_recipients::ActiveModel {
            id: Set(Uuid::now_v7()),
            campaign_id: Set(new.id.as_uuid()),
            position: Set(i32::try_from(i).unwrap_or(i32::MAX)),
            to_number: Set(r.to_number.clone()),
            content: Set(r.content.clone()),
            segments: Set(i32::try_from(r.segments).unwrap_or(i32::MAX)),
            encoding: Set(r.encoding.clone()),
            status: Set(r.status.as_str().to_string()),
            message_id: Set(None),
            skip_reason: Set(r.skip_reason.clone()),
            failure_reason: Set(r.failure_reason.clone()),
        })
        .collect();
    for chunk in crate::store::shaped_chunks(&rows, RECIPIENT_ROWS_PER_INSERT) {
        campaign_recipients::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(conn)
            .await?;
    }
    Ok(())
}

/// What a guarded status change sets besides the status.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stamps {
    pub launched: bool,
    pub started: bool,
    pub finished: bool,
    /// Why the campaign pauses itself; every other change clears the reason.
    pub paused_reason: Option<PauseReason>,
}

/// Moves the campaign to `to` if its status is one of `from`; false when it was not.
pub(crate) async fn set_status<C: ConnectionTrait>(
    conn: &C,
    id: CampaignId,
    from: &[CampaignStatus],
    to: CampaignStatus,
    stamps: Stamps,
    now: i64,
) -> Result<bool, StoreError> {
    let mut update = campaigns::Entity::update_many()
        .col_expr(campaigns::Column::Status, Expr::value(to.as_str()))
        .col_expr(campaigns::Column::UpdatedAt, Expr::value(now))
        .col_expr(
            campaigns::Column::PausedReason,
            Expr::value(stamps.paused_reason.map(|r| r.as_str().to_string())),
        )
        .filter(campaigns::Column::Id.eq(id))
        .filter(campaigns::Column::Status.is_in(from.iter().map(|s| s.as_str())));
    if stamps.launched {
        update = update.col_expr(campaigns::Column::LaunchedAt, Expr::value(now));
    }
    if stamps.started {
        update = update.col_expr(
            campaigns::Column::StartedAt,
            Expr::col(campaigns::Column::StartedAt).if_null(now),
        );
    }
    if stamps.finished {
        update = update.col_expr(campaigns::Column::FinishedAt, Expr::value(now));
    }
    Ok(update.exec(conn).await?.rows_affected == 1)
}

/// The campaign quota a new campaign of `recipients` recipient rows would pass in `scope`,
/// if any: the stored campaigns are counted (at most the quota's number of rows), their
/// recipients summed from `recipient_count` (one row per campaign). Call after the workspace
/// is locked (`quotas::lock_workspace`, PostgreSQL with several nodes).
pub(crate) async fn over_quota<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    quotas: CampaignQuotas,
    recipients: u64,
) -> Result<Option<CountQuota>, StoreError> {
    let stored = || campaigns::Entity::find().filter(scope.of::<campaigns::Entity>());
    let limit = quotas.campaigns.limit;
    if limit > 0 {
        let counted = crate::store::quotas::bounded_count(conn, stored(), u64::from(limit)).await?;
        if !quotas.campaigns.allows(counted, 1) {
            return Ok(Some(quotas.campaigns));
        }
    }
    if quotas.recipients.limit > 0 {
        let sum: Option<i64> = stored()
            .select_only()
            .expr(Expr::cust("COALESCE(SUM(recipient_count), 0)"))
            .into_tuple()
            .one(conn)
            .await?;
        let summed = u64::try_from(sum.unwrap_or(0)).unwrap_or(0);
        if !quotas.recipients.allows(summed, recipients) {
            return Ok(Some(quotas.recipients));
        }
    }
    Ok(None)
}

/// What [`delete`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    Deleted,
    /// No such campaign in the scope.
    NotFound,
    /// The campaign is in a status that cannot be deleted: this one.
    Refused(CampaignStatus),
}

/// Removes a campaign of `scope` whose status is one of `deletable` (a draft or finished: no
/// actor feeds it) with its recipient rows. Its messages stay, keeping their `campaign_id`.
pub(crate) async fn delete<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    id: CampaignId,
    deletable: &[CampaignStatus],
) -> Result<Removal, StoreError> {
    let campaign = match super::get(conn, scope, id).await {
        Ok(campaign) => campaign,
        Err(StoreError::NotFound) => return Ok(Removal::NotFound),
        Err(err) => return Err(err),
    };
    if !deletable.contains(&campaign.status) {
        return Ok(Removal::Refused(campaign.status));
    }
    // Guarded by the status again: on PostgreSQL a launch committed by another node since the
    // read above makes this delete nothing (READ COMMITTED re-checks the updated row).
    let gone = campaigns::Entity::delete_many()
        .filter(campaigns::Column::Id.eq(id))
        .filter(campaigns::Column::Status.is_in(deletable.iter().map(|s| s.as_str())))
        .exec(conn)
        .await?;
    if gone.rows_affected == 0 {
        return match super::get(conn, scope, id).await {
            Ok(campaign) => Ok(Removal::Refused(campaign.status)),
            Err(StoreError::NotFound) => Ok(Removal::NotFound),
            Err(err) => Err(err),
        };
    }
    campaign_recipients::Entity::delete_many()
        .filter(campaign_recipients::Column::CampaignId.eq(id))
        .exec(conn)
        .await?;
    Ok(Removal::Deleted)
}

/// Whether any recipient is still pending.
pub(crate) async fn has_pending<C: ConnectionTrait>(
    conn: &C,
    campaign_id: CampaignId,
) -> Result<bool, StoreError> {
    Ok(campaign_recipients::Entity::find()
        .filter(campaign_recipients::Column::CampaignId.eq(campaign_id))
        .filter(campaign_recipients::Column::Status.eq(RecipientStatus::Pending.as_str()))
        .count(conn)
        .await?
        > 0)
}

/// Whether any of the campaign's messages is not terminal.
pub(crate) async fn has_open_messages<C: ConnectionTrait>(
    conn: &C,
    campaign_id: CampaignId,
) -> Result<bool, StoreError> {
    Ok(messages::Entity::find()
        .filter(messages::Column::CampaignId.eq(campaign_id))
        .filter(messages::Column::Status.is_in(open_statuses()))
        .count(conn)
        .await?
        > 0)
}

/// The campaign's messages in `status` (pause withdraws the queued ones never tried, cancel
/// cancels every queued one); `untried` keeps only those no phone was ever handed.
pub(crate) async fn messages_in<C: ConnectionTrait>(
    conn: &C,
    campaign_id: CampaignId,
    status: MessageStatus,
    untried: bool,
) -> Result<Vec<crate::store::messages::Message>, StoreError> {
    let mut select = messages::Entity::find()
        .filter(messages::Column::CampaignId.eq(campaign_id))
        .filter(messages::Column::Status.eq(status.as_str()));
    if untried {
        select = select.filter(messages::Column::SendAttempts.eq(0));
    }
    crate::store::rows_as(conn, select).await
}

/// Which of `ids` are still pending recipients of the campaign.
pub(crate) async fn still_pending<C: ConnectionTrait>(
    conn: &C,
    campaign_id: CampaignId,
    ids: &[Uuid],
) -> Result<std::collections::HashSet<Uuid>, StoreError> {
    let mut out = std::collections::HashSet::new();
    for chunk in ids.chunks(crate::store::IDS_PER_STATEMENT) {
        let found: Vec<Uuid> = campaign_recipients::Entity::find()
            .select_only()
            .column(campaign_recipients::Column::Id)
            .filter(campaign_recipients::Column::CampaignId.eq(campaign_id))
            .filter(campaign_recipients::Column::Status.eq(RecipientStatus::Pending.as_str()))
            .filter(campaign_recipients::Column::Id.is_in(crate::store::id_list(chunk)))
            .into_tuple()
            .all(conn)
            .await?;
        out.extend(found);
    }
    Ok(out)
}

/// Marks recipients queued with their messages (`(recipient, message)` pairs).
pub(crate) async fn mark_queued<C: ConnectionTrait>(
    conn: &C,
    pairs: &[(Uuid, Uuid)],
) -> Result<(), StoreError> {
    for chunk in pairs.chunks(crate::store::IDS_PER_STATEMENT) {
        let mut case = sea_orm::sea_query::CaseStatement::new();
        for (recipient, message) in chunk {
            case = case.case(
                campaign_recipients::Column::Id.eq(*recipient),
                Expr::value(*message),
            );
        }
        let case: Expr = case.finally(Expr::value(Option::<Uuid>::None)).into();
        campaign_recipients::Entity::update_many()
            .col_expr(
                campaign_recipients::Column::Status,
                Expr::value(RecipientStatus::Queued.as_str()),
            )
            .col_expr(campaign_recipients::Column::MessageId, case)
            .filter(campaign_recipients::Column::Id.is_in(chunk.iter().map(|(r, _)| *r)))
            .exec(conn)
            .await?;
    }
    Ok(())
}

/// Cancels recipients who opted out since the campaign was created (`skip_reason` opted_out;
/// they were in `total`, so they count as canceled) and counts them in `skipped.opted_out`.
pub(crate) async fn mark_opted_out<C: ConnectionTrait>(
    conn: &C,
    campaign_id: CampaignId,
    ids: &[Uuid],
    now: i64,
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    for chunk in ids.chunks(crate::store::IDS_PER_STATEMENT) {
        campaign_recipients::Entity::update_many()
            .col_expr(
                campaign_recipients::Column::Status,
                Expr::value(RecipientStatus::Canceled.as_str()),
            )
            .col_expr(
                campaign_recipients::Column::SkipReason,
                Expr::value(SkipReason::OptedOut.as_str()),
            )
            .filter(campaign_recipients::Column::Id.is_in(chunk.iter().copied()))
            .exec(conn)
            .await?;
    }
    let n = i32::try_from(ids.len()).unwrap_or(i32::MAX);
    campaigns::Entity::update_many()
        .col_expr(
            campaigns::Column::SkippedOptedOut,
            Expr::col(campaigns::Column::SkippedOptedOut).add(n),
        )
        .col_expr(campaigns::Column::UpdatedAt, Expr::value(now))
        .filter(campaigns::Column::Id.eq(campaign_id))
        .exec(conn)
        .await?;
    Ok(())
}

/// Pending recipients become canceled (the campaign was canceled); how many.
pub(crate) async fn cancel_pending<C: ConnectionTrait>(
    conn: &C,
    campaign_id: CampaignId,
) -> Result<u64, StoreError> {
    let result = campaign_recipients::Entity::update_many()
        .col_expr(
            campaign_recipients::Column::Status,
            Expr::value(RecipientStatus::Canceled.as_str()),
        )
        .filter(campaign_recipients::Column::CampaignId.eq(campaign_id))
        .filter(campaign_recipients::Column::Status.eq(RecipientStatus::Pending.as_str()))
        .exec(conn)
        .await?;
    Ok(result.rows_affected)
}

/// Removes queued messages that were never handed to a phone (pause) and makes their
/// recipients pending again; returns the ids actually removed. A message back in `queued`
/// after an attempt (its phone disconnected, a retry) may have been sent already: it stays.
pub(crate) async fn withdraw<C: ConnectionTrait>(
    conn: &C,
    ids: &[Uuid],
) -> Result<Vec<Uuid>, StoreError> {
    let mut removed = Vec::new();
    for chunk in ids.chunks(crate::store::IDS_PER_STATEMENT) {
        let gone: Vec<Uuid> = messages::Entity::delete_many()
            .filter(messages::Column::Id.is_in(chunk.iter().copied()))
            .filter(messages::Column::Status.eq(MessageStatus::Queued.as_str()))
            .filter(messages::Column::SendAttempts.eq(0))
            .exec_with_returning(conn)
            .await?
            .into_iter()
            .map(|m| m.id)
            .collect();
        if gone.is_empty() {
            continue;
        }
        entity::message_events::Entity::delete_many()
            .filter(entity::message_events::Column::MessageId.is_in(gone.iter().copied()))
            .exec(conn)
            .await?;
        campaign_recipients::Entity::update_many()
            .col_expr(
                campaign_recipients::Column::Status,
                Expr::value(RecipientStatus::Pending.as_str()),
            )
            .col_expr(
                campaign_recipients::Column::MessageId,
                Expr::value(Option::<Uuid>::None),
            )
            .filter(campaign_recipients::Column::MessageId.is_in(gone.iter().copied()))
            .exec(conn)
            .await?;
        removed.extend(gone);
    }
    Ok(removed)
}

/// Before retention removes campaign messages: their recipients keep the final status.
pub(crate) async fn keep_final_status<C: ConnectionTrait>(
    conn: &C,
    messages: &[(Uuid, MessageStatus, Option<String>)],
) -> Result<(), StoreError> {
    let mut by_outcome: HashMap<(RecipientStatus, Option<&str>), Vec<Uuid>> = HashMap::new();
    for (id, status, reason) in messages {
        by_outcome
            .entry((RecipientStatus::of_message(*status), reason.as_deref()))
            .or_default()
            .push(*id);
    }
    for ((status, reason), ids) in by_outcome {
        for chunk in ids.chunks(crate::store::IDS_PER_STATEMENT) {
            campaign_recipients::Entity::update_many()
                .col_expr(
                    campaign_recipients::Column::Status,
                    Expr::value(status.as_str()),
                )
                .col_expr(
                    campaign_recipients::Column::FailureReason,
                    Expr::value(reason.map(str::to_string)),
                )
                .filter(campaign_recipients::Column::MessageId.is_in(chunk.iter().copied()))
                .filter(campaign_recipients::Column::Status.eq(RecipientStatus::Queued.as_str()))
                .exec(conn)
                .await?;
        }
    }
    Ok(())
}

/// Live outbound recipients of campaigns launched in `[from, to)` by this workspace: what the
/// new-workspace limit counts for campaigns.
pub(crate) async fn launched_recipients<C: ConnectionTrait>(
    conn: &C,
    workspace_id: WorkspaceId,
    from: i64,
    to: i64,
) -> Result<u64, StoreError> {
    let totals: Vec<i32> = campaigns::Entity::find()
        .select_only()
        .column(campaigns::Column::Total)
        .filter(campaigns::Column::WorkspaceId.eq(workspace_id))
        .filter(campaigns::Column::TestMode.eq(false))
        .filter(campaigns::Column::LaunchedAt.gte(from))
        .filter(campaigns::Column::LaunchedAt.lt(to))
        .into_tuple()
        .all(conn)
        .await?;
    Ok(totals
        .into_iter()
        .map(|t| u64::try_from(t).unwrap_or(0))
        .sum())
}
