//! Webhooks API (docs/api.md, Webhooks): endpoints (create with a signing key shown once, list,
//! get, update, delete, rotate-key), the per-endpoint deliveries log, and manual retry.

use crate::api::page::PageParams;

use actix::Addr;
use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::envelope_of;
use super::fields::parse_number;
use super::idempotent::{Created, create_body, create_once};
use super::page::{Positioned, page_out};
use super::routes::DocumentedRoute;
use super::schemas::{DeletedEnvelope, ErrorCode, deleted};
use super::{
    Answer, AppState, Caller, JsonBody, PageRequest, QueryParams, missing, parse_id, required,
};
use crate::actors::webhook_endpoint::{EndpointChanged, EndpointDeleted, WebhookEndpoints};
use crate::clock::format_ms;
use crate::domain::ids::EndpointId;
use crate::domain::quota::Quota;
use crate::domain::secrets::SecretBox;
use crate::domain::signing;
use crate::domain::ssrf::UrlError;
use crate::domain::webhook_event::{EventKind, SmsGateEvent, WebhookFormat};
use crate::error::{ApiError, success};
use crate::outbound::target::{self as webhook_target, SharedResolver, TargetError};
use crate::store::messages::Position;
use crate::store::webhooks::{
    self, AttemptRow, DeliveryState, EndpointChanges, EndpointRecord, NewEndpoint, PendingDelivery,
    Subscriptions,
};

/// Longest accepted endpoint URL, in bytes.
const MAX_URL_BYTES: usize = 2048;
/// Most phone numbers one endpoint may list.
const MAX_PHONE_NUMBERS: usize = 1000;

/// What the webhook handlers need beyond [`AppState`]: target resolution for the creation
/// check, and the subscription index the writer's commit hook reads.
pub struct WebhookApi {
    /// The webhook endpoints' supervisor, told of every change.
    pub endpoints: Addr<WebhookEndpoints>,
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
    /// ai.draft.created, and the phone alerts phone.offline, phone.online, phone.low_battery,
    /// phone.stalled (docs/api.md, "Phone health").
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
create_body!(CreateWebhookIn => CreateWebhook, "endpoint");

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

/// A webhook endpoint (docs/api.md, Webhooks); the signing key is never shown here.
#[derive(Serialize, ToSchema)]
pub struct WebhookOut<'a> {
    pub id: Uuid,
    pub url: &'a str,
    /// Subscribed event kinds.
    #[schema(value_type = Vec<String>)]
    pub events: &'a [String],
    /// E.164 numbers the endpoint is limited to; empty: every phone.
    #[schema(value_type = Vec<String>)]
    pub phone_numbers: &'a [String],
    pub enabled: bool,
    /// The body format: `smsgw`, or `smsgate` for endpoints created through the client API
    /// compatible with the SMSGate clients (their `events` are SMSGate names, docs/compat.md).
    #[schema(example = "smsgw")]
    pub format: &'static str,
    pub test_mode: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}
envelope_of!(
    WebhookEnvelope,
    WebhookOut<'static>,
    "One webhook endpoint."
);

/// A webhook endpoint with its signing key, shown only at creation and rotation.
#[derive(Serialize, ToSchema)]
pub struct WebhookWithKeyOut<'a> {
    #[serde(flatten)]
    pub webhook: WebhookOut<'a>,
    /// `whsec_…`: keys `X-Signature` (whole string) and `webhook-signature` (base64 part).
    pub signing_key: String,
}
envelope_of!(
    WebhookWithKeyEnvelope,
    WebhookWithKeyOut<'static>,
    "A webhook endpoint and its signing key."
);

page_out!(
    /// A page of webhook endpoints.
    WebhookPage<'a>, webhooks: WebhookOut<'a>
);
envelope_of!(
    WebhookPageEnvelope,
    WebhookPage<'static>,
    "A page of webhook endpoints."
);

