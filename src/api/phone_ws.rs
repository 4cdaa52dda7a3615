//! `GET /v1/phones/connect`: the phone's WebSocket (docs/api.md, Phone WebSocket).
//!
//! The HTTP server hands every `Upgrade: websocket` request to [`upgrade`] together with the
//! raw connection (actix-http's upgrade hook, wired in `startup.rs`). It checks the device token
//! before the upgrade, answers 101 and runs the session on the bare socket, so an idle phone
//! holds no HTTP buffers (actix-web's dispatcher keeps 16 KiB per upgraded connection for its
//! life). A request on this route without the upgrade reaches [`connect`] and gets 400.

use std::time::Instant;

use actix_codec::Framed;
use actix_http::body::BodySize;
use actix_http::{ConnectionType, HttpMessage, Request, h1, ws};
use actix_web::http::header::{AUTHORIZATION, HeaderMap};
use actix_web::{HttpRequest, ResponseError, web};
use bytes::BytesMut;
use futures_util::SinkExt;
use tracing::Instrument;
use uuid::Uuid;

use super::{Answer, AppState};
use crate::actors::phone_session;
use crate::domain::keys;
use crate::error::ApiError;
use crate::store::phones;
use crate::telemetry;

/// The route of the phone WebSocket; the only path that accepts an upgrade.
pub const CONNECT_PATH: &str = "/v1/phones/connect";

/// Answers a request on the WebSocket route that is not an upgrade: the token is checked first
/// (401 like the upgrade), then 400.
#[utoipa::path(
    get,
    path = "/v1/phones/connect",
    tag = "phones",
    description = "The phone's WebSocket (docs/api.md, Phone WebSocket). Authenticates with \
        `Authorization: Bearer <device_token>`, checked before the upgrade; text frames are JSON \
        objects with a `type` (`hello`, `send`, `ack`, `error` from the server; `sent`, \
        `delivered`, `failed`, `received`, `heartbeat` from the phone).",
    params(("Authorization" = String, Header, description = "`Bearer dt_…`")),
    responses((status = 101, description = "Switching Protocols: the WebSocket session."))
)]
#[tracing::instrument(skip_all)]
pub async fn connect(state: web::Data<AppState>, req: HttpRequest) -> Answer {
    let client = req.peer_addr().map(|addr| addr.ip());
    authenticate(&state, req.headers(), client).await?;
    Err(ApiError::BadRequest(
        "this route only accepts a WebSocket upgrade".into(),
    ))
}

/// The phone a `Bearer dt_…` header belongs to. A token the database does not know spends the
/// client address's failed-auth budget; while it is spent, no token is looked up (429).
async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    client: Option<std::net::IpAddr>,
) -> Result<Uuid, ApiError> {
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(ApiError::MissingApiKey)?;
    if !token.starts_with("dt_") {
        return Err(ApiError::InvalidApiKey);
    }
    state.refuse_spent_budget(client)?;
    let Some(phone) = phones::find_by_token(&state.db, &keys::hash_secret(token)).await? else {
        state.spend_failed_auth(client)?;
        return Err(ApiError::InvalidApiKey);
    };
    Ok(phone.id)
}

/// Serves one upgrade request on its raw connection: a refused one gets the error envelope and
/// the connection closes; an accepted one becomes the phone's session, spawned as its own task
/// and counted in `AppState::sessions`, which a graceful stop waits for.
pub async fn upgrade<T: phone_session::SessionIo>(
    state: web::Data<AppState>,
    req: Request,
    mut framed: Framed<T, h1::Codec>,
) -> Result<(), actix_web::Error> {
    let started = Instant::now();
    let request_id = telemetry::request_id(req.headers());
    let method = req.method().to_string();
    let route = if req.path() == CONNECT_PATH {
        CONNECT_PATH
    } else {
        "unmatched"
    };
    let span =
        tracing::info_span!("request", request_id = %request_id, method = %method, route = %route);
    let accepted = handshake(&state, &req).instrument(span.clone()).await;
    let status = match &accepted {
        Ok(_) => 101,
        Err(err) => err.status_code().as_u16(),
    };
    telemetry::record_request(route.to_string(), method, status, started.elapsed());
    let phone_id = match accepted {
        Ok((phone_id, mut response)) => {
            let mut head = response.finish().drop_body();
            telemetry::tag_response(head.headers_mut(), &request_id);
            framed.send((head, BodySize::None).into()).await?;
            phone_id
        }
        Err(err) => {
            send_error(&mut framed, &err, &request_id).await?;
            return Ok(());
        }
    };
    drop(req);
    // Bytes the phone sent right behind its request belong to the WebSocket. The connection's
    // 8 KiB read and write buffers are freed at the end of this block, not held by the session.
    let (io, early) = {
        let parts = framed.into_parts();
        (parts.io, BytesMut::from(&parts.read_buf[..]))
    };
    let registry = state.transports.clone();
    let timeout = state.settings.phones.heartbeat_timeout;
    // The session is a task of its own: the connection's task (actix-http's dispatcher with
    // this future inside, ~5 KiB) ends here instead of living as long as the phone is online.
    let sessions = state.sessions.clone();
    actix_web::rt::spawn(
        phone_session::run(phone_id, registry, sessions, io, early, timeout).instrument(span),
    );
    Ok(())
}

/// Checks path, token and WebSocket headers; the phone and the 101 response to send.
async fn handshake(
    state: &AppState,
    req: &Request,
) -> Result<(Uuid, actix_http::ResponseBuilder), ApiError> {
    if req.path() != CONNECT_PATH {
        return Err(ApiError::NotFound("route"));
    }
    let client = req.peer_addr().map(|addr| addr.ip());
    let phone_id = authenticate(state, req.headers(), client).await?;
    let response = ws::handshake(req.head())
        .map_err(|err| ApiError::BadRequest(format!("not a valid WebSocket upgrade: {err}")))?;
    Ok((phone_id, response))
}

/// Writes the error envelope of `err` and asks the connection to close.
async fn send_error<T: phone_session::SessionIo>(
    framed: &mut Framed<T, h1::Codec>,
    err: &ApiError,
    request_id: &str,
) -> Result<(), actix_web::Error> {
    let mut response = err.error_response();
    telemetry::tag_response(response.headers_mut(), request_id);
    let (mut head, body) = actix_http::Response::from(response).into_parts();
    head.head_mut().set_connection_type(ConnectionType::Close);
    let body = actix_web::body::to_bytes(body)
        .await
        .map_err(|_| ApiError::internal("error body"))?;
    framed
        .send((head, BodySize::Sized(body.len() as u64)).into())
        .await?;
    if !body.is_empty() {
        framed.send(h1::Message::Chunk(Some(body))).await?;
    }
    framed.send(h1::Message::Chunk(None)).await?;
    Ok(())
}
