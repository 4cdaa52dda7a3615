//! The client API's settings (docs/compat.md, Settings): `GET`, `PUT` (replace) and `PATCH`
//! (merge) of one snake_case document per workspace and mode. `webhooks.signing_key` (the key
//! SMSGate-format webhooks are signed with) and `encryption.passphrase` are stored sealed and
//! never shown.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::Value;

use super::auth::Caller;
use super::error::ClientError;
use super::wire;
use crate::api::AppState;
use crate::api::webhooks::WebhookApi;
use crate::domain::client_settings::SettingsBody;
use crate::error::ApiError;
use crate::store::settings::{self, StoredSettings};

/// Largest request body, in bytes: every known field fits many times over.
const MAX_BODY_BYTES: usize = 16 * 1024;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/settings", web::get().to(get))
        .route("/settings", web::put().to(put))
        .route("/settings", web::patch().to(patch));
}

/// The public view: the document without its secrets (they are never in it).
fn public(settings: StoredSettings) -> HttpResponse {
    wire::json(StatusCode::OK, Value::Object(settings.document))
}

/// The settings of the caller's workspace and mode (`{}` when none were set).
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn get(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ClientError> {
    let stored = settings::get(&state.db, caller.scope())
        .await
        .map_err(ClientError::from)?;
    Ok(public(stored))
}

async fn write(
    state: &AppState,
    api: &WebhookApi,
    caller: &Caller,
    body: &[u8],
    replace: bool,
) -> Result<HttpResponse, ClientError> {
    let UniqueKeys(value) = serde_json::from_slice(body)
        .map_err(|e| ClientError::bad_request(format!("invalid JSON body: {e}")))?;
    let body = SettingsBody::parse(&value).map_err(|e| ClientError::bad_request(e.0))?;
    let stored = settings::apply(
        &state.db,
        caller.scope(),
        &body,
        replace,
        &api.secrets,
        state.clock.now_ms(),
    )
    .await
    .map_err(ClientError::from)?;
    Ok(public(stored))
}

/// A JSON value whose objects hold each key once: a repeated key is refused (`duplicate field`),
/// as in every `/v1` and client-API body, where serde_json's `Value` would keep the last one.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("duplicate field `{key}`")));
            }
            let UniqueKeys(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// Reads the body (after authentication) with smsgw's bounded reader: within
/// `server.body_timeout`, and refused past 16 KiB (400, as the clients expect it here).
async fn read_body(req: &HttpRequest, payload: web::Payload) -> Result<web::BytesMut, ClientError> {
    let mut payload = payload.into_inner();
    crate::api::read_body_up_to(req, &mut payload, MAX_BODY_BYTES)
        .await
        .map_err(|err| match err {
            ApiError::PayloadTooLarge => {
                ClientError::bad_request("the request body is larger than 16 KiB")
            }
            other => ClientError::from(other),
        })
}

/// Replaces the settings; a secret left out is kept.
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn put(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ClientError> {
    let body = read_body(&req, payload).await?;
    write(&state, &api, &caller, &body, true).await
}

/// Merges into the settings: given fields replace, `null` removes.
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn patch(
    state: web::Data<AppState>,
    api: web::Data<WebhookApi>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ClientError> {
    let body = read_body(&req, payload).await?;
    write(&state, &api, &caller, &body, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_repeated_in_any_object_is_refused() {
        let parse = |text: &str| serde_json::from_str::<UniqueKeys>(text).map(|u| u.0);
        let err = parse(r#"{"webhooks":{"signing_key":"k1","signing_key":"k2"}}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("duplicate field `signing_key`"), "{err}");
        assert!(parse(r#"[{"a":1},{"a":2,"b":[1.5,null,true,"x"]}]"#).is_ok());
        assert_eq!(
            parse(r#"{"a":{"b":-1}}"#).ok(),
            Some(serde_json::json!({"a":{"b":-1}}))
        );
    }
}
