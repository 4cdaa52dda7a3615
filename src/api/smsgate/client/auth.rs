//! Who calls the client API: `Authorization: Bearer <API key>`, or `Basic login:password`
//! with the API key as the password (or as the login when the password is empty, as Stripe
//! clients send it). The key is resolved through the `/v1` key cache, so a call costs no slow
//! hash, and the same per-key rate and failed-auth budget apply (docs/compat.md,
//! Authentication).

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{FromRequest, HttpRequest, web};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use uuid::Uuid;

use super::error::ClientError;
use crate::api::AppState;
use crate::domain::ids::WorkspaceId;
use crate::domain::status::Mode;
use crate::store::scoped::Scope;

/// The authenticated caller: a workspace in the mode of its key.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub workspace_id: WorkspaceId,
    pub mode: Mode,
    pub key_id: Uuid,
    pub workspace_created_at: i64,
}

impl Caller {
    /// The scope of every read and write this caller makes.
    pub fn scope(&self) -> Scope {
        Scope {
            workspace_id: self.workspace_id,
            mode: self.mode,
        }
    }

    /// The same caller as the `/v1` API knows it (for the shared send helpers).
    pub fn as_api_caller(&self) -> crate::api::Caller {
        crate::api::Caller {
            workspace_id: self.workspace_id,
            workspace_created_at: self.workspace_created_at,
            mode: self.mode,
            key_id: self.key_id,
        }
    }
}

/// The API key an `Authorization` header carries, or why there is none.
pub fn credential(header: Option<&str>) -> Result<String, ClientError> {
    let header = header
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .ok_or_else(|| ClientError::unauthorized("the Authorization header is missing"))?;
    let (scheme, value) = header.split_once(' ').unwrap_or((header, ""));
    let value = value.trim();
    let key = if scheme.eq_ignore_ascii_case("bearer") {
        value.to_string()
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = STANDARD
            .decode(value)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| ClientError::unauthorized("the Basic credentials are not valid"))?;
        let (login, password) = decoded.split_once(':').unwrap_or((&decoded, ""));
        if password.is_empty() {
            login.to_string()
        } else {
            password.to_string()
        }
    } else {
        return Err(ClientError::unauthorized(
            "the Authorization header must be Basic or Bearer",
        ));
    };
    if key.trim().is_empty() {
        return Err(ClientError::unauthorized("the API key is missing"));
    }
    Ok(key.trim().to_string())
}

impl FromRequest for Caller {
    type Error = ClientError;
    type Future = Pin<Box<dyn Future<Output = Result<Caller, ClientError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let header = req
            .headers()
            .get(AUTHORIZATION)
            .map(|v| v.to_str().map(str::to_string));
        let client = state
            .as_ref()
            .and_then(|state| crate::api::origin::client_ip(&state.settings, req));
        Box::pin(async move {
            let state = state.ok_or_else(|| ClientError::internal("application state missing"))?;
            let header = match header {
                Some(Ok(text)) => Some(text),
                Some(Err(_)) => {
                    return Err(ClientError::unauthorized(
                        "the Authorization header is not valid",
                    ));
                }
                None => None,
            };
            let key = credential(header.as_deref())?;
            let grant = state.resolve_key(&key, client).await?;
            state.throttle(grant.key_id)?;
            Ok(Caller {
                workspace_id: grant.workspace_id,
                mode: grant.mode,
                key_id: grant.key_id,
                workspace_created_at: grant.workspace_created_at,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(pair: &str) -> String {
        format!("Basic {}", STANDARD.encode(pair))
    }

    #[test]
    fn the_key_is_read_from_bearer_and_basic() {
        let key = "sk_live_abc";
        assert_eq!(
            credential(Some("Bearer sk_live_abc")).ok().as_deref(),
            Some(key)
        );
        assert_eq!(
            credential(Some(&basic("me:sk_live_abc"))).ok().as_deref(),
            Some(key)
        );
        assert_eq!(
            credential(Some(&basic("sk_live_abc:"))).ok().as_deref(),
            Some(key)
        );
        assert_eq!(
            credential(Some(&basic("sk_live_abc"))).ok().as_deref(),
            Some(key)
        );
    }

    #[test]
    fn missing_or_malformed_credentials_are_refused() {
        assert!(credential(None).is_err());
        assert!(credential(Some("")).is_err());
        assert!(credential(Some("Bearer ")).is_err());
        assert!(credential(Some("Basic !!!")).is_err());
        assert!(credential(Some(&basic(":"))).is_err());
        assert!(credential(Some("Token sk_live_abc")).is_err());
    }
}
