//! The HTTP API: routes, authentication, body and paging extractors shared by every resource.

pub mod ai;
pub mod api_keys;
pub mod campaign_preview;
pub mod campaigns;
pub mod contacts;
pub mod conversations;
mod envelope;
pub mod events;
mod idempotent;
pub mod messages;
pub mod mobile;
pub mod numbers;
pub mod openapi;
pub mod ops;
pub mod page;
pub mod phone_ws;
pub mod phones;
pub mod routes;
pub mod schemas;
pub mod stats;
pub mod test_mode;
pub mod thirdparty;
pub mod webhooks;
pub mod workspace;

use std::collections::HashMap;
use std::future::{Ready, ready};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use actix::Addr;
use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures_util::future::LocalBoxFuture;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sea_orm::DatabaseConnection;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::actors::registry::Registry;
use crate::clock::SharedClock;
use crate::config::Settings;
use crate::domain::ids::WorkspaceId;
use crate::domain::keys;
use crate::domain::status::Mode;
use crate::error::ApiError;
use crate::store::messages::{Position, Scope};
use crate::store::workspaces::{self, KeyGrant};
use crate::store::writer::Writer;

/// Largest accepted request body (docs/api.md, Errors).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Whole-body deadline when no settings are at hand (`server.body_timeout`'s default).
const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a resolved API key is trusted without asking the database again (a revocation
/// ends that trust sooner: see [`KEY_GENERATION_CHECK`]).
const KEY_CACHE_TTL: Duration = Duration::from_secs(60);
/// How often a process reads the key generation; a key revoked by another process (or by
/// `smsgw key revoke`) is refused at most this long after its revocation committed, plus one
/// read (docs/api.md, "API keys").
const KEY_GENERATION_CHECK: Duration = Duration::from_millis(500);

/// A resolved key in the cache, with when and under which key generation it was read.
struct CachedKey {
    grant: KeyGrant,
    read_at: Instant,
    generation: i64,
}

/// The key generation this process last read, and when it claimed the next read.
#[derive(Default)]
struct KnownGeneration {
    value: i64,
    checked_at: Option<Instant>,
}

/// Everything a handler may need, shared by all workers.
pub struct AppState {
    pub db: DatabaseConnection,
    pub writer: Writer,
    pub registry: Addr<Registry>,
    pub settings: Arc<Settings>,
    pub clock: SharedClock,
    /// The phone sessions running (see `phone_session::LiveSessions`).
    pub sessions: Arc<crate::actors::phone_session::LiveSessions>,
    /// The device API's transport state per phone (`actors::device_link`).
    pub device_links: crate::actors::device_link::DeviceLinks,
    /// The portal's live event streams (`actors::live_events`); the server's own hub is set
    /// by `startup` after construction.
    pub live: Arc<crate::actors::live_events::LiveEvents>,
    keys: RwLock<HashMap<String, CachedKey>>,
    generation: std::sync::Mutex<KnownGeneration>,
    /// Hashes of well-formed keys the database did not know, answered 401 without asking it
    /// again for a few seconds.
    unknown_keys: UnknownKeys,
    limiter: Option<DefaultKeyedRateLimiter<Uuid>>,
    /// Per client address: look-ups that found no key.
    failed_auth: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// Client addresses whose failed-auth budget is spent, and until when.
    over_budget: std::sync::Mutex<HashMap<IpAddr, Instant>>,
    /// When `/metrics` last counted the stored messages by status.
    pub(crate) messages_counted_at: std::sync::Mutex<Option<Instant>>,
    /// This node in the cluster (PostgreSQL); None on SQLite.
    pub cluster: Option<crate::actors::cluster::Cluster>,
}

impl AppState {
    /// What the send use case needs, from this state.
    pub fn send_deps(&self) -> crate::send::SendDeps {
        crate::send::SendDeps {
            writer: self.writer.clone(),
            registry: self.registry.clone(),
            clock: self.clock.clone(),
            settings: self.settings.clone(),
        }
    }

    /// Builds the shared state; the per-key limiter follows `limits.api_per_second`.
    pub fn new(
        db: DatabaseConnection,
        writer: Writer,
        registry: Addr<Registry>,
        settings: Arc<Settings>,
        clock: SharedClock,
    ) -> AppState {
        let keyed = |rate: NonZeroU32| {
            let burst = rate.saturating_mul(NonZeroU32::MIN.saturating_add(1));
            Quota::per_second(rate).allow_burst(burst)
        };
        let limiter =
            NonZeroU32::new(settings.limits.api_per_second).map(|r| RateLimiter::keyed(keyed(r)));
        let failed_auth = NonZeroU32::new(settings.limits.failed_auth_per_second)
            .map(|r| RateLimiter::keyed(keyed(r)));
        AppState {
            device_links: crate::actors::device_link::DeviceLinks::new(registry.clone()),
            db,
            writer,
            registry,
            settings,
            clock,
            sessions: Arc::default(),
            live: Arc::default(),
            keys: RwLock::new(HashMap::new()),
            generation: std::sync::Mutex::new(KnownGeneration::default()),
            unknown_keys: UnknownKeys::default(),
            limiter,
            failed_auth,
            over_budget: std::sync::Mutex::default(),
            messages_counted_at: std::sync::Mutex::new(None),
            cluster: None,
        }
    }

    /// Resolves an API key through the cache; misses ask the database unless the client
    /// address spent its failed-auth budget. A key the database does not know is answered 401
    /// from memory for [`UNKNOWN_KEY_TTL`]; a key created by the CLI still works at once, as its
    /// hash was never presented before it existed (docs/api.md "Authentication and modes"). A
    /// cached key counts only while the key generation it was read under is the current one, so
    /// a revocation anywhere ends it.
    async fn resolve_key(&self, key: &str, client: Option<IpAddr>) -> Result<KeyGrant, ApiError> {
        if keys::api_key_mode(key).is_none() {
            return Err(ApiError::InvalidApiKey);
        }
        let hash = keys::hash_secret(key);
        let generation = self.key_generation().await?;
        if let Ok(cache) = self.keys.read()
            && let Some(cached) = cache.get(&hash)
            && cached.generation == generation
            && cached.read_at.elapsed() < KEY_CACHE_TTL
            && keys::hashes_equal(&cached.grant.key_hash, &hash)
        {
            return Ok(cached.grant.clone());
        }
        if self.unknown_keys.contains(&hash) {
            return Err(ApiError::InvalidApiKey);
        }
        let address = client_address(client);
        self.refuse_over_budget(address)?;
        let Some(grant) = workspaces::find_key(&self.db, &hash).await? else {
            self.unknown_keys.insert(hash);
            self.count_failed_auth(address)?;
            return Err(ApiError::InvalidApiKey);
        };
        if let Ok(mut cache) = self.keys.write() {
            let cached = CachedKey {
                grant: grant.clone(),
                read_at: Instant::now(),
                generation,
            };
            cache.insert(hash, cached);
        }
        Ok(grant)
    }

    /// The current key generation, read from the database at most every
    /// [`KEY_GENERATION_CHECK`] (one request claims the read; the others meanwhile use the
    /// value known). A changed generation empties the key cache.
    async fn key_generation(&self) -> Result<i64, ApiError> {
        let known = {
            let mut known = self
                .generation
                .lock()
                .map_err(|_| ApiError::Internal("key generation lock poisoned".into()))?;
            if known
                .checked_at
                .is_some_and(|at| at.elapsed() < KEY_GENERATION_CHECK)
            {
                return Ok(known.value);
            }
            known.checked_at = Some(Instant::now());
            known.value
        };
        let read = workspaces::key_generation(&self.db).await;
        let mut state = self
            .generation
            .lock()
            .map_err(|_| ApiError::Internal("key generation lock poisoned".into()))?;
        match read {
            Ok(value) => {
                // The generation only grows: a read that started before another and ends after
                // it must not bring an older value back.
                if value > state.value {
                    state.value = value;
                    if let Ok(mut cache) = self.keys.write() {
                        cache.clear();
                    }
                }
                Ok(state.value)
            }
            Err(err) => {
                // Not claimed any more: the next request reads again.
                state.checked_at = None;
                tracing::debug!(known, "key generation read failed");
                Err(err.into())
            }
        }
    }

    /// Forgets every cached key and the known generation: called after this process revokes a
    /// key, so the revocation is in force here at once.
    pub fn forget_keys(&self) {
        if let Ok(mut known) = self.generation.lock() {
            known.checked_at = None;
        }
        if let Ok(mut cache) = self.keys.write() {
            cache.clear();
        }
    }

    /// 429 while the address's failed-auth budget is spent: no database look-up for it.
    fn refuse_over_budget(&self, address: IpAddr) -> Result<(), ApiError> {
        let Ok(over) = self.over_budget.lock() else {
            return Ok(());
        };
        match over.get(&address) {
            Some(until) if *until > Instant::now() => Err(ApiError::RateLimited {
                retry_after_secs: until
                    .saturating_duration_since(Instant::now())
                    .as_secs_f64()
                    .ceil()
                    .max(1.0) as u64,
            }),
            _ => Ok(()),
        }
    }

    /// Spends one failed look-up of the address; 429 (and later look-ups refused until the
    /// budget refills) when none was left.
    fn count_failed_auth(&self, address: IpAddr) -> Result<(), ApiError> {
        let Some(limiter) = &self.failed_auth else {
            return Ok(());
        };
        let checked = limiter.check_key(&address);
        if limiter.len() > MAX_TRACKED_ADDRESSES {
            limiter.retain_recent();
        }
        let Err(not_until) = checked else {
            return Ok(());
        };
        let wait = not_until.wait_time_from(governor::clock::Clock::now(
            &governor::clock::DefaultClock::default(),
        ));
        if let Ok(mut over) = self.over_budget.lock() {
            if over.len() >= MAX_TRACKED_ADDRESSES {
                let now = Instant::now();
                over.retain(|_, until| *until > now);
                if over.len() >= MAX_TRACKED_ADDRESSES {
                    over.clear();
                }
            }
            over.insert(address, Instant::now() + wait);
        }
        Err(ApiError::RateLimited {
            retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
        })
    }

    fn throttle(&self, key_id: Uuid) -> Result<(), ApiError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        limiter.check_key(&key_id).map_err(|not_until| {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ));
            ApiError::RateLimited {
                retry_after_secs: wait.as_secs().max(1),
            }
        })
    }
}

