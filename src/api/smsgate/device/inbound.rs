//! Inbound SMS from a phone running the SMSGate Android app: the app posts an `sms:received`
//! webhook to the URL `GET /webhooks` handed it (a per-phone secret path), signed with the key
//! `GET /settings` handed it. A verified post takes the same path as a WebSocket `received`
//! frame (the Phone actor, then `Writer::inbound`), deduplicated by the post's event id, and is
//! answered 200 only once stored, so the app retries anything not stored.
//!
//! Nothing of the body is read before the phone id and the path secret are checked (a wrong
//! one spends the client address's failed-auth budget); the body is then read within 16 KiB and
//! `server.body_timeout`, and held to the bounds of a `received` frame (docs/api.md, "Device
//! API for the SMSGate Android app").

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use sha2::Sha256;
use uuid::Uuid;

use super::{MobileError, parse, read_body};
use crate::actors::device_link::{Pending, STORE_WAIT};
use crate::actors::registry::HealthReported;
use crate::api::AppState;
use crate::api::webhooks::WebhookApi;
use crate::domain::app_protocol::AppEvent;
use crate::domain::health::HealthReport;
use crate::domain::keys;
use crate::domain::protocol::{FrameRefusal, PhoneFrame};
use crate::domain::secrets::SecretBox;
use crate::domain::signing::TIMESTAMP_TOLERANCE_SECS;
use crate::store::phones;

/// Longest event id accepted (the app's are 21-character nanoids).
const MAX_EVENT_ID_CHARS: usize = 128;

/// Largest inbound post, in bytes: one SMS of 1,600 UTF-16 units and the app's envelope fit
/// several times over.
const MAX_INBOUND_BODY_BYTES: usize = 16 * 1024;

/// The per-phone secrets of the inbound route, derived from the phone's token hash under the
/// server's secrets key, so a copy of the database alone cannot forge a post.
pub struct PhoneSecrets {
    /// The last path segment of the phone's inbound URL.
    pub path_secret: String,
    /// The key the app signs its posts with (`webhooks.signing_key` in `GET /settings`).
    pub signing_key: String,
}

impl PhoneSecrets {
    /// The secrets of this phone; None when it is not paired.
    pub async fn find(
        state: &AppState,
        secrets: &SecretBox,
        phone_id: Uuid,
    ) -> Result<Option<PhoneSecrets>, MobileError> {
        let Some(token_hash) = phones::token_hash_of(&state.db, phone_id).await? else {
            return Ok(None);
        };
        Ok(Some(PhoneSecrets {
            path_secret: derive(secrets, &token_hash, "smsgw device API inbound path"),
            signing_key: derive(secrets, &token_hash, "smsgw device API inbound signing key"),
        }))
    }

    /// The secrets of this phone; 404 when it is not paired.
    pub async fn of(
        state: &AppState,
        secrets: &SecretBox,
        phone_id: Uuid,
    ) -> Result<PhoneSecrets, MobileError> {
        PhoneSecrets::find(state, secrets, phone_id)
            .await?
            .ok_or_else(MobileError::not_found)
    }
}

/// The secret for `purpose` derived from the token hash under the secrets key, cut to 32 hex
/// characters (128 bits).
fn derive(secrets: &SecretBox, token_hash: &str, purpose: &str) -> String {
    let mut hex = secrets.derive(purpose, token_hash.as_bytes());
    hex.truncate(32);
    hex
}

fn hmac(key: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length: this cannot fail.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    }
}