/// One delivery attempt of the deliveries log.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct DeliveryAttemptOut<'a> {
    /// The attempt's id.
    pub id: Uuid,
    pub delivery_id: Uuid,
    pub event: &'a str,
    pub event_id: Uuid,
    pub message_id: Uuid,
    /// From 1.
    pub attempt: u32,
    /// Null when no response arrived.
    pub status_code: Option<u16>,
    /// dns, connect, tls, timeout, blocked_address, redirect, http_status, message_deleted.
    pub error: Option<&'a str>,
    pub error_detail: Option<&'a str>,
    pub duration_ms: i64,
    #[schema(format = DateTime)]
    pub attempted_at: String,
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    /// The delivery's state after this attempt: pending, succeeded or failed.
    pub state: &'a str,
}

page_out!(
    /// A page of delivery attempts, newest first.
    DeliveryPage<'a>, deliveries: DeliveryAttemptOut<'a>
);
envelope_of!(
    DeliveryPageEnvelope,
    DeliveryPage<'static>,
    "A page of delivery attempts."
);

/// A delivery scheduled for another attempt.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct DeliveryRetryOut<'a> {
    pub id: Uuid,
    pub event: &'a str,
    pub event_id: Uuid,
    pub message_id: Uuid,
    /// Attempts made so far.
    pub attempts: u32,
    /// Always `pending`.
    pub state: &'static str,
    #[schema(format = DateTime)]
    pub next_attempt_at: String,
}
envelope_of!(
    DeliveryRetryEnvelope,
    DeliveryRetryOut<'static>,
    "The delivery, due now."
);

impl Positioned for AttemptRow {
    fn position(&self) -> Position {
        Position {
            created_at: self.attempted_at,
            id: self.id,
        }
    }
}

/// An endpoint as the API shows it (never the signing key, except where added once).
pub fn endpoint_out(e: &EndpointRecord) -> WebhookOut<'_> {
    WebhookOut {
        id: e.id.as_uuid(),
        url: &e.url,
        events: &e.events,
        phone_numbers: &e.phone_numbers,
        enabled: e.enabled,
        format: e.format.as_str(),
        test_mode: e.mode.is_test(),
        created_at: format_ms(e.created_at),
        updated_at: format_ms(e.updated_at),
    }
}

/// An endpoint with its clear signing key, shown once (the store holds it sealed only).
fn with_key(e: &EndpointRecord, signing_key: String) -> WebhookWithKeyOut<'_> {
    WebhookWithKeyOut {
        webhook: endpoint_out(e),
        signing_key,
    }
}

/// A new signing key for endpoint `id`: the clear key to show once, and its sealed form to store.
fn new_signing_key(api: &WebhookApi, id: EndpointId) -> Result<(String, String), ApiError> {
    let clear = signing::generate_signing_key();
    let sealed = api
        .secrets
        .seal(&clear, id.as_uuid().as_bytes())
        .map_err(|e| ApiError::internal_context("signing key not sealed", e))?;
    Ok((clear, sealed))
}

/// Puts a created or changed endpoint in this process's subscription index and announces it.
fn subscribe(api: &WebhookApi, endpoint: &EndpointRecord) {
    api.subscriptions.upsert(endpoint);
    announce(api, endpoint.id, None);
}

/// Tells the endpoint's actor (and, through the endpoints' supervisor, the other nodes of a
/// cluster and their subscription indexes) that the endpoint changed, or that `retry` is due now.
fn announce(api: &WebhookApi, endpoint_id: EndpointId, retry: Option<PendingDelivery>) {
    api.endpoints
        .do_send(EndpointChanged { endpoint_id, retry });
}

/// One attempt of the deliveries log.
pub fn attempt_out(a: &AttemptRow) -> DeliveryAttemptOut<'_> {
    DeliveryAttemptOut {
        id: a.id,
        delivery_id: a.delivery_id,
        event: &a.event,
        event_id: a.event_id,
        message_id: a.message_id,
        attempt: a.attempt,
        status_code: a.status_code,
        error: a.error.as_deref(),
        error_detail: a.error_detail.as_deref(),
        duration_ms: a.duration_ms,
        attempted_at: format_ms(a.attempted_at),
        next_attempt_at: a.next_attempt_at.map(format_ms),
        state: &a.state,
    }
}