/// How long a key the database did not know is refused without asking it again.
const UNKNOWN_KEY_TTL: Duration = Duration::from_secs(5);
/// Unknown key hashes remembered at most (about 1 MiB).
const MAX_UNKNOWN_KEYS: usize = 10_000;
/// Client addresses the failed-auth budget tracks before it forgets the idle ones.
const MAX_TRACKED_ADDRESSES: usize = 100_000;

/// A bounded, short-lived memory of key hashes the database did not know.
#[derive(Default)]
struct UnknownKeys {
    seen: std::sync::Mutex<HashMap<String, Instant>>,
}

impl UnknownKeys {
    /// Whether `hash` was unknown less than [`UNKNOWN_KEY_TTL`] ago.
    fn contains(&self, hash: &str) -> bool {
        self.seen.lock().is_ok_and(|seen| {
            seen.get(hash)
                .is_some_and(|at| at.elapsed() < UNKNOWN_KEY_TTL)
        })
    }

    /// Remembers `hash` as unknown; when full, expired entries go first, then all of them
    /// (the memory stays bounded whatever a client sends).
    fn insert(&self, hash: String) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if seen.len() >= MAX_UNKNOWN_KEYS {
            seen.retain(|_, at| at.elapsed() < UNKNOWN_KEY_TTL);
            if seen.len() >= MAX_UNKNOWN_KEYS {
                seen.clear();
            }
        }
        seen.insert(hash, Instant::now());
    }
}

