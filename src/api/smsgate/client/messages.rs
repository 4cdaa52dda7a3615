//! Messages of the client API (docs/compat.md, Messages): one client message to up to 100
//! numbers becomes one smsgw message per recipient, created through the send use case and
//! grouped under the client's message id; its state is the group's, aggregated with the
//! SMSGate app's rule. The legacy `/message` routes and `"message"` text field of older
//! clients are served too.

use std::collections::{HashMap, HashSet};

use actix_web::http::StatusCode;
use actix_web::http::header::LOCATION;
use actix_web::{HttpRequest, HttpResponse, web};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::auth::Caller;
use super::devices::all_phones_live;
use super::error::ClientError;
use super::wire::{self, ClientJson};
use crate::actors::registry::Cancel;
use crate::api::AppState;
use crate::domain::change::FailureReason;
use crate::domain::ids::PhoneId;
use crate::domain::phone_number::PhoneNumber;
use crate::domain::sms::SmsText;
use crate::domain::status::MessageStatus;
use crate::send::{self, BulkSendRequest, RequestId, SendError};
use crate::store::client_groups::{self, GroupFilter, GroupState};
use crate::store::messages::{ClientOptions, Message};
use crate::store::phones::PhoneRecord;
use crate::store::writer::Transition;

/// Most recipients of one client message.
pub const MAX_RECIPIENTS: usize = 100;
/// Longest client message id.
pub const MAX_ID_CHARS: usize = 36;
/// Characters of generated message ids (21, like the upstream's).
const GENERATED_ID_CHARS: usize = 21;
/// The sender of test-mode messages when the workspace has no test-mode phone.
pub const TEST_SENDER: &str = "+15005550006";
/// List page size: default and most.
const DEFAULT_LIMIT: u64 = 50;
const MAX_LIMIT: u64 = 100;
/// The idempotency key of a client message id, kept apart from `/v1` request_ids.
const REQUEST_ID_PREFIX: &str = "smsgate:";

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/messages", web::post().to(create))
        .route("/messages", web::get().to(list))
        .route("/messages/{id}", web::get().to(get))
        .route("/messages/{id}", web::delete().to(cancel))
        .route("/message", web::post().to(create))
        .route("/message/{id}", web::get().to(get));
}

#[derive(Debug, Deserialize)]
struct TextIn {
    text: Option<String>,
}

/// A client message as the clients send it (camelCase, unknown fields ignored).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageIn {
    id: Option<String>,
    device_id: Option<String>,
    /// The legacy text field of older clients.
    message: Option<String>,
    text_message: Option<TextIn>,
    data_message: Option<Value>,
    mms_message: Option<Value>,
    phone_numbers: Option<Vec<String>>,
    sim_number: Option<i64>,
    with_delivery_report: Option<bool>,
    is_encrypted: Option<bool>,
    priority: Option<i64>,
    ttl: Option<i64>,
    valid_until: Option<String>,
    schedule_at: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendQuery {
    skip_phone_validation: Option<String>,
    device_active_within: Option<String>,
}

/// A request checked field by field, before any phone is chosen.
struct Checked {
    id: String,
    device_id: Option<Uuid>,
    text: SmsText,
    numbers: Vec<PhoneNumber>,
    options: ClientOptions,
    /// Expires by (ms).
    expires_by: Option<i64>,
}

fn bad(message: impl Into<String>) -> ClientError {
    ClientError::bad_request(message)
}

