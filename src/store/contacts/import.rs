//! A bulk import of contacts: upserted by phone number in one transaction with multi-row
//! statements, counted against the contacts quota first.

use std::collections::HashMap;

use entity::contacts;
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QuerySelect, Set};
use uuid::Uuid;

use super::{
    CONTACT_ROWS_PER_STATEMENT, ContactFields, IDS_PER_LOOKUP, ImportOutcome, conflict_target,
    delete_tags, encode_fields, insert_tags, tag_rows,
};
use crate::domain::quota::CountQuota;
use crate::store::StoreError;
use crate::store::scoped::Scope;

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
            .filter(scope.of::<contacts::Entity>())
            .filter(contacts::Column::PhoneNumber.is_in(chunk.iter().copied()))
            .into_tuple()
            .all(&txn)
            .await?;
        existing.extend(rows);
    }
    let adding = numbers.len().saturating_sub(existing.len()) as u64;
    let stored = contacts::Entity::find().filter(scope.of::<contacts::Entity>());
    crate::store::quotas::ensure_room(&txn, quota, stored, adding).await?;
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
    let txn = crate::store::quotas::begin_locked(db, scope.workspace_id).await?;
    let mut existing: HashMap<String, contacts::Model> = HashMap::with_capacity(items.len());
    let numbers: Vec<&str> = items.iter().map(|i| i.phone_number.as_str()).collect();
    for chunk in numbers.chunks(IDS_PER_LOOKUP) {
        let rows = contacts::Entity::find()
            .filter(scope.of::<contacts::Entity>())
            .filter(contacts::Column::PhoneNumber.is_in(chunk.iter().copied()))
            .all(&txn)
            .await?;
        existing.extend(rows.into_iter().map(|r| (r.phone_number.clone(), r)));
    }
    let adding = items.len().saturating_sub(existing.len()) as u64;
    let stored = contacts::Entity::find().filter(scope.of::<contacts::Entity>());
    crate::store::quotas::ensure_room(&txn, quota, stored, adding).await?;
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
                let number = item.phone_number.clone();
                let (row, tags) = item.into_new_row(id, scope, now_ms);
                planned.insert(number, (Some(id), tags));
                row
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
