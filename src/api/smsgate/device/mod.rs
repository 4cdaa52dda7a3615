//! The device API compatible with the SMSGate Android app (docs/api.md "Device API for the
//! SMSGate Android app"), mounted at `/mobile/v1` and `/api/mobile/v1`: registration with a
//! phone's device token, the event stream, fetching and reporting messages, settings and the
//! webhook list through which the app posts inbound SMS back (`inbound.rs`).
//!
//! The app's conventions, not the `/v1` envelope: camelCase JSON, errors `{"message": …}`,
//! timestamps with exactly three fractional digits, `[]` never `null`. Outside `/v1`, so the
//! API-key middleware and the OpenAPI registry do not apply; every route authenticates the
//! phone with `Authorization: Bearer <device token>` itself.

mod inbound;

use std::collections::HashMap;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, web};
use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::actors::device_link::{
    AppMessageId, FetchOrder, KEEPALIVE, KEEPALIVE_FRAME, NotPaired, Pending, STORE_WAIT,
};
use crate::api::AppState;
use crate::api::webhooks::WebhookApi;
use crate::clock::format_ms;
use crate::domain::app_protocol::{AppEvent, AppMessageState};
use crate::domain::keys;
use crate::domain::protocol::PhoneFrame;
use crate::domain::sim_slot::SimSlot;
use crate::error::ApiError;
use crate::store::messages;
use crate::store::phones::{self, PhoneRecord};

/// Where the app's users point it: ours, and the path the upstream docs give.
pub const MOUNTS: [&str; 2] = ["/mobile/v1", "/api/mobile/v1"];

/// Registers the device API under both mounts.
pub fn routes(cfg: &mut web::ServiceConfig) {
    for mount in MOUNTS {
        cfg.service(
            web::scope(mount)
                .route("/device", web::post().to(register))
                .route("/device", web::patch().to(update_device))
                .route("/device", web::get().to(get_device))
                .route("/events", web::get().to(events))
                .route("/message", web::get().to(fetch))
                .route("/message", web::patch().to(report))
                .route("/settings", web::get().to(settings))
                .route("/webhooks", web::get().to(webhooks))
                .route(
                    "/inbound/{phone_id}/{secret}",
                    web::post().to(inbound::receive),
                )
                .default_service(web::to(|| async {
                    Err::<HttpResponse, _>(MobileError::not_found())
                })),
        );
    }
}

/// Largest body of the token holder's routes (`POST`/`PATCH /device`, `PATCH /message`), in
/// bytes: a hundred reports with long failure texts fit (docs/api.md, "Device API … Limits").
const MAX_DEVICE_BODY_BYTES: usize = 256 * 1024;

/// An error in the app's shape: `{"message": …}` with the status the app acts on (401 makes
/// it register again, so it is answered only for a token that is really unknown).
#[derive(Debug)]
pub struct MobileError {
    status: StatusCode,
    message: String,
    /// `Retry-After` of a 429, in seconds.
    retry_after_secs: Option<u64>,
}

impl MobileError {
    fn new(status: StatusCode, message: impl Into<String>) -> MobileError {
        MobileError {
            status,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// A body that could not be read within the bounds: 413 past `max_bytes`, 408 past
    /// `server.body_timeout`, 400 for one that is not readable.
    fn of_body(err: ApiError, max_bytes: usize) -> MobileError {
        match err {
            ApiError::PayloadTooLarge => MobileError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {} KiB", max_bytes / 1024),
            ),
            ApiError::InvalidJson { message, .. } => MobileError::bad_request(message),
            other => MobileError::from(other),
        }
    }

    fn unauthorized() -> MobileError {
        MobileError::new(StatusCode::UNAUTHORIZED, "unknown or missing device token")
    }

    fn bad_request(message: impl Into<String>) -> MobileError {
        MobileError::new(StatusCode::BAD_REQUEST, message)
    }

    fn not_found() -> MobileError {
        MobileError::new(StatusCode::NOT_FOUND, "not found")
    }
}

impl std::fmt::Display for MobileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ResponseError for MobileError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        if let Some(secs) = self.retry_after_secs {
            response.insert_header((RETRY_AFTER, secs));
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still be on its way: the connection cannot carry
            // another request.
            response.force_close();
        }
        response.json(serde_json::json!({ "message": self.message }))
    }
}

