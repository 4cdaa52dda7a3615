//! Message groups of the client API (docs/compat.md, Messages): the smsgw messages one client
//! request created (one per recipient) share its `group_id`. Reads of a group, its timeline,
//! and group listings filtered by the group's aggregated state.

use entity::{message_events, messages};
use sea_orm::sea_query::{Alias, Expr, ExprTrait, Order, Query, SimpleExpr};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::Message;
use super::scoped::Scope;
use crate::domain::status::MessageStatus;

/// Most messages (recipients) of one group: the client API takes 100 numbers at most.
pub const MAX_GROUP_MESSAGES: u64 = 100;

/// The aggregated state of a group, with the SMSGate app's rule (docs/compat.md, Messages):
/// any queued → Pending; any canceled → Cancelled; any sending → Processed; all failed →
/// Failed; all delivered → Delivered; else Sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    Pending,
    Processed,
    Sent,
    Delivered,
    Failed,
    Cancelled,
}

impl GroupState {
    /// Every state, in the order the upstream lists them.
    pub const ALL: [GroupState; 6] = [
        GroupState::Pending,
        GroupState::Processed,
        GroupState::Sent,
        GroupState::Delivered,
        GroupState::Failed,
        GroupState::Cancelled,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Pending => "Pending",
            GroupState::Processed => "Processed",
            GroupState::Sent => "Sent",
            GroupState::Delivered => "Delivered",
            GroupState::Failed => "Failed",
            GroupState::Cancelled => "Cancelled",
        }
    }

    /// The state of one smsgw message.
    pub fn of(status: MessageStatus) -> GroupState {
        match status {
            MessageStatus::Queued => GroupState::Pending,
            MessageStatus::Sending => GroupState::Processed,
            MessageStatus::Sent => GroupState::Sent,
            MessageStatus::Delivered => GroupState::Delivered,
            MessageStatus::Failed | MessageStatus::Expired => GroupState::Failed,
            MessageStatus::Canceled => GroupState::Cancelled,
        }
    }

    /// The state of a group whose messages are in `states` (`None` for no message).
    pub fn aggregate(states: impl IntoIterator<Item = GroupState> + Clone) -> Option<GroupState> {
        let any = |s: GroupState| states.clone().into_iter().any(|x| x == s);
        let all = |s: GroupState| states.clone().into_iter().all(|x| x == s);
        states.clone().into_iter().next()?;
        Some(if any(GroupState::Pending) {
            GroupState::Pending
        } else if any(GroupState::Cancelled) {
            GroupState::Cancelled
        } else if any(GroupState::Processed) {
            GroupState::Processed
        } else if all(GroupState::Failed) {
            GroupState::Failed
        } else if all(GroupState::Delivered) {
            GroupState::Delivered
        } else {
            GroupState::Sent
        })
    }

    /// The same rule as a SQL condition on a group's per-status counts (see [`list`]).
    fn having(self) -> SimpleExpr {
        let none =
            |statuses: &str| format!("SUM(CASE WHEN status IN ({statuses}) THEN 1 ELSE 0 END) = 0");
        let some =
            |statuses: &str| format!("SUM(CASE WHEN status IN ({statuses}) THEN 1 ELSE 0 END) > 0");
        let every = |statuses: &str| {
            format!("SUM(CASE WHEN status IN ({statuses}) THEN 1 ELSE 0 END) = COUNT(*)")
        };
        let not_every = |statuses: &str| {
            format!("SUM(CASE WHEN status IN ({statuses}) THEN 1 ELSE 0 END) < COUNT(*)")
        };
        let listed = |statuses: &[MessageStatus]| {
            statuses
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect::<Vec<_>>()
                .join(",")
        };
        use MessageStatus::{Canceled, Delivered, Expired, Failed, Queued, Sending};
        let (queued, canceled) = (&listed(&[Queued]), &listed(&[Canceled]));
        let (sending, delivered) = (&listed(&[Sending]), &listed(&[Delivered]));
        let failed = &listed(&[Failed, Expired]);
        let parts = match self {
            GroupState::Pending => vec![some(queued)],
            GroupState::Cancelled => vec![none(queued), some(canceled)],
            GroupState::Processed => vec![none(queued), none(canceled), some(sending)],
            GroupState::Failed => vec![none(queued), none(canceled), none(sending), every(failed)],
            GroupState::Delivered => {
                vec![
                    none(queued),
                    none(canceled),
                    none(sending),
                    every(delivered),
                ]
            }
            GroupState::Sent => vec![
                none(queued),
                none(canceled),
                none(sending),
                not_every(failed),
                not_every(delivered),
            ],
        };
        Expr::cust(parts.join(" AND "))
    }
}

