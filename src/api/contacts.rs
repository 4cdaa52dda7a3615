//! Contacts API (docs/api.md, Contacts): create, get, update, delete, list with `tag` / `opted_out`
//! filters, and bulk import upserting up to 10,000 contacts by phone number.

use crate::api::page::PageParams;
use std::collections::{BTreeMap, HashMap};

use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::body::present;
use super::envelope::envelope_of;
use super::fields::parse_number;
use super::idempotent::{Created, create_body, create_once};
use super::page::page_out;
use super::schemas::{DeletedEnvelope, deleted};
use super::{
    Answer, AppState, Caller, DocumentedRoute, JsonBody, PageRequest, QueryParams, missing,
    parse_id, required,
};
use crate::clock::format_ms;
use crate::domain::quota::Quota;
use crate::error::{ApiError, ErrorCode, success};
use crate::store::StoreError;
use crate::store::contacts::{self, Contact, ContactFields, ContactFilter, ContactPatch};

/// Most contacts of one import.
pub const MAX_IMPORT_CONTACTS: usize = 10_000;
/// Longest contact search (`q`), in characters.
const MAX_SEARCH_CHARS: usize = 64;
/// Longest first or last name.
const MAX_NAME_CHARS: usize = 120;
/// Longest email (RFC 5321 path limit).
const MAX_EMAIL_CHARS: usize = 254;
/// Most custom fields per contact, longest key and value.
const MAX_CUSTOM_FIELDS: usize = 50;
const MAX_CUSTOM_KEY_CHARS: usize = 64;
const MAX_CUSTOM_VALUE_CHARS: usize = 500;
/// Most tags per contact and longest tag.
const MAX_TAGS: usize = 50;
const MAX_TAG_CHARS: usize = 64;

/// The contact operations (route list, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_import>(|| web::to(import)).errors(&[
            ValidationFailed,
            InvalidPhoneNumber,
            QuotaExceeded,
        ]),
        DocumentedRoute::of::<__path_list>(|| web::to(list)).errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_create>(|| web::to(create)).errors(&[
            ValidationFailed,
            InvalidPhoneNumber,
            AlreadyExists,
            QuotaExceeded,
            DuplicateRequest,
        ]),
        DocumentedRoute::of::<__path_get>(|| web::to(get)),
        DocumentedRoute::of::<__path_update>(|| web::to(update)).errors(&[
            ValidationFailed,
            InvalidPhoneNumber,
            AlreadyExists,
        ]),
        DocumentedRoute::of::<__path_delete>(|| web::to(delete)),
    ]
}

/// Body of `POST /v1/contacts` and one item of an import.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ContactIn {
    /// E.164; one contact per number.
    #[schema(required = true, nullable = false)]
    pub phone_number: Option<String>,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub email: Option<String>,
    pub custom_fields: Option<BTreeMap<String, String>>,
    pub tags: Option<Vec<String>>,
    /// `POST /v1/contacts` only (ignored in an import item): idempotency key (1–255
    /// characters); a repeat answers 409 `duplicate_request` with the first contact's id in
    /// `data.id` (docs/api.md, "Idempotent creates").
    pub request_id: Option<String>,
}
create_body!(ContactIn => CreateContact, "contact");

/// What an import did, or with `dry_run` would do.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ImportOutcomeOut {
    pub created: u64,
    pub updated: u64,
    /// `dry_run=true` only: each item and what the import would do with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<ImportPlanItemOut>>,
}
envelope_of!(
    ImportOutcomeEnvelope,
    ImportOutcomeOut,
    "Counts of an import (and, for a dry run, its plan)."
);

/// What an import would do with one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ImportAction {
    Create,
    Update,
}

/// One item of a dry-run import.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ImportPlanItemOut {
    /// Its place in `contacts` (from 0).
    pub index: usize,
    pub phone_number: String,
    pub action: ImportAction,
}

/// Body of `PATCH /v1/contacts/{id}`: absent fields stay, `null` clears a nullable one.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UpdateContactIn {
    pub phone_number: Option<String>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub first_name: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub last_name: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub email: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub custom_fields: Option<Option<BTreeMap<String, String>>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub tags: Option<Option<Vec<String>>>,
    pub opted_out: Option<bool>,
    pub ai_replies: Option<bool>,
}

/// Body of `POST /v1/contacts/import`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ImportContactsIn {
    /// 1 to 10,000 contacts, distinct numbers.
    #[schema(required = true, nullable = false)]
    pub contacts: Option<Vec<ContactIn>>,
}