/// The address a failed-auth budget counts: an IPv4 address, or an IPv6 /64 (which one host
/// can fill).
fn client_address(client: Option<IpAddr>) -> IpAddr {
    match client {
        Some(IpAddr::V6(v6)) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        Some(v4) => v4,
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    }
}

/// The authenticated caller: a workspace in one mode.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub workspace_id: WorkspaceId,
    pub workspace_created_at: i64,
    pub mode: Mode,
}

impl Caller {
    /// The scope of every read and write this caller makes.
    pub fn scope(&self) -> Scope {
        Scope {
            workspace_id: self.workspace_id,
            mode: self.mode,
        }
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Ready<Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            req.extensions()
                .get::<Caller>()
                .copied()
                .ok_or(ApiError::MissingApiKey),
        )
    }
}

/// Paths under /v1 that authenticate otherwise (the phone WebSocket uses its device token).
fn is_public(path: &str) -> bool {
    path == "/v1/phones/connect"
}

/// Authenticates every /v1 request before its body is read, then applies the per-key rate.
pub async fn authenticate(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if !is_public(req.path()) {
        let state = req
            .app_data::<web::Data<AppState>>()
            .cloned()
            .ok_or_else(|| ApiError::Internal("application state missing".into()))?;
        let key = req
            .headers()
            .get("x-api-key")
            .ok_or(ApiError::MissingApiKey)?
            .to_str()
            .map_err(|_| ApiError::InvalidApiKey)?
            .trim()
            .to_string();
        if key.is_empty() {
            return Err(ApiError::MissingApiKey.into());
        }
        let client = req.peer_addr().map(|addr| addr.ip());
        let grant = state.resolve_key(&key, client).await?;
        state.throttle(grant.key_id)?;
        req.extensions_mut().insert(Caller {
            workspace_id: grant.workspace_id,
            workspace_created_at: grant.workspace_created_at,
            mode: grant.mode,
        });
    }
    next.call(req).await
}

