//! Inbox export requests (docs/compat.md, Inbox): `POST /inbox/refresh` and the older
//! `POST /messages/inbox/export`. smsgw stores every SMS its phones forward as they arrive, so
//! there is nothing to fetch again: a valid request is answered 202 and changes nothing. The
//! SMSGate app's `MessagesExportRequested` event is not sent: the app would post the exported
//! SMS again under new delivery ids, and smsgw would store them twice.

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use uuid::Uuid;

use super::auth::Caller;
use super::devices::all_phones;
use super::error::ClientError;
use super::wire::{self, ClientJson};
use crate::api::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/inbox/refresh", web::post().to(refresh))
        .route("/messages/inbox/export", web::post().to(refresh));
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RefreshIn {
    since: Option<String>,
    until: Option<String>,
    device_id: Option<String>,
    message_types: Option<serde_json::Value>,
    webhook_delivery: Option<String>,
    #[allow(dead_code)]
    trigger_webhooks: Option<bool>,
}

/// Checks the request (dates, device, delivery mode) and answers 202.
async fn refresh(
    state: web::Data<AppState>,
    caller: Caller,
    ClientJson(body): ClientJson<RefreshIn>,
) -> Result<HttpResponse, ClientError> {
    let time = |value: Option<&str>, name: &str| {
        let text = value.ok_or_else(|| ClientError::bad_request(format!("{name} is required")))?;
        wire::parse_timestamp(text).ok_or_else(|| {
            ClientError::bad_request(format!("{name} must be an RFC 3339 timestamp"))
        })
    };
    let since = time(body.since.as_deref(), "since")?;
    let until = time(body.until.as_deref(), "until")?;
    if until < since {
        return Err(ClientError::bad_request("until must not be before since"));
    }
    if let Some(mode) = body.webhook_delivery.as_deref()
        && !matches!(mode, "Individual" | "Batch" | "Disabled")
    {
        return Err(ClientError::bad_request(
            "webhookDelivery must be Individual, Batch or Disabled",
        ));
    }
    if let Some(types) = &body.message_types
        && !(types.is_null() || types.is_array() || types.is_string())
    {
        return Err(ClientError::bad_request(
            "messageTypes must be a list of message types",
        ));
    }
    if let Some(device) = body.device_id.as_deref().filter(|d| !d.is_empty()) {
        let known = match Uuid::parse_str(device) {
            Ok(id) => all_phones(&state, &caller)
                .await?
                .iter()
                .any(|p| p.id == id),
            Err(_) => false,
        };
        if !known {
            return Err(ClientError::bad_request(format!(
                "deviceId {device:?} is not a device of yours"
            )));
        }
    }
    Ok(HttpResponse::Accepted().finish())
}
