//! `GET /v1/phones/connect`: the device token is checked before the WebSocket upgrade, then the
//! session runs as a transport of the phone's actor.

use actix_web::{HttpRequest, HttpResponse, web};

use super::AppState;
use crate::actors::phone_session;
use crate::domain::keys;
use crate::error::ApiError;
use crate::store::phones;

/// Upgrades an authenticated phone to its WebSocket session (contract §6).
#[utoipa::path(
    get,
    path = "/v1/phones/connect",
    tag = "phones",
    description = "The phone's WebSocket (contract §6). Authenticates with \
        `Authorization: Bearer <device_token>`, checked before the upgrade; text frames are JSON \
        objects with a `type` (`hello`, `send`, `ack`, `error` from the server; `sent`, \
        `delivered`, `failed`, `received`, `heartbeat` from the phone).",
    params(("Authorization" = String, Header, description = "`Bearer dt_…`")),
    responses((status = 101, description = "Switching Protocols: the WebSocket session."))
)]
#[tracing::instrument(skip_all)]
pub async fn connect(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, actix_web::Error> {
    let token = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(ApiError::MissingApiKey)?;
    if !token.starts_with("dt_") {
        return Err(ApiError::InvalidApiKey.into());
    }
    let phone = phones::find_by_token(&state.db, &keys::hash_secret(token))
        .await
        .map_err(ApiError::from)?
        .ok_or(ApiError::InvalidApiKey)?;
    let (response, session, stream) = actix_ws::handle(&req, body).map_err(|err| {
        ApiError::BadRequest(format!(
            "this route only accepts a WebSocket upgrade: {err}"
        ))
    })?;
    let stream = stream.max_frame_size(64 * 1024);
    let registry = state.registry.clone();
    let timeout = state.settings.phones.heartbeat_timeout;
    actix_web::rt::spawn(phone_session::run(
        phone.id, registry, session, stream, timeout,
    ));
    Ok(response)
}
