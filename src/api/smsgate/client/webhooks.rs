//! The client API's webhooks (docs/compat.md, Webhooks): `POST /webhooks` (create, or replace
//! the one with the given id), `GET /webhooks`, `DELETE /webhooks/{id}`. Each is a webhook
//! endpoint of the `smsgate` format, riding the same endpoint actors, retries and attempt log
//! as `/v1` endpoints (and listed there too).

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::auth::Caller;
use super::error::ClientError;
use super::wire;
use crate::actors::webhook_endpoint::{EndpointChanged, EndpointDeleted};
use crate::api::AppState;
use crate::api::webhooks::{WebhookApi, check_url};
use crate::domain::ids::EndpointId;
use crate::domain::quota::Quota;
use crate::domain::signing;
use crate::domain::webhook_event::{SmsGateEvent, WebhookFormat};
use crate::store::StoreError;
use crate::store::scoped::Scope;
use crate::store::webhooks::{self, EndpointChanges, EndpointRecord, NewEndpoint};
use crate::store::{phones, settings};

/// Longest client-given webhook id, in characters (as upstream).
const MAX_ID_CHARS: usize = 36;
/// Largest request body, in bytes.
const MAX_BODY_BYTES: usize = 16 * 1024;
/// Most webhooks `GET /webhooks` lists (the endpoint quota keeps a scope well under it).
const MAX_LISTED: u64 = 1000;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/webhooks", web::get().to(list))
        .route("/webhooks", web::post().to(create))
        .route("/webhooks/{id}", web::delete().to(delete));
}

/// Body of `POST /webhooks`; other fields are ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WebhookIn {
    id: Option<String>,
    url: Option<String>,
    event: Option<String>,
    device_id: Option<String>,
}

/// A webhook as SMSGate clients read it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WebhookOut {
    id: String,
    device_id: Option<String>,
    url: String,
    event: String,
}

impl From<&EndpointRecord> for WebhookOut {
    fn from(e: &EndpointRecord) -> Self {
        WebhookOut {
            id: e.external_id.clone().unwrap_or_else(|| e.id.to_string()),
            device_id: e.device_id.clone(),
            url: e.url.clone(),
            event: e.events.first().cloned().unwrap_or_default(),
        }
    }
}

/// A checked `POST /webhooks` body.
struct Checked {
    id: Option<String>,
    url: String,
    event: SmsGateEvent,
    device_id: Option<String>,
    phone_numbers: Vec<String>,
}

async fn check(
    state: &AppState,
    api: &WebhookApi,
    scope: Scope,
    body: &[u8],
) -> Result<Checked, ClientError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ClientError::bad_request(
            "the request body is larger than 16 KiB",
        ));
    }
    let input: WebhookIn = serde_json::from_slice(body)
        .map_err(|e| ClientError::bad_request(format!("invalid JSON body: {e}")))?;
    let id = match input.id {
        None => None,
        Some(id) if id.is_empty() => None,
        Some(id) => {
            if id.chars().count() > MAX_ID_CHARS || id.chars().any(char::is_control) {
                return Err(ClientError::bad_request(
                    "id must be at most 36 characters without control characters",
                ));
            }
            Some(id)
        }
    };
    let event_name = input.event.unwrap_or_default();
    if event_name.is_empty() {
        return Err(ClientError::bad_request("event is required"));
    }
    let event: SmsGateEvent = event_name.parse().map_err(|_| {
        ClientError::bad_request(format!(
            "invalid event {event_name:?}; known events: {}",
            SmsGateEvent::list()
        ))
    })?;
    let (device_id, phone_numbers) = match input.device_id.filter(|d| !d.is_empty()) {
        None => (None, Vec::new()),
        Some(device_id) => {
            let unknown = || ClientError::bad_request(format!("unknown device {device_id:?}"));
            let phone_id = Uuid::parse_str(&device_id).map_err(|_| unknown())?;
            let phone = match phones::get(&state.db, scope, phone_id).await {
                Ok(phone) => phone,
                Err(StoreError::NotFound) => return Err(unknown()),
                Err(err) => return Err(err.into()),
            };
            (Some(device_id), vec![phone.phone_number])
        }
    };
    // The DNS check last: every cheaper refusal first.
    let url = input.url.unwrap_or_default();
    if url.trim().is_empty() {
        return Err(ClientError::bad_request("url is required"));
    }
    let url = check_url(api, state, &url)
        .await
        .map_err(ClientError::bad_request)?;
    Ok(Checked {
        id,
        url,
        event,
        device_id,
        phone_numbers,
    })
}