/// A contact (docs/api.md, Contacts).
#[derive(Serialize, ToSchema)]
pub struct ContactOut<'a> {
    pub id: Uuid,
    pub phone_number: &'a str,
    pub first_name: Option<&'a str>,
    pub last_name: Option<&'a str>,
    pub email: Option<&'a str>,
    /// String to string; `{}` when none.
    #[schema(value_type = BTreeMap<String, String>)]
    pub custom_fields: &'a BTreeMap<String, String>,
    /// Sorted; `[]` when none.
    #[schema(value_type = Vec<String>)]
    pub tags: &'a [String],
    /// Opted out by keyword (STOP, …) or by hand; campaigns skip the contact.
    pub opted_out: bool,
    #[schema(format = DateTime)]
    pub opted_out_at: Option<String>,
    /// False after STOP AI: no AI replies to this contact.
    pub ai_replies: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}
envelope_of!(ContactEnvelope, ContactOut<'static>, "One contact.");

page_out!(
    /// A page of contacts, newest first.
    ContactPage<'a>, contacts: ContactOut<'a>
);
envelope_of!(
    ContactPageEnvelope,
    ContactPage<'static>,
    "A page of contacts."
);

/// A contact as the API shows it.
pub fn contact_out(c: &Contact) -> ContactOut<'_> {
    ContactOut {
        id: c.id.as_uuid(),
        phone_number: &c.phone_number,
        first_name: c.first_name.as_deref(),
        last_name: c.last_name.as_deref(),
        email: c.email.as_deref(),
        custom_fields: &c.custom_fields,
        tags: &c.tags,
        opted_out: c.opted_out,
        opted_out_at: c.opted_out_at.map(format_ms),
        ai_replies: c.ai_replies,
        created_at: format_ms(c.created_at),
        updated_at: format_ms(c.updated_at),
    }
}

fn name(value: Option<String>, field: String) -> Result<Option<String>, ApiError> {
    match value {
        Some(v) if v.chars().count() > MAX_NAME_CHARS => Err(ApiError::validation(
            &field,
            format!("{field} must be at most {MAX_NAME_CHARS} characters"),
        )),
        other => Ok(other),
    }
}

fn email(value: Option<String>, field: String) -> Result<Option<String>, ApiError> {
    match value {
        Some(v)
            if v.chars().count() > MAX_EMAIL_CHARS
                || !email_address::EmailAddress::is_valid(&v) =>
        {
            Err(ApiError::validation(
                &field,
                format!("{field} is not a valid email address"),
            ))
        }
        other => Ok(other),
    }
}

fn custom_fields(
    value: BTreeMap<String, String>,
    field: String,
) -> Result<BTreeMap<String, String>, ApiError> {
    if value.len() > MAX_CUSTOM_FIELDS {
        return Err(ApiError::validation(
            &field,
            format!("{field} may have at most {MAX_CUSTOM_FIELDS} entries"),
        ));
    }
    for (key, text) in &value {
        let key_chars = key.chars().count();
        if key_chars == 0 || key_chars > MAX_CUSTOM_KEY_CHARS {
            return Err(ApiError::validation(
                &field,
                format!("{field} keys must be 1 to {MAX_CUSTOM_KEY_CHARS} characters"),
            ));
        }
        if text.chars().count() > MAX_CUSTOM_VALUE_CHARS {
            let at = format!("{field}.{key}");
            return Err(ApiError::validation(
                &at,
                format!("{at} must be at most {MAX_CUSTOM_VALUE_CHARS} characters"),
            ));
        }
    }
    Ok(value)
}

