//! Live events for the portal (docs/api.md, "Live events"): `GET /v1/events/stream`, a
//! server-sent event stream of the key's workspace and mode. A `snapshot` of every phone on
//! open, then `phone.status` and `message.status` as they happen (`live_events`), and
//! a `:keepalive` comment after 15 s of silence. A stream ends within about a second of its
//! key's revocation.

use std::time::Duration;

use actix_web::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use actix_web::{HttpResponse, web};
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Ref, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::{Answer, AppState, Caller, DocumentedRoute};
use crate::actors::registry::{GetPhoneStates, PhoneState};
use crate::clock::format_ms;
use crate::error::ApiError;
use crate::live_events::{self, EventName, LiveMessageStatus, PhoneStatusOut};
use crate::store::phones;

/// Longest silence on a stream before a `:keepalive` comment (proxies close idle connections).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// The `:keepalive` comment frame.
const KEEPALIVE_FRAME: &[u8] = b":keepalive\n\n";
/// Phones a snapshot lists at most (the `phones` quota is 100 by default).
const MAX_SNAPSHOT_PHONES: u64 = 1_000;
/// How often an open stream checks that its key is still valid (the key generation behind the
/// check is read at most every 500 ms, so a revoked key's stream ends within about a second).
const KEY_CHECK: Duration = Duration::from_millis(500);
/// A refused stream may try again after this many seconds.
const RETRY_AFTER_SECS: u64 = 15;

/// The live-event operations (route registry, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    vec![DocumentedRoute::of::<__path_stream>(|| web::to(stream))]
}

/// The `snapshot` event: every phone of the workspace and mode with its live state.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotOut {
    pub phones: Vec<PhoneStatusOut>,
}

/// One event of the stream in the document (docs/api.md "Live events"), for schema-driven
/// readers: `{event, data}`, the event's name and the JSON text of its `data:` line, whose
/// shape is the `contentSchema` of `data`. The stream answer's schema is this per-event
/// schema, as OpenAPI 3.2 `itemSchema` is and as tools read `schema` of a 3.1
/// `text/event-stream` (the document stays 3.1: utoipa writes no `itemSchema`).
pub struct LiveEventItem;

/// Each event: its name, its component's name, the schema name of its `data` and what it says.
fn event_kinds() -> [(EventName, &'static str, String, &'static str); 3] {
    [
        (
            EventName::Snapshot,
            "SnapshotEvent",
            SnapshotOut::name().into_owned(),
            "First and once: every phone of the workspace and mode with its live state.",
        ),
        (
            EventName::PhoneStatus,
            "PhoneStatusEvent",
            PhoneStatusOut::name().into_owned(),
            "A phone came online or went offline.",
        ),
        (
            EventName::MessageStatus,
            "MessageStatusEvent",
            LiveMessageStatus::name().into_owned(),
            "A message's status changed.",
        ),
    ]
}

/// `{event: NAME, data: JSON text of DATA}`.
fn event_schema(name: EventName, data: &str, description: &str) -> RefOr<Schema> {
    let name: &'static str = name.into();
    // `contentSchema` (JSON Schema 2020-12, which OpenAPI 3.1 schemas are) has no utoipa
    // builder; an extension entry is written verbatim beside the object's keywords.
    let json_of_data: Extensions = [(
        "contentSchema",
        serde_json::json!({ "$ref": format!("#/components/schemas/{data}") }),
    )]
    .into_iter()
    .collect();
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
        .property(
            "event",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([name])),
        )
        .required("event")
        .property(
            "data",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(format!("The `data:` line: `{data}` as JSON text.")))
                .content_media_type("application/json")
                .extensions(Some(json_of_data)),
        )
        .required("data")
        .into()
}

impl PartialSchema for LiveEventItem {
    fn schema() -> RefOr<Schema> {
        event_kinds()
            .iter()
            .fold(OneOfBuilder::new(), |one_of, (_, component, _, _)| {
                one_of.item(Ref::from_schema_name(*component))
            })
            .description(Some(
                "One event of the stream: `snapshot`, `phone.status` or `message.status`.",
            ))
            .into()
    }
}