/// A JSON body parsed with the envelope's errors: 413 over 2 MiB, 400 invalid_json for text
/// that is not JSON or a field of the wrong type (naming the field).
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest for JsonBody<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<JsonBody<T>, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload);
        Box::pin(async move { parse_json(&body.await?).map(JsonBody) })
    }
}

/// A JSON body that may be left out: `None` for an empty (or blank) body, otherwise read and
/// refused exactly like [`JsonBody`].
pub struct OptionalJsonBody<T>(pub Option<T>);

impl<T: DeserializeOwned + 'static> FromRequest for OptionalJsonBody<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<OptionalJsonBody<T>, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload);
        Box::pin(async move {
            let body = body.await?;
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(OptionalJsonBody(None));
            }
            parse_json(&body).map(|value| OptionalJsonBody(Some(value)))
        })
    }
}

/// Reads a request body for JSON parsing with the envelope's errors: 413 over 2 MiB (declared
/// or read), and a multipart body refused unread.
pub(crate) fn read_body(
    req: &HttpRequest,
    payload: &mut Payload,
) -> LocalBoxFuture<'static, Result<web::BytesMut, ApiError>> {
    // docs/api.md, Errors: `invalid_json` is for a body that is not JSON, whatever it was labelled.
    // So a JSON body is read as JSON under any content type (curl's `-d` sends a form type),
    // and only a multipart body, which cannot be JSON, is refused before reading it.
    let content_type_ok = !matches!(
        req.mime_type(),
        Ok(Some(mime)) if mime.type_() == "multipart"
    );
    let declared_too_large = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|len| len > MAX_BODY_BYTES);
    // The default applies to an app built without the state (none in the server).
    let body_timeout = req
        .app_data::<web::Data<AppState>>()
        .map_or(DEFAULT_BODY_TIMEOUT, |state| {
            state.settings.server.body_timeout
        });
    let mut payload = payload.take();
    Box::pin(async move {
        if declared_too_large {
            return Err(ApiError::PayloadTooLarge);
        }
        if !content_type_ok {
            return Err(ApiError::InvalidJson {
                message: "the body must be JSON, not multipart".into(),
                field: None,
            });
        }
        let read = async {
            let mut body = web::BytesMut::new();
            use futures_util::StreamExt;
            while let Some(chunk) = payload.next().await {
                let chunk = chunk.map_err(|_| ApiError::InvalidJson {
                    message: "the request body could not be read".into(),
                    field: None,
                })?;
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(ApiError::PayloadTooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        // A whole-body deadline (docs/api.md "Errors"): a client trickling its body holds a
        // connection and a buffer for no longer than this. actix-http's own request timeout
        // covers the head only.
        let outcome = actix_web::rt::time::timeout(body_timeout, read).await;
        match outcome {
            Ok(body) => body,
            Err(_) => {
                hold_until_closed(payload);
                Err(ApiError::RequestTimeout {
                    secs: body_timeout.as_secs(),
                })
            }
        }
    })
}

/// Longest time an abandoned body is held (see [`hold_until_closed`]), in seconds.
const ABANDONED_BODY_HOLD: Duration = Duration::from_secs(5);

/// Keeps an unfinished body alive, unread, until its connection is gone. actix-http closes a
/// connection whose answer leaves a body unfinished, unless the body was dropped and is
/// chunked: then it reads the rest first, for as long as the client trickles it.
fn hold_until_closed(mut payload: Payload) {
    actix_web::rt::spawn(async move {
        use futures_util::StreamExt;
        let _ = actix_web::rt::time::timeout(ABANDONED_BODY_HOLD, async {
            while let Some(Ok(_)) = payload.next().await {}
        })
        .await;
    });
}

/// Parses JSON, naming the offending field on a type error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let deserializer = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        // A syntax error has no field (serde_path_to_error reports its position as `?`).
        let syntax = inner.is_syntax() || inner.is_eof();
        let known = !(syntax || path == "." || path.is_empty() || path.contains('?'));
        let field = known.then_some(path);
        let message = if syntax {
            format!("the request body is not valid JSON: {inner}")
        } else {
            match &field {
                Some(field) => format!("{field}: {inner}"),
                None => format!("the request body has the wrong shape: {inner}"),
            }
        };
        ApiError::InvalidJson { message, field }
    })?;
    // Only whitespace may follow the value: `{…} xx` is not a JSON text.
    deserializer.end().map_err(|err| ApiError::InvalidJson {
        message: format!("the request body is not valid JSON: {err}"),
        field: None,
    })?;
    Ok(value)
}

