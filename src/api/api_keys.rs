//! API keys of the caller's workspace and mode: list, create (secret shown once), revoke
//! (in force at once in this process, and in every other within the key generation check;
//! docs/api.md, "API keys").

use crate::api::page::PageParams;

use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::envelope_of;
use super::page::page_out;
use super::routes::DocumentedRoute;
use super::schemas::ErrorCode;
use super::{Answer, AppState, Caller, PageRequest, missing, parse_id};
use crate::clock::format_ms;
use crate::domain::quota::Quota;
use crate::error::success;
use crate::store::workspaces::{self, KeyRecord, KeyToRevoke};

/// The key operations (route list, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_list>(|| web::to(list)).errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_create>(|| web::to(create)).errors(&[QuotaExceeded]),
        DocumentedRoute::of::<__path_revoke>(|| web::to(revoke)),
    ]
}

/// An API key as listed (never the secret nor its hash).
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ApiKeyOut<'a> {
    pub id: Uuid,
    /// `live` or `test`: the caller's own mode.
    pub mode: &'static str,
    /// The first 12 characters of the key (`sk_live_` and 4 more), to tell keys apart.
    pub prefix: &'a str,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When the key was revoked; null while it works.
    #[schema(format = DateTime)]
    pub revoked_at: Option<String>,
}
envelope_of!(ApiKeyEnvelope, ApiKeyOut<'static>, "One API key.");

/// A new API key with its secret, shown only at creation.
#[derive(Serialize, ToSchema)]
pub struct ApiKeyWithSecretOut<'a> {
    #[serde(flatten)]
    pub api_key: ApiKeyOut<'a>,
    /// `sk_live_…` / `sk_test_…`: the `x-api-key` value. Only its hash is stored.
    pub key: String,
}
envelope_of!(
    ApiKeyWithSecretEnvelope,
    ApiKeyWithSecretOut<'static>,
    "A new API key and its secret."
);

page_out!(
    /// A page of API keys, newest first.
    ApiKeyPage<'a>, keys: ApiKeyOut<'a>
);
envelope_of!(
    ApiKeyPageEnvelope,
    ApiKeyPage<'static>,
    "A page of API keys."
);

/// A key as the API shows it: never the secret nor its hash.
pub fn key_out(key: &KeyRecord) -> ApiKeyOut<'_> {
    ApiKeyOut {
        id: key.id,
        mode: key.mode.as_str(),
        prefix: &key.prefix,
        created_at: format_ms(key.created_at),
        revoked_at: key.revoked_at.map(format_ms),
    }
}

/// Lists the keys of the caller's workspace in the caller's mode, revoked ones included.
#[utoipa::path(
    get,
    path = "/v1/keys",
    tag = "keys",
    params(
        PageParams,
    ),
    responses((status = 200, description = "A page of API keys, newest first.", body = ApiKeyPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(state: web::Data<AppState>, caller: Caller, page: PageRequest) -> Answer {
    let rows = state
        .list_scoped(&caller, page, workspaces::list_keys)
        .await?;
    Ok(rows.map(key_out).answer::<ApiKeyPage>("keys"))
}

/// Issues one more key in the caller's mode; its secret is shown only in this answer.
#[utoipa::path(
    post,
    path = "/v1/keys",
    tag = "keys",
    responses((status = 201, description = "Created, with the secret.", body = ApiKeyWithSecretEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn create(state: web::Data<AppState>, caller: Caller) -> Answer {
    let issued = workspaces::create_key(
        &state.db,
        caller.workspace_id,
        caller.mode,
        state.settings.quotas.count(Quota::ApiKeys),
        state.clock.now_ms(),
    )
    .await?;
    let out = ApiKeyWithSecretOut {
        api_key: key_out(&issued.record),
        key: issued.secret,
    };
    Ok(success(
        StatusCode::CREATED,
        "API key created; the key is shown only now",
        out,
    ))
}

/// Revokes a key of the caller's workspace and mode (the calling key included); it is refused
/// from the next request on. Revoking a revoked key answers the same record again.
#[utoipa::path(
    delete,
    path = "/v1/keys/{id}",
    tag = "keys",
    params(("id" = Uuid, Path, description = "API key id")),
    responses((status = 200, description = "The revoked key.", body = ApiKeyEnvelope))
)]
#[tracing::instrument(skip_all, fields(key_id = %path))]
async fn revoke(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let id = parse_id(&path, "API key")?;
    let which = KeyToRevoke::Id {
        scope: caller.scope(),
        id,
    };
    let revoked = workspaces::revoke_key(&state.db, which, state.clock.now_ms())
        .await
        .map_err(missing("API key"))?;
    state.forget_keys();
    let message = if revoked.newly {
        "API key revoked"
    } else {
        "API key was already revoked"
    };
    Ok(success(StatusCode::OK, message, key_out(&revoked.record)))
}