/// The `/v1` errors the device API meets: the failed-auth budget (429) and a body's deadline
/// (408), in the app's shape.
impl From<ApiError> for MobileError {
    fn from(err: ApiError) -> Self {
        match err {
            ApiError::RateLimited { retry_after_secs } => MobileError {
                retry_after_secs: Some(retry_after_secs),
                ..MobileError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many failed authentications from this address; retry later",
                )
            },
            ApiError::RequestTimeout { .. } => {
                MobileError::new(StatusCode::REQUEST_TIMEOUT, err.to_string())
            }
            ApiError::MissingApiKey | ApiError::InvalidApiKey => MobileError::unauthorized(),
            other => {
                tracing::error!(error = %other, "device API: request failed");
                MobileError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
            }
        }
    }
}

impl From<crate::store::StoreError> for MobileError {
    fn from(err: crate::store::StoreError) -> Self {
        tracing::error!(error = %err, "device API: storage failed");
        MobileError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
    }
}

impl From<NotPaired> for MobileError {
    fn from(_: NotPaired) -> Self {
        MobileError::unauthorized()
    }
}

/// The device token the request carries as `Bearer`, if any.
fn bearer(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// The phone whose device token the request carries as `Bearer`; every route's first
/// extractor, so a bad token is 401 whatever else the request holds, and no body is read before
/// it ([`read_body`] runs in the handler). A token read within
/// [`crate::actors::device_link::TOKEN_TTL`] is answered from memory (forgotten at once when this
/// server rotates or unpairs it); a token the database does not know spends the client
/// address's failed-auth budget, and while that is spent no token is looked up (429).
struct DevicePhone(PhoneRecord);

impl FromRequest for DevicePhone {
    type Error = MobileError;
    type Future = LocalBoxFuture<'static, Result<DevicePhone, MobileError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let client = req.peer_addr().map(|addr| addr.ip());
        let token_hash = bearer(req)
            .filter(|t| t.starts_with("dt_"))
            .map(keys::hash_secret);
        Box::pin(async move {
            let (Some(state), Some(token_hash)) = (state, token_hash) else {
                return Err(MobileError::unauthorized());
            };
            if let Some(phone) = state.device_links.phone_of_token(&token_hash) {
                return Ok(DevicePhone(phone));
            }
            state.refuse_spent_budget(client)?;
            let Some(phone) = phones::find_by_token(&state.db, &token_hash).await? else {
                state.spend_failed_auth(client)?;
                return Err(MobileError::unauthorized());
            };
            state.device_links.remember_token(&token_hash, &phone);
            Ok(DevicePhone(phone))
        })
    }
}

/// Reads a request body of at most `max_bytes` within `server.body_timeout` (the bounded
/// reader of `/v1`): called after authentication, so a bad token is 401 and the body unread.
async fn read_body(
    req: &HttpRequest,
    payload: web::Payload,
    max_bytes: usize,
) -> Result<web::BytesMut, MobileError> {
    let mut payload = payload.into_inner();
    crate::api::read_body_up_to(req, &mut payload, max_bytes)
        .await
        .map_err(|err| MobileError::of_body(err, max_bytes))
}

/// Parses a JSON body (after authentication, so a bad token is 401 whatever the body).
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, MobileError> {
    serde_json::from_slice(body).map_err(|err| MobileError::bad_request(format!("bad JSON: {err}")))
}

/// `POST /device` body; the app's SIM and push-token details are not needed (the phone's
/// number is the one it was created with; the event stream replaces push).
#[derive(Debug, Deserialize)]
struct RegisterIn {
    #[serde(default)]
    #[allow(dead_code)]
    name: Option<String>,
}

#[derive(Serialize)]
struct RegisterOut {
    id: Uuid,
    token: String,
    login: Uuid,
}