/// `limit` and `cursor` of every list operation.
#[derive(Debug, Clone, Copy)]
pub struct PageRequest {
    pub limit: u64,
    pub after: Option<Position>,
}

/// Default and bounds of list page sizes.
pub const DEFAULT_PAGE_SIZE: u64 = 25;
pub const MAX_PAGE_SIZE: u64 = 100;

impl PageRequest {
    /// Reads `limit` (1–100, default 25) and `cursor` from a query map.
    pub fn parse(query: &HashMap<String, String>) -> Result<PageRequest, ApiError> {
        let limit = match query.get("limit") {
            None => DEFAULT_PAGE_SIZE,
            Some(text) => match text.parse::<u64>() {
                Ok(n) if (1..=MAX_PAGE_SIZE).contains(&n) => n,
                _ => {
                    return Err(ApiError::validation(
                        "limit",
                        "limit must be an integer from 1 to 100",
                    ));
                }
            },
        };
        let after = match query.get("cursor").map(String::as_str) {
            None | Some("") => None,
            Some(cursor) => Some(decode_cursor(cursor).ok_or_else(|| {
                ApiError::validation("cursor", "cursor is not a value this API returned")
            })?),
        };
        Ok(PageRequest { limit, after })
    }
}

/// An optional query parameter read with `parse`; a value it refuses is 422 naming `name`.
pub fn query_param<T>(
    query: &HashMap<String, String>,
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
    refusal: &str,
) -> Result<Option<T>, ApiError> {
    query
        .get(name)
        .map(|value| parse(value).ok_or_else(|| ApiError::validation(name, refusal)))
        .transpose()
}

/// Opaque cursor for a (created_at, id) position.
pub fn encode_cursor(position: Position) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{}", position.created_at, position.id))
}

fn decode_cursor(cursor: &str) -> Option<Position> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (at, id) = text.split_once(':')?;
    Some(Position {
        created_at: at.parse().ok()?,
        id: Uuid::parse_str(id).ok()?,
    })
}

/// Parses a path id; anything that is not a UUID is simply not found.
pub fn parse_id(text: &str, what: &'static str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| ApiError::NotFound(what))
}

/// A required body field, or 422 naming it.
pub fn required<T>(value: Option<T>, field: &str) -> Result<T, ApiError> {
    value.ok_or_else(|| ApiError::validation(field, format!("{field} is required")))
}

/// Maps a store lookup's NotFound to the resource's 404; other failures stay as they are.
pub fn missing(what: &'static str) -> impl Fn(crate::store::StoreError) -> ApiError {
    move |err| match err {
        crate::store::StoreError::NotFound => ApiError::NotFound(what),
        other => other.into(),
    }
}

/// Answers unknown routes with the envelope.
pub async fn not_found() -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::NotFound("route"))
}

/// Answers a known route called with the wrong method.
pub async fn method_not_allowed() -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}

pub use routes::DocumentedRoute;

/// The one list of `/v1` operations: routes and the OpenAPI document are both built from it
/// (see "To add a route" in docs/architecture.md). Nothing else registers a `/v1` route.
pub fn documented_routes() -> Vec<DocumentedRoute> {
    let mut all = Vec::new();
    all.extend(messages::documented_routes());
    all.extend(phones::documented_routes());
    all.extend(contacts::documented_routes());
    all.extend(campaigns::documented_routes());
    all.extend(ai::documented_routes());
    all.extend(test_mode::documented_routes());
    all.extend(webhooks::documented_routes());
    all.extend(api_keys::documented_routes());
    all.extend(workspace::documented_routes());
    all.extend(numbers::documented_routes());
    all.extend(events::documented_routes());
    all.extend(conversations::documented_routes());
    all.extend(campaign_preview::documented_routes());
    all.extend(stats::documented_routes());
    all
}

/// Registers every route of the API.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        routes::scope(documented_routes())
            .wrap(actix_web::middleware::from_fn(authenticate))
            .default_service(web::to(not_found)),
    )
    .configure(ops::routes)
    .configure(openapi::routes)
    .configure(mobile::routes)
    .configure(thirdparty::routes);
}

/// Runs CPU-heavy request work (parsing or rendering thousands of items) on actix's blocking
/// thread pool. On the HTTP worker it would hold up every other connection of that worker,
/// phone sessions among them, and a handler that keeps its worker busy past the keep-alive
/// (5 s) also gets its connection closed right after the answer: actix-http measures the
/// keep-alive from a clock that worker updates.
pub async fn off_worker<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    web::block(work)
        .await
        .map_err(|e| ApiError::Internal(format!("blocking task failed: {e}")))?
}
