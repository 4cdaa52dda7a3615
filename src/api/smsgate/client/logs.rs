//! `GET /logs?from&to` (docs/compat.md, Logs): where the upstream server answers 501, smsgw
//! lists what its own records hold: the timeline entries of the caller's messages created in
//! the window, newest first.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use entity::{message_events, messages};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::auth::Caller;
use super::error::ClientError;
use super::wire;
use crate::api::AppState;
use crate::domain::change::ChangeKind;
use crate::domain::status::MessageStatus;

/// Entries one answer holds at most (and messages it reads them from).
pub const MAX_ENTRIES: u64 = 100;
/// The window when `from` is not given: the last day.
const DEFAULT_WINDOW_MS: i64 = 24 * 3600 * 1000;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/logs", web::get().to(list));
}

#[derive(Debug, Deserialize)]
struct LogsQuery {
    from: Option<String>,
    to: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EntryOut {
    id: i64,
    created_at: String,
    module: &'static str,
    priority: &'static str,
    message: String,
    context: serde_json::Value,
}

async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<LogsQuery>,
) -> Result<HttpResponse, ClientError> {
    let time = |value: &Option<String>, name: &str| {
        value
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(|v| {
                wire::parse_timestamp(v)
                    .map(|t| t.timestamp_millis())
                    .ok_or_else(|| {
                        ClientError::bad_request(format!("{name} must be an RFC 3339 timestamp"))
                    })
            })
            .transpose()
    };
    let to = time(&query.to, "to")?.unwrap_or_else(|| state.clock.now_ms());
    let from = time(&query.from, "from")?.unwrap_or(to.saturating_sub(DEFAULT_WINDOW_MS));
    if to < from {
        return Err(ClientError::bad_request("to must not be before from"));
    }
    let scope = caller.scope();
    let recent: Vec<(Uuid, String, String)> = messages::Entity::find()
        .select_only()
        .column(messages::Column::Id)
        .column(messages::Column::ToNumber)
        .column(messages::Column::Direction)
        .filter(messages::Column::WorkspaceId.eq(scope.workspace_id))
        .filter(messages::Column::TestMode.eq(scope.mode.is_test()))
        .filter(messages::Column::CreatedAt.between(from, to))
        .order_by_desc(messages::Column::CreatedAt)
        .limit(MAX_ENTRIES)
        .into_tuple()
        .all(&state.db)
        .await
        .map_err(ClientError::internal)?;
    let ids: Vec<Uuid> = recent.iter().map(|(id, _, _)| *id).collect();
    let events = message_events::Entity::find()
        .filter(message_events::Column::MessageId.is_in(ids))
        .filter(message_events::Column::At.between(from, to))
        .order_by_desc(message_events::Column::At)
        .order_by_desc(message_events::Column::Id)
        .limit(MAX_ENTRIES)
        .all(&state.db)
        .await
        .map_err(ClientError::internal)?;
    let out: Vec<EntryOut> = events
        .into_iter()
        .map(|event| {
            let failed = ChangeKind::Moved(MessageStatus::Failed).as_str();
            let expired = ChangeKind::Moved(MessageStatus::Expired).as_str();
            let priority = match event.kind.as_str() {
                kind if kind == failed || kind == expired => "ERROR",
                kind if kind == ChangeKind::AttemptFailed.as_str() => "WARN",
                _ => "INFO",
            };
            let number = recent
                .iter()
                .find(|(id, _, _)| *id == event.message_id)
                .map(|(_, to, _)| to.clone());
            let detail = event.detail.clone().unwrap_or_default();
            let message = if detail.is_empty() {
                format!("message {}: {}", event.message_id, event.kind)
            } else {
                format!("message {}: {}: {detail}", event.message_id, event.kind)
            };
            EntryOut {
                id: event.id,
                created_at: wire::timestamp(event.at),
                module: "messages",
                priority,
                message,
                context: json!({
                    "messageId": event.message_id,
                    "event": event.kind,
                    "status": event.status,
                    "phoneNumber": number,
                }),
            }
        })
        .collect();
    Ok(wire::json(StatusCode::OK, out))
}
