//! Messages API: send, bulk send, get with timeline, list, batch status, cancel.

use crate::api::page::PageParams;
use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::envelope_of;
use super::fields::{
    from_field, parse_content, parse_device_id, parse_from, parse_number, parse_timestamp,
};
use super::idempotent::{Created, create_body, create_once};
use super::page::page_out;
use super::sending::{send_error, sender};
use super::{
    Answer, AppState, Caller, DocumentedRoute, JsonBody, PageRequest, QueryParams, required,
};
use crate::actors::registry::Cancel;
use crate::clock::format_ms;
use crate::domain::ids::PhoneId;
use crate::domain::phone_number::PhoneNumber;
use crate::domain::status::MessageStatus;
use crate::error::{ApiError, ErrorCode, success};
use crate::send::{
    self, BulkSendRequest, MAX_BULK_RECIPIENTS, RecipientCount, RequestId, SendRequest,
};
use crate::store::messages::{self, ListFilter, Message, MessageEvent, Record};
use crate::store::writer::Transition;

/// Most ids of one batch-status call.
pub const MAX_BATCH_STATUS_IDS: usize = 100;

/// The message operations (route list, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    let send_errors = [
        ValidationFailed,
        InvalidPhoneNumber,
        ContentTooLong,
        PremiumRateBlocked,
        RecipientOptedOut,
        NoDeviceAvailable,
        QuotaExceeded,
        NewAccountLimit,
        DailyQuotaExceeded,
    ];
    vec![
        DocumentedRoute::of::<__path_send>(|| web::to(send))
            .errors(&send_errors)
            .errors(&[DuplicateRequest]),
        DocumentedRoute::of::<__path_bulk_send>(|| web::to(bulk_send))
            .errors(&send_errors)
            .errors(&[DuplicateRequest]),
        DocumentedRoute::of::<__path_batch_status>(|| web::to(batch_status))
            .errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_list>(|| web::to(list))
            .errors(&[ValidationFailed, InvalidPhoneNumber]),
        DocumentedRoute::of::<__path_get>(|| web::to(get)),
        DocumentedRoute::of::<__path_cancel>(|| web::to(cancel)).errors(&[InvalidState]),
    ]
}

/// Body of `POST /v1/messages/send`. Fields are optional in Rust so a missing one is a 422
/// naming it; the document marks them required.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SendMessageIn {
    /// E.164 number of your phone that sends; exactly one of this and `from_pool`.
    #[schema(nullable = false, example = "+14155550100")]
    pub from_number: Option<String>,
    /// A sender pool's id or name (docs/api.md, "Pools"): the pool chooses the line; exactly
    /// one of this and `from_number`.
    #[schema(nullable = false)]
    pub from_pool: Option<String>,
    /// E.164 recipient.
    #[schema(required = true, nullable = false, example = "+14155550123")]
    pub to_number: Option<String>,
    /// Up to 10 segments.
    #[schema(required = true, nullable = false)]
    pub content: Option<String>,
    /// Idempotency key, 1–255 characters, unique per workspace and mode.
    #[schema(nullable = false)]
    pub request_id: Option<String>,
    /// Hold the message until then (RFC 3339 with offset).
    #[schema(nullable = false, format = DateTime)]
    pub scheduled_for: Option<String>,
    /// Send through this phone only.
    #[schema(nullable = false, value_type = Option<uuid::Uuid>)]
    pub device_id: Option<String>,
}

/// Body of `POST /v1/messages/bulk-send`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct BulkSendIn {
    /// Exactly one of this and `from_pool`.
    #[schema(nullable = false)]
    pub from_number: Option<String>,
    /// A sender pool's id or name: each recipient's line is chosen in it.
    #[schema(nullable = false)]
    pub from_pool: Option<String>,
    /// 1–500 E.164 numbers; duplicates are sent once.
    #[schema(required = true, nullable = false)]
    pub to_numbers: Option<Vec<String>>,
    #[schema(required = true, nullable = false)]
    pub content: Option<String>,
    #[schema(nullable = false, value_type = Option<uuid::Uuid>)]
    pub device_id: Option<String>,
    /// Idempotency key (1–255 characters): a repeat answers 409 `duplicate_request` with the
    /// first bulk send's first message id in `data.id` (docs/api.md, "Idempotent creates").
    pub request_id: Option<String>,
}

create_body!(BulkSendIn => BulkSend, "bulk send");

/// Body of `POST /v1/messages/batch-status`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct BatchStatusIn {
    /// 1–100 message ids.
    #[schema(required = true, nullable = false)]
    pub message_ids: Option<Vec<String>>,
}

/// A message as every API response and webhook shows it (docs/api.md, Messages).
pub fn message_out(m: &Message) -> Record<'_> {
    m.view()
}

envelope_of!(MessageEnvelope, Record<'static>, "One message.");

/// One transition of a message's timeline.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct MessageEventOut<'a> {
    /// queued, sending, sent, delivered, failed, expired, canceled, content_removed, …
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub status: &'a str,
    #[schema(format = DateTime)]
    pub at: String,
    pub detail: Option<&'a str>,
}

