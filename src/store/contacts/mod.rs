//! Contacts: CRUD, cursor-paged listing with tag and opt-out filters, and the contacts a new
//! campaign reads. A bulk import (upsert by phone number) is `import`; what a contact allows
//! the workspace to send it, and the opt-out keywords applied inside the writer's inbound
//! transaction, are `consent`.

mod consent;
mod import;

pub use consent::{
    Consent, ContactKey, ai_replies_to, apply_keyword, consent, opted_out_among, restrictions,
};
pub use import::{import, plan_import};

use std::collections::{BTreeMap, HashMap};

use entity::{contact_tags, contacts};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, QueryTrait, Set,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::Position;
use super::scoped::Scope;
use super::scoped::find_in_scope;
use crate::domain::ids::ContactId;
use crate::domain::quota::CountQuota;

/// Contacts per multi-row statement of an import (13 columns: 6,500 bind parameters, well
/// under SQLite's 32,766 and PostgreSQL's 65,535).
const CONTACT_ROWS_PER_STATEMENT: usize = 500;
/// Tag rows per multi-row INSERT (4 columns).
const TAG_ROWS_PER_STATEMENT: usize = 2_000;
/// Ids per `IN (...)` list.
const IDS_PER_LOOKUP: usize = 500;

/// A stored contact with its tags (sorted).
#[derive(Debug, Clone, PartialEq)]
pub struct Contact {
    pub id: ContactId,
    pub phone_number: String,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub email: Option<String>,
    pub custom_fields: BTreeMap<String, String>,
    pub tags: Vec<String>,
    pub opted_out: bool,
    pub opted_out_at: Option<i64>,
    pub ai_replies: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Contact {
    fn from_row(m: contacts::Model, tags: Vec<String>) -> Contact {
        Contact {
            id: m.id.into(),
            phone_number: m.phone_number,
            first_name: m.first_name,
            last_name: m.last_name,
            email: m.email,
            custom_fields: serde_json::from_str(&m.custom_fields).unwrap_or_default(),
            tags,
            opted_out: m.opted_out,
            opted_out_at: m.opted_out_at,
            ai_replies: m.ai_replies,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// Validated fields of a create or import item; `None` means "not given".
#[derive(Debug, Clone, Default)]
pub struct ContactFields {
    /// E.164, already validated.
    pub phone_number: String,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub email: Option<String>,
    pub custom_fields: Option<BTreeMap<String, String>>,
    /// Deduplicated.
    pub tags: Option<Vec<String>>,
}

impl ContactFields {
    /// The row of a new contact `id` with these fields (opted in, AI replies on, created now),
    /// and its tags, which are rows of their own: the one shape of a new contact, for a create
    /// and an import alike.
    fn into_new_row(
        self,
        id: Uuid,
        scope: Scope,
        now_ms: i64,
    ) -> (contacts::ActiveModel, Option<Vec<String>>) {
        let row = contacts::ActiveModel {
            id: Set(id),
            workspace_id: Set(scope.workspace_id.as_uuid()),
            test_mode: Set(scope.mode.is_test()),
            phone_number: Set(self.phone_number),
            first_name: Set(self.first_name),
            last_name: Set(self.last_name),
            email: Set(self.email),
            custom_fields: Set(encode_fields(&self.custom_fields.unwrap_or_default())),
            opted_out: Set(false),
            opted_out_at: Set(None),
            ai_replies: Set(true),
            created_at: Set(now_ms),
            updated_at: Set(now_ms),
        };
        (row, self.tags)
    }
}

/// Validated changes of a PATCH: the outer `None` leaves a field alone, `Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct ContactPatch {
    pub phone_number: Option<String>,
    pub first_name: Option<Option<String>>,
    pub last_name: Option<Option<String>>,
    pub email: Option<Option<String>>,
    pub custom_fields: Option<BTreeMap<String, String>>,
    pub tags: Option<Vec<String>>,
    pub opted_out: Option<bool>,
    pub ai_replies: Option<bool>,
}

/// Filters of the list operation.
#[derive(Debug, Clone, Default)]
pub struct ContactFilter {
    pub tag: Option<String>,
    pub opted_out: Option<bool>,
    /// Words that must each appear (case-insensitively) in the first name, last name, email
    /// or number (docs/api.md, Contacts, `q`).
    pub search: Vec<String>,
}

/// What an import did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOutcome {
    pub created: u64,
    pub updated: u64,
}

fn encode_fields(fields: &BTreeMap<String, String>) -> String {
    serde_json::to_string(fields).unwrap_or_else(|_| "{}".into())
}

fn conflict_target() -> OnConflict {
    OnConflict::columns([
        contacts::Column::WorkspaceId,
        contacts::Column::TestMode,
        contacts::Column::PhoneNumber,
    ])
}

fn tag_rows(scope: Scope, id: Uuid, tags: &[String]) -> Vec<contact_tags::ActiveModel> {
    tags.iter()
        .map(|tag| contact_tags::ActiveModel {
            contact_id: Set(id),
            tag: Set(tag.clone()),
            workspace_id: Set(scope.workspace_id.as_uuid()),
            test_mode: Set(scope.mode.is_test()),
        })
        .collect()
}

async fn insert_tags<C: ConnectionTrait>(
    conn: &C,
    rows: Vec<contact_tags::ActiveModel>,
) -> Result<(), StoreError> {
    for chunk in rows.chunks(TAG_ROWS_PER_STATEMENT) {
        contact_tags::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(conn)
            .await?;
    }
    Ok(())
}

async fn delete_tags<C: ConnectionTrait>(conn: &C, ids: &[Uuid]) -> Result<(), StoreError> {
    for chunk in ids.chunks(IDS_PER_LOOKUP) {
        contact_tags::Entity::delete_many()
            .filter(contact_tags::Column::ContactId.is_in(chunk.iter().copied()))
            .exec(conn)
            .await?;
    }
    Ok(())
}

async fn tags_of<C: ConnectionTrait>(
    conn: &C,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<String>>, StoreError> {
    let mut tags: HashMap<Uuid, Vec<String>> = HashMap::new();
    for chunk in ids.chunks(IDS_PER_LOOKUP) {
        let rows = contact_tags::Entity::find()
            .filter(contact_tags::Column::ContactId.is_in(chunk.iter().copied()))
            .order_by_asc(contact_tags::Column::Tag)
            .all(conn)
            .await?;
        for row in rows {
            tags.entry(row.contact_id).or_default().push(row.tag);
        }
    }
    Ok(tags)
}

/// Creates a contact; `Conflict` when the number already has one in this scope,
/// `QuotaExceeded` when the scope already has `quota` contacts.
#[tracing::instrument(skip_all)]
pub async fn create(
    db: &DatabaseConnection,
    scope: Scope,
    fields: ContactFields,
    quota: CountQuota,
    now_ms: i64,
) -> Result<Contact, StoreError> {
    let id = Uuid::now_v7();
    let txn = super::quotas::begin_counted::<contacts::Entity>(db, scope, quota).await?;
    let (row, tags) = fields.into_new_row(id, scope, now_ms);
    let model = row.insert(&txn).await?;
    let mut tags = tags.unwrap_or_default();
    insert_tags(&txn, tag_rows(scope, id, &tags)).await?;
    txn.commit().await?;
    tags.sort();
    Ok(Contact::from_row(model, tags))
}

/// The id of this scope's contact with that number.
pub async fn find_id_by_number(
    db: &DatabaseConnection,
    scope: Scope,
    phone_number: &str,
) -> Result<Option<ContactId>, StoreError> {
    let id: Option<Uuid> = contacts::Entity::find()
        .select_only()
        .column(contacts::Column::Id)
        .filter(scope.of::<contacts::Entity>())
        .filter(contacts::Column::PhoneNumber.eq(phone_number))
        .into_tuple()
        .one(db)
        .await?;
    Ok(id.map(ContactId::from))
}

/// One contact of this scope.
#[tracing::instrument(skip_all, fields(contact_id = %id))]
pub async fn get(
    db: &DatabaseConnection,
    scope: Scope,
    id: ContactId,
) -> Result<Contact, StoreError> {
    let model = find_in_scope::<contacts::Entity>(db, scope, id.as_uuid()).await?;
    let tags = tags_of(db, &[model.id])
        .await?
        .remove(&model.id)
        .unwrap_or_default();
    Ok(Contact::from_row(model, tags))
}

/// Applies a PATCH; `Conflict` when the new number belongs to another contact.
#[tracing::instrument(skip_all, fields(contact_id = %id))]
pub async fn update(
    db: &DatabaseConnection,
    scope: Scope,
    id: ContactId,
    patch: ContactPatch,
    now_ms: i64,
) -> Result<Contact, StoreError> {
    let id = id.as_uuid();
    let txn = super::begin_write(db).await?;
    let model = find_in_scope::<contacts::Entity>(&txn, scope, id).await?;
    let opted_out_before = model.opted_out;
    let mut active: contacts::ActiveModel = model.into();
    if let Some(number) = patch.phone_number {
        active.phone_number = Set(number);
    }
    if let Some(v) = patch.first_name {
        active.first_name = Set(v);
    }
    if let Some(v) = patch.last_name {
        active.last_name = Set(v);
    }
    if let Some(v) = patch.email {
        active.email = Set(v);
    }
    if let Some(v) = &patch.custom_fields {
        active.custom_fields = Set(encode_fields(v));
    }
    if let Some(v) = patch.opted_out
        && v != opted_out_before
    {
        active.opted_out = Set(v);
        active.opted_out_at = Set(v.then_some(now_ms));
    }
    if let Some(v) = patch.ai_replies {
        active.ai_replies = Set(v);
    }
    active.updated_at = Set(now_ms);
    let model = active.update(&txn).await?;
    if let Some(tags) = &patch.tags {
        delete_tags(&txn, &[id]).await?;
        insert_tags(&txn, tag_rows(scope, id, tags)).await?;
    }
    let tags = tags_of(&txn, &[id]).await?.remove(&id).unwrap_or_default();
    txn.commit().await?;
    Ok(Contact::from_row(model, tags))
}

/// Deletes a contact and its tags.
#[tracing::instrument(skip_all, fields(contact_id = %id))]
pub async fn delete(
    db: &DatabaseConnection,
    scope: Scope,
    id: ContactId,
) -> Result<(), StoreError> {
    let txn = super::begin_write(db).await?;
    let delete = contacts::Entity::delete_many()
        .filter(contacts::Column::Id.eq(id))
        .filter(scope.of::<contacts::Entity>());
    super::delete_found(&txn, delete).await?;
    delete_tags(&txn, &[id.as_uuid()]).await?;
    txn.commit().await?;
    Ok(())
}

/// Newest first by (created_at, id), strictly after `after`; `limit + 1` rows tell has_more.
#[tracing::instrument(skip_all)]
pub async fn list(
    db: &DatabaseConnection,
    scope: Scope,
    filter: &ContactFilter,
    after: Option<Position>,
    limit: u64,
) -> Result<(Vec<Contact>, bool), StoreError> {
    let mut condition = scope.of::<contacts::Entity>();
    if let Some(opted_out) = filter.opted_out {
        condition = condition.add(contacts::Column::OptedOut.eq(opted_out));
    }
    for word in &filter.search {
        condition = condition.add(word_matches(word));
    }
    if let Some(tag) = &filter.tag {
        let tagged = contact_tags::Entity::find()
            .select_only()
            .column(contact_tags::Column::ContactId)
            .filter(scope.of::<contact_tags::Entity>())
            .filter(contact_tags::Column::Tag.eq(tag.as_str()))
            .into_query();
        condition = condition.add(contacts::Column::Id.in_subquery(tagged));
    }
    let (rows, has_more): (Vec<contacts::Model>, bool) = super::newest_first(
        db,
        contacts::Entity::find().filter(condition),
        (contacts::Column::CreatedAt, contacts::Column::Id),
        after,
        limit,
    )
    .await?;
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let mut tags = tags_of(db, &ids).await?;
    let contacts = rows
        .into_iter()
        .map(|r| {
            let t = tags.remove(&r.id).unwrap_or_default();
            Contact::from_row(r, t)
        })
        .collect();
    Ok((contacts, has_more))
}

/// A search word found in the first name, last name, email or number, case-insensitively
/// (`%` and `_` in the word match themselves).
fn word_matches(word: &str) -> Condition {
    use sea_orm::sea_query::{ExprTrait, Func, LikeExpr};
    let escaped: String = word
        .to_lowercase()
        .chars()
        .flat_map(|c| match c {
            '%' | '_' | '\\' => vec!['\\', c],
            other => vec![other],
        })
        .collect();
    let pattern = format!("%{escaped}%");
    let like = |column: contacts::Column| {
        Expr::expr(Func::lower(Expr::col(column))).like(LikeExpr::new(pattern.clone()).escape('\\'))
    };
    Condition::any()
        .add(like(contacts::Column::FirstName))
        .add(like(contacts::Column::LastName))
        .add(like(contacts::Column::Email))
        .add(like(contacts::Column::PhoneNumber))
}

/// The contacts a new campaign needs: those having any of `tags` (oldest first: the order
/// their recipients take), and by number those of `numbers` (to render explicit recipients and
/// skip opted-out ones). Tags are not loaded. At most `tagged_limit` tagged contacts are read:
/// past the campaign limit the request fails anyway.
#[tracing::instrument(skip_all)]
pub async fn for_campaign(
    db: &DatabaseConnection,
    scope: Scope,
    numbers: &[String],
    tags: &[String],
    tagged_limit: u64,
) -> Result<(Vec<Contact>, HashMap<String, Contact>), StoreError> {
    let mut tagged = Vec::new();
    if !tags.is_empty() {
        let having_tag = contact_tags::Entity::find()
            .select_only()
            .column(contact_tags::Column::ContactId)
            .filter(scope.of::<contact_tags::Entity>())
            .filter(contact_tags::Column::Tag.is_in(tags.iter().cloned()))
            .into_query();
        tagged = contacts::Entity::find()
            .filter(scope.of::<contacts::Entity>())
            .filter(contacts::Column::Id.in_subquery(having_tag))
            .order_by_asc(contacts::Column::CreatedAt)
            .order_by_asc(contacts::Column::Id)
            .limit(tagged_limit)
            .all(db)
            .await?
            .into_iter()
            .map(|m| Contact::from_row(m, Vec::new()))
            .collect();
    }
    let mut by_number = HashMap::new();
    for chunk in numbers.chunks(IDS_PER_LOOKUP) {
        let rows = contacts::Entity::find()
            .filter(scope.of::<contacts::Entity>())
            .filter(contacts::Column::PhoneNumber.is_in(chunk.iter().cloned()))
            .all(db)
            .await?;
        for row in rows {
            let contact = Contact::from_row(row, Vec::new());
            by_number.insert(contact.phone_number.clone(), contact);
        }
    }
    Ok((tagged, by_number))
}
