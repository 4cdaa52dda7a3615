//! Inbound SMS from a phone running the SMSGate Android app: the app posts an `sms:received`
//! webhook to the URL `GET /webhooks` handed it (a per-phone secret path), signed with the key
//! `GET /settings` handed it. A verified post takes the same path as a WebSocket `received`
//! frame (the Phone actor, then `Writer::inbound`), deduplicated by the post's event id, and is
//! answered 200 only once stored, so the app retries anything not stored.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use sha2::Sha256;
use uuid::Uuid;

use super::{MobileError, parse};
use crate::actors::device_link::{Pending, STORE_WAIT};
use crate::api::AppState;
use crate::domain::app_protocol::AppEvent;
use crate::domain::keys;
use crate::domain::protocol::PhoneFrame;
use crate::domain::signing::TIMESTAMP_TOLERANCE_SECS;
use crate::store::phones;

/// Longest event id accepted (the app's are 21-character nanoids).
const MAX_EVENT_ID_CHARS: usize = 128;

/// The per-phone secrets of the inbound route, derived from the phone's token hash.
pub struct PhoneSecrets {
    /// The last path segment of the phone's inbound URL.
    pub path_secret: String,
    /// The key the app signs its posts with (`webhooks.signing_key` in `GET /settings`).
    pub signing_key: String,
}

impl PhoneSecrets {
    /// The secrets of this phone; `NotFound`-like 404 when it is not paired.
    pub async fn of(state: &AppState, phone_id: Uuid) -> Result<PhoneSecrets, MobileError> {
        let token_hash = phones::token_hash_of(&state.db, phone_id)
            .await?
            .ok_or_else(MobileError::not_found)?;
        Ok(PhoneSecrets {
            path_secret: derive(&token_hash, "smsgw device API inbound path"),
            signing_key: derive(&token_hash, "smsgw device API inbound signing key"),
        })
    }
}

/// Hex HMAC-SHA256 of `purpose` under the token hash, cut to 32 characters (128 bits).
fn derive(token_hash: &str, purpose: &str) -> String {
    let mut mac = hmac(token_hash.as_bytes());
    mac.update(purpose.as_bytes());
    let mut hex = hex::encode(mac.finalize().into_bytes());
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

#[derive(Debug, Deserialize)]
struct PostIn {
    id: String,
    event: String,
    payload: Option<PayloadIn>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PayloadIn {
    message: String,
    sender: String,
    received_at: Option<chrono::DateTime<chrono::FixedOffset>>,
}

/// `POST /mobile/v1/inbound/{phone_id}/{secret}`.
#[tracing::instrument(skip_all, fields(phone_id = %path.0))]
pub async fn receive(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(Uuid, String)>,
    body: Bytes,
) -> Result<HttpResponse, MobileError> {
    let (phone_id, secret) = path.into_inner();
    let secrets = PhoneSecrets::of(&state, phone_id).await?;
    if !keys::hashes_equal(&secrets.path_secret, &secret) {
        return Err(MobileError::not_found());
    }
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
    if post.event != AppEvent::SmsReceived.as_str() {
        // Other events the user may have pointed here carry nothing to store.
        return Ok(HttpResponse::Ok().json(serde_json::json!({})));
    }
    if post.id.is_empty() || post.id.chars().count() > MAX_EVENT_ID_CHARS {
        return Err(MobileError::bad_request(format!(
            "id must have 1 to {MAX_EVENT_ID_CHARS} characters"
        )));
    }
    let payload = post
        .payload
        .ok_or_else(|| MobileError::bad_request("payload is required"))?;
    let frame = PhoneFrame::Received {
        reference: format!("smsgate:{}", post.id),
        from: payload.sender,
        content: payload.message,
        received_at: payload
            .received_at
            .map_or_else(|| state.clock.now(), |at| at.with_timezone(&chrono::Utc)),
    };
    let pending = state.device_links.of(phone_id).inbound(frame).await?;
    if !Pending::all_within(vec![pending], STORE_WAIT).await {
        return Err(MobileError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not stored yet; retry",
        ));
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}