/// The app's signature: lowercase hex HMAC-SHA256 of the body followed by the timestamp text.
pub fn signature(signing_key: &str, body: &[u8], timestamp: &str) -> String {
    let mut mac = hmac(signing_key.as_bytes());
    mac.update(body);
    mac.update(timestamp.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// The app's webhook post; `payload` is read by event: `sms:received` below, the health events
/// by `domain::health`; other events are ignored.
#[derive(Debug, Deserialize)]
struct PostIn {
    #[serde(default)]
    id: String,
    event: String,
    #[serde(default)]
    payload: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PayloadIn {
    message: String,
    sender: String,
    received_at: Option<chrono::DateTime<chrono::FixedOffset>>,
    /// The SIM the SMS arrived on: stored on the device's SIM line of that slot, if any
    /// (docs/api.md, "Phones").
    #[serde(default)]
    sim_number: Option<i64>,
}

/// A health event (`system:ping`, `app:started`): its facts are stored over the device's
/// earlier ones (docs/api.md, "Phone health"); a fact out of bounds refuses the post (400,
/// naming it) and stores nothing.
async fn health(
    state: &AppState,
    phone_id: Uuid,
    event: AppEvent,
    payload: Option<serde_json::Value>,
) -> Result<HttpResponse, MobileError> {
    let payload = payload.ok_or_else(|| MobileError::bad_request("payload is required"))?;
    if !payload.is_object() {
        return Err(MobileError::bad_request("payload must be an object"));
    }
    let report = match event {
        AppEvent::AppStarted => HealthReport::of_app_started(&payload),
        _ => HealthReport::of_app_ping(&payload),
    }
    .map_err(|refusal| MobileError::bad_request(refusal.to_string()))?;
    let now = state.clock.now_ms();
    let health = crate::store::health::record(&state.db, phone_id, report, now).await?;
    state.registry.do_send(HealthReported { phone_id, health });
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}

/// `POST /mobile/v1/inbound/{phone_id}/{secret}`.
#[tracing::instrument(skip_all, fields(phone_id = %path.0))]
pub async fn receive(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    req: HttpRequest,
    path: web::Path<(Uuid, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, MobileError> {
    let (phone_id, secret) = path.into_inner();
    let client = req.peer_addr().map(|addr| addr.ip());
    state.refuse_spent_budget(client)?;
    let secrets = PhoneSecrets::find(&state, &api.secrets, phone_id)
        .await?
        .filter(|secrets| keys::hashes_equal(&secrets.path_secret, &secret));
    let Some(secrets) = secrets else {
        state.spend_failed_auth(client)?;
        return Err(MobileError::not_found());
    };
    let body = read_body(&req, payload, MAX_INBOUND_BODY_BYTES).await?;
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let timestamp = header("x-timestamp");
    let refused = |why: &str| MobileError::new(StatusCode::UNAUTHORIZED, why.to_string());
    let at: i64 = timestamp
        .parse()
        .map_err(|_| refused("X-Timestamp must be unix seconds"))?;
    if (state.clock.now().timestamp() - at).abs() > TIMESTAMP_TOLERANCE_SECS {
        return Err(refused("X-Timestamp is more than 300 s away"));
    }
    let expected = signature(&secrets.signing_key, &body, &timestamp);
    if !keys::hashes_equal(&expected, &header("x-signature").to_ascii_lowercase()) {
        return Err(refused("X-Signature does not match"));
    }
    let post: PostIn = parse(&body)?;
    match post.event.parse::<AppEvent>() {
        Ok(AppEvent::SmsReceived) => {}
        Ok(event) => return health(&state, phone_id, event, post.payload).await,
        // Other events the user may have pointed here carry nothing to store.
        Err(_) => return Ok(HttpResponse::Ok().json(serde_json::json!({}))),
    }
    if post.id.is_empty() || post.id.chars().count() > MAX_EVENT_ID_CHARS {
        return Err(MobileError::bad_request(format!(
            "id must have 1 to {MAX_EVENT_ID_CHARS} characters"
        )));
    }
    let payload: PayloadIn = post
        .payload
        .map(serde_json::from_value)
        .ok_or_else(|| MobileError::bad_request("payload is required"))?
        .map_err(|err| MobileError::bad_request(format!("payload: {err}")))?;
    let frame = PhoneFrame::Received {
        reference: format!("smsgate:{}", post.id),
        from: payload.sender,
        content: payload.message,
        received_at: payload
            .received_at
            .map_or_else(|| state.clock.now(), |at| at.with_timezone(&chrono::Utc)),
    };
    // The bounds of a WebSocket `received` frame, named as the app names the fields.
    frame.check_bounds().map_err(|refusal| {
        MobileError::bad_request(match refusal {
            FrameRefusal::Sender => {
                "payload.sender must be 1 to 32 characters without control characters"
            }
            FrameRefusal::Content => "payload.message must be 1 to 1600 UTF-16 code units",
            FrameRefusal::Reference => "id must have 1 to 128 characters",
        })
    })?;
    // A slot the device has no line on (or none at all) is the device's own SIM.
    let slot = payload
        .sim_number
        .and_then(|n| crate::domain::sim_slot::SimSlot::parse(n).ok());
    let pending = state.device_links.of(phone_id).inbound(frame, slot).await?;
    if !Pending::all_within(vec![pending], STORE_WAIT).await {
        return Err(MobileError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not stored yet; retry",
        ));
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}
