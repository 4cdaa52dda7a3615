//! Messages API: send, bulk send, get with timeline, list, batch status, cancel.

use std::collections::{HashMap, HashSet};

use actix::Addr;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use uuid::Uuid;

use super::schemas::{
    BatchStatusEnvelope, BulkSendEnvelope, MessageDetailEnvelope, MessageEnvelope,
    MessagePageEnvelope,
};
use super::{
    AppState, Caller, DocumentedRoute, JsonBody, PageRequest, missing, page_response, parse_id,
    query_param, required,
};
use crate::actors::phone::{Handed, Phone, Release, Reserve, Ticket};
use crate::actors::registry::{Cancel, Enqueue, Route, RouteError};
use crate::clock::format_ms;
use crate::domain::phone_number::PhoneNumber;
use crate::domain::quota::CountQuota;
use crate::domain::sms::{ContentError, SmsText};
use crate::domain::status::{Direction, MessageStatus, Mode, QueueClass};
use crate::error::{ApiError, ErrorCode, success};
use crate::store::messages::{self, ListFilter, Message, MessageEvent, Position};
use crate::store::writer::{Accept, AcceptOutcome, NewMessage, NewWorkspaceLimit, Transition};

/// Most recipients of one bulk send.
pub const MAX_BULK_RECIPIENTS: usize = 500;
/// Most ids of one batch-status call.
pub const MAX_BATCH_STATUS_IDS: usize = 100;
/// Longest accepted request_id.
const MAX_REQUEST_ID_CHARS: usize = 255;

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
        DocumentedRoute::of::<__path_bulk_send>(|| web::to(bulk_send)).errors(&send_errors),
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
    /// E.164 number of your phone that sends.
    #[schema(required = true, nullable = false, example = "+14155550100")]
    pub from_number: Option<String>,
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
    #[schema(required = true, nullable = false)]
    pub from_number: Option<String>,
    /// 1–500 E.164 numbers; duplicates are sent once.
    #[schema(required = true, nullable = false)]
    pub to_numbers: Option<Vec<String>>,
    #[schema(required = true, nullable = false)]
    pub content: Option<String>,
    #[schema(nullable = false, value_type = Option<uuid::Uuid>)]
    pub device_id: Option<String>,
}

/// Body of `POST /v1/messages/batch-status`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct BatchStatusIn {
    /// 1–100 message ids.
    #[schema(required = true, nullable = false)]
    pub message_ids: Option<Vec<String>>,
}

/// A message as every API response and webhook shows it (docs/api.md, Messages).
pub fn message_out(m: &Message) -> Value {
    m.record()
}

fn event_out(e: &MessageEvent) -> Value {
    json!({
        "type": e.kind,
        "status": e.status,
        "at": format_ms(e.at),
        "detail": e.detail,
    })
}

/// Parses a number field, naming it on failure.
pub fn parse_number(text: &str, field: &str) -> Result<PhoneNumber, ApiError> {
    PhoneNumber::parse(text).map_err(|_| ApiError::InvalidPhoneNumber {
        field: field.to_string(),
    })
}

/// Parses message content, naming the field on failure.
pub fn parse_content(text: String, field: &str) -> Result<SmsText, ApiError> {
    SmsText::parse(text).map_err(|err| match err {
        ContentError::Empty => ApiError::validation(field, format!("{field} must not be empty")),
        ContentError::TooLong { segments, encoding } => ApiError::ContentTooLong {
            field: field.to_string(),
            segments,
            encoding: encoding.as_str(),
        },
    })
}

fn parse_device_id(text: Option<String>) -> Result<Option<Uuid>, ApiError> {
    text.map(|t| {
        Uuid::parse_str(&t)
            .map_err(|_| ApiError::validation("device_id", "device_id must be a UUID"))
    })
    .transpose()
}

pub fn parse_timestamp(text: &str, field: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::validation(
                field,
                format!("{field} must be an ISO 8601 timestamp with an offset"),
            )
        })
}

