//! Contacts: CRUD, cursor-paged listing with tag and opt-out filters, bulk import (upsert by
//! phone number), and the opt-out keywords applied inside the writer's inbound transaction.

use std::collections::{BTreeMap, HashMap};

use entity::{contact_tags, contacts};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, QueryTrait, Set,
};
use uuid::Uuid;

use super::StoreError;
use super::messages::{Position, Scope};
use crate::domain::keywords::Keyword;
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
    pub id: Uuid,
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
            id: m.id,
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

fn in_scope(scope: Scope) -> Condition {
    Condition::all()
        .add(contacts::Column::WorkspaceId.eq(scope.workspace_id))
        .add(contacts::Column::TestMode.eq(scope.mode.is_test()))
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
    let txn = super::begin_write(db).await?;
    super::quotas::lock_workspace(&txn, scope.workspace_id).await?;
    let stored = contacts::Entity::find().filter(in_scope(scope));
    super::quotas::ensure_room(&txn, quota, stored, 1).await?;
    let model = contacts::ActiveModel {
        id: Set(id),
        workspace_id: Set(scope.workspace_id.as_uuid()),
        test_mode: Set(scope.mode.is_test()),
        phone_number: Set(fields.phone_number),
        first_name: Set(fields.first_name),
        last_name: Set(fields.last_name),
        email: Set(fields.email),
        custom_fields: Set(encode_fields(&fields.custom_fields.unwrap_or_default())),
        opted_out: Set(false),
        opted_out_at: Set(None),
        ai_replies: Set(true),
        created_at: Set(now_ms),
        updated_at: Set(now_ms),
    }
    .insert(&txn)
    .await?;
    let mut tags = fields.tags.unwrap_or_default();
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
) -> Result<Option<Uuid>, StoreError> {
    Ok(contacts::Entity::find()
        .select_only()
        .column(contacts::Column::Id)
        .filter(in_scope(scope))
        .filter(contacts::Column::PhoneNumber.eq(phone_number))
        .into_tuple()
        .one(db)
        .await?)
}

/// One contact of this scope.
#[tracing::instrument(skip_all, fields(contact_id = %id))]
pub async fn get(db: &DatabaseConnection, scope: Scope, id: Uuid) -> Result<Contact, StoreError> {
    let model = contacts::Entity::find_by_id(id)
        .filter(in_scope(scope))
        .one(db)
        .await?
        .ok_or(StoreError::NotFound)?;
    let tags = tags_of(db, &[id]).await?.remove(&id).unwrap_or_default();
    Ok(Contact::from_row(model, tags))
}

