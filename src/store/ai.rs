//! AI reply settings and drafts. A draft is stored by the writer (`writer::Op::Draft`, so its
//! `ai.draft.created` delivery commits with it) and marked sent by the writer in the same
//! transaction as its reply message; reads, settings and discards are plain statements here.

use std::collections::HashMap;

use entity::{ai_drafts, ai_settings, messages};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, QueryTrait,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::{Message, Position};
use super::scoped::Scope;
use super::scoped::find_in_scope;
use crate::domain::ai::{AiMode, DraftStatus, Rule};

/// The AI settings of a workspace and mode.
#[derive(Debug, Clone, PartialEq)]
pub struct AiSettings {
    pub enabled: bool,
    pub mode: AiMode,
    pub instructions: String,
    pub rules: Vec<Rule>,
}

impl Default for AiSettings {
    fn default() -> Self {
        AiSettings {
            enabled: false,
            mode: AiMode::Draft,
            instructions: String::new(),
            rules: Vec::new(),
        }
    }
}

/// A stored draft.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub id: Uuid,
    pub scope: Scope,
    pub message_id: Uuid,
    pub from_number: String,
    pub to_number: String,
    pub content: String,
    pub status: DraftStatus,
    pub sent_message_id: Option<Uuid>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A row read as a [`Draft`]; a status outside its enum is a [`StoreError::CorruptRow`].
impl TryFrom<ai_drafts::Model> for Draft {
    type Error = StoreError;