/// Appended to the refusal of an `http://`, private or loopback target.
const INSECURE_TARGETS_HINT: &str =
    "(http:// and private or loopback targets need webhooks.allow_insecure_targets)";

/// The static URL rules, then the DNS check (every address public) unless insecure targets
/// are allowed. No request is made to the target.
async fn parse_url(api: &WebhookApi, state: &AppState, url: &str) -> Result<String, ApiError> {
    check_url(api, state, url)
        .await
        .map_err(|message| ApiError::validation("url", message))
}

/// [`parse_url`]'s rules with the refusal as plain text (the client API answers it as its own
/// 400, docs/compat.md, Webhooks).
pub(crate) async fn check_url(
    api: &WebhookApi,
    state: &AppState,
    url: &str,
) -> Result<String, String> {
    let url = url.trim();
    if url.is_empty() {
        return Err("url must not be empty".into());
    }
    if url.len() > MAX_URL_BYTES {
        return Err("url must be at most 2048 bytes".into());
    }
    let allow_insecure = state.settings.webhooks.allow_insecure_targets;
    webhook_target::check_target(url, allow_insecure, api.resolver.as_ref())
        .await
        .map_err(|err| {
            let (refusal, insecure) = match &err {
                TargetError::Url(e) => (
                    format!("url is refused: {e}"),
                    matches!(e, UrlError::SchemeNotAllowed | UrlError::BlockedAddress),
                ),
                TargetError::Unresolvable => ("url host does not resolve".to_string(), false),
                TargetError::Blocked(_) => (
                    "url host resolves to a private, loopback or internal address".to_string(),
                    true,
                ),
            };
            // Name the setting that would allow it (a development setting, docs/api.md).
            if insecure && !allow_insecure {
                format!("{refusal} {INSECURE_TARGETS_HINT}")
            } else {
                refusal
            }
        })?;
    Ok(url.to_string())
}