/// The new-workspace limit for this caller, when it still applies (live mode only).
pub fn new_workspace_limit(state: &AppState, caller: &Caller) -> Option<NewWorkspaceLimit> {
    NewWorkspaceLimit::of(
        &state.settings.limits,
        caller.mode,
        caller.workspace_created_at,
    )
}

/// Where accepted messages go: a phone (live) or the simulated phone (test).
pub struct Routing {
    pub device_id: Option<Uuid>,
    pub pinned: bool,
    pub available: bool,
    /// The chosen online phone's actor (live mode).
    pub phone: Option<Addr<Phone>>,
}

/// Finds the phone for a send from `from_number`, or learns there is none (docs/api.md, Messages,
/// check order: this runs before the writer checks idempotency, but its answer is applied after).
pub async fn route(
    state: &AppState,
    caller: &Caller,
    from_number: &PhoneNumber,
    device_id: Option<Uuid>,
) -> Result<Routing, ApiError> {
    let answer = state
        .registry
        .send(Route {
            scope: caller.scope(),
            from_number: from_number.as_str().to_string(),
            device_id,
        })
        .await
        .map_err(|e| ApiError::Internal(format!("registry unavailable: {e}")))?;
    match answer {
        Ok(found) => Ok(Routing {
            device_id: found.as_ref().map(|r| r.device_id).or(device_id),
            pinned: device_id.is_some(),
            available: caller.mode == Mode::Test || found.is_some(),
            phone: found.map(|r| r.phone),
        }),
        Err(RouteError::UnknownDevice) => Err(ApiError::validation(
            "device_id",
            "device_id is not one of your phones",
        )),
        Err(RouteError::NumberMismatch) => Err(ApiError::validation(
            "device_id",
            "device_id belongs to a phone with another number than from_number",
        )),
    }
}

fn no_device(device_id: Option<Uuid>, from_number: &PhoneNumber) -> ApiError {
    ApiError::NoDeviceAvailable {
        field: if device_id.is_some() {
            "device_id"
        } else {
            "from_number"
        },
        number: from_number.as_str().to_string(),
    }
}

fn expires_at(state: &AppState, starts: i64) -> i64 {
    let ttl = i64::try_from(state.settings.messages.ttl.as_millis()).unwrap_or(i64::MAX);
    starts.saturating_add(ttl)
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
) -> Result<HttpResponse, ApiError> {
    let from_text = required(body.from_number, "from_number")?;
    let to_text = required(body.to_number, "to_number")?;
    let content = required(body.content, "content")?;
    let from_number = parse_number(&from_text, "from_number")?;
    let to_number = parse_number(&to_text, "to_number")?;
    let device_id = parse_device_id(body.device_id)?;
    let request_id = match body.request_id {
        Some(id) if id.is_empty() || id.chars().count() > MAX_REQUEST_ID_CHARS => {
            return Err(ApiError::validation(
                "request_id",
                "request_id must be 1 to 255 characters",
            ));
        }
        other => other,
    };
    let scheduled_for = body
        .scheduled_for
        .as_deref()
        .map(|t| parse_timestamp(t, "scheduled_for"))
        .transpose()?;
    let text = parse_content(content, "content")?;
    if to_number.is_premium_rate() {
        return Err(ApiError::PremiumRateBlocked {
            field: "to_number".into(),
        });
    }
    let routing = route(&state, &caller, &from_number, device_id).await?;
    let now = state.clock.now_ms();
    let scheduled_for = scheduled_for.map(|t| t.timestamp_millis());
    // Fast path: an idle online phone with pace to spare takes the message in the accept's own
    // commit (stored as `sending`), and its frame leaves as soon as that commit is done.
    let reserved = match (&routing.phone, scheduled_for) {
        (Some(phone), None) => match phone.send(Reserve).await {
            Ok(Some(ticket)) => Some((phone.clone(), ticket)),
            _ => None,
        },
        _ => None,
    };
    let new = NewMessage {
        id: Uuid::now_v7(),
        direction: Direction::Outbound,
        status: if reserved.is_some() {
            MessageStatus::Sending
        } else {
            MessageStatus::Queued
        },
        class: QueueClass::Single,
        from_number: from_number.as_str().to_string(),
        to_number: to_number.into_string(),
        segments: text.segments(),
        encoding: text.encoding().as_str().to_string(),
        content: text.into_string(),
        device_id: routing.device_id,
        pinned: routing.pinned,
        campaign_id: None,
        request_id: request_id.clone(),
        inbound_ref: None,
        scheduled_for,
        expires_at: expires_at(&state, scheduled_for.unwrap_or(now).max(now)),
    };
    let accept = Accept {
        scope: caller.scope(),
        request_id,
        messages: vec![new],
        device_available: routing.available,
        limit: new_workspace_limit(&state, &caller),
        draft: None,
    };
    let outcome = accept_and_hand_over(&state, accept, reserved).await?;
    let stored = accepted(outcome, device_id, &from_number, |_| "to_number".into())?;
    let message = stored
        .first()
        .ok_or_else(|| ApiError::Internal("writer accepted no message".into()))?;
    // docs/api.md, Messages: the reply reads `queued` even when a phone took the message at once.
    let as_accepted = Message {
        status: MessageStatus::Queued,
        send_attempts: 0,
        ..message.clone()
    };
    Ok(success(
        StatusCode::ACCEPTED,
        "message queued",
        as_accepted.view(),
    ))
}