    fn try_from(m: ai_drafts::Model) -> Result<Draft, StoreError> {
        let status = DraftStatus::parse(&m.status)
            .ok_or_else(|| StoreError::corrupt("ai_drafts", "status", m.id, &m.status))?;
        Ok(Draft {
            id: m.id,
            scope: Scope {
                workspace_id: m.workspace_id.into(),
                mode: crate::domain::status::Mode::from_test_flag(m.test_mode),
            },
            message_id: m.message_id,
            from_number: m.from_number,
            to_number: m.to_number,
            content: m.content,
            status,
            sent_message_id: m.sent_message_id,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

/// The settings of this scope (the defaults when never set).
pub async fn settings(db: &DatabaseConnection, scope: Scope) -> Result<AiSettings, StoreError> {
    let row = ai_settings::Entity::find_by_id((scope.workspace_id.as_uuid(), scope.mode.is_test()))
        .one(db)
        .await?;
    Ok(match row {
        Some(row) => AiSettings {
            enabled: row.enabled,
            mode: AiMode::parse(&row.mode).ok_or_else(|| {
                StoreError::corrupt("ai_settings", "mode", row.workspace_id, &row.mode)
            })?,
            instructions: row.instructions,
            rules: serde_json::from_str(&row.rules).unwrap_or_default(),
        },
        None => AiSettings::default(),
    })
}

/// Replaces the settings of this scope.
pub async fn put_settings(
    db: &DatabaseConnection,
    scope: Scope,
    settings: &AiSettings,
    now: i64,
) -> Result<(), StoreError> {
    let rules = serde_json::to_string(&settings.rules).unwrap_or_else(|_| "[]".into());
    let row = ai_settings::ActiveModel {
        workspace_id: Set(scope.workspace_id.as_uuid()),
        test_mode: Set(scope.mode.is_test()),
        enabled: Set(settings.enabled),
        mode: Set(settings.mode.as_str().to_string()),
        instructions: Set(settings.instructions.clone()),
        rules: Set(rules),
        updated_at: Set(now),
    };
    ai_settings::Entity::insert(row)
        .on_conflict(
            OnConflict::columns([
                ai_settings::Column::WorkspaceId,
                ai_settings::Column::TestMode,
            ])
            .update_columns([
                ai_settings::Column::Enabled,
                ai_settings::Column::Mode,
                ai_settings::Column::Instructions,
                ai_settings::Column::Rules,
                ai_settings::Column::UpdatedAt,
            ])
            .to_owned(),
        )
        .exec_without_returning(db)
        .await?;
    Ok(())
}

/// A draft of this scope.
pub async fn get<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    id: Uuid,
) -> Result<Draft, StoreError> {
    find_in_scope::<ai_drafts::Entity>(conn, scope, id)
        .await?
        .try_into()
}

/// Newest first by (created_at, id), optionally of one status.
pub async fn list(
    db: &DatabaseConnection,
    scope: Scope,
    status: Option<DraftStatus>,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<Draft>, bool), StoreError> {
    let mut condition = scope.of::<ai_drafts::Entity>();
    if let Some(status) = status {
        condition = condition.add(ai_drafts::Column::Status.eq(status.as_str()));
    }
    super::newest_first(
        db,
        ai_drafts::Entity::find().filter(condition),
        (ai_drafts::Column::CreatedAt, ai_drafts::Column::Id),
        after,
        limit,
    )
    .await
}

/// Discards a pending draft; false when it is not pending (anymore).
pub async fn discard(
    db: &DatabaseConnection,
    scope: Scope,
    id: Uuid,
    now: i64,
) -> Result<bool, StoreError> {
    let discarded = discard_pending(db, scope, ai_drafts::Column::Id.eq(id), now).await?;
    Ok(discarded == 1)
}

/// Discards every pending draft answering `from_number` in this scope (inside the writer's
/// transaction, when the number texts STOP or STOP AI); how many.
pub(crate) async fn discard_pending_from<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    from_number: &str,
    now: i64,
) -> Result<u64, StoreError> {
    let which = ai_drafts::Column::FromNumber.eq(from_number);
    discard_pending(conn, scope, which, now).await
}

/// Discards the pending drafts of this scope that `which` selects; how many.
async fn discard_pending<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    which: sea_orm::sea_query::SimpleExpr,
    now: i64,
) -> Result<u64, StoreError> {
    let result = ai_drafts::Entity::update_many()
        .col_expr(
            ai_drafts::Column::Status,
            Expr::value(DraftStatus::Discarded.as_str()),
        )
        .col_expr(ai_drafts::Column::UpdatedAt, Expr::value(now))
        .filter(scope.of::<ai_drafts::Entity>())
        .filter(which)
        .filter(ai_drafts::Column::Status.eq(DraftStatus::Pending.as_str()))
        .exec(conn)
        .await?;
    Ok(result.rows_affected)
}

/// The drafts answering these inbound messages (the bodies of `ai.draft.created` attempts).
pub async fn drafts_by_message(
    db: &DatabaseConnection,
    message_ids: &[Uuid],
) -> Result<HashMap<Uuid, Draft>, StoreError> {
    let mut found = HashMap::new();
    for chunk in message_ids.chunks(super::IDS_PER_STATEMENT) {
        let rows = ai_drafts::Entity::find()
            .filter(ai_drafts::Column::MessageId.is_in(chunk.iter().copied()))
            .all(db)
            .await?;
        for row in rows {
            found.insert(row.message_id, Draft::try_from(row)?);
        }
    }
    Ok(found)
}

/// The last `limit` messages between `ours` and `theirs` in this scope, oldest first (the
/// conversation an AI provider sees).
pub async fn conversation(
    db: &DatabaseConnection,
    scope: Scope,
    ours: &str,
    theirs: &str,
    limit: u64,
) -> Result<Vec<Message>, StoreError> {
    let between = Condition::any()
        .add(
            Condition::all()
                .add(messages::Column::FromNumber.eq(ours))
                .add(messages::Column::ToNumber.eq(theirs)),
        )
        .add(
            Condition::all()
                .add(messages::Column::FromNumber.eq(theirs))
                .add(messages::Column::ToNumber.eq(ours)),
        );
    let query = messages::Entity::find()
        .filter(scope.condition())
        .filter(between)
        .order_by_desc(messages::Column::CreatedAt)
        .order_by_desc(messages::Column::Id)
        .limit(limit);
    let mut rows = super::rows_as(db, query).await?;
    rows.reverse();
    Ok(rows)
}

/// Inbound messages received in `[from, to)` that have no draft, oldest first, at most
/// `limit`: the ones a stopped server may not have answered (see `actors::ai`).
pub async fn inbound_without_draft(
    db: &DatabaseConnection,
    from: i64,
    to: i64,
    limit: u64,
) -> Result<Vec<Message>, StoreError> {
    let drafted = ai_drafts::Entity::find()
        .select_only()
        .column(ai_drafts::Column::MessageId)
        .into_query();
    let query = messages::Entity::find()
        .filter(messages::Column::Direction.eq(crate::domain::status::Direction::Inbound.as_str()))
        .filter(messages::Column::CreatedAt.gte(from))
        .filter(messages::Column::CreatedAt.lt(to))
        .filter(messages::Column::Id.not_in_subquery(drafted))
        .order_by_asc(messages::Column::CreatedAt)
        .limit(limit);
    super::rows_as(db, query).await
}

// ---- Statements of the writer (inside its transaction) ----

/// A draft to store.
#[derive(Debug, Clone)]
pub struct NewDraft {
    pub id: Uuid,
    /// The inbound message it answers.
    pub message: Message,
    pub content: String,
    pub status: DraftStatus,
}

pub(crate) async fn insert<C: ConnectionTrait>(
    conn: &C,
    draft: &NewDraft,
    now: i64,
) -> Result<(), StoreError> {
    ai_drafts::Entity::insert(ai_drafts::ActiveModel {
        id: Set(draft.id),
        workspace_id: Set(draft.message.workspace_id.as_uuid()),
        test_mode: Set(draft.message.mode.is_test()),
        message_id: Set(draft.message.id),
        from_number: Set(draft.message.from_number.clone()),
        to_number: Set(draft.message.to_number.clone()),
        content: Set(draft.content.clone()),
        status: Set(draft.status.as_str().to_string()),
        sent_message_id: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    })
    .exec_without_returning(conn)
    .await?;
    Ok(())
}

/// Marks a pending draft sent as `message` with `content`; the draft's status when it is not
/// pending, or None when it does not exist.
pub(crate) async fn mark_sent<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    id: Uuid,
    message: Uuid,
    content: &str,
    now: i64,
) -> Result<Result<(), Option<DraftStatus>>, StoreError> {
    let result = ai_drafts::Entity::update_many()
        .col_expr(
            ai_drafts::Column::Status,
            Expr::value(DraftStatus::Sent.as_str()),
        )
        .col_expr(ai_drafts::Column::SentMessageId, Expr::value(message))
        .col_expr(ai_drafts::Column::Content, Expr::value(content))
        .col_expr(ai_drafts::Column::UpdatedAt, Expr::value(now))
        .filter(scope.of::<ai_drafts::Entity>())
        .filter(ai_drafts::Column::Id.eq(id))
        .filter(ai_drafts::Column::Status.eq(DraftStatus::Pending.as_str()))
        .exec(conn)
        .await?;
    if result.rows_affected == 1 {
        return Ok(Ok(()));
    }
    match get(conn, scope, id).await {
        Ok(draft) => Ok(Err(Some(draft.status))),
        Err(StoreError::NotFound) => Ok(Err(None)),
        Err(err) => Err(err),
    }
}