/// The events of an endpoint of `format`: at least one, each a name that format accepts (smsgw
/// kinds, or SMSGate names for an SMSGate-format endpoint changed through `/v1`), the first
/// mention of each kept.
fn parse_events(events: Vec<String>, format: WebhookFormat) -> Result<Vec<String>, ApiError> {
    let known = match format {
        WebhookFormat::Smsgw => EventKind::list(),
        WebhookFormat::Smsgate => SmsGateEvent::list(),
    };
    if events.is_empty() {
        return Err(ApiError::validation(
            "events",
            format!("events must list at least one of {known}"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(events.len());
    for (i, event) in events.into_iter().enumerate() {
        if !format.accepts(&event) {
            let message = match format {
                WebhookFormat::Smsgw => {
                    format!("unknown event kind {event:?}; known kinds: {known}")
                }
                WebhookFormat::Smsgate => format!(
                    "unknown event {event:?} for an smsgate-format endpoint; known events: {known}"
                ),
            };
            return Err(ApiError::validation(format!("events[{i}]"), message));
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
    JsonBody(body): JsonBody<CreateWebhookIn>,
) -> Answer {
    create_once(&state, &caller, body, async |state, caller, body| {
        create_endpoint(state, &api, caller, body).await
    })
    .await
}

/// Creates an endpoint: the response (with its signing key) and the endpoint's id.
async fn create_endpoint(
    state: &AppState,
    api: &WebhookApi,
    caller: &Caller,
    body: CreateWebhookIn,
) -> Created {
    let url_text = required(body.url, "url")?;
    let events = required(body.events, "events")?;
    let events = parse_events(events, WebhookFormat::Smsgw)?;
    let phone_numbers = parse_phone_numbers(body.phone_numbers.unwrap_or_default())?;
    let url = parse_url(api, state, &url_text).await?;
    let id = EndpointId::from(Uuid::now_v7());
    let (signing_key, sealed_signing_key) = new_signing_key(api, id)?;
    let new = NewEndpoint {
        id,
        url,
        events,
        phone_numbers,
        enabled: body.enabled.unwrap_or(true),
        sealed_signing_key,
        format: WebhookFormat::Smsgw,
        external_id: None,
        device_id: None,
    };
    let quota = state.settings.quotas.count(Quota::WebhookEndpoints);
    let now = state.clock.now_ms();
    let endpoint = webhooks::create(&state.db, caller.scope(), new, quota, now).await?;
    subscribe(api, &endpoint);
    let response = success(
        StatusCode::CREATED,
        "webhook endpoint created; the signing key is shown only now",
        with_key(&endpoint, signing_key),
    );
    Ok((response, id.as_uuid()))
}

/// Lists webhook endpoints, newest first.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "webhooks",
    params(
        PageParams,
    ),
    responses((status = 200, description = "A page of webhook endpoints.", body = WebhookPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(state: web::Data<AppState>, caller: Caller, page: PageRequest) -> Answer {
    let rows = state.list_scoped(&caller, page, webhooks::list).await?;
    Ok(rows.map(endpoint_out).answer::<WebhookPage>("webhooks"))
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
async fn get(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let endpoint: EndpointRecord = state.find(&caller, &path).await?;
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
) -> Answer {
    // Unknown ids are 404 before any field is judged.
    let current: EndpointRecord = state.find(&caller, &path).await?;
    let id = current.id;
    let events = body
        .events
        .map(|events| parse_events(events, current.format))
        .transpose()?;
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
        device_id: None,
    };
    let endpoint = webhooks::update(&state.db, caller.scope(), id, changes, state.clock.now_ms())
        .await
        .map_err(missing("webhook"))?;
    subscribe(&api, &endpoint);
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
) -> Answer {
    let id = parse_id(&path, "webhook")?;
    webhooks::delete(&state.db, caller.scope(), id)
        .await
        .map_err(missing("webhook"))?;
    api.subscriptions.remove(id);
    api.endpoints.do_send(EndpointDeleted { endpoint_id: id });
    Ok(deleted("webhook endpoint deleted", id.as_uuid()))
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
) -> Answer {
    let current: EndpointRecord = state.find(&caller, &path).await?;
    let id = current.id;
    if current.format == WebhookFormat::Smsgate {
        return Err(ApiError::validation(
            "id",
            "an smsgate-format endpoint is signed with the workspace's webhooks.signing_key; change it through the client API's settings (docs/compat.md, Settings)",
        ));
    }
    let (signing_key, sealed_signing_key) = new_signing_key(&api, id)?;
    let changes = EndpointChanges {
        sealed_signing_key: Some(sealed_signing_key),
        ..EndpointChanges::default()
    };
    let endpoint = webhooks::update(&state.db, caller.scope(), id, changes, state.clock.now_ms())
        .await
        .map_err(missing("webhook"))?;
    announce(&api, id, None);
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
        PageParams,
    ),
    responses((status = 200, description = "A page of attempts.", body = DeliveryPageEnvelope))
)]
#[tracing::instrument(skip_all, fields(webhook_id = %path))]
async fn deliveries(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: QueryParams,
) -> Answer {
    let id = state.find::<EndpointRecord>(&caller, &path).await?.id;
    let page = PageRequest::parse(&query)?;
    let rows = page
        .read(|after, limit| webhooks::list_attempts(&state.db, id, after, limit))
        .await?;
    Ok(rows.map(attempt_out).answer::<DeliveryPage>("deliveries"))
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
    api: web::Data<WebhookApi>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Answer {
    let id: EndpointId = parse_id(&path.0, "webhook")?;
    let delivery_id: Uuid = parse_id(&path.1, "delivery")?;
    state
        .find_id::<EndpointRecord>(&caller, id.as_uuid())
        .await?;
    let delivery = webhooks::retry_now(&state.db, id, delivery_id, state.clock.now_ms())
        .await
        .map_err(missing("delivery"))?;
    announce(&api, id, Some(delivery.clone()));
    Ok(success(
        StatusCode::ACCEPTED,
        "delivery scheduled for another attempt now",
        DeliveryRetryOut {
            id: delivery.id,
            event: &delivery.event,
            event_id: delivery.event_id,
            message_id: delivery.message_id,
            attempts: delivery.attempts,
            state: DeliveryState::Pending.as_str(),
            next_attempt_at: format_ms(delivery.next_attempt_at),
        },
    ))
}