/// Stores accepted messages, then hands them on: to the phone that reserved the hand-over
/// (`reserved`, single sends), or to their phones' queues through the registry. A refused
/// accept gives a reserved pace slot back. This runs as a task of its own, so a client that
/// hangs up mid-request cannot leave a stored message unqueued or a reserved slot taken.
pub async fn accept_and_hand_over(
    state: &AppState,
    accept: Accept,
    reserved: Option<(Addr<Phone>, Ticket)>,
) -> Result<AcceptOutcome, ApiError> {
    let (writer, registry) = (state.writer.clone(), state.registry.clone());
    let outcome = actix_web::rt::spawn(async move {
        let outcome = writer.accept(accept).await;
        match (&outcome, reserved) {
            (Ok(AcceptOutcome::Accepted(stored)), Some((phone, ticket))) => {
                if let Some(message) = stored.first() {
                    hand_to(&phone, ticket, message.clone(), &writer, &registry).await;
                }
            }
            (Ok(AcceptOutcome::Accepted(stored)), None) => registry.do_send(Enqueue {
                messages: stored.clone(),
            }),
            (_, Some((phone, ticket))) => phone.do_send(Release { ticket }),
            (_, None) => {}
        }
        outcome
    })
    .await
    .map_err(|e| ApiError::Internal(format!("accept task ended: {e}")))??;
    Ok(outcome)
}

/// Gives a message stored as `sending` on a reserved phone to that phone's actor. If the actor
/// cannot take it (gone because the phone was unpaired meanwhile, or its mailbox is full), the
/// message goes back to `queued` and through the registry, which routes it again or fails it
/// like any message of an unpaired phone (a frame already queued is deduped by the phone).
async fn hand_to(
    phone: &Addr<Phone>,
    ticket: Ticket,
    message: Message,
    writer: &crate::store::writer::Writer,
    registry: &Addr<crate::actors::registry::Registry>,
) {
    let id = message.id;
    // The frame goes straight to the session (this task runs beside the HTTP handler, not on
    // the busy actor thread). Should the phone's report overtake `Handed`, the report still
    // moves the message (it is `sending` on this phone); `Handed` then only adds an entry that
    // a later disconnect cannot move back.
    let frame_queued = phone.connected() && ticket.send_frame(&message);
    let handed = Handed {
        ticket,
        message,
        frame_queued,
    };
    if phone.try_send(handed).is_ok() {
        return;
    }
    let back = Transition::requeue(
        id,
        "the phone's actor stopped before the message was sent; queued again",
    );
    match writer.transition(back).await {
        Ok(Some(queued)) => registry.do_send(Enqueue {
            messages: vec![queued],
        }),
        Ok(None) => {}
        Err(err) => {
            tracing::error!(message_id = %id, error = %err, "message not queued again; it is sent after the next restart")
        }
    }
}

