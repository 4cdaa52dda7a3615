//! Webhooks API (docs/api.md, Webhooks): endpoints (create with a signing key shown once, list,
//! get, update, delete, rotate-key), the per-endpoint deliveries log, and manual retry.

use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use utoipa::ToSchema;

use super::idempotent::create_once;
use super::routes::DocumentedRoute;
use super::schemas::{
    DeletedEnvelope, DeliveryPageEnvelope, DeliveryRetryEnvelope, ErrorCode, WebhookEnvelope,
    WebhookPageEnvelope, WebhookWithKeyEnvelope,
};
use super::{AppState, Caller, JsonBody, PageRequest, missing, page_response, parse_id, required};
use crate::actors::webhook_endpoint::{EndpointChanged, EndpointDeleted};
use crate::actors::webhook_target::{self, SharedResolver, TargetError};
use crate::api::messages::parse_number;
use crate::clock::format_ms;
use crate::domain::quota::Quota;
use crate::domain::secrets::SecretBox;
use crate::domain::signing;
use crate::domain::webhook_event::{EventKind, is_event_kind};
use crate::error::{ApiError, success};
use crate::store::idempotency::Operation;
use crate::store::messages::Position;
use crate::store::webhooks::{
    self, AttemptRow, DeliveryState, EndpointChanges, EndpointRecord, NewEndpoint, Subscriptions,
};

/// Longest accepted endpoint URL, in bytes.
const MAX_URL_BYTES: usize = 2048;
/// Most phone numbers one endpoint may list.
const MAX_PHONE_NUMBERS: usize = 1000;

/// What the webhook handlers need beyond [`AppState`]: target resolution for the creation
/// check, and the subscription index the writer's commit hook reads.
pub struct WebhookApi {
    pub resolver: SharedResolver,
    pub subscriptions: std::sync::Arc<Subscriptions>,
    /// Seals new signing keys before they are stored (docs/api.md, "Secrets at rest").
    pub secrets: std::sync::Arc<SecretBox>,
}

/// The webhook operations (route list, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<__path_list>(|| web::to(list)).errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_create>(|| web::to(create)).errors(&[
            ValidationFailed,
            InvalidPhoneNumber,
            QuotaExceeded,
            DuplicateRequest,
        ]),
        DocumentedRoute::of::<__path_get>(|| web::to(get)),
        DocumentedRoute::of::<__path_update>(|| web::to(update))
            .errors(&[ValidationFailed, InvalidPhoneNumber]),
        DocumentedRoute::of::<__path_delete>(|| web::to(delete)),
        DocumentedRoute::of::<__path_rotate_key>(|| web::to(rotate_key)),
        DocumentedRoute::of::<__path_deliveries>(|| web::to(deliveries))
            .errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_retry>(|| web::to(retry)),
    ]
}

/// Body of `POST /v1/webhooks`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateWebhookIn {
    /// https URL whose host resolves to public addresses only.
    #[schema(required = true, nullable = false)]
    pub url: Option<String>,
    /// Event kinds: message.received, message.sent, message.delivered, message.failed,
    /// ai.draft.created.
    #[schema(required = true, nullable = false)]
    pub events: Option<Vec<String>>,
    /// E.164 numbers; only events of these phones are delivered. Absent or empty: every phone.
    pub phone_numbers: Option<Vec<String>>,
    /// Default true.
    pub enabled: Option<bool>,
    /// Idempotency key (1–255 characters): a repeat answers 409 `duplicate_request` with the
    /// first endpoint's id in `data.id` (docs/api.md, "Idempotent creates").
    pub request_id: Option<String>,
}

/// Body of `PATCH /v1/webhooks/{id}`; absent or null fields stay as they are.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UpdateWebhookIn {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    /// `[]`: every phone.
    pub phone_numbers: Option<Vec<String>>,
    /// False pauses deliveries (pending ones resume when enabled again).
    pub enabled: Option<bool>,
}

/// An endpoint as the API shows it (never the signing key, except where added once).
pub fn endpoint_out(e: &EndpointRecord) -> Value {
    json!({
        "id": e.id,
        "url": e.url,
        "events": e.events,
        "phone_numbers": e.phone_numbers,
        "enabled": e.enabled,
        "test_mode": e.mode.is_test(),
        "created_at": format_ms(e.created_at),
        "updated_at": format_ms(e.updated_at),
    })
}