/// Applies a PATCH; `Conflict` when the new number belongs to another contact.
#[tracing::instrument(skip_all, fields(contact_id = %id))]
pub async fn update(
    db: &DatabaseConnection,
    scope: Scope,
    id: Uuid,
    patch: ContactPatch,
    now_ms: i64,
) -> Result<Contact, StoreError> {
    let txn = super::begin_write(db).await?;
    let model = contacts::Entity::find_by_id(id)
        .filter(in_scope(scope))
        .one(&txn)
        .await?
        .ok_or(StoreError::NotFound)?;
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
pub async fn delete(db: &DatabaseConnection, scope: Scope, id: Uuid) -> Result<(), StoreError> {
    let txn = super::begin_write(db).await?;
    let result = contacts::Entity::delete_many()
        .filter(contacts::Column::Id.eq(id))
        .filter(in_scope(scope))
        .exec(&txn)
        .await?;
    if result.rows_affected == 0 {
        return Err(StoreError::NotFound);
    }
    delete_tags(&txn, &[id]).await?;
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
    let mut condition = in_scope(scope);
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
            .filter(contact_tags::Column::WorkspaceId.eq(scope.workspace_id))
            .filter(contact_tags::Column::TestMode.eq(scope.mode.is_test()))
            .filter(contact_tags::Column::Tag.eq(tag.as_str()))
            .into_query();
        condition = condition.add(contacts::Column::Id.in_subquery(tagged));
    }
    let (rows, has_more) = super::newest_first(
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

/// What an import of `numbers` would do, writing nothing: the numbers that already have a
/// contact. `QuotaExceeded` when the new ones would not fit, the check [`import`] makes.
#[tracing::instrument(skip_all, fields(contacts = numbers.len()))]
pub async fn plan_import(
    db: &DatabaseConnection,
    scope: Scope,
    numbers: &[&str],
    quota: CountQuota,
) -> Result<std::collections::HashSet<String>, StoreError> {
    use sea_orm::TransactionTrait;
    // A read transaction: the existing numbers and the quota count see one snapshot.
    let txn = db.begin().await?;
    let mut existing = std::collections::HashSet::with_capacity(numbers.len());
    for chunk in numbers.chunks(IDS_PER_LOOKUP) {
        let rows: Vec<String> = contacts::Entity::find()
            .select_only()
            .column(contacts::Column::PhoneNumber)
            .filter(in_scope(scope))
            .filter(contacts::Column::PhoneNumber.is_in(chunk.iter().copied()))
            .into_tuple()
            .all(&txn)
            .await?;
        existing.extend(rows);
    }
    let adding = numbers.len().saturating_sub(existing.len()) as u64;
    let stored = contacts::Entity::find().filter(in_scope(scope));
    super::quotas::ensure_room(&txn, quota, stored, adding).await?;
    txn.rollback().await?;
    Ok(existing)
}

/// Upserts contacts by phone number in one transaction with multi-row statements. A field an
/// item leaves out keeps its stored value on an existing contact; given tags replace the
/// contact's tags. Numbers must be distinct (the API checks). `QuotaExceeded`, with nothing
/// written, when the new contacts would take the scope past `quota`.
#[tracing::instrument(skip_all, fields(contacts = items.len()))]
pub async fn import(
    db: &DatabaseConnection,
    scope: Scope,
    items: Vec<ContactFields>,
    quota: CountQuota,
    now_ms: i64,
) -> Result<ImportOutcome, StoreError> {
    let txn = super::begin_write(db).await?;
    super::quotas::lock_workspace(&txn, scope.workspace_id).await?;
    let mut existing: HashMap<String, contacts::Model> = HashMap::with_capacity(items.len());
    let numbers: Vec<&str> = items.iter().map(|i| i.phone_number.as_str()).collect();
    for chunk in numbers.chunks(IDS_PER_LOOKUP) {
        let rows = contacts::Entity::find()
            .filter(in_scope(scope))
            .filter(contacts::Column::PhoneNumber.is_in(chunk.iter().copied()))
            .all(&txn)
            .await?;
        existing.extend(rows.into_iter().map(|r| (r.phone_number.clone(), r)));
    }
    let adding = items.len().saturating_sub(existing.len()) as u64;
    let stored = contacts::Entity::find().filter(in_scope(scope));
    super::quotas::ensure_room(&txn, quota, stored, adding).await?;
    let mut rows = Vec::with_capacity(items.len());
    // Per item: the id it will have when it is new (None for an existing contact), and its tags.
    let mut planned: HashMap<String, (Option<Uuid>, Option<Vec<String>>)> =
        HashMap::with_capacity(items.len());
    for item in items {
        let row = match existing.remove(&item.phone_number) {
            Some(old) => {
                planned.insert(old.phone_number.clone(), (None, item.tags));
                contacts::ActiveModel {
                    id: Set(old.id),
                    workspace_id: Set(old.workspace_id),
                    test_mode: Set(old.test_mode),
                    phone_number: Set(old.phone_number),
                    first_name: Set(item.first_name.or(old.first_name)),
                    last_name: Set(item.last_name.or(old.last_name)),
                    email: Set(item.email.or(old.email)),
                    custom_fields: Set(item
                        .custom_fields
                        .as_ref()
                        .map(encode_fields)
                        .unwrap_or(old.custom_fields)),
                    opted_out: Set(old.opted_out),
                    opted_out_at: Set(old.opted_out_at),
                    ai_replies: Set(old.ai_replies),
                    created_at: Set(old.created_at),
                    updated_at: Set(now_ms),
                }
            }
            None => {
                let id = Uuid::now_v7();
                planned.insert(item.phone_number.clone(), (Some(id), item.tags));
                contacts::ActiveModel {
                    id: Set(id),
                    workspace_id: Set(scope.workspace_id.as_uuid()),
                    test_mode: Set(scope.mode.is_test()),
                    phone_number: Set(item.phone_number),
                    first_name: Set(item.first_name),
                    last_name: Set(item.last_name),
                    email: Set(item.email),
                    custom_fields: Set(encode_fields(&item.custom_fields.unwrap_or_default())),
                    opted_out: Set(false),
                    opted_out_at: Set(None),
                    ai_replies: Set(true),
                    created_at: Set(now_ms),
                    updated_at: Set(now_ms),
                }
            }
        };
        rows.push(row);
    }
    // Existing rows conflict on the number and take the merged values; new rows insert. The
    // returned ids are the truth: a contact created concurrently (an inbound STOP) since the
    // read above is updated, not duplicated, and counted as updated.
    let mut on_conflict = conflict_target();
    on_conflict.update_columns([
        contacts::Column::FirstName,
        contacts::Column::LastName,
        contacts::Column::Email,
        contacts::Column::CustomFields,
        contacts::Column::UpdatedAt,
    ]);
    let mut outcome = ImportOutcome {
        created: 0,
        updated: 0,
    };
    let mut retagged = Vec::new();
    let mut new_tags = Vec::new();
    for chunk in rows.chunks(CONTACT_ROWS_PER_STATEMENT) {
        let stored = contacts::Entity::insert_many(chunk.to_vec())
            .on_conflict(on_conflict.clone())
            .exec_with_returning(&txn)
            .await?;
        for row in stored {
            let Some((new_id, tags)) = planned.remove(&row.phone_number) else {
                continue;
            };
            if new_id == Some(row.id) {
                outcome.created += 1;
            } else {
                outcome.updated += 1;
            }
            if let Some(tags) = tags {
                retagged.push(row.id);
                new_tags.extend(tag_rows(scope, row.id, &tags));
            }
        }
    }
    delete_tags(&txn, &retagged).await?;
    insert_tags(&txn, new_tags).await?;
    txn.commit().await?;
    Ok(outcome)
}

/// Applies an opt-out keyword from `phone_number` inside the caller's transaction (the
/// writer's inbound batch): the contact is created when missing.
pub async fn apply_keyword<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    phone_number: &str,
    keyword: Keyword,
    now_ms: i64,
) -> Result<(), StoreError> {
    let (opted_out, ai_replies) = match keyword {
        Keyword::OptOut => (true, true),
        Keyword::OptIn => (false, true),
        Keyword::StopAi => (false, false),
    };
    let row = contacts::ActiveModel {
        id: Set(Uuid::now_v7()),
        workspace_id: Set(scope.workspace_id.as_uuid()),
        test_mode: Set(scope.mode.is_test()),
        phone_number: Set(phone_number.to_string()),
        first_name: Set(None),
        last_name: Set(None),
        email: Set(None),
        custom_fields: Set("{}".into()),
        opted_out: Set(opted_out),
        opted_out_at: Set(opted_out.then_some(now_ms)),
        ai_replies: Set(ai_replies),
        created_at: Set(now_ms),
        updated_at: Set(now_ms),
    };
    let mut on_conflict = conflict_target();
    match keyword {
        Keyword::OptOut => {
            // A repeated STOP keeps the time of the first one.
            on_conflict.update_column(contacts::Column::OptedOut).value(
                contacts::Column::OptedOutAt,
                Expr::cust("COALESCE(contacts.opted_out_at, excluded.opted_out_at)"),
            );
        }
        Keyword::OptIn => {
            on_conflict.update_columns([contacts::Column::OptedOut, contacts::Column::OptedOutAt]);
        }
        Keyword::StopAi => {
            on_conflict.update_column(contacts::Column::AiReplies);
        }
    }
    on_conflict.update_column(contacts::Column::UpdatedAt);
    contacts::Entity::insert(row)
        .on_conflict(on_conflict)
        .exec_without_returning(conn)
        .await?;
    Ok(())
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
            .filter(contact_tags::Column::WorkspaceId.eq(scope.workspace_id))
            .filter(contact_tags::Column::TestMode.eq(scope.mode.is_test()))
            .filter(contact_tags::Column::Tag.is_in(tags.iter().cloned()))
            .into_query();
        tagged = contacts::Entity::find()
            .filter(in_scope(scope))
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
            .filter(in_scope(scope))
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

/// Which of `numbers` belong to opted-out contacts of this scope (inside a transaction: a
/// campaign checks again as it queues each recipient).
pub async fn opted_out_among<C: ConnectionTrait>(
    conn: &C,
    scope: Scope,
    numbers: &[String],
) -> Result<std::collections::HashSet<String>, StoreError> {
    let mut out = std::collections::HashSet::new();
    for chunk in numbers.chunks(IDS_PER_LOOKUP) {
        let rows: Vec<String> = contacts::Entity::find()
            .select_only()
            .column(contacts::Column::PhoneNumber)
            .filter(in_scope(scope))
            .filter(contacts::Column::OptedOut.eq(true))
            .filter(contacts::Column::PhoneNumber.is_in(chunk.iter().cloned()))
            .into_tuple()
            .all(conn)
            .await?;
        out.extend(rows);
    }
    Ok(out)
}

/// Whether AI replies may go to this number: its contact (if any) has `ai_replies` on and has
/// not opted out (an opted-out number gets no text at all, drafted or not).
pub async fn ai_replies_to(
    db: &DatabaseConnection,
    scope: Scope,
    phone_number: &str,
) -> Result<bool, StoreError> {
    let key = ContactKey {
        scope,
        phone_number: phone_number.to_string(),
    };
    Ok(consent(db, &key).await?.allows_ai_replies())
}

/// What a contact lets the workspace send it. A number without a contact allows everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consent {
    /// False once it texted STOP (or was opted out by hand): no text of any kind.
    pub texts: bool,
    /// False once it texted STOP AI (or `ai_replies` was turned off): no AI reply.
    pub ai_replies: bool,
}

impl Consent {
    /// A number without a contact, or a contact that restricts nothing.
    pub const ALL: Consent = Consent {
        texts: true,
        ai_replies: true,
    };

    /// Whether an AI reply (a draft or an auto reply) may go to it.
    pub fn allows_ai_replies(self) -> bool {
        self.texts && self.ai_replies
    }
}

/// A contact's number in one scope: the key of [`restrictions`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContactKey {
    pub scope: Scope,
    pub phone_number: String,
}