fn tags(value: Vec<String>, field: String) -> Result<Vec<String>, ApiError> {
    if value.len() > MAX_TAGS {
        return Err(ApiError::validation(
            &field,
            format!("{field} may have at most {MAX_TAGS} tags"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(value.len());
    for (i, tag) in value.into_iter().enumerate() {
        let chars = tag.chars().count();
        if chars == 0 || chars > MAX_TAG_CHARS || tag.trim() != tag {
            let at = format!("{field}[{i}]");
            return Err(ApiError::validation(
                &at,
                format!("{at} must be 1 to {MAX_TAG_CHARS} characters without surrounding spaces"),
            ));
        }
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    Ok(out)
}

/// Validates a create body or import item; field names carry `prefix` (e.g. `contacts[3].`).
fn parse_contact(input: ContactIn, prefix: &str) -> Result<ContactFields, ApiError> {
    let field = |name: &str| format!("{prefix}{name}");
    let number_text = required(input.phone_number, &field("phone_number"))?;
    let phone_number = parse_number(&number_text, &field("phone_number"))?.into_string();
    Ok(ContactFields {
        phone_number,
        first_name: name(input.first_name, field("first_name"))?,
        last_name: name(input.last_name, field("last_name"))?,
        email: email(input.email, field("email"))?,
        custom_fields: input
            .custom_fields
            .map(|v| custom_fields(v, field("custom_fields")))
            .transpose()?,
        tags: input.tags.map(|v| tags(v, field("tags"))).transpose()?,
    })
}

async fn already_exists(state: &AppState, caller: &Caller, number: &str) -> ApiError {
    match contacts::find_id_by_number(&state.db, caller.scope(), number).await {
        Ok(Some(id)) => ApiError::AlreadyExists {
            what: "contact",
            id: id.as_uuid(),
        },
        Ok(None) => ApiError::internal("contact conflict without a contact"),
        Err(err) => err.into(),
    }
}

/// Creates a contact.
#[utoipa::path(
    post,
    path = "/v1/contacts",
    tag = "contacts",
    request_body = ContactIn,
    responses((status = 201, description = "The new contact.", body = ContactEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<ContactIn>,
) -> Answer {
    create_once(&state, &caller, body, create_contact).await
}

/// Creates a contact: the response and the contact's id.
async fn create_contact(state: &AppState, caller: &Caller, body: ContactIn) -> Created {
    let fields = parse_contact(body, "")?;
    let number = fields.phone_number.clone();
    let quota = state.settings.quotas.count(Quota::Contacts);
    let now = state.clock.now_ms();
    match contacts::create(&state.db, caller.scope(), fields, quota, now).await {
        Ok(contact) => {
            let response = success(
                StatusCode::CREATED,
                "contact created",
                contact_out(&contact),
            );
            Ok((response, contact.id.as_uuid()))
        }
        Err(StoreError::Conflict(_)) => Err(already_exists(state, caller, &number).await),
        Err(err) => Err(err.into()),
    }
}

/// Reads one contact.
#[utoipa::path(
    get,
    path = "/v1/contacts/{id}",
    tag = "contacts",
    params(("id" = Uuid, Path, description = "contact id")),
    responses((status = 200, description = "The contact.", body = ContactEnvelope))
)]
#[tracing::instrument(skip_all, fields(contact_id = %path))]
async fn get(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let contact: Contact = state.find(&caller, &path).await?;
    Ok(success(StatusCode::OK, "contact", contact_out(&contact)))
}

/// Changes a contact: absent fields stay, null clears.
#[utoipa::path(
    patch,
    path = "/v1/contacts/{id}",
    tag = "contacts",
    params(("id" = Uuid, Path, description = "contact id")),
    request_body = UpdateContactIn,
    responses((status = 200, description = "The updated contact.", body = ContactEnvelope))
)]
#[tracing::instrument(skip_all, fields(contact_id = %path))]
async fn update(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    JsonBody(body): JsonBody<UpdateContactIn>,
) -> Answer {
    let id = parse_id(&path, "contact")?;
    let phone_number = body
        .phone_number
        .map(|n| parse_number(&n, "phone_number").map(|n| n.into_string()))
        .transpose()?;
    let patch = ContactPatch {
        phone_number: phone_number.clone(),
        first_name: body
            .first_name
            .map(|v| name(v, "first_name".into()))
            .transpose()?,
        last_name: body
            .last_name
            .map(|v| name(v, "last_name".into()))
            .transpose()?,
        email: body.email.map(|v| email(v, "email".into())).transpose()?,
        custom_fields: body
            .custom_fields
            .map(|v| custom_fields(v.unwrap_or_default(), "custom_fields".into()))
            .transpose()?,
        tags: body
            .tags
            .map(|v| tags(v.unwrap_or_default(), "tags".into()))
            .transpose()?,
        opted_out: body.opted_out,
        ai_replies: body.ai_replies,
    };
    match contacts::update(&state.db, caller.scope(), id, patch, state.clock.now_ms()).await {
        Ok(contact) => Ok(success(
            StatusCode::OK,
            "contact updated",
            contact_out(&contact),
        )),
        Err(StoreError::Conflict(_)) => {
            let number = phone_number.unwrap_or_default();
            Err(already_exists(&state, &caller, &number).await)
        }
        Err(err) => Err(missing("contact")(err)),
    }
}

/// Deletes a contact and its tags.
#[utoipa::path(
    delete,
    path = "/v1/contacts/{id}",
    tag = "contacts",
    params(("id" = Uuid, Path, description = "contact id")),
    responses((status = 200, description = "Deleted.", body = DeletedEnvelope))
)]
#[tracing::instrument(skip_all, fields(contact_id = %path))]
async fn delete(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let id = parse_id(&path, "contact")?;
    contacts::delete(&state.db, caller.scope(), id)
        .await
        .map_err(missing("contact"))?;
    Ok(deleted("contact deleted", id.as_uuid()))
}