/// An endpoint with its clear signing key, shown once (the store holds it sealed only).
fn with_key(e: &EndpointRecord, signing_key: String) -> Value {
    let mut out = endpoint_out(e);
    if let Some(obj) = out.as_object_mut() {
        obj.insert("signing_key".into(), Value::String(signing_key));
    }
    out
}

/// A new signing key for endpoint `id`: the clear key to show once, and its sealed form to store.
fn new_signing_key(api: &WebhookApi, id: Uuid) -> Result<(String, String), ApiError> {
    let clear = signing::generate_signing_key();
    let sealed = api
        .secrets
        .seal(&clear, id.as_bytes())
        .map_err(|e| ApiError::Internal(format!("signing key not sealed: {e}")))?;
    Ok((clear, sealed))
}

/// One attempt of the deliveries log.
pub fn attempt_out(a: &AttemptRow) -> Value {
    json!({
        "id": a.id,
        "delivery_id": a.delivery_id,
        "event": a.event,
        "event_id": a.event_id,
        "message_id": a.message_id,
        "attempt": a.attempt,
        "status_code": a.status_code,
        "error": a.error,
        "error_detail": a.error_detail,
        "duration_ms": a.duration_ms,
        "attempted_at": format_ms(a.attempted_at),
        "next_attempt_at": a.next_attempt_at.map(format_ms),
        "state": a.state,
    })
}

/// The static URL rules, then the DNS check (every address public) unless insecure targets
/// are allowed. No request is made to the target.
async fn parse_url(api: &WebhookApi, state: &AppState, url: &str) -> Result<String, ApiError> {
    let url = url.trim();
    if url.is_empty() {
        return Err(ApiError::validation("url", "url must not be empty"));
    }
    if url.len() > MAX_URL_BYTES {
        return Err(ApiError::validation(
            "url",
            "url must be at most 2048 bytes",
        ));
    }
    let allow_insecure = state.settings.webhooks.allow_insecure_targets;
    webhook_target::check_target(url, allow_insecure, api.resolver.as_ref())
        .await
        .map_err(|err| {
            let message = match &err {
                TargetError::Url(e) => format!("url is refused: {e}"),
                TargetError::Unresolvable => "url host does not resolve".to_string(),
                TargetError::Blocked(_) => {
                    "url host resolves to a private, loopback or internal address".to_string()
                }
            };
            ApiError::validation("url", message)
        })?;
    Ok(url.to_string())
}