/// Turns the writer's answer into the stored messages or the error docs/api.md, Messages, names;
/// `recipient_field` names the request field of the accept's `index`-th recipient.
pub fn accepted(
    outcome: AcceptOutcome,
    device_id: Option<Uuid>,
    from_number: &PhoneNumber,
    recipient_field: impl Fn(usize) -> String,
) -> Result<Vec<Message>, ApiError> {
    match outcome {
        AcceptOutcome::Accepted(messages) => Ok(messages),
        AcceptOutcome::OptedOut { index } => Err(ApiError::RecipientOptedOut {
            field: recipient_field(index),
        }),
        AcceptOutcome::AiRepliesOff => Err(ApiError::AiRepliesOff {
            field: recipient_field(0),
        }),
        AcceptOutcome::Duplicate(id) => Err(ApiError::DuplicateRequest { id }),
        AcceptOutcome::NoDevice => Err(no_device(device_id, from_number)),
        AcceptOutcome::LimitReached {
            limit,
            window_ends_at,
        } => Err(ApiError::NewAccountLimit {
            limit,
            window_ends_at: format_ms(window_ends_at),
        }),
        AcceptOutcome::QuotaExceeded {
            quota,
            resets_at,
            retry_after_secs,
        } => Err(quota_exceeded(quota, resets_at, retry_after_secs)),
        AcceptOutcome::DraftNotPending(Some(status)) => Err(ApiError::InvalidState {
            message: format!("only a pending draft can be sent; this one is {status}"),
            status: status.as_str().to_string(),
        }),
        AcceptOutcome::DraftNotPending(None) => Err(ApiError::NotFound("draft")),
    }
}