/// The checks of docs/compat.md, Messages, in order.
fn check(body: MessageIn, now_ms: i64) -> Result<Checked, ClientError> {
    if body.is_encrypted == Some(true) {
        return Err(bad(
            "encrypted messages are not supported: smsgw checks and paces every recipient, \
             which needs the numbers in clear",
        ));
    }
    if body.data_message.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(bad(
            "data messages are not supported: smsgw phones send text messages only",
        ));
    }
    if body.mms_message.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(bad(
            "MMS messages are not supported: smsgw phones send text messages only",
        ));
    }
    if body.schedule_at.is_some() {
        return Err(bad("scheduleAt is not supported"));
    }
    let text = match (body.text_message, body.message) {
        (Some(_), Some(_)) => {
            return Err(bad("give the text in textMessage or in message, not both"));
        }
        (Some(TextIn { text: Some(text) }), None) | (None, Some(text)) => text,
        (Some(TextIn { text: None }), None) => return Err(bad("textMessage.text is required")),
        (None, None) => return Err(bad("textMessage is required")),
    };
    let text = SmsText::parse(text).map_err(|err| bad(format!("textMessage.text: {err}")))?;
    let given = body.phone_numbers.unwrap_or_default();
    if given.is_empty() || given.len() > MAX_RECIPIENTS {
        return Err(bad("phoneNumbers must hold 1 to 100 numbers"));
    }
    let mut numbers = Vec::with_capacity(given.len());
    let mut seen = HashSet::new();
    for (i, number) in given.iter().enumerate() {
        let parsed = PhoneNumber::parse(number).map_err(|_| {
            bad(format!(
                "phoneNumbers[{i}]: {number:?} is not a valid phone number in E.164 form \
                 (a + and the country code, e.g. +14155550123)"
            ))
        })?;
        if !seen.insert(parsed.clone()) {
            return Err(bad("phone numbers must be unique"));
        }
        numbers.push(parsed);
    }
    let priority = match body.priority {
        None => 0,
        Some(p) => i8::try_from(p).map_err(|_| bad("priority must be from -128 to 127"))?,
    };
    let sim_number = match body.sim_number {
        None => None,
        Some(n @ 1..=3) => u8::try_from(n).ok(),
        Some(_) => return Err(bad("simNumber must be 1, 2 or 3")),
    };
    let expires_by = match (body.ttl, body.valid_until) {
        (Some(_), Some(_)) => return Err(bad("give ttl or validUntil, not both")),
        (Some(ttl), None) if ttl < 5 => return Err(bad("ttl must be at least 5 seconds")),
        (Some(ttl), None) => Some(now_ms.saturating_add(ttl.saturating_mul(1000))),
        (None, Some(until)) => {
            let at = wire::parse_timestamp(&until)
                .ok_or_else(|| bad("validUntil must be an RFC 3339 timestamp"))?
                .timestamp_millis();
            if at <= now_ms {
                return Err(bad("validUntil must be in the future"));
            }
            Some(at)
        }
        (None, None) => None,
    };
    let id = match body.id.filter(|id| !id.is_empty()) {
        Some(id) if id.chars().count() > MAX_ID_CHARS => {
            return Err(bad("id must be at most 36 characters"));
        }
        Some(id) => id,
        None => generate_id(),
    };
    let device_id = match body.device_id.filter(|d| !d.is_empty()) {
        None => None,
        Some(text) => Some(
            Uuid::parse_str(&text)
                .map_err(|_| bad(format!("deviceId {text:?} is not a device of yours")))?,
        ),
    };
    Ok(Checked {
        options: ClientOptions {
            group_id: id.clone(),
            sim_number,
            priority,
            with_delivery_report: body.with_delivery_report.unwrap_or(true),
        },
        id,
        device_id,
        text,
        numbers,
        expires_by,
    })
}

/// A random message id of 21 letters and digits.
fn generate_id() -> String {
    let mut rng = rand::rng();
    (0..GENERATED_ID_CHARS)
        .map(|_| char::from(rng.sample(rand::distr::Alphanumeric)))
        .collect()
}

/// A query flag: `true`/`1` or `false`/`0`; anything else is 400.
fn flag(value: Option<&str>, name: &str) -> Result<bool, ClientError> {
    match value {
        None | Some("") | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(_) => Err(bad(format!("{name} must be true or false"))),
    }
}

/// The phone a message goes through (docs/compat.md, Messages): `deviceId`'s, or the
/// workspace's phone online now (else the one heard from last), among those heard from within
/// `active_within_hours` when given. `None` in test mode without a test-mode phone.
async fn choose_phone(
    state: &AppState,
    caller: &Caller,
    device_id: Option<Uuid>,
    active_within_hours: Option<i64>,
) -> Result<Option<PhoneRecord>, ClientError> {
    let (phones, live) = all_phones_live(state, caller).await?;
    if let Some(id) = device_id {
        return phones
            .into_iter()
            .find(|p| p.id == id)
            .map(Some)
            .ok_or_else(|| bad(format!("deviceId {id} is not a device of yours")));
    }
    let now = state.clock.now_ms();
    let candidates: Vec<PhoneRecord> = phones
        .into_iter()
        .filter(|p| {
            active_within_hours.is_none_or(|hours| {
                let since = now.saturating_sub(hours.saturating_mul(3_600_000));
                p.last_seen_at.is_some_and(|at| at >= since)
            })
        })
        .collect();
    if candidates.is_empty() {
        if caller.mode.is_test() {
            return Ok(None);
        }
        return Err(bad(
            "failed to select device: no phone of this workspace matches (pair one with \
             POST /v1/phones)",
        ));
    }
    let online = |p: &PhoneRecord| live.get(&p.id).is_some_and(|s| s.online);
    let chosen = candidates
        .iter()
        .find(|p| online(p))
        .or_else(|| candidates.iter().max_by_key(|p| p.last_seen_at))
        .cloned();
    Ok(chosen)
}