fn parse_events(events: Vec<String>) -> Result<Vec<String>, ApiError> {
    if events.is_empty() {
        return Err(ApiError::validation(
            "events",
            format!("events must list at least one of {}", EventKind::list()),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(events.len());
    for (i, event) in events.into_iter().enumerate() {
        if !is_event_kind(&event) {
            return Err(ApiError::validation(
                format!("events[{i}]"),
                format!(
                    "unknown event kind {event:?}; known kinds: {}",
                    EventKind::list()
                ),
            ));
        }
        if !out.contains(&event) {
            out.push(event);
        }
    }
    Ok(out)
}

fn parse_phone_numbers(numbers: Vec<String>) -> Result<Vec<String>, ApiError> {
    if numbers.len() > MAX_PHONE_NUMBERS {
        return Err(ApiError::validation(
            "phone_numbers",
            "phone_numbers may list at most 1000 numbers",
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(numbers.len());
    for (i, text) in numbers.iter().enumerate() {
        let number = parse_number(text, &format!("phone_numbers[{i}]"))?.into_string();
        if !out.contains(&number) {
            out.push(number);
        }
    }
    Ok(out)
}

/// Creates a webhook endpoint; its signing key is shown only in this answer.
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    tag = "webhooks",
    request_body = CreateWebhookIn,
    responses((status = 201, description = "Created, with the signing key.", body = WebhookWithKeyEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn create(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    JsonBody(mut body): JsonBody<CreateWebhookIn>,
) -> Result<HttpResponse, ApiError> {
    let request_id = body.request_id.take();
    let operation = Operation::CreateWebhook;
    create_once(
        &state,
        &caller,
        operation,
        "endpoint",
        request_id,
        async || create_endpoint(&state, &api, &caller, body).await,
    )
    .await
}

/// Creates an endpoint: the response (with its signing key) and the endpoint's id.
async fn create_endpoint(
    state: &AppState,
    api: &WebhookApi,
    caller: &Caller,
    body: CreateWebhookIn,
) -> Result<(HttpResponse, Uuid), ApiError> {
    let url_text = required(body.url, "url")?;
    let events = required(body.events, "events")?;
    let events = parse_events(events)?;
    let phone_numbers = parse_phone_numbers(body.phone_numbers.unwrap_or_default())?;
    let url = parse_url(api, state, &url_text).await?;
    let id = Uuid::now_v7();
    let (signing_key, sealed_signing_key) = new_signing_key(api, id)?;
    let new = NewEndpoint {
        id,
        url,
        events,
        phone_numbers,
        enabled: body.enabled.unwrap_or(true),
        sealed_signing_key,
    };
    let quota = state.settings.quotas.count(Quota::WebhookEndpoints);
    let now = state.clock.now_ms();
    let endpoint = webhooks::create(&state.db, caller.scope(), new, quota, now).await?;
    api.subscriptions.upsert(&endpoint);
    // Other nodes of a cluster learn it through the registry (their subscription index).
    state.registry.do_send(EndpointChanged {
        endpoint_id: endpoint.id,
        retry: None,
    });
    let response = success(
        StatusCode::CREATED,
        "webhook endpoint created; the signing key is shown only now",
        with_key(&endpoint, signing_key),
    );
    Ok((response, id))
}

/// Lists webhook endpoints, newest first.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "webhooks",
    params(
        ("limit" = Option<u32>, Query, description = "1–100, default 25"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses((status = 200, description = "A page of webhook endpoints.", body = WebhookPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    let page = PageRequest::parse(&query)?;
    let (rows, has_more) =
        webhooks::list(&state.db, caller.scope(), page.after, page.limit).await?;
    let last = rows.last().map(|e| Position {
        created_at: e.created_at,
        id: e.id,
    });
    let items = rows.iter().map(endpoint_out).collect();
    Ok(page_response("webhooks", items, has_more, last))
}

/// Reads a webhook endpoint (never its key).
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = Uuid, Path, description = "webhook endpoint id")),
    responses((status = 200, description = "The webhook endpoint.", body = WebhookEnvelope))
)]
#[tracing::instrument(skip_all, fields(webhook_id = %path))]
async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "webhook")?;
    let endpoint = webhooks::get(&state.db, caller.scope(), id)
        .await
        .map_err(missing("webhook"))?;
    Ok(success(StatusCode::OK, "webhook", endpoint_out(&endpoint)))
}

/// Changes url, events, phone_numbers or enabled.
#[utoipa::path(
    patch,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = Uuid, Path, description = "webhook endpoint id")),
    request_body = UpdateWebhookIn,
    responses((status = 200, description = "The updated webhook endpoint.", body = WebhookEnvelope))
)]
#[tracing::instrument(skip_all, fields(webhook_id = %path))]
async fn update(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    path: web::Path<String>,
    JsonBody(body): JsonBody<UpdateWebhookIn>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "webhook")?;
    // Unknown ids are 404 before any field is judged.
    webhooks::get(&state.db, caller.scope(), id)
        .await
        .map_err(missing("webhook"))?;
    let events = body.events.map(parse_events).transpose()?;
    let phone_numbers = body.phone_numbers.map(parse_phone_numbers).transpose()?;
    let url = match body.url {
        Some(url) => Some(parse_url(&api, &state, &url).await?),
        None => None,
    };
    let changes = EndpointChanges {
        url,
        events,
        phone_numbers,
        enabled: body.enabled,
        sealed_signing_key: None,
    };
    let endpoint = webhooks::update(&state.db, caller.scope(), id, changes, state.clock.now_ms())
        .await
        .map_err(missing("webhook"))?;
    api.subscriptions.upsert(&endpoint);
    state.registry.do_send(EndpointChanged {
        endpoint_id: id,
        retry: None,
    });
    Ok(success(
        StatusCode::OK,
        "webhook endpoint updated",
        endpoint_out(&endpoint),
    ))
}

