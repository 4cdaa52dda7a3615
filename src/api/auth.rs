//! Authentication of `/v1`: the `x-api-key` header resolved through a cache of keys (trusted
//! for a minute, and only under the key generation they were read under, so a revocation
//! anywhere applies within a second), a short memory of unknown keys, the per-address
//! failed-auth budget and the per-key rate (docs/api.md, "Authentication and modes").

use std::collections::HashMap;
use std::future::{Ready, ready};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use uuid::Uuid;

use super::AppState;
use crate::domain::ids::WorkspaceId;
use crate::domain::keys;
use crate::domain::network::budget_address;
use crate::domain::status::Mode;
use crate::error::ApiError;
use crate::store::scoped::Scope;
use crate::store::workspaces::{self, KeyGrant};

/// How long a resolved API key is trusted without asking the database again (a revocation
/// ends that trust sooner: see [`KEY_GENERATION_CHECK`]).
const KEY_CACHE_TTL: Duration = Duration::from_secs(60);
/// How often a process reads the key generation; a key revoked by another process (or by
/// `smsgw key revoke`) is refused at most this long after its revocation committed, plus one
/// read (docs/api.md, "API keys").
const KEY_GENERATION_CHECK: Duration = Duration::from_millis(500);

/// A resolved key in the cache, with when and under which key generation it was read.
pub(super) struct CachedKey {
    grant: KeyGrant,
    read_at: Instant,
    generation: i64,
}

/// The key generation this process last read, and when it claimed the next read.
#[derive(Default)]
pub(super) struct KnownGeneration {
    value: i64,
    checked_at: Option<Instant>,
}

impl AppState {
    /// Resolves an API key through the cache; misses ask the database unless the client
    /// address spent its failed-auth budget. A key the database does not know is answered 401
    /// from memory for [`UNKNOWN_KEY_TTL`]; a key created by the CLI still works at once, as its
    /// hash was never presented before it existed (docs/api.md "Authentication and modes"). A
    /// cached key counts only while the key generation it was read under is the current one, so
    /// a revocation anywhere ends it.
    pub(in crate::api) async fn resolve_key(
        &self,
        key: &str,
        client: Option<IpAddr>,
    ) -> Result<KeyGrant, ApiError> {
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
                .map_err(|_| ApiError::internal("key generation lock poisoned"))?;
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
            .map_err(|_| ApiError::internal("key generation lock poisoned"))?;
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

    /// Whether the key `key_id` has been revoked. The database is asked only when the key
    /// generation differs from `checked` (the generation the key was last found live under,
    /// None at first), which a live answer then advances; so an open stream that checks every
    /// half second costs one look-up per revocation anywhere. A failed read answers false: the
    /// next check asks again.
    pub(in crate::api) async fn key_revoked(
        &self,
        key_id: Uuid,
        checked: &mut Option<i64>,
    ) -> bool {
        let Ok(generation) = self.key_generation().await else {
            return false;
        };
        if *checked == Some(generation) {
            return false;
        }
        // The generation was read before the key: a revocation committed after that read
        // moves the generation past it, so the next check asks again.
        match workspaces::key_is_live(&self.db, key_id).await {
            Ok(true) => {
                *checked = Some(generation);
                false
            }
            Ok(false) => true,
            Err(err) => {
                tracing::debug!(error = %err, "key look-up for an open stream failed");
                false
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

    pub(in crate::api) fn throttle(&self, key_id: Uuid) -> Result<(), ApiError> {
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

/// The failed-auth budget of the other credentials: device tokens (the device API and the phone
/// WebSocket) and the device API's inbound path secrets (docs/api.md, "Authentication and
/// modes"). The caller asks [`AppState::refuse_spent_budget`] before its database look-up and
/// reports a look-up that found nothing with [`AppState::spend_failed_auth`].
impl AppState {
    /// 429 (`RateLimited`) while the client address's failed-auth budget is spent.
    pub(in crate::api) fn refuse_spent_budget(
        &self,
        client: Option<IpAddr>,
    ) -> Result<(), ApiError> {
        self.refuse_over_budget(client_address(client))
    }

    /// Spends one failed look-up of the client address; 429 when none was left.
    pub(in crate::api) fn spend_failed_auth(&self, client: Option<IpAddr>) -> Result<(), ApiError> {
        self.count_failed_auth(client_address(client))
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
pub(super) struct UnknownKeys {
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

/// The address a failed-auth budget counts the client under (`domain::network::budget_address`:
/// IPv4, IPv4-mapped as IPv4, IPv6 by /64).
fn client_address(client: Option<IpAddr>) -> IpAddr {
    client.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), budget_address)
}

/// The authenticated caller: a workspace in one mode, through one API key.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub workspace_id: WorkspaceId,
    pub workspace_created_at: i64,
    pub mode: Mode,
    /// The key the request came with (a long-lived response ends when it is revoked).
    pub key_id: Uuid,
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
pub(in crate::api) fn is_public(path: &str) -> bool {
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
            .ok_or_else(|| ApiError::internal("application state missing"))?;
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
        let client = super::origin::client_ip(&state.settings, req.request());
        let grant = state.resolve_key(&key, client).await?;
        state.throttle(grant.key_id)?;
        req.extensions_mut().insert(Caller {
            workspace_id: grant.workspace_id,
            workspace_created_at: grant.workspace_created_at,
            mode: grant.mode,
            key_id: grant.key_id,
        });
    }
    next.call(req).await
}
