//! Devices: the phones of the caller's workspace in the key's mode (docs/compat.md, Devices).

use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::Serialize;
use uuid::Uuid;

use super::auth::Caller;
use super::error::ClientError;
use super::wire;
use crate::actors::registry::{PhoneState, Unpaired};
use crate::api::AppState;
use crate::store::phones::{self, PhoneRecord};
use crate::store::{StoreError, messages::Position};

/// Most phones one listing returns (a workspace has 100 at most by default).
pub const MAX_DEVICES: usize = 1000;
/// Phones read per database page while listing.
const PAGE: u64 = 100;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/devices", web::get().to(list))
        .route("/devices/{id}", web::delete().to(remove));
}

/// A device as the clients read it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeviceOut {
    id: Uuid,
    name: String,
    created_at: String,
    updated_at: String,
    last_seen: Option<String>,
    deleted_at: Option<String>,
}

impl From<&PhoneRecord> for DeviceOut {
    fn from(phone: &PhoneRecord) -> Self {
        let last_seen = phone.last_seen_at.map(wire::timestamp);
        DeviceOut {
            id: phone.id,
            name: phone
                .name
                .clone()
                .unwrap_or_else(|| phone.phone_number.clone()),
            created_at: wire::timestamp(phone.created_at),
            updated_at: wire::timestamp(phone.last_seen_at.unwrap_or(phone.created_at)),
            last_seen,
            deleted_at: None,
        }
    }
}

/// Every phone of the caller's scope, newest first, up to [`MAX_DEVICES`].
pub(super) async fn all_phones(
    state: &AppState,
    caller: &Caller,
) -> Result<Vec<PhoneRecord>, StoreError> {
    let mut phones = Vec::new();
    let mut after = None;
    loop {
        let (page, has_more) = phones::list(&state.db, caller.scope(), after, PAGE).await?;
        after = page.last().map(|p| Position {
            created_at: p.created_at,
            id: p.id,
        });
        phones.extend(page);
        if !has_more || phones.len() >= MAX_DEVICES {
            phones.truncate(MAX_DEVICES);
            return Ok(phones);
        }
    }
}

/// [`all_phones`] with their live state; `last_seen_at` is the live one where this node has
/// a newer one than the database (docs/compat.md, Devices).
pub(super) async fn all_phones_live(
    state: &AppState,
    caller: &Caller,
) -> Result<(Vec<PhoneRecord>, HashMap<Uuid, PhoneState>), StoreError> {
    let mut phones = all_phones(state, caller).await?;
    let live = crate::api::phones::live_states(state, &phones).await;
    for phone in &mut phones {
        phone.last_seen_at = PhoneState::last_seen(live.get(&phone.id), phone.last_seen_at);
    }
    Ok((phones, live))
}

async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ClientError> {
    let (phones, _) = all_phones_live(&state, &caller).await?;
    let out: Vec<DeviceOut> = phones.iter().map(DeviceOut::from).collect();
    Ok(wire::json(StatusCode::OK, out))
}

/// Unpairs the phone, as `DELETE /v1/phones/{id}` does: 204, or 404 for an unknown id.
async fn remove(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ClientError> {
    let not_found = || ClientError::not_found("device not found");
    let id = Uuid::parse_str(&path).map_err(|_| not_found())?;
    match phones::delete(&state.db, caller.scope(), id).await {
        Ok(()) => {}
        Err(StoreError::NotFound) => return Err(not_found()),
        Err(other) => return Err(other.into()),
    }
    state.device_links.forget_tokens_of(id);
    state.registry.do_send(Unpaired { phone_id: id });
    Ok(HttpResponse::NoContent().finish())
}