/// The messages of group `group_id` in this scope, oldest first (at most
/// [`MAX_GROUP_MESSAGES`]); empty when there is no such group.
pub async fn messages_of(
    db: &impl ConnectionTrait,
    scope: Scope,
    group_id: &str,
) -> Result<Vec<Message>, StoreError> {
    let query = messages::Entity::find()
        .filter(scope.condition())
        .filter(messages::Column::GroupId.eq(group_id))
        .order_by_asc(messages::Column::CreatedAt)
        .order_by_asc(messages::Column::Id)
        .limit(MAX_GROUP_MESSAGES);
    super::rows_as(db, query).await
}

/// The messages of these groups (a listing's page) in this scope, oldest first.
pub async fn messages_of_groups(
    db: &impl ConnectionTrait,
    scope: Scope,
    group_ids: &[String],
) -> Result<Vec<Message>, StoreError> {
    if group_ids.is_empty() {
        return Ok(Vec::new());
    }
    let most = MAX_GROUP_MESSAGES.saturating_mul(group_ids.len() as u64);
    let query = messages::Entity::find()
        .filter(scope.condition())
        .filter(messages::Column::GroupId.is_in(group_ids.iter().cloned()))
        .order_by_asc(messages::Column::CreatedAt)
        .order_by_asc(messages::Column::Id)
        .limit(most);
    super::rows_as(db, query).await
}

/// Message ids per timeline query (well under every backend's bound-parameter limit).
const TIMELINE_CHUNK: usize = 500;

/// The status changes of these messages, `(message id, status, at)`, oldest first.
pub async fn timeline(
    db: &impl ConnectionTrait,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, MessageStatus, i64)>, StoreError> {
    let mut events = Vec::new();
    for chunk in ids.chunks(TIMELINE_CHUNK) {
        let rows = message_events::Entity::find()
            .filter(message_events::Column::MessageId.is_in(chunk.iter().copied()))
            .all(db)
            .await?;
        events
            .extend(rows.into_iter().filter_map(|e| {
                Some((e.id, e.message_id, MessageStatus::parse(&e.status)?, e.at))
            }));
    }
    events.sort_by_key(|(id, _, _, at)| (*at, *id));
    Ok(events
        .into_iter()
        .map(|(_, message, status, at)| (message, status, at))
        .collect())
}

/// Which groups a listing returns.
#[derive(Debug, Clone, Default)]
pub struct GroupFilter {
    /// Created at or after (ms).
    pub from: Option<i64>,
    /// Created at or before (ms).
    pub to: Option<i64>,
    pub state: Option<GroupState>,
    pub device_id: Option<Uuid>,
    /// Oldest first instead of newest first.
    pub oldest_first: bool,
}