impl<'a> From<&'a MessageEvent> for MessageEventOut<'a> {
    fn from(e: &'a MessageEvent) -> Self {
        MessageEventOut {
            kind: &e.kind,
            status: &e.status,
            at: format_ms(e.at),
            detail: e.detail.as_deref(),
        }
    }
}

/// A message with its timeline, oldest event first.
#[derive(Serialize, ToSchema)]
pub struct MessageDetailOut<'a> {
    #[serde(flatten)]
    pub message: Record<'a>,
    pub events: Vec<MessageEventOut<'a>>,
}
envelope_of!(
    MessageDetailEnvelope,
    MessageDetailOut<'static>,
    "One message with its events."
);

page_out!(
    /// A page of messages, newest first.
    MessagePage<'a>, messages: Record<'a>
);
envelope_of!(
    MessagePageEnvelope,
    MessagePage<'static>,
    "A page of messages."
);

/// Result of a bulk send.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct BulkSendOut {
    /// Messages created (duplicate numbers are sent once).
    pub count: u64,
    pub message_ids: Vec<Uuid>,
}
envelope_of!(
    BulkSendEnvelope,
    BulkSendOut,
    "Messages queued by a bulk send."
);

/// The status of one message.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct MessageStatusOut {
    pub id: Uuid,
    pub status: MessageStatus,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// Statuses of the requested messages; unknown ids are listed as given.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct BatchStatusOut {
    pub messages: Vec<MessageStatusOut>,
    pub not_found: Vec<String>,
}
envelope_of!(BatchStatusEnvelope, BatchStatusOut, "Statuses of messages.");

impl TryFrom<SendMessageIn> for SendRequest {
    type Error = ApiError;

    /// Checks the fields in the order docs/api.md, Messages, gives.
    fn try_from(body: SendMessageIn) -> Result<SendRequest, ApiError> {
        let from_text = from_field(body.from_number, body.from_pool)?;
        let to_text = required(body.to_number, "to_number")?;
        let content = required(body.content, "content")?;
        let device_uuid = parse_device_id(body.device_id)?;
        let from = parse_from(from_text, device_uuid)?;
        let to_number = parse_number(&to_text, "to_number")?;
        let device_id = device_uuid.map(PhoneId::from);
        let request_id = body
            .request_id
            .map(RequestId::parse)
            .transpose()
            .map_err(|err| ApiError::validation("request_id", err.to_string()))?;
        let scheduled_for = body
            .scheduled_for
            .as_deref()
            .map(|t| parse_timestamp(t, "scheduled_for"))
            .transpose()?;
        let text = parse_content(content, "content")?;
        Ok(SendRequest {
            from,
            to_number,
            text,
            request_id,
            scheduled_for,
            device_id,
        })
    }
}

impl TryFrom<BulkSendIn> for BulkSendRequest {
    type Error = ApiError;

