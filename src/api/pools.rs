//! Sender pools API (docs/api.md, "Pools"): named sets of phones (lines) a send names with
//! `from_pool` instead of `from_number`; create, list, read, rename or change lines, delete.

use std::collections::HashSet;

use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::envelope_of;
use super::page::{PageParams, page_out};
use super::schemas::{DeletedEnvelope, deleted};
use super::{Answer, AppState, Caller, DocumentedRoute, JsonBody, PageRequest, missing, parse_id};
use crate::clock::format_ms;
use crate::error::{ApiError, ErrorCode, success};
use crate::store::StoreError;
use crate::store::pools::{self, MAX_POOL_PHONES, PoolRecord};
use crate::store::scoped::Scope;

/// Longest pool name, in characters.
const MAX_NAME_CHARS: usize = 120;

/// The pool operations (route registry, see `super::endpoints`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_list>(|| web::to(list)).errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_create>(|| web::to(create))
            .errors(&[ValidationFailed, AlreadyExists]),
        DocumentedRoute::of::<__path_get>(|| web::to(get)),
        DocumentedRoute::of::<__path_update>(|| web::to(update))
            .errors(&[ValidationFailed, AlreadyExists]),
        DocumentedRoute::of::<__path_delete>(|| web::to(delete)),
    ]
}

/// Body of `POST /v1/pools`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreatePoolIn {
    /// 1–120 characters, unique in the workspace and mode, not a UUID (so `from_pool` names
    /// one pool either way).
    #[schema(required = true, nullable = false)]
    pub name: Option<String>,
    /// 1–100 distinct phones (lines) of the workspace and mode, in the order listed.
    #[schema(required = true, nullable = false)]
    pub phone_ids: Option<Vec<String>>,
}

/// Body of `PATCH /v1/pools/{id}`: what is given changes; `phone_ids` replaces the lines.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UpdatePoolIn {
    #[schema(nullable = false)]
    pub name: Option<String>,
    #[schema(nullable = false)]
    pub phone_ids: Option<Vec<String>>,
}

/// A sender pool.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct PoolOut {
    pub id: Uuid,
    pub name: String,
    /// Its phones (lines), in the order given.
    pub phone_ids: Vec<Uuid>,
    #[schema(format = DateTime)]
    pub created_at: String,
}
envelope_of!(PoolEnvelope, PoolOut, "One sender pool.");

page_out!(
    /// A page of sender pools.
    PoolPage, pools: PoolOut
);
envelope_of!(PoolPageEnvelope, PoolPage, "A page of sender pools.");

fn pool_out(pool: &PoolRecord) -> PoolOut {
    PoolOut {
        id: pool.id,
        name: pool.name.clone(),
        phone_ids: pool.phone_ids.clone(),
        created_at: format_ms(pool.created_at),
    }
}

/// A pool name: 1–120 characters, not blank, not a UUID.
fn parse_name(name: String) -> Result<String, ApiError> {
    let count = name.chars().count();
    if name.trim().is_empty() || count > MAX_NAME_CHARS {
        return Err(ApiError::validation(
            "name",
            "name must be 1 to 120 characters, not blank",
        ));
    }
    if Uuid::parse_str(&name).is_ok() {
        return Err(ApiError::validation(
            "name",
            "name must not be a UUID: from_pool takes a pool id or a name",
        ));
    }
    Ok(name)
}

/// The pool's lines: 1–[`MAX_POOL_PHONES`] distinct phones of the caller's scope; a refusal
/// names `phone_ids[i]`. Bounded work: one query for all of them.
async fn parse_phone_ids(
    state: &AppState,
    scope: Scope,
    ids: Vec<String>,
) -> Result<Vec<Uuid>, ApiError> {
    if ids.is_empty() || ids.len() > MAX_POOL_PHONES {
        return Err(ApiError::validation(
            "phone_ids",
            format!("phone_ids must hold 1 to {MAX_POOL_PHONES} phone ids"),
        ));
    }
    let not_a_phone = |i: usize| {
        ApiError::validation(
            format!("phone_ids[{i}]"),
            format!("phone_ids[{i}] must be a phone of this workspace and mode"),
        )
    };
    let mut parsed = Vec::with_capacity(ids.len());
    let mut seen = HashSet::new();
    for (i, id) in ids.iter().enumerate() {
        let id = Uuid::parse_str(id).map_err(|_| not_a_phone(i))?;
        if !seen.insert(id) {
            return Err(ApiError::validation(
                format!("phone_ids[{i}]"),
                format!("phone_ids[{i}] is listed twice"),
            ));
        }
        parsed.push(id);
    }
    let known = pools::phones_in_scope(&state.db, scope, &parsed).await?;
    if let Some(i) = parsed.iter().position(|id| !known.contains(id)) {
        return Err(not_a_phone(i));
    }
    Ok(parsed)
}