/// Creates a webhook, or replaces the one with the given `id`; 201 with the webhook.
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn create(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ClientError> {
    let scope = caller.scope();
    let checked = check(&state, &api, scope, &body).await?;
    let now = state.clock.now_ms();
    // The workspace's key signs every delivery; made now so the first one does not wait.
    settings::signing_key(&state.db, scope, &api.secrets, now)
        .await
        .map_err(ClientError::from)?;
    let existing = match &checked.id {
        Some(id) => webhooks::find_external(&state.db, scope, id)
            .await
            .map_err(ClientError::from)?,
        None => None,
    };
    let endpoint = match existing {
        Some(existing) => {
            let changes = EndpointChanges {
                url: Some(checked.url),
                events: Some(vec![checked.event.as_str().to_string()]),
                phone_numbers: Some(checked.phone_numbers),
                device_id: Some(checked.device_id),
                ..EndpointChanges::default()
            };
            webhooks::update(&state.db, scope, existing.id, changes, now)
                .await
                .map_err(ClientError::from)?
        }
        None => {
            let id = EndpointId::from(Uuid::now_v7());
            // Never used to sign (the workspace's key does), but every endpoint has one.
            let sealed_signing_key = api
                .secrets
                .seal(&signing::generate_signing_key(), id.as_uuid().as_bytes())
                .map_err(|e| ClientError::internal(format!("signing key not sealed: {e}")))?;
            let new = NewEndpoint {
                id,
                url: checked.url,
                events: vec![checked.event.as_str().to_string()],
                phone_numbers: checked.phone_numbers,
                enabled: true,
                sealed_signing_key,
                format: WebhookFormat::Smsgate,
                external_id: Some(checked.id.unwrap_or_else(|| id.to_string())),
                device_id: checked.device_id,
            };
            let quota = state.settings.quotas.count(Quota::WebhookEndpoints);
            match webhooks::create(&state.db, scope, new, quota, now).await {
                Ok(endpoint) => endpoint,
                Err(StoreError::QuotaExceeded(quota)) => {
                    return Err(ClientError::bad_request(format!(
                        "this workspace already has {} webhooks, the most it may have",
                        quota.limit
                    )));
                }
                Err(StoreError::Conflict(_)) => {
                    return Err(ClientError::conflict(
                        "a webhook with the same id was created at the same time",
                    ));
                }
                Err(err) => return Err(err.into()),
            }
        }
    };
    api.subscriptions.upsert(&endpoint);
    // Other nodes of a cluster learn it through the registry (their subscription index).
    api.endpoints.do_send(EndpointChanged {
        endpoint_id: endpoint.id,
        retry: None,
    });
    Ok(wire::json(StatusCode::CREATED, WebhookOut::from(&endpoint)))
}

/// Every webhook created through the client API in this workspace and mode.
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ClientError> {
    let rows = webhooks::list_format(
        &state.db,
        caller.scope(),
        WebhookFormat::Smsgate,
        MAX_LISTED,
    )
    .await
    .map_err(ClientError::from)?;
    let out: Vec<WebhookOut> = rows.iter().map(WebhookOut::from).collect();
    Ok(wire::json(StatusCode::OK, out))
}

/// Deletes a webhook with its pending deliveries and log; 204 whether or not it existed.
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn delete(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ClientError> {
    let scope = caller.scope();
    let found = webhooks::find_external(&state.db, scope, &path)
        .await
        .map_err(ClientError::from)?;
    if let Some(endpoint) = found {
        match webhooks::delete(&state.db, scope, endpoint.id).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(err) => return Err(err.into()),
        }
        api.subscriptions.remove(endpoint.id);
        api.endpoints.do_send(EndpointDeleted {
            endpoint_id: endpoint.id,
        });
    }
    Ok(HttpResponse::NoContent().finish())
}