/// The error of a message quota: a daily one (429, until `resets_at`) or a count (422).
fn quota_exceeded(quota: CountQuota, resets_at: Option<i64>, retry_after_secs: u64) -> ApiError {
    match resets_at {
        Some(at) => ApiError::DailyQuotaExceeded {
            quota: quota.quota,
            limit: quota.limit,
            resets_at: format_ms(at),
            retry_after_secs,
        },
        None => ApiError::QuotaExceeded {
            quota: quota.quota,
            limit: quota.limit,
        },
    }
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
) -> Result<HttpResponse, ApiError> {
    let from_text = required(body.from_number, "from_number")?;
    let to_texts = required(body.to_numbers, "to_numbers")?;
    let content = required(body.content, "content")?;
    if to_texts.is_empty() || to_texts.len() > MAX_BULK_RECIPIENTS {
        return Err(ApiError::validation(
            "to_numbers",
            "to_numbers must hold 1 to 500 numbers",
        ));
    }
    let from_number = parse_number(&from_text, "from_number")?;
    let mut to_numbers = Vec::with_capacity(to_texts.len());
    for (i, text) in to_texts.iter().enumerate() {
        to_numbers.push(parse_number(text, &format!("to_numbers[{i}]"))?);
    }
    let device_id = parse_device_id(body.device_id)?;
    let text = parse_content(content, "content")?;
    if let Some(i) = to_numbers.iter().position(PhoneNumber::is_premium_rate) {
        return Err(ApiError::PremiumRateBlocked {
            field: format!("to_numbers[{i}]"),
        });
    }
    // Duplicates are sent once; `places[i]` is where the i-th kept number is in the request.
    let mut seen = HashSet::new();
    let mut places = Vec::with_capacity(to_numbers.len());
    let to_numbers: Vec<PhoneNumber> = to_numbers
        .into_iter()
        .enumerate()
        .filter(|(_, n)| seen.insert(n.clone()))
        .map(|(place, n)| {
            places.push(place);
            n
        })
        .collect();
    let routing = route(&state, &caller, &from_number, device_id).await?;
    let now = state.clock.now_ms();
    let messages = to_numbers
        .into_iter()
        .map(|to| NewMessage {
            id: Uuid::now_v7(),
            direction: Direction::Outbound,
            status: MessageStatus::Queued,
            class: QueueClass::Bulk,
            from_number: from_number.as_str().to_string(),
            to_number: to.into_string(),
            content: text.as_str().to_string(),
            segments: text.segments(),
            encoding: text.encoding().as_str().to_string(),
            device_id: routing.device_id,
            pinned: routing.pinned,
            campaign_id: None,
            request_id: None,
            inbound_ref: None,
            scheduled_for: None,
            expires_at: expires_at(&state, now),
        })
        .collect();
    let accept = Accept {
        scope: caller.scope(),
        request_id: None,
        messages,
        device_available: routing.available,
        limit: new_workspace_limit(&state, &caller),
        draft: None,
    };
    let outcome = accept_and_hand_over(&state, accept, None).await?;
    let stored = accepted(outcome, device_id, &from_number, |i| {
        format!("to_numbers[{}]", places.get(i).copied().unwrap_or(i))
    })?;
    let ids: Vec<Uuid> = stored.iter().map(|m| m.id).collect();
    Ok(success(
        StatusCode::ACCEPTED,
        "messages queued",
        json!({ "count": ids.len(), "message_ids": ids }),
    ))
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
) -> Result<HttpResponse, ApiError> {
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
            Some((id, (status, at))) => out.push(json!({
                "id": id,
                "status": status.as_str(),
                "updated_at": format_ms(at),
            })),
            None => not_found.push(text.clone()),
        }
    }
    Ok(success(
        StatusCode::OK,
        "statuses",
        json!({ "messages": out, "not_found": not_found }),
    ))
}

/// Lists messages, newest first, cursor paged.
#[utoipa::path(
    get,
    path = "/v1/messages",
    tag = "messages",
    params(
        ("limit" = Option<u32>, Query, description = "1–100, default 25"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("direction" = Option<String>, Query, description = "`inbound` or `outbound`"),
        ("status" = Option<String>, Query, description = "a message status"),
        ("phone_number" = Option<String>, Query, description = "messages from or to this E.164 number"),
    ),
    responses((status = 200, description = "A page of messages.", body = MessagePageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    let page = PageRequest::parse(&query)?;
    let filter = ListFilter {
        direction: query_param(
            &query,
            "direction",
            Direction::parse,
            "direction must be inbound or outbound",
        )?,
        status: query_param(
            &query,
            "status",
            MessageStatus::parse,
            "status is not a message status",
        )?,
        phone_number: query
            .get("phone_number")
            .map(|n| parse_number(n, "phone_number").map(PhoneNumber::into_string))
            .transpose()?,
    };
    let (rows, has_more) =
        messages::list(&state.db, caller.scope(), &filter, page.after, page.limit).await?;
    let last = rows.last().map(|m| Position {
        created_at: m.created_at,
        id: m.id,
    });
    Ok(page_response(
        "messages",
        rows.iter().map(message_out).collect(),
        has_more,
        last,
    ))
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
async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "message")?;
    let (message, events) = messages::get_with_events(&state.db, caller.scope(), id)
        .await
        .map_err(missing("message"))?;
    let mut out = message_out(&message);
    if let Some(obj) = out.as_object_mut() {
        obj.insert(
            "events".into(),
            Value::Array(events.iter().map(event_out).collect()),
        );
    }
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
async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path, "message")?;
    let (current, _) = messages::get_with_events(&state.db, caller.scope(), id)
        .await
        .map_err(missing("message"))?;
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