/// `POST /messages` (and the legacy `POST /message`): 202 with the message's state and
/// `Location`.
async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    query: web::Query<SendQuery>,
    ClientJson(body): ClientJson<MessageIn>,
) -> Result<HttpResponse, ClientError> {
    // Numbers are always checked: pace, opt-out and premium-rate rules need E.164.
    flag(
        query.skip_phone_validation.as_deref(),
        "skipPhoneValidation",
    )?;
    let active_within = match query.device_active_within.as_deref() {
        None | Some("") => None,
        Some(text) => match text.parse::<i64>() {
            Ok(0) => None,
            Ok(hours) if hours > 0 => Some(hours),
            _ => return Err(bad("deviceActiveWithin must be a whole number of hours")),
        },
    };
    let checked = check(body, state.clock.now_ms())?;
    let phone = choose_phone(&state, &caller, checked.device_id, active_within).await?;
    let from = match &phone {
        Some(phone) => PhoneNumber::parse(&phone.phone_number).map_err(ClientError::internal)?,
        None => PhoneNumber::parse(TEST_SENDER).map_err(ClientError::internal)?,
    };
    let pinned = checked
        .device_id
        .and(phone.as_ref())
        .map(|p| PhoneId::from(p.id));
    let request_id = RequestId::parse(format!("{REQUEST_ID_PREFIX}{}", checked.id))
        .map_err(|err| bad(err.to_string()))?;
    let request = BulkSendRequest::new(
        crate::send::SendFrom::Number(from),
        checked.numbers,
        checked.text,
        pinned,
    )
    .map_err(|err| bad(err.to_string()))?
    .for_client(request_id, checked.options, checked.expires_by);
    let api_caller = caller.as_api_caller();
    let sender = crate::api::sending::sender(&api_caller);
    let stored = send::send_bulk(&state.send_deps(), sender, request)
        .await
        .map_err(send_error)?;
    let timeline = client_groups::timeline(&state.db, &ids(&stored)).await?;
    let out = state_out(&checked.id, &stored, &timeline, true);
    let base = req.path().trim_end_matches('/');
    let base = base
        .strip_suffix("/message")
        .map_or(base.to_string(), |b| format!("{b}/messages"));
    let location = format!("{base}/{}", wire::path_segment(&checked.id));
    Ok(HttpResponse::Accepted()
        .insert_header((LOCATION, location))
        .json(out))
}

/// The answer docs/compat.md, Messages, gives to a refused send.
fn send_error(err: SendError) -> ClientError {
    let recipient = |index: usize| format!("phoneNumbers[{index}]");
    match err {
        SendError::PremiumRate { index } => ClientError::forbidden(format!(
            "{} is a premium-rate number; sending to it is blocked",
            recipient(index)
        )),
        SendError::OptedOut { index } => ClientError::forbidden(format!(
            "{} has opted out (STOP); nothing may be sent to it until it texts START",
            recipient(index)
        )),
        SendError::Duplicate(_) => ClientError::conflict("message with the same ID already exists"),
        SendError::UnknownDevice | SendError::NumberMismatch => {
            bad("deviceId is not a device of yours")
        }
        SendError::NoDevice { number, .. } => ClientError::unavailable(format!(
            "no online phone of {number} can take the message now"
        )),
        // The client API names no pools.
        SendError::UnknownPool | SendError::NoPoolLine(_) => {
            ClientError::unavailable("no online phone can take the message now".to_string())
        }
        SendError::LimitReached { limit, .. } => ClientError::too_many_requests(
            format!("a new workspace may send {limit} messages in its first 24 hours"),
            3600,
        ),
        SendError::QuotaExceeded {
            quota,
            resets_at: Some(_),
            retry_after_secs,
        } => ClientError::too_many_requests(
            format!(
                "the {} quota of this workspace ({}) is used up for today",
                quota.quota.as_str(),
                quota.limit
            ),
            retry_after_secs,
        ),
        SendError::QuotaExceeded { quota, .. } => ClientError::unavailable(format!(
            "the {} quota of this workspace ({}) is reached",
            quota.quota.as_str(),
            quota.limit
        )),
        SendError::AiRepliesOff | SendError::DraftNotPending(_) => {
            ClientError::internal("unexpected draft refusal")
        }
        SendError::Store(err) => err.into(),
        SendError::Unavailable(why) => ClientError::unavailable(why),
    }
}