impl ToSchema for LiveEventItem {
    fn name() -> std::borrow::Cow<'static, str> {
        "LiveEvent".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        for (name, component, data, description) in event_kinds() {
            schemas.push((component.into(), event_schema(name, &data, description)));
        }
        schemas.push((SnapshotOut::name().into_owned(), SnapshotOut::schema()));
        SnapshotOut::schemas(schemas);
        schemas.push((
            PhoneStatusOut::name().into_owned(),
            PhoneStatusOut::schema(),
        ));
        PhoneStatusOut::schemas(schemas);
        schemas.push((
            LiveMessageStatus::name().into_owned(),
            LiveMessageStatus::schema(),
        ));
        LiveMessageStatus::schemas(schemas);
    }
}

/// Opens the live event stream (`text/event-stream`). Events: `snapshot` (`SnapshotOut`, once,
/// first), `phone.status` (`PhoneStatusOut`), `message.status` (`LiveMessageStatus`); a reader
/// that falls behind misses events rather than holding the server's memory.
#[utoipa::path(
    get,
    path = "/v1/events/stream",
    tag = "events",
    responses(
        (status = 200, description = "A server-sent event stream: `event: snapshot` then `phone.status` and `message.status` events, each with one JSON `data` line; `:keepalive` comments after 15 s of silence. The schema is that of one event (`LiveEvent`: `{event, data}`, `data` the JSON text of the event's payload). Five streams of one workspace and mode are open at most (429 `rate_limited` beyond). The stream ends within about a second of its key's revocation.", content_type = "text/event-stream", body = LiveEventItem)
    )
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn stream(state: web::Data<AppState>, caller: Caller) -> Answer {
    // Subscribed before the snapshot is read, so no change between the two is missed.
    let receiver = state
        .live
        .subscribe(caller.scope())
        .map_err(|_| ApiError::RateLimited {
            retry_after_secs: RETRY_AFTER_SECS,
        })?;
    let (rows, _) = phones::list(&state.db, caller.scope(), None, MAX_SNAPSHOT_PHONES).await?;
    let live = state
        .registry
        .send(GetPhoneStates {
            ids: rows.iter().map(|p| p.id).collect(),
        })
        .await
        .unwrap_or_default();
    let snapshot = SnapshotOut {
        phones: rows
            .iter()
            .map(|phone| {
                let now = live.get(&phone.id);
                PhoneStatusOut {
                    id: phone.id,
                    online: now.is_some_and(|s| s.online),
                    last_seen_at: PhoneState::last_seen(now, phone.last_seen_at).map(format_ms),
                }
            })
            .collect(),
    };
    let first = live_events::frame(EventName::Snapshot, &snapshot);
    let open = OpenStream {
        receiver,
        state: state.clone(),
        key_id: caller.key_id,
        checked: None,
        keepalive_at: Instant::now() + KEEPALIVE,
        check_at: Instant::now() + KEY_CHECK,
    };
    let events = futures_util::stream::unfold(open, OpenStream::next_frame);
    use futures_util::StreamExt;
    let body =
        futures_util::stream::once(async move { Ok::<_, actix_web::Error>(first) }).chain(events);
    Ok(HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "text/event-stream"))
        .insert_header((CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
}

/// One open stream: its events, the key it was opened with and its two timers.
struct OpenStream {
    receiver: mpsc::Receiver<Bytes>,
    state: web::Data<AppState>,
    key_id: Uuid,
    /// The key generation the key was last found live under.
    checked: Option<i64>,
    keepalive_at: Instant,
    check_at: Instant,
}

impl OpenStream {
    /// The next frame: an event, or `:keepalive` after [`KEEPALIVE`] of silence; None (the
    /// response ends) when the hub closed the stream or the key was revoked.
    async fn next_frame(mut self) -> Option<(Result<Bytes, actix_web::Error>, OpenStream)> {
        loop {
            tokio::select! {
                frame = self.receiver.recv() => {
                    let frame = frame?;
                    self.keepalive_at = Instant::now() + KEEPALIVE;
                    return Some((Ok(frame), self));
                }
                () = tokio::time::sleep_until(self.keepalive_at.min(self.check_at)) => {}
            }
            if Instant::now() >= self.check_at {
                if self.state.key_revoked(self.key_id, &mut self.checked).await {
                    tracing::info!(key_id = %self.key_id, "event stream ended: its key was revoked");
                    return None;
                }
                self.check_at = Instant::now() + KEY_CHECK;
            }
            if Instant::now() >= self.keepalive_at {
                self.keepalive_at = Instant::now() + KEEPALIVE;
                return Some((Ok(Bytes::from_static(KEEPALIVE_FRAME)), self));
            }
        }
    }
}