    fn try_from(body: BulkSendIn) -> Result<BulkSendRequest, ApiError> {
        let from_text = from_field(body.from_number, body.from_pool)?;
        let to_texts = required(body.to_numbers, "to_numbers")?;
        let content = required(body.content, "content")?;
        if to_texts.is_empty() || to_texts.len() > MAX_BULK_RECIPIENTS {
            return Err(ApiError::validation(
                "to_numbers",
                RecipientCount.to_string(),
            ));
        }
        let device_uuid = parse_device_id(body.device_id)?;
        let from = parse_from(from_text, device_uuid)?;
        let to_numbers = to_texts
            .iter()
            .enumerate()
            .map(|(i, text)| parse_number(text, &format!("to_numbers[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let device_id = device_uuid.map(PhoneId::from);
        let text = parse_content(content, "content")?;
        BulkSendRequest::new(from, to_numbers, text, device_id)
            .map_err(|err| ApiError::validation("to_numbers", err.to_string()))
    }
}

/// Sends one SMS.
#[utoipa::path(
    post,
    path = "/v1/messages/send",
    tag = "messages",
    request_body = SendMessageIn,
    responses((status = 202, description = "Accepted and queued (status `queued`).", body = MessageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn send(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<SendMessageIn>,
) -> Answer {
    let request = SendRequest::try_from(body)?;
    let message = send::send(&state.send_deps(), sender(&caller), request)
        .await
        .map_err(|err| send_error(err, |_| "to_number".into()))?;
    // docs/api.md, Messages: the reply reads `queued` even when a phone took the message at once.
    let as_accepted = Message {
        status: MessageStatus::Queued,
        send_attempts: 0,
        ..message
    };
    Ok(success(
        StatusCode::ACCEPTED,
        "message queued",
        as_accepted.view(),
    ))
}

/// Sends one text to up to 500 numbers, atomically.
#[utoipa::path(
    post,
    path = "/v1/messages/bulk-send",
    tag = "messages",
    request_body = BulkSendIn,
    responses((status = 202, description = "All messages queued.", body = BulkSendEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn bulk_send(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<BulkSendIn>,
) -> Answer {
    create_once(&state, &caller, body, queue_bulk).await
}

/// Queues a bulk send: the response and the first message's id.
async fn queue_bulk(state: &AppState, caller: &Caller, body: BulkSendIn) -> Created {
    let request = BulkSendRequest::try_from(body)?;
    let stored = send::send_bulk(&state.send_deps(), sender(caller), request)
        .await
        .map_err(|err| send_error(err, |i| format!("to_numbers[{i}]")))?;
    let message_ids: Vec<Uuid> = stored.iter().map(|m| m.id).collect();
    let first = message_ids.first().copied().unwrap_or_default();
    let response = success(
        StatusCode::ACCEPTED,
        "messages queued",
        BulkSendOut {
            count: message_ids.len() as u64,
            message_ids,
        },
    );
    Ok((response, first))
}

/// Statuses of up to 100 messages.
#[utoipa::path(
    post,
    path = "/v1/messages/batch-status",
    tag = "messages",
    request_body = BatchStatusIn,
    responses((status = 200, description = "Statuses; unknown ids in `not_found`.", body = BatchStatusEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn batch_status(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<BatchStatusIn>,
) -> Answer {
    let ids = required(body.message_ids, "message_ids")?;
    if ids.is_empty() || ids.len() > MAX_BATCH_STATUS_IDS {
        return Err(ApiError::validation(
            "message_ids",
            "message_ids must hold 1 to 100 ids",
        ));
    }
    let parsed: Vec<Uuid> = ids.iter().filter_map(|t| Uuid::parse_str(t).ok()).collect();
    let found = messages::statuses(&state.db, caller.scope(), &parsed).await?;
    let by_id: HashMap<Uuid, (MessageStatus, i64)> =
        found.into_iter().map(|(id, s, at)| (id, (s, at))).collect();
    let mut out = Vec::new();
    let mut not_found = Vec::new();
    for text in &ids {
        match Uuid::parse_str(text)
            .ok()
            .and_then(|id| by_id.get(&id).map(|v| (id, *v)))
        {
            Some((id, (status, at))) => out.push(MessageStatusOut {
                id,
                status,
                updated_at: format_ms(at),
            }),
            None => not_found.push(text.clone()),
        }
    }
    Ok(success(
        StatusCode::OK,
        "statuses",
        BatchStatusOut {
            messages: out,
            not_found,
        },
    ))
}

/// Lists messages, newest first, cursor paged.
#[utoipa::path(
    get,
    path = "/v1/messages",
    tag = "messages",
    params(
        PageParams,
        ("direction" = Option<String>, Query, description = "`inbound` or `outbound`"),
        ("status" = Option<String>, Query, description = "a message status"),
        ("phone_number" = Option<String>, Query, description = "messages from or to this E.164 number"),
    ),
    responses((status = 200, description = "A page of messages.", body = MessagePageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(state: web::Data<AppState>, caller: Caller, query: QueryParams) -> Answer {
    let page = PageRequest::parse(&query)?;
    let filter = ListFilter {
        direction: query.filter()?,
        status: query.filter()?,
        phone_number: query
            .get("phone_number")
            .map(|n| parse_number(n, "phone_number").map(PhoneNumber::into_string))
            .transpose()?,
    };
    let rows = page
        .read(|after, limit| messages::list(&state.db, caller.scope(), &filter, after, limit))
        .await?;
    Ok(rows.map(message_out).answer::<MessagePage>("messages"))
}

/// One message with its timeline.
#[utoipa::path(
    get,
    path = "/v1/messages/{id}",
    tag = "messages",
    params(("id" = Uuid, Path, description = "message id")),
    responses((status = 200, description = "The message and its events.", body = MessageDetailEnvelope))
)]
#[tracing::instrument(skip_all, fields(message_id = %path))]
async fn get(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let (message, events): (Message, Vec<MessageEvent>) = state.find(&caller, &path).await?;
    let out = MessageDetailOut {
        message: message_out(&message),
        events: events.iter().map(MessageEventOut::from).collect(),
    };
    Ok(success(StatusCode::OK, "message", out))
}

/// Cancels a queued message.
#[utoipa::path(
    delete,
    path = "/v1/messages/{id}",
    tag = "messages",
    params(("id" = Uuid, Path, description = "message id")),
    responses((status = 200, description = "Canceled.", body = MessageEnvelope))
)]
#[tracing::instrument(skip_all, fields(message_id = %path))]
async fn cancel(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let (current, _): (Message, Vec<MessageEvent>) = state.find(&caller, &path).await?;
    let id = current.id;
    let transition = Transition::cancel(id, "canceled through the API");
    match state.writer.transition(transition).await? {
        Some(message) => {
            state.registry.do_send(Cancel {
                message_id: message.id,
                device_id: message.device_id,
                scope: caller.scope(),
                from_number: message.from_number.clone(),
            });
            Ok(success(
                StatusCode::OK,
                "message canceled",
                message_out(&message),
            ))
        }
        None => {
            let status = messages::get(&state.db, id)
                .await?
                .map(|m| m.status)
                .unwrap_or(current.status);
            Err(ApiError::InvalidState {
                message: format!("only a queued message can be canceled; this one is {status}"),
                status: status.as_str().to_string(),
            })
        }
    }
}