fn ids(messages: &[Message]) -> Vec<Uuid> {
    messages.iter().map(|m| m.id).collect()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RecipientOut {
    phone_number: String,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct TextOut {
    text: String,
}

/// A message's state as the clients read it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StateOut {
    id: String,
    device_id: Option<Uuid>,
    state: &'static str,
    is_hashed: bool,
    is_encrypted: bool,
    recipients: Vec<RecipientOut>,
    states: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text_message: Option<TextOut>,
    created_at: String,
}

/// The state of group `id` from its messages and their timeline (oldest first).
fn state_out(
    id: &str,
    messages: &[Message],
    timeline: &[(Uuid, MessageStatus, i64)],
    with_content: bool,
) -> StateOut {
    let state = GroupState::aggregate(messages.iter().map(|m| GroupState::of(m.status)))
        .unwrap_or(GroupState::Pending);
    let recipients = messages
        .iter()
        .map(|m| RecipientOut {
            phone_number: m.to_number.clone(),
            state: GroupState::of(m.status).as_str(),
            error: match m.status {
                MessageStatus::Failed => Some(
                    m.failure_reason
                        .as_ref()
                        .map_or(MessageStatus::Failed.as_str(), FailureReason::as_str)
                        .into(),
                ),
                MessageStatus::Expired => Some(FailureReason::Expired.as_str().into()),
                _ => None,
            },
        })
        .collect();
    let first = messages.first();
    StateOut {
        id: id.to_string(),
        device_id: messages.iter().find_map(|m| m.device_id),
        state: state.as_str(),
        is_hashed: false,
        is_encrypted: false,
        recipients,
        states: reached(messages, timeline),
        text_message: first.filter(|_| with_content).map(|m| TextOut {
            text: m.content.clone(),
        }),
        created_at: wire::timestamp(first.map_or(0, |m| m.created_at)),
    }
}

/// When the group first reached each state: its messages' timeline replayed in order, the
/// group's state taken after each change once every message has one.
fn reached(
    messages: &[Message],
    timeline: &[(Uuid, MessageStatus, i64)],
) -> serde_json::Map<String, Value> {
    let mut current: HashMap<Uuid, GroupState> = HashMap::new();
    let mut first: HashMap<GroupState, i64> = HashMap::new();
    for (id, status, at) in timeline {
        current.insert(*id, GroupState::of(*status));
        if current.len() < messages.len() {
            continue;
        }
        if let Some(state) = GroupState::aggregate(current.values().copied()) {
            first.entry(state).or_insert(*at);
        }
    }
    GroupState::ALL
        .iter()
        .filter_map(|s| {
            first
                .get(s)
                .map(|at| (s.as_str().to_string(), Value::String(wire::timestamp(*at))))
        })
        .collect()
}

/// The group `id` of the caller, or 404.
async fn group(state: &AppState, caller: &Caller, id: &str) -> Result<Vec<Message>, ClientError> {
    let messages = client_groups::messages_of(&state.db, caller.scope(), id).await?;
    if messages.is_empty() {
        return Err(ClientError::not_found("message not found"));
    }
    Ok(messages)
}

/// `GET /messages/{id}` (and the legacy `GET /message/{id}`).
async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ClientError> {
    let messages = group(&state, &caller, &path).await?;
    let timeline = client_groups::timeline(&state.db, &ids(&messages)).await?;
    Ok(wire::json(
        StatusCode::OK,
        state_out(&path, &messages, &timeline, true),
    ))
}

/// `DELETE /messages/{id}`: cancels every recipient still queued; 409 when none is.
async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ClientError> {
    let messages = group(&state, &caller, &path).await?;
    let mut canceled = 0;
    for message in messages
        .iter()
        .filter(|m| m.status == MessageStatus::Queued)
    {
        let transition = Transition::cancel(message.id, "canceled through the client API");
        if let Some(moved) = state.writer.transition(transition).await? {
            canceled += 1;
            state.registry.do_send(Cancel {
                message_id: moved.id,
                device_id: moved.device_id,
                scope: caller.scope(),
                from_number: moved.from_number.clone(),
            });
        }
    }
    if canceled == 0 {
        return Err(ClientError::conflict("message is not pending"));
    }
    let messages = group(&state, &caller, &path).await?;
    let timeline = client_groups::timeline(&state.db, &ids(&messages)).await?;
    Ok(wire::json(
        StatusCode::OK,
        state_out(&path, &messages, &timeline, false),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    from: Option<String>,
    to: Option<String>,
    state: Option<String>,
    device_id: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
    sort: Option<String>,
    include_content: Option<String>,
}

/// `GET /messages`: the caller's client messages, newest first, `X-Total-Count` the number
/// matching the filters.
async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ClientError> {
    let time = |value: &Option<String>, name: &str| {
        value
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(|v| {
                wire::parse_timestamp(v)
                    .map(|t| t.timestamp_millis())
                    .ok_or_else(|| bad(format!("{name} must be an RFC 3339 timestamp")))
            })
            .transpose()
    };
    let mut filter = GroupFilter {
        from: time(&query.from, "from")?,
        to: time(&query.to, "to")?,
        ..GroupFilter::default()
    };
    let mut nothing = false;
    match query.state.as_deref() {
        None | Some("") => {}
        // smsgw cancels at once: no message is ever Cancelling.
        Some("Cancelling") => nothing = true,
        Some(name) => {
            filter.state = Some(
                GroupState::ALL
                    .into_iter()
                    .find(|s| s.as_str() == name)
                    .ok_or_else(|| bad(format!("state {name:?} is not a message state")))?,
            );
        }
    }
    if let Some(device) = query.device_id.as_deref().filter(|d| !d.is_empty()) {
        filter.device_id = Some(
            Uuid::parse_str(device)
                .map_err(|_| bad(format!("deviceId {device:?} is not a device id")))?,
        );
    }
    let limit = match query.limit.as_deref() {
        None | Some("") => DEFAULT_LIMIT,
        Some(text) => text
            .parse::<i64>()
            .map_err(|_| bad("limit must be a whole number"))?
            .clamp(1, MAX_LIMIT as i64) as u64,
    };
    let offset = match query.offset.as_deref() {
        None | Some("") => 0,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| bad("offset must be a whole number, 0 or more"))?,
    };
    filter.oldest_first = match query.sort.as_deref() {
        None | Some("") | Some("-created_at") => false,
        Some("created_at") => true,
        Some(_) => return Err(bad("sort must be created_at or -created_at")),
    };
    let with_content = flag(query.include_content.as_deref(), "includeContent")?;
    let (group_ids, total) = if nothing {
        (Vec::new(), 0)
    } else {
        client_groups::list(&state.db, caller.scope(), &filter, limit, offset).await?
    };
    let messages = client_groups::messages_of_groups(&state.db, caller.scope(), &group_ids).await?;
    let timeline = client_groups::timeline(&state.db, &ids(&messages)).await?;
    let mut by_group: HashMap<&str, Vec<Message>> = HashMap::new();
    let mut group_of: HashMap<Uuid, &str> = HashMap::new();
    for message in &messages {
        if let Some(group) = message.group_id() {
            by_group.entry(group).or_default().push(message.clone());
            group_of.insert(message.id, group);
        }
    }
    let mut events_of: HashMap<&str, Vec<(Uuid, MessageStatus, i64)>> = HashMap::new();
    for event in &timeline {
        if let Some(group) = group_of.get(&event.0) {
            events_of.entry(group).or_default().push(*event);
        }
    }
    let out: Vec<StateOut> = group_ids
        .iter()
        .map(|id| {
            let group = by_group.get(id.as_str()).map_or(&[][..], Vec::as_slice);
            let events = events_of.get(id.as_str()).map_or(&[][..], Vec::as_slice);
            state_out(id, group, events, with_content)
        })
        .collect();
    Ok(HttpResponse::Ok()
        .insert_header(("X-Total-Count", total.to_string()))
        .json(out))
}
