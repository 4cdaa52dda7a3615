//! The client API's settings (docs/compat.md, Settings): `GET`, `PUT` (replace) and `PATCH`
//! (merge) of one snake_case document per workspace and mode. `webhooks.signing_key` (the key
//! SMSGate-format webhooks are signed with) and `encryption.passphrase` are stored sealed and
//! never shown.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde_json::Value;

use super::auth::Caller;
use super::error::ClientError;
use super::wire;
use crate::api::AppState;
use crate::api::webhooks::WebhookApi;
use crate::domain::client_settings::SettingsBody;
use crate::store::settings::{self, StoredSettings};

/// Largest request body, in bytes: every known field fits many times over.
const MAX_BODY_BYTES: usize = 16 * 1024;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/settings", web::get().to(get))
        .route("/settings", web::put().to(put))
        .route("/settings", web::patch().to(patch));
}

/// The public view: the document without its secrets (they are never in it).
fn public(settings: StoredSettings) -> HttpResponse {
    wire::json(StatusCode::OK, Value::Object(settings.document))
}

/// The settings of the caller's workspace and mode (`{}` when none were set).
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn get(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ClientError> {
    let stored = settings::get(&state.db, caller.scope())
        .await
        .map_err(ClientError::from)?;
    Ok(public(stored))
}

async fn write(
    state: &AppState,
    api: &WebhookApi,
    caller: &Caller,
    body: &[u8],
    replace: bool,
) -> Result<HttpResponse, ClientError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ClientError::bad_request(
            "the request body is larger than 16 KiB",
        ));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ClientError::bad_request(format!("invalid JSON body: {e}")))?;
    let body = SettingsBody::parse(&value).map_err(|e| ClientError::bad_request(e.0))?;
    let stored = settings::apply(
        &state.db,
        caller.scope(),
        &body,
        replace,
        &api.secrets,
        state.clock.now_ms(),
    )
    .await
    .map_err(ClientError::from)?;
    Ok(public(stored))
}

/// Replaces the settings; a secret left out is kept.
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn put(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ClientError> {
    write(&state, &api, &caller, &body, true).await
}

/// Merges into the settings: given fields replace, `null` removes.
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn patch(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ClientError> {
    write(&state, &api, &caller, &body, false).await
}