/// One page of group ids (`limit` from `offset`) and the number of groups matching.
pub async fn list(
    db: &DatabaseConnection,
    scope: Scope,
    filter: &GroupFilter,
    limit: u64,
    offset: u64,
) -> Result<(Vec<String>, u64), StoreError> {
    let created = Alias::new("group_created_at");
    let mut query = Query::select();
    query
        .column(messages::Column::GroupId)
        .expr_as(Expr::cust("MIN(created_at)"), created.clone())
        .from(messages::Entity)
        .cond_where(scope.condition())
        .and_where(messages::Column::GroupId.is_not_null())
        .group_by_col(messages::Column::GroupId);
    if let Some(device) = filter.device_id {
        query.and_where(messages::Column::DeviceId.eq(device));
    }
    if let Some(from) = filter.from {
        query.and_having(Expr::cust("MIN(created_at)").gte(from));
    }
    if let Some(to) = filter.to {
        query.and_having(Expr::cust("MIN(created_at)").lte(to));
    }
    if let Some(state) = filter.state {
        query.and_having(state.having());
    }
    let mut count = Query::select();
    count
        .expr_as(Expr::cust("COUNT(*)"), Alias::new("total"))
        .from_subquery(query.clone(), Alias::new("groups"));
    let total: i64 = db
        .query_one(&count)
        .await?
        .map(|row| row.try_get("", "total"))
        .transpose()?
        .unwrap_or(0);
    let order = if filter.oldest_first {
        Order::Asc
    } else {
        Order::Desc
    };
    query
        .order_by(created, order.clone())
        .order_by(messages::Column::GroupId, order)
        .limit(limit)
        .offset(offset);
    let ids = db
        .query_all(&query)
        .await?
        .into_iter()
        .map(|row| row.try_get::<String>("", "group_id"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ids, u64::try_from(total).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::GroupState::{self, *};

    #[test]
    fn the_app_rule_aggregates_states() {
        let agg = |s: &[GroupState]| GroupState::aggregate(s.iter().copied());
        assert_eq!(agg(&[]), None);
        assert_eq!(agg(&[Delivered, Pending, Cancelled]), Some(Pending));
        assert_eq!(agg(&[Delivered, Cancelled, Processed]), Some(Cancelled));
        assert_eq!(agg(&[Delivered, Processed]), Some(Processed));
        assert_eq!(agg(&[Failed, Failed]), Some(Failed));
        assert_eq!(agg(&[Delivered, Delivered]), Some(Delivered));
        assert_eq!(agg(&[Delivered, Failed]), Some(Sent));
        assert_eq!(agg(&[Sent, Delivered]), Some(Sent));
    }

    /// The migration adding groups goes down (with every later one) and up again, on SQLite
    /// and, when `SMSGW_TEST_DATABASE_URL` is set, on PostgreSQL.
    #[test]
    fn the_group_migration_goes_down_and_up_again() {
        use migration::{Migrator, MigratorTrait};
        crate::startup::block_on_system(async {
            let dir = tempfile::tempdir().unwrap();
            let mut urls = vec![format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("m.db").display()
            )];
            let mut postgres = None;
            if let Ok(base) = std::env::var("SMSGW_TEST_DATABASE_URL")
                && !base.is_empty()
            {
                let admin = crate::store::connect(&base, 1).await.unwrap();
                // Named as the integration tests name theirs, so their sweep of leftovers
                // drops it should this test fail before its own drop.
                let name = format!(
                    "smsgw_t_{}_{}",
                    chrono::Utc::now().timestamp(),
                    uuid::Uuid::new_v4().simple()
                );
                sea_orm::ConnectionTrait::execute_unprepared(
                    &admin,
                    &format!("CREATE DATABASE {name}"),
                )
                .await
                .unwrap();
                let (prefix, _) = base.rsplit_once('/').unwrap();
                urls.push(format!("{prefix}/{name}"));
                postgres = Some((admin, name));
            }
            for url in urls {
                // One connection: the schema changes going down and up are then read by the
                // connection that made them (from a pool, a connection still holding an older
                // snapshot once reported the dropped column as a duplicate).
                let db = crate::store::open(&crate::store::DbOptions::new(&url), 1, false)
                    .await
                    .unwrap();
                crate::store::migrate(&db).await.unwrap();
                let all = Migrator::migrations();
                let mine = all
                    .iter()
                    .position(|m| m.name() == "m20261125_000190_add_message_groups")
                    .unwrap();
                let later = u32::try_from(all.len() - mine).unwrap();
                Migrator::down(&db, Some(later)).await.unwrap();
                crate::store::migrate(&db).await.unwrap();
                let _ = db.close().await;
            }
            if let Some((admin, name)) = postgres {
                sea_orm::ConnectionTrait::execute_unprepared(
                    &admin,
                    &format!("DROP DATABASE {name} WITH (FORCE)"),
                )
                .await
                .unwrap();
            }
        })
        .unwrap();
    }
}