/// The 409 of a name another pool of the scope has, naming it in `data.id`.
async fn name_taken(state: &AppState, scope: Scope, name: &str) -> ApiError {
    match pools::by_name(&state.db, scope, name).await {
        Ok(existing) => ApiError::AlreadyExists {
            what: "pool with this name",
            id: existing.id,
        },
        Err(err) => ApiError::internal(err),
    }
}

/// Creates a sender pool.
#[utoipa::path(
    post,
    path = "/v1/pools",
    tag = "pools",
    request_body = CreatePoolIn,
    responses((status = 201, description = "Created.", body = PoolEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<CreatePoolIn>,
) -> Answer {
    let scope = caller.scope();
    let name = parse_name(super::required(body.name, "name")?)?;
    let ids = super::required(body.phone_ids, "phone_ids")?;
    let phone_ids = parse_phone_ids(&state, scope, ids).await?;
    let now = state.clock.now_ms();
    match pools::create(&state.db, scope, name.clone(), phone_ids, now).await {
        Ok(pool) => Ok(success(
            StatusCode::CREATED,
            "pool created",
            pool_out(&pool),
        )),
        Err(StoreError::Conflict(_)) => Err(name_taken(&state, scope, &name).await),
        Err(err) => Err(err.into()),
    }
}

/// Lists the sender pools, newest first, cursor paged.
#[utoipa::path(
    get,
    path = "/v1/pools",
    tag = "pools",
    params(PageParams),
    responses((status = 200, description = "A page of pools.", body = PoolPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(state: web::Data<AppState>, caller: Caller, page: PageRequest) -> Answer {
    let rows = state.list_scoped(&caller, page, pools::list).await?;
    Ok(rows.map(pool_out).answer::<PoolPage>("pools"))
}

/// One sender pool.
#[utoipa::path(
    get,
    path = "/v1/pools/{id}",
    tag = "pools",
    params(("id" = Uuid, Path, description = "pool id")),
    responses((status = 200, description = "The pool.", body = PoolEnvelope))
)]
#[tracing::instrument(skip_all, fields(pool_id = %path))]
async fn get(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let pool: PoolRecord = state.find(&caller, &path).await?;
    Ok(success(StatusCode::OK, "pool", pool_out(&pool)))
}

/// Renames a pool and/or replaces its lines (a recipient stuck to a line that left chooses
/// again).
#[utoipa::path(
    patch,
    path = "/v1/pools/{id}",
    tag = "pools",
    params(("id" = Uuid, Path, description = "pool id")),
    request_body = UpdatePoolIn,
    responses((status = 200, description = "The updated pool.", body = PoolEnvelope))
)]
#[tracing::instrument(skip_all, fields(pool_id = %path))]
async fn update(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    JsonBody(body): JsonBody<UpdatePoolIn>,
) -> Answer {
    let scope = caller.scope();
    let id = parse_id(&path, "pool")?;
    let name = body.name.map(parse_name).transpose()?;
    let phone_ids = match body.phone_ids {
        Some(ids) => Some(parse_phone_ids(&state, scope, ids).await?),
        None => None,
    };
    match pools::update(&state.db, scope, id, name.clone(), phone_ids).await {
        Ok(pool) => Ok(success(StatusCode::OK, "pool updated", pool_out(&pool))),
        Err(StoreError::Conflict(_)) => {
            Err(name_taken(&state, scope, name.as_deref().unwrap_or_default()).await)
        }
        Err(err) => Err(missing("pool")(err)),
    }
}

/// Deletes a pool; its messages keep their `pool_id` and their lines.
#[utoipa::path(
    delete,
    path = "/v1/pools/{id}",
    tag = "pools",
    params(("id" = Uuid, Path, description = "pool id")),
    responses((status = 200, description = "Deleted.", body = DeletedEnvelope))
)]
#[tracing::instrument(skip_all, fields(pool_id = %path))]
async fn delete(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let id = parse_id(&path, "pool")?;
    pools::delete(&state.db, caller.scope(), id)
        .await
        .map_err(missing("pool"))?;
    Ok(deleted("pool deleted", id))
}