/// Binds the app to the phone created with `POST /v1/phones` whose device token it carries.
/// Idempotent: the same token registers the same phone again, and stays the token.
#[tracing::instrument(skip_all)]
async fn register(
    DevicePhone(phone): DevicePhone,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, MobileError> {
    let body = read_body(&req, payload, MAX_DEVICE_BODY_BYTES).await?;
    if !body.is_empty() {
        let _: RegisterIn = parse(&body)?;
    }
    let token = bearer(&req).unwrap_or_default().to_string();
    Ok(HttpResponse::Created().json(RegisterOut {
        id: phone.id,
        token,
        login: phone.workspace_id.as_uuid(),
    }))
}

#[derive(Debug, Deserialize)]
struct UpdateDeviceIn {
    id: Uuid,
}

/// `PATCH /device`, sent at every start of the app: 204 for this phone, 403 for another id.
#[tracing::instrument(skip_all)]
async fn update_device(
    DevicePhone(phone): DevicePhone,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, MobileError> {
    let body = read_body(&req, payload, MAX_DEVICE_BODY_BYTES).await?;
    let update: UpdateDeviceIn = parse(&body)?;
    if update.id != phone.id {
        return Err(MobileError::new(
            StatusCode::FORBIDDEN,
            "this token belongs to another device",
        ));
    }
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeviceOut {
    id: Uuid,
    name: String,
    created_at: String,
    updated_at: String,
    last_seen: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeviceInfoOut {
    external_ip: String,
    device: DeviceOut,
}

/// `GET /device`: the caller's address as seen here, and the phone.
#[tracing::instrument(skip_all)]
async fn get_device(
    DevicePhone(phone): DevicePhone,
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, MobileError> {
    let live = crate::api::phones::live_states(&state, std::slice::from_ref(&phone)).await;
    let seen =
        crate::actors::registry::PhoneState::last_seen(live.get(&phone.id), phone.last_seen_at)
            .unwrap_or(phone.created_at);
    Ok(HttpResponse::Ok().json(DeviceInfoOut {
        external_ip: req
            .peer_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default(),
        device: DeviceOut {
            id: phone.id,
            name: phone
                .name
                .clone()
                .unwrap_or_else(|| phone.phone_number.clone()),
            created_at: format_ms(phone.created_at),
            updated_at: format_ms(seen),
            last_seen: format_ms(seen),
        },
    }))
}

/// `GET /events`: a server-sent event stream. `MessageEnqueued` when a message is handed to the
/// phone (and once at open when some wait, and again while some wait once the phone reported
/// what it fetched or went quiet), `MessageCancelled` when a queued one is withdrawn,
/// a `:keepalive` comment after [`KEEPALIVE`] of silence.
#[tracing::instrument(skip_all)]
async fn events(
    DevicePhone(phone): DevicePhone,
    state: web::Data<AppState>,
) -> Result<HttpResponse, MobileError> {
    let rx = state.device_links.of(phone.id).open_stream().await?;
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let frame = match tokio::time::timeout(KEEPALIVE, rx.recv()).await {
            Ok(Some(frame)) => frame,
            // The phone was unpaired, or another transport took over.
            Ok(None) => return None,
            Err(_) => Bytes::from_static(KEEPALIVE_FRAME),
        };
        Some((Ok::<_, actix_web::Error>(frame), rx))
    });
    Ok(HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "text/event-stream"))
        .insert_header((CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream))
}

#[derive(Debug, Deserialize)]
struct FetchQuery {
    #[serde(default)]
    order: Option<String>,
}

#[derive(Serialize)]
struct TextOut {
    text: String,
}

/// One message in the app's shape: one recipient; `id` names this send of it
/// ([`AppMessageId`]: the smsgw message id, or a new id for each retry after a failure).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MobileMessageOut {
    id: String,
    text_message: TextOut,
    phone_numbers: [String; 1],
    sim_number: Option<u8>,
    with_delivery_report: bool,
    is_encrypted: bool,
    priority: i8,
    valid_until: String,
    created_at: String,
    state: &'static str,
}

/// `GET /message?order=lifo|fifo`: the messages handed to the phone (only what its pace
/// allowed) and not yet reported on, at most 100. The phone's outbox is in memory
/// ([`crate::actors::device_link`]); one read checks that its messages are still `sending`
/// here and gives their dates and options (one that is not leaves the outbox), a second one
/// (only for a retry served for the first time) counts the failures its id is named after.
#[tracing::instrument(skip_all)]
async fn fetch(
    DevicePhone(phone): DevicePhone,
    state: web::Data<AppState>,
    query: web::Query<FetchQuery>,
) -> Result<HttpResponse, MobileError> {
    let order = match query.order.as_deref() {
        None | Some("") | Some("fifo") => FetchOrder::Fifo,
        Some("lifo") => FetchOrder::Lifo,
        Some(other) => {
            return Err(MobileError::bad_request(format!(
                "order must be lifo or fifo, not {other:?}"
            )));
        }
    };
    let link = state.device_links.of(phone.id);
    let handouts = link.fetch(order).await?;
    let ids: Vec<Uuid> = handouts.iter().map(|h| h.message_id).collect();
    // The device's SIM lines hand over on its link too (their hand-overs name their slot).
    let mut devices = vec![phone.id];
    if handouts.iter().any(|h| h.sim_slot.is_some()) {
        devices.extend(
            phones::lines_of(&state.db, phone.id)
                .await?
                .iter()
                .map(|l| l.id),
        );
    }
    // One that left `sending` meanwhile is not served.
    let mut stored: HashMap<Uuid, messages::Message> =
        messages::sending_on_phone(&state.db, &devices, &ids)
            .await?
            .into_iter()
            .map(|m| (m.id, m))
            .collect();
    let retries: Vec<Uuid> = handouts
        .iter()
        .filter(|h| h.app_id.is_none())
        .filter_map(|h| stored.get(&h.message_id))
        .filter(|m| m.send_attempts > 1)
        .map(|m| m.id)
        .collect();
    let failures = messages::failed_attempts_of(&state.db, &retries).await?;
    let mut out = Vec::with_capacity(handouts.len());
    let mut served = Vec::with_capacity(handouts.len());
    let mut stale = Vec::new();
    for handout in handouts {
        let Some(message) = stored.remove(&handout.message_id) else {
            stale.push((handout.message_id, handout.handed_at));
            continue;
        };
        let app_id = handout.app_id.unwrap_or_else(|| {
            let failed = failures.get(&message.id).copied().unwrap_or(0);
            AppMessageId::after_failures(message.id, failed)
        });
        served.push(app_id);
        out.push(MobileMessageOut {
            id: app_id.to_string(),
            text_message: TextOut {
                text: handout.content,
            },
            phone_numbers: [handout.to],
            // A SIM line's slot (docs/api.md, "Phones"), else the client API's option
            // (docs/compat.md, Messages); `/v1` messages of a device have none.
            sim_number: handout
                .sim_slot
                .map(|slot| slot.get())
                .or_else(|| message.client.as_ref().and_then(|c| c.sim_number)),
            with_delivery_report: message
                .client
                .as_ref()
                .is_none_or(|c| c.with_delivery_report),
            is_encrypted: false,
            priority: message.client.as_ref().map_or(0, |c| c.priority),
            valid_until: format_ms(message.expires_at),
            created_at: format_ms(message.created_at),
            state: AppMessageState::Pending.as_str(),
        });
    }
    link.served(&served, &stale).await;
    Ok(HttpResponse::Ok().json(out))
}

#[derive(Debug, Deserialize)]
struct RecipientIn {
    #[serde(default)]
    error: Option<String>,
}

/// One item of `PATCH /message`.
#[derive(Debug, Deserialize)]
struct ReportIn {
    id: String,
    state: String,
    #[serde(default)]
    recipients: Vec<RecipientIn>,
}

/// Reports in one `PATCH /message` at most (the app sends one at a time).
const MAX_REPORTS: usize = 100;

/// `PATCH /message`: the app's states mapped onto smsgw's (docs/api.md). 204 once every report
/// that moves a message is stored (503 when that took longer than [`STORE_WAIT`]: the app
/// retries). An unknown id, another phone's message, an earlier send of a message sent again
/// since, or a report that would move a message backwards changes nothing.
#[tracing::instrument(skip_all)]
async fn report(
    DevicePhone(phone): DevicePhone,
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, MobileError> {
    let body = read_body(&req, payload, MAX_DEVICE_BODY_BYTES).await?;
    let items: Vec<ReportIn> = parse(&body)?;
    if items.len() > MAX_REPORTS {
        return Err(MobileError::bad_request(format!(
            "at most {MAX_REPORTS} reports per request"
        )));
    }
    let link = state.device_links.of(phone.id);
    let mut pending = Vec::new();
    for item in items {
        let Some(app_id) = AppMessageId::parse(&item.id) else {
            continue;
        };
        let message_id = app_id.message_id;
        let frame = match item.state.parse::<AppMessageState>() {
            Ok(AppMessageState::Sent) => Some(PhoneFrame::Sent {
                message_id,
                reference: None,
            }),
            Ok(AppMessageState::Delivered) => Some(PhoneFrame::Delivered {
                message_id,
                reference: None,
            }),
            Ok(AppMessageState::Failed) => Some(PhoneFrame::Failed {
                message_id,
                error: item
                    .recipients
                    .into_iter()
                    .find_map(|r| r.error)
                    .unwrap_or_else(|| "failed on the phone".into()),
                reference: None,
            }),
            // Pending (acknowledged) and Processed (handed to Android) are `sending`, which
            // the message already is; cancel states have no meaning for a handed-over message.
            _ => None,
        };
        // Only a report on this phone's current send of the message counts: a late or
        // repeated report of an earlier send must neither fail the retry nor stop serving it.
        let line = match link.current_send(message_id).await {
            Some(current) if current == app_id => None,
            Some(_) => continue,
            None => match is_current_send(&state, phone.id, app_id).await? {
                Some(line) => line,
                None => continue,
            },
        };
        pending.push(link.report(message_id, frame, line).await?);
    }
    if !Pending::all_within(pending, STORE_WAIT).await {
        return Err(MobileError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the report is not stored yet; retry",
        ));
    }
    Ok(HttpResponse::NoContent().finish())
}

/// Whether `app_id` names the current send of a message handed to this phone or one of its
/// SIM lines, read from the store (for a send no fetch on this server named): the app id counts
/// the failures the message was retried after, which only a message handed over more than once
/// can have. Some(the line's slot, None for the device itself) when it does.
async fn is_current_send(
    state: &AppState,
    phone_id: Uuid,
    app_id: AppMessageId,
) -> Result<Option<Option<SimSlot>>, MobileError> {
    let Some(message) = messages::get(&state.db, app_id.message_id).await? else {
        return Ok(None);
    };
    let line = match message.device_id {
        Some(device) if device == phone_id => None,
        Some(other) => match phones::by_id(&state.db, other).await?.and_then(|p| p.line) {
            Some(line) if line.device_phone_id == phone_id => Some(line.sim_slot),
            _ => return Ok(None),
        },
        None => return Ok(None),
    };
    let failures = if message.send_attempts > 1 {
        messages::failed_attempts(&state.db, message.id).await?
    } else {
        0
    };
    Ok((AppMessageId::after_failures(message.id, failures) == app_id).then_some(line))
}

/// `GET /settings`: only the webhook signing key the app signs inbound posts with; never the
/// `gateway` section (it would reset the app's server address).
#[tracing::instrument(skip_all)]
async fn settings(
    DevicePhone(phone): DevicePhone,
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
) -> Result<HttpResponse, MobileError> {
    let secrets = inbound::PhoneSecrets::of(&state, &api.secrets, phone.id).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "webhooks": { "signing_key": secrets.signing_key }
    })))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WebhookOut {
    id: String,
    url: String,
    event: &'static str,
    device_id: Uuid,
}

/// `GET /webhooks`: one webhook per event smsgw consumes (`sms:received`, and the health
/// events `system:ping` and `app:started`), each pointing back at this server's inbound route
/// for this phone.
#[tracing::instrument(skip_all)]
async fn webhooks(
    DevicePhone(phone): DevicePhone,
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    req: HttpRequest,
) -> Result<HttpResponse, MobileError> {
    use strum::IntoEnumIterator;
    let secrets = inbound::PhoneSecrets::of(&state, &api.secrets, phone.id).await?;
    let base = crate::api::origin::public_base(&state, &req);
    let url = format!(
        "{base}{}/inbound/{}/{}",
        MOUNTS[0], phone.id, secrets.path_secret
    );
    let hooks: Vec<WebhookOut> = AppEvent::iter()
        .map(|event| WebhookOut {
            // The first keeps the id it always had, so an app that stored it sees no change.
            id: match event {
                AppEvent::SmsReceived => format!("smsgw-inbound-{}", phone.id),
                other => format!("smsgw-{}-{}", other.as_str().replace(':', "-"), phone.id),
            },
            url: url.clone(),
            event: event.as_str(),
            device_id: phone.id,
        })
        .collect();
    Ok(HttpResponse::Ok().json(hooks))
}