/// Lists contacts, newest first, optionally by tag and opt-out state.
#[utoipa::path(
    get,
    path = "/v1/contacts",
    tag = "contacts",
    params(
        ("tag" = Option<String>, Query, description = "only contacts with this tag"),
        ("opted_out" = Option<bool>, Query, description = "true or false"),
        ("q" = Option<String>, Query, description = "words each found in the first or last name, email or number (case-insensitive), up to 64 characters"),
        PageParams,
    ),
    responses((status = 200, description = "A page of contacts.", body = ContactPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(state: web::Data<AppState>, caller: Caller, query: QueryParams) -> Answer {
    let page = PageRequest::parse(&query)?;
    let opted_out = query.flag("opted_out")?;
    let tag = match query.get("tag") {
        Some(t) if t.is_empty() => {
            return Err(ApiError::validation("tag", "tag must not be empty"));
        }
        other => other.cloned(),
    };
    let search = match query.get("q").map(|q| q.trim()) {
        Some(q) if q.chars().count() > MAX_SEARCH_CHARS => {
            return Err(ApiError::validation("q", "q must be at most 64 characters"));
        }
        Some(q) => q.split_whitespace().map(str::to_string).collect(),
        None => Vec::new(),
    };
    let filter = ContactFilter {
        tag,
        opted_out,
        search,
    };
    let rows = page
        .read(|after, limit| contacts::list(&state.db, caller.scope(), &filter, after, limit))
        .await?;
    Ok(rows.map(contact_out).answer::<ContactPage>("contacts"))
}

/// Upserts up to 10,000 contacts by phone number, atomically.
#[utoipa::path(
    post,
    path = "/v1/contacts/import",
    tag = "contacts",
    request_body = ImportContactsIn,
    params(("dry_run" = Option<bool>, Query, description = "true: answer what the import would do, with `items`, and write nothing")),
    responses((status = 200, description = "How many were (or would be) created and updated.", body = ImportOutcomeEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn import(
    state: web::Data<AppState>,
    caller: Caller,
    query: QueryParams,
    JsonBody(body): JsonBody<ImportContactsIn>,
) -> Answer {
    let dry_run = query.flag("dry_run")?.unwrap_or(false);
    let items = required(body.contacts, "contacts")?;
    if items.is_empty() || items.len() > MAX_IMPORT_CONTACTS {
        return Err(ApiError::validation(
            "contacts",
            format!("contacts must have 1 to {MAX_IMPORT_CONTACTS} entries"),
        ));
    }
    let fields = super::off_worker(move || parse_import(items)).await?;
    if dry_run {
        let numbers: Vec<&str> = fields.iter().map(|f| f.phone_number.as_str()).collect();
        let quota = state.settings.quotas.count(Quota::Contacts);
        let existing = contacts::plan_import(&state.db, caller.scope(), &numbers, quota).await?;
        let items: Vec<ImportPlanItemOut> = fields
            .iter()
            .enumerate()
            .map(|(index, f)| ImportPlanItemOut {
                index,
                phone_number: f.phone_number.clone(),
                action: if existing.contains(&f.phone_number) {
                    ImportAction::Update
                } else {
                    ImportAction::Create
                },
            })
            .collect();
        let updated = items
            .iter()
            .filter(|i| i.action == ImportAction::Update)
            .count() as u64;
        let out = ImportOutcomeOut {
            created: items.len() as u64 - updated,
            updated,
            items: Some(items),
        };
        return Ok(success(StatusCode::OK, "dry run: nothing was written", out));
    }
    let outcome = crate::store::retry_busy(|| {
        contacts::import(
            &state.db,
            caller.scope(),
            fields.clone(),
            state.settings.quotas.count(Quota::Contacts),
            state.clock.now_ms(),
        )
    })
    .await?;
    let out = ImportOutcomeOut {
        created: outcome.created,
        updated: outcome.updated,
        items: None,
    };
    Ok(success(StatusCode::OK, "contacts imported", out))
}

/// Every contact of an import parsed, or the first error (a number given twice is one).
fn parse_import(items: Vec<ContactIn>) -> Result<Vec<ContactFields>, ApiError> {
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(items.len());
    let mut fields = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let parsed = parse_contact(item, &format!("contacts[{i}]."))?;
        if let Some(first) = seen.insert(parsed.phone_number.clone(), i) {
            let at = format!("contacts[{i}].phone_number");
            return Err(ApiError::validation(
                &at,
                format!("{at} repeats the number of contacts[{first}]"),
            ));
        }
        fields.push(parsed);
    }
    Ok(fields)
}