/// The numbers among `keys` whose contact restricts something (opted out, or AI replies off),
/// with what they allow; a number not in the answer allows everything. One indexed lookup
/// (`uq_contacts_number`) per scope and 512 numbers, the number list padded to a power of two so
/// the statement comes in a few shapes (see [`super::id_list`]). Used by the writer inside its
/// transaction, once per batch of sends.
pub async fn restrictions<C: ConnectionTrait>(
    conn: &C,
    keys: &[ContactKey],
) -> Result<HashMap<ContactKey, Consent>, StoreError> {
    let mut by_scope: HashMap<Scope, Vec<&str>> = HashMap::new();
    for key in keys {
        by_scope
            .entry(key.scope)
            .or_default()
            .push(key.phone_number.as_str());
    }
    let mut found = HashMap::new();
    for (scope, mut numbers) in by_scope {
        numbers.sort_unstable();
        numbers.dedup();
        for chunk in numbers.chunks(super::IDS_PER_STATEMENT) {
            let mut padded = chunk.to_vec();
            if let Some(&first) = chunk.first() {
                padded.resize(chunk.len().next_power_of_two(), first);
            }
            let rows: Vec<(String, bool, bool)> = contacts::Entity::find()
                .select_only()
                .column(contacts::Column::PhoneNumber)
                .column(contacts::Column::OptedOut)
                .column(contacts::Column::AiReplies)
                .filter(in_scope(scope))
                .filter(contacts::Column::PhoneNumber.is_in(padded))
                .filter(
                    Condition::any()
                        .add(contacts::Column::OptedOut.eq(true))
                        .add(contacts::Column::AiReplies.eq(false)),
                )
                .into_tuple()
                .all(conn)
                .await?;
            for (phone_number, opted_out, ai_replies) in rows {
                found.insert(
                    ContactKey {
                        scope,
                        phone_number,
                    },
                    Consent {
                        texts: !opted_out,
                        ai_replies,
                    },
                );
            }
        }
    }
    Ok(found)
}

/// What the contact of `key` allows now ([`Consent::ALL`] without a contact).
pub async fn consent<C: ConnectionTrait>(
    conn: &C,
    key: &ContactKey,
) -> Result<Consent, StoreError> {
    let found: Option<(bool, bool)> = contacts::Entity::find()
        .select_only()
        .column(contacts::Column::OptedOut)
        .column(contacts::Column::AiReplies)
        .filter(in_scope(key.scope))
        .filter(contacts::Column::PhoneNumber.eq(key.phone_number.as_str()))
        .into_tuple()
        .one(conn)
        .await?;
    Ok(
        found.map_or(Consent::ALL, |(opted_out, ai_replies)| Consent {
            texts: !opted_out,
            ai_replies,
        }),
    )
}
