//! The HTTP API: the shared state, the route list, and the small helpers every resource's
//! handlers use. Authentication (the key cache, the failed-auth budget, the `Caller`) is
//! `auth`; reading a JSON body is `body`; reading the query string is `query`; paging is
//! `page`; finding the resource a path names in the caller's scope is `scoped`. The two
//! SMSGate-compatible surfaces outside `/v1` (the client API and the Android app's device API)
//! are `smsgate`.
//!
//! # A handler's toolbox
//!
//! The pieces a handler calls rather than rewrites; each item's own docs say more.
//!
//! - **Answer**: a handler returns [`Answer`]; a success is `error::success` with the
//!   resource's `…Out` (see "To add a route" in docs/architecture.md), a delete's answer
//!   [`schemas::deleted`].
//! - **Body**: [`JsonBody`], or [`OptionalJsonBody`] for a body that may be left out, holds it
//!   to its size limit and to `server.body_timeout`; `read_body_up_to` for a route with a
//!   smaller cap (the device API's). [`required`] turns a missing field into 422 naming it.
//! - **Query string**: [`QueryParams`] reads it once; `filter::<T>()` reads an enum filter
//!   (declared once with `query_filters!`), `flag` a boolean, `param` anything else. A refused
//!   value is 422 naming the parameter.
//! - **Path ids**: `AppState::find` reads the resource a path id names in the caller's scope
//!   (a bad or unknown id is the resource's 404; `find_id` when the id is already parsed; a
//!   stored type names its store read and 404 once, with `store::scoped!`). On their own:
//!   [`parse_id`] (into a `Uuid` or a `domain::ids` type) and [`missing`] (a store write's
//!   NotFound, a second path id).
//! - **Lists**: take [`PageRequest`] as an extractor (a list with filters parses it from its
//!   [`QueryParams`] with `PageRequest::parse`), read one [`page::Page`] with
//!   [`PageRequest::read`] over `store::newest_first`, or `AppState::list_scoped` for a plain
//!   list of the caller's scope; map the rows with [`page::Page::map`] and answer with
//!   [`page::Page::answer`] in the page struct `page_out!` declares. The
//!   `#[utoipa::path]` names [`page::PageParams`] for `limit` and `cursor`.
//! - **Creates with a `request_id`** (campaigns, contacts, phones, webhook endpoints, bulk
//!   sends): `idempotent::create_once` runs the create function at most once per key; the body
//!   type declares its operation beside itself with `create_body!` (docs/api.md, "Idempotent creates").
//! - **CPU work over thousands of items** (a campaign's numbers and texts, a contacts
//!   import): [`off_worker`], so the HTTP worker is not held.
//! - **A resource whose module would mix jobs is a folder**: `campaigns` has its handlers in
//!   `mod.rs`, its bodies in `wire.rs`, and the checks a create and a preview share in
//!   `prepare.rs`.

pub mod ai;
pub mod api_keys;
mod auth;
mod body;
pub mod campaign_preview;
pub mod campaigns;
pub mod contacts;
pub mod conversations;
mod envelope;
pub mod events;
mod fields;
mod idempotent;
pub mod messages;
pub mod numbers;
pub mod openapi;
pub mod ops;
pub mod origin;
pub mod page;
pub mod phone_stats;
pub mod phone_ws;
pub mod phones;
pub mod pools;
mod query;
pub mod routes;
pub mod schemas;
mod scoped;
mod sending;
pub mod smsgate;
pub mod stats;
pub mod test_mode;
pub mod webhooks;
pub mod workspace;

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use actix::Addr;
use actix_web::web;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use auth::{CachedKey, KnownGeneration, UnknownKeys};
pub use auth::{Caller, authenticate};
pub use body::{JsonBody, MAX_BODY_BYTES, OptionalJsonBody, parse_json};
pub(crate) use body::{read_body, read_body_up_to};
pub use page::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, PageRequest, encode_cursor};
pub use query::QueryParams;

use crate::actors::registry::Registry;
use crate::clock::SharedClock;
use crate::config::Settings;
use crate::error::ApiError;
use crate::store::writer::Writer;

/// Everything a handler may need, shared by all workers.
pub struct AppState {
    pub db: DatabaseConnection,
    pub writer: Writer,
    pub registry: Addr<Registry>,
    /// The campaigns' supervisor (`actors::campaign::Campaigns`).
    pub campaigns: Addr<crate::actors::campaign::Campaigns>,
    pub settings: Arc<Settings>,
    pub clock: SharedClock,
    /// The phone sessions running (see `phone_session::LiveSessions`).
    pub sessions: Arc<crate::actors::phone_session::LiveSessions>,
    /// What phone transports tell the registry (`registry::TransportRecipients`).
    pub transports: Arc<crate::actors::registry::TransportRecipients>,
    /// The device API's transport state per phone (`actors::device_link`).
    pub device_links: crate::actors::device_link::DeviceLinks,
    /// The portal's live event streams (`live_events`); the server's own hub is set
    /// by `startup` after construction.
    pub live: Arc<crate::live_events::LiveEvents>,
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
    pub cluster: Option<crate::cluster::Cluster>,
}

impl AppState {
    /// What the send use case needs, from this state.
    pub fn send_deps(&self) -> crate::send::SendDeps {
        crate::send::SendDeps {
            writer: self.writer.clone(),
            registry: self.registry.clone(),
            clock: self.clock.clone(),
            settings: self.settings.clone(),
            db: self.db.clone(),
        }
    }

    /// Builds the shared state; the per-key limiter follows `limits.api_per_second`.
    pub fn new(
        db: DatabaseConnection,
        writer: Writer,
        registry: Addr<Registry>,
        campaigns: Addr<crate::actors::campaign::Campaigns>,
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
        let transports = Arc::new(crate::actors::registry::TransportRecipients::of(&registry));
        AppState {
            device_links: crate::actors::device_link::DeviceLinks::new(transports.clone()),
            transports,
            db,
            writer,
            registry,
            campaigns,
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
}

/// What a handler answers: its response, or the error the envelope renders.
pub type Answer = Result<actix_web::HttpResponse, ApiError>;

/// Parses a path id (a `Uuid` or one of the `domain::ids` types); anything that is not a
/// UUID is simply not found.
pub fn parse_id<T: std::str::FromStr>(text: &str, what: &'static str) -> Result<T, ApiError> {
    text.parse().map_err(|_| ApiError::NotFound(what))
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
pub async fn not_found() -> Answer {
    Err(ApiError::NotFound("route"))
}

/// Answers a known route called with the wrong method.
pub async fn method_not_allowed() -> Answer {
    Err(ApiError::MethodNotAllowed)
}

pub use routes::DocumentedRoute;

/// The one list of `/v1` operations: routes and the OpenAPI document are both built from it
/// (see "To add a route" in docs/architecture.md). Nothing else registers a `/v1` route.
pub fn documented_routes() -> Vec<DocumentedRoute> {
    let mut all = Vec::new();
    all.extend(messages::documented_routes());
    all.extend(phones::documented_routes());
    all.extend(phone_stats::documented_routes());
    all.extend(pools::documented_routes());
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
    .configure(smsgate::device::routes)
    .configure(smsgate::client::routes);
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
        .map_err(|e| ApiError::internal_context("blocking task failed", e))?
}