/// Deletes a webhook endpoint with its pending deliveries and log.
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = Uuid, Path, description = "webhook endpoint id")),
    responses((status = 200, description = "Deleted.", body = DeletedEnvelope))
)]
#[tracing::instrument(skip_all, fields(webhook_id = %path))]
async fn delete(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "webhook")?;
    webhooks::delete(&state.db, caller.scope(), id)
        .await
        .map_err(missing("webhook"))?;
    api.subscriptions.remove(id);
    state.registry.do_send(EndpointDeleted { endpoint_id: id });
    Ok(success(
        StatusCode::OK,
        "webhook endpoint deleted",
        json!({ "id": id }),
    ))
}

/// Replaces the signing key; the new one is shown only in this answer.
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/rotate-key",
    tag = "webhooks",
    params(("id" = Uuid, Path, description = "webhook endpoint id")),
    responses((status = 200, description = "The endpoint with its new signing key.", body = WebhookWithKeyEnvelope))
)]
#[tracing::instrument(skip_all, fields(webhook_id = %path))]
async fn rotate_key(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "webhook")?;
    let (signing_key, sealed_signing_key) = new_signing_key(&api, id)?;
    let changes = EndpointChanges {
        sealed_signing_key: Some(sealed_signing_key),
        ..EndpointChanges::default()
    };
    let endpoint = webhooks::update(&state.db, caller.scope(), id, changes, state.clock.now_ms())
        .await
        .map_err(missing("webhook"))?;
    state.registry.do_send(EndpointChanged {
        endpoint_id: id,
        retry: None,
    });
    Ok(success(
        StatusCode::OK,
        "signing key rotated; the new key is shown only now and signs every later attempt",
        with_key(&endpoint, signing_key),
    ))
}

/// The deliveries log: one row per attempt, newest first.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}/deliveries",
    tag = "webhooks",
    params(
        ("id" = Uuid, Path, description = "webhook endpoint id"),
        ("limit" = Option<u32>, Query, description = "1–100, default 25"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses((status = 200, description = "A page of attempts.", body = DeliveryPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(webhook_id = %path))]
async fn deliveries(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "webhook")?;
    webhooks::get(&state.db, caller.scope(), id)
        .await
        .map_err(missing("webhook"))?;
    let page = PageRequest::parse(&query)?;
    let (rows, has_more) = webhooks::list_attempts(&state.db, id, page.after, page.limit).await?;
    let last = rows.last().map(|a| Position {
        created_at: a.attempted_at,
        id: a.id,
    });
    let items = rows.iter().map(attempt_out).collect();
    Ok(page_response("deliveries", items, has_more, last))
}

/// Sends a delivery again now (same event_id).
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/deliveries/{delivery_id}/retry",
    tag = "webhooks",
    params(
        ("id" = Uuid, Path, description = "webhook endpoint id"),
        ("delivery_id" = Uuid, Path, description = "delivery id, or the id of one of its attempts"),
    ),
    responses((status = 202, description = "The delivery, due now.", body = DeliveryRetryEnvelope))
)]
#[tracing::instrument(skip_all, fields(webhook_id = %path.0))]
async fn retry(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path.0, "webhook")?;
    let delivery_id: Uuid = parse_id(&path.1, "delivery")?;
    webhooks::get(&state.db, caller.scope(), id)
        .await
        .map_err(missing("webhook"))?;
    let delivery = webhooks::retry_now(&state.db, id, delivery_id, state.clock.now_ms())
        .await
        .map_err(missing("delivery"))?;
    state.registry.do_send(EndpointChanged {
        endpoint_id: id,
        retry: Some(delivery.clone()),
    });
    Ok(success(
        StatusCode::ACCEPTED,
        "delivery scheduled for another attempt now",
        json!({
            "id": delivery.id,
            "event": delivery.event,
            "event_id": delivery.event_id,
            "message_id": delivery.message_id,
            "attempts": delivery.attempts,
            "state": DeliveryState::Pending.as_str(),
            "next_attempt_at": format_ms(delivery.next_attempt_at),
        }),
    ))
}
