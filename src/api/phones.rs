//! Phones API: pairing, listing with live state, pace overrides, unpairing, token rotation;
//! SIM lines (docs/api.md, "Phones"): a phone added to another phone's device, with no token.

use crate::api::page::PageParams;
use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::body::present;
use super::envelope::envelope_of;
use super::fields::parse_number;
use super::idempotent::{Created, create_body, create_once};
use super::page::page_out;
use super::schemas::{DeletedEnvelope, deleted};
use super::{
    Answer, AppState, Caller, DocumentedRoute, JsonBody, PageRequest, missing, parse_id, required,
};
use crate::actors::registry::{
    GetPhoneStates, PaceChanged, Paired, PhoneState, TokenRotated, Unpaired,
};
use crate::clock::format_ms;
use crate::domain::health::{AlertKind, Network, PhoneHealth, SimCard};
use crate::domain::keys;
use crate::domain::pace::Pace;
use crate::domain::quota::Quota;
use crate::domain::sim_slot::SimSlot;
use crate::error::{ApiError, ErrorCode, success};
use crate::store::StoreError;
use crate::store::health::{self, OpenAlert};
use crate::store::phones::{self, Line, Pairing, PhoneRecord};

/// Longest phone name.
const MAX_NAME_CHARS: usize = 120;

/// The phone operations, the WebSocket upgrade included (route registry, see
/// `super::endpoints`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    use ErrorCode::*;
    vec![
        DocumentedRoute::of::<super::phone_ws::__path_connect>(|| {
            web::to(super::phone_ws::connect)
        })
        .public()
        .errors(&[BadRequest, MissingApiKey, InvalidApiKey]),
        DocumentedRoute::of::<__path_list>(|| web::to(list)).errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_create>(|| web::to(create)).errors(&[
            ValidationFailed,
            InvalidPhoneNumber,
            QuotaExceeded,
            DuplicateRequest,
            AlreadyExists,
        ]),
        DocumentedRoute::of::<__path_get>(|| web::to(get)),
        DocumentedRoute::of::<__path_update>(|| web::to(update)).errors(&[ValidationFailed]),
        DocumentedRoute::of::<__path_delete>(|| web::to(delete)),
        DocumentedRoute::of::<__path_rotate_token>(|| web::to(rotate_token))
            .errors(&[ValidationFailed]),
    ]
}

/// Body of `POST /v1/phones`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreatePhoneIn {
    /// E.164 number of the phone's SIM.
    #[schema(required = true, nullable = false)]
    pub phone_number: Option<String>,
    /// Up to 120 characters.
    pub name: Option<String>,
    /// Adds a SIM line to the device of this phone (a phone created with a token, not a line);
    /// requires `sim_slot`.
    pub device_phone_id: Option<String>,
    /// The line's SIM slot on the device, 1–3; requires `device_phone_id`.
    pub sim_slot: Option<i64>,
    /// Idempotency key (1–255 characters): a repeat answers 409 `duplicate_request` with the
    /// first phone's id in `data.id` (docs/api.md, "Idempotent creates").
    pub request_id: Option<String>,
}
create_body!(CreatePhoneIn => CreatePhone, "phone");

/// A pace in a request body (docs/api.md, "Phones"): both windows are required; `per_day`
/// and `jitter_seconds` left out keep the phone's current values.
#[derive(Debug, Deserialize, ToSchema)]
pub struct PaceIn {
    #[schema(required = true, nullable = false)]
    pub per_minute: Option<u32>,
    #[schema(required = true, nullable = false)]
    pub per_30_minutes: Option<u32>,
    /// 1–100000 sends in any 24 hours; null: no daily cap; left out: unchanged.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>, required = false)]
    pub per_day: Option<Option<u32>>,
    /// 0–3600: each send waits a further random 0..N s; left out: unchanged.
    #[schema(required = false, nullable = false)]
    pub jitter_seconds: Option<u32>,
}

impl PaceIn {
    /// The pace this body asks for; `current` (the phone's pace now) fills in what it leaves
    /// out. Errors name the field (`pace.per_day`, …).
    fn parse(self, current: Pace) -> Result<Pace, ApiError> {
        let per_minute = self.per_minute.ok_or_else(|| {
            ApiError::validation("pace.per_minute", "pace.per_minute is required")
        })?;
        let per_30 = self.per_30_minutes.ok_or_else(|| {
            ApiError::validation("pace.per_30_minutes", "pace.per_30_minutes is required")
        })?;
        Pace::new(per_minute, per_30)
            .and_then(|pace| pace.with_per_day(self.per_day.unwrap_or(current.per_day)))
            .and_then(|pace| {
                pace.with_jitter_seconds(self.jitter_seconds.unwrap_or(current.jitter_seconds))
            })
            .map_err(|e| ApiError::validation(e.field, e.to_string()))
    }
}

/// Body of `PATCH /v1/phones/{id}`; `pace: null` returns to the server default.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UpdatePhoneIn {
    /// Null clears the name.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub name: Option<Option<String>>,
    /// Null returns to the server's default pace.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<PaceIn>)]
    pub pace: Option<Option<PaceIn>>,
}

/// A phone's sending pace: every sliding window must allow a send, then the jitter waits.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct PaceOut {
    pub per_minute: u32,
    pub per_30_minutes: u32,
    /// At most this many sends in any 24 hours; null: no daily cap.
    pub per_day: Option<u32>,
    /// Each send waits a further random 0..N seconds (0: none).
    pub jitter_seconds: u32,
}

impl From<Pace> for PaceOut {
    fn from(pace: Pace) -> Self {
        PaceOut {
            per_minute: pace.per_minute,
            per_30_minutes: pace.per_30_minutes,
            per_day: pace.per_day,
            jitter_seconds: pace.jitter_seconds,
        }
    }
}

/// A paired phone; its `id` is the `device_id` of docs/api.md, Phones.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct PhoneOut<'a> {
    pub id: Uuid,
    pub phone_number: &'a str,
    pub name: Option<&'a str>,
    /// True while a WebSocket session is open.
    pub online: bool,
    pub pace: PaceOut,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub last_seen_at: Option<String>,
    /// A SIM line's slot (1–3); null for a device.
    pub sim_slot: Option<u8>,
    /// A SIM line's device (the phone whose token and connection carry it); null for a device.
    pub device_phone_id: Option<Uuid>,
    /// What the device last reported about itself (a SIM line shows its device's); null
    /// before any report (docs/api.md, "Phone health").
    pub health: Option<HealthOut>,
    /// True while the stall watchdog holds the phone stalled: online, but its messages got no
    /// report for `phones.stall_after`, or its last `phones.stall_failures` attempts failed.
    pub stalled: bool,
    /// The phone's open alert episodes (`offline`, `low_battery`, `stalled`), oldest first.
    pub alerts: Vec<AlertOut>,
}
envelope_of!(PhoneEnvelope, PhoneOut<'static>, "One phone.");

/// A phone with its device token, shown only when paired or rotated.
#[derive(Serialize, ToSchema)]
pub struct PhoneWithTokenOut<'a> {
    #[serde(flatten)]
    pub phone: PhoneOut<'a>,
    /// `dt_…`; the phone authenticates its WebSocket with it. Absent for a SIM line, which
    /// has no token (docs/api.md, Phones, "SIM lines").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_token: Option<String>,
}
envelope_of!(
    PhoneWithTokenEnvelope,
    PhoneWithTokenOut<'static>,
    "A phone and its new device token."
);

page_out!(
    /// A page of phones.
    PhonePage<'a>, phones: PhoneOut<'a>
);
envelope_of!(PhonePageEnvelope, PhonePage<'static>, "A page of phones.");

/// A device's health as the API shows it (docs/api.md, "Phone health").
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HealthOut {
    /// 0–100; null when not reported.
    pub battery_percent: Option<u8>,
    pub charging: Option<bool>,
    pub network: Option<Network>,
    /// The device's SIM cards; null when not reported.
    pub sims: Option<Vec<SimCard>>,
    #[schema(format = DateTime)]
    pub reported_at: String,
}

impl From<&PhoneHealth> for HealthOut {
    fn from(h: &PhoneHealth) -> Self {
        HealthOut {
            battery_percent: h.battery_percent,
            charging: h.charging,
            network: h.network,
            sims: h.sims.clone(),
            reported_at: format_ms(h.reported_at),
        }
    }
}

/// An open alert episode of a phone.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AlertOut {
    /// offline, low_battery or stalled.
    pub kind: String,
    /// When the episode began.
    #[schema(format = DateTime)]
    pub since: String,
    /// Whether its webhook event fired (an offline phone alerts after
    /// `phones.offline_alert_after`).
    pub alerted: bool,
}

/// The stored health and open alerts of a page of phones, read in two queries.
#[derive(Default)]
pub(crate) struct Facts {
    health: HashMap<Uuid, PhoneHealth>,
    alerts: HashMap<Uuid, Vec<OpenAlert>>,
}

impl Facts {
    /// The facts of `phones` (a line's health is its device's). A read that fails shows
    /// none: the phone itself is still worth showing.
    pub(crate) async fn of(state: &AppState, phones: &[PhoneRecord]) -> Facts {
        let ids: Vec<Uuid> = phones.iter().map(|p| p.id).collect();
        let mut devices: Vec<Uuid> = phones.iter().map(device_of).collect();
        devices.sort_unstable();
        devices.dedup();
        let health = health::of(&state.db, &devices).await;
        let alerts = health::open_alerts(&state.db, &ids).await;
        if let Err(err) = health.as_ref().and(alerts.as_ref()) {
            tracing::error!(error = %err, "phone health not read");
        }
        Facts {
            health: health.unwrap_or_default(),
            alerts: alerts.unwrap_or_default(),
        }
    }
}

/// The device whose connection carries a phone: itself, or a line's device.
fn device_of(p: &PhoneRecord) -> Uuid {
    p.line.map_or(p.id, |l| l.device_phone_id)
}

fn phone_out<'a>(
    state: &AppState,
    p: &'a PhoneRecord,
    live: Option<PhoneState>,
    facts: &Facts,
) -> PhoneOut<'a> {
    let pace = p.pace.unwrap_or(state.settings.pace);
    let mut alerts: Vec<&OpenAlert> = facts.alerts.get(&p.id).into_iter().flatten().collect();
    alerts.sort_by_key(|a| a.since);
    PhoneOut {
        id: p.id,
        phone_number: &p.phone_number,
        name: p.name.as_deref(),
        online: live.is_some_and(|s| s.online),
        pace: PaceOut::from(pace),
        created_at: format_ms(p.created_at),
        last_seen_at: PhoneState::last_seen(live.as_ref(), p.last_seen_at).map(format_ms),
        sim_slot: p.line.map(|l| l.sim_slot.get()),
        device_phone_id: p.line.map(|l| l.device_phone_id),
        health: facts.health.get(&device_of(p)).map(HealthOut::from),
        stalled: alerts.iter().any(|a| a.kind == AlertKind::Stalled),
        alerts: alerts
            .iter()
            .map(|a| AlertOut {
                kind: a.kind.as_str().to_string(),
                since: format_ms(a.since),
                alerted: a.alerted,
            })
            .collect(),
    }
}

/// The live state (online, last seen) of each of `phones` the registry knows.
pub(super) async fn live_states(
    state: &AppState,
    phones: &[PhoneRecord],
) -> HashMap<uuid::Uuid, PhoneState> {
    state
        .registry
        .send(GetPhoneStates {
            ids: phones.iter().map(|p| p.id).collect(),
        })
        .await
        .unwrap_or_default()
}

/// One phone as the API shows it, with its live state.
async fn live_phone_out<'a>(state: &AppState, phone: &'a PhoneRecord) -> PhoneOut<'a> {
    let live = live_states(state, std::slice::from_ref(phone)).await;
    let facts = Facts::of(state, std::slice::from_ref(phone)).await;
    phone_out(state, phone, live.get(&phone.id).copied(), &facts)
}

fn validate_name(name: Option<String>) -> Result<Option<String>, ApiError> {
    match name {
        Some(n) if n.chars().count() > MAX_NAME_CHARS => Err(ApiError::validation(
            "name",
            "name must be at most 120 characters",
        )),
        other => Ok(other),
    }
}

/// Pairs a phone; the device token is shown only in this answer.
#[utoipa::path(
    post,
    path = "/v1/phones",
    tag = "phones",
    request_body = CreatePhoneIn,
    responses((status = 201, description = "Paired.", body = PhoneWithTokenEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<CreatePhoneIn>,
) -> Answer {
    create_once(&state, &caller, body, create_phone).await
}

/// Pairs a phone, or adds a SIM line to a device: the response and the new phone's id.
async fn create_phone(state: &AppState, caller: &Caller, body: CreatePhoneIn) -> Created {
    let number_text = required(body.phone_number, "phone_number")?;
    let number = parse_number(&number_text, "phone_number")?;
    let name = validate_name(body.name)?;
    let line = parse_line(state, caller, body.device_phone_id, body.sim_slot).await?;
    let token = keys::generate_device_token();
    let pairing = match line {
        Some(line) => Pairing::Line(line),
        None => Pairing::Device {
            token_hash: keys::hash_secret(&token),
        },
    };
    let now = state.clock.now_ms();
    let created = phones::create(
        &state.db,
        caller.scope(),
        number.as_str(),
        name,
        pairing,
        state.settings.quotas.count(Quota::Phones),
        now,
    )
    .await;
    let phone = match (created, line) {
        (Err(StoreError::Conflict(_)), Some(line)) => {
            return Err(slot_taken(state, line).await);
        }
        (created, _) => created?,
    };
    state.registry.do_send(Paired {
        phone: phone.clone(),
    });
    let (message, device_token) = match line {
        Some(_) => (
            "SIM line added; it uses its device's token and connection",
            None,
        ),
        None => (
            "phone paired; the device token is shown only now",
            Some(token),
        ),
    };
    let out = PhoneWithTokenOut {
        phone: phone_out(state, &phone, None, &Facts::default()),
        device_token,
    };
    let response = success(StatusCode::CREATED, message, out);
    Ok((response, phone.id))
}

/// The SIM line a create asks for (docs/api.md, "Phones"): `device_phone_id` and `sim_slot`
/// together, the slot 1–3, the device a phone of the caller's scope that is not a line itself.
/// None when neither is given (a one-line device).
async fn parse_line(
    state: &AppState,
    caller: &Caller,
    device_phone_id: Option<String>,
    sim_slot: Option<i64>,
) -> Result<Option<Line>, ApiError> {
    let (device, slot) = match (device_phone_id, sim_slot) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(ApiError::validation(
                "sim_slot",
                "sim_slot is required with device_phone_id",
            ));
        }
        (None, Some(_)) => {
            return Err(ApiError::validation(
                "device_phone_id",
                "device_phone_id is required with sim_slot",
            ));
        }
        (Some(device), Some(slot)) => (device, slot),
    };
    let sim_slot =
        SimSlot::parse(slot).map_err(|e| ApiError::validation("sim_slot", e.to_string()))?;
    let not_a_device = || {
        ApiError::validation(
            "device_phone_id",
            "device_phone_id must be a phone of this workspace and mode that is not a SIM line",
        )
    };
    let id = Uuid::parse_str(&device).map_err(|_| not_a_device())?;
    let device = phones::get(&state.db, caller.scope(), id)
        .await
        .map_err(|_| not_a_device())?;
    if device.line.is_some() {
        return Err(not_a_device());
    }
    Ok(Some(Line {
        device_phone_id: device.id,
        sim_slot,
    }))
}

/// The 409 for a slot a line of the device already has, naming that line in `data.id`.
async fn slot_taken(state: &AppState, line: Line) -> ApiError {
    match phones::lines_of(&state.db, line.device_phone_id).await {
        Ok(lines) => match lines
            .into_iter()
            .find(|l| l.line.is_some_and(|l| l.sim_slot == line.sim_slot))
        {
            Some(existing) => ApiError::AlreadyExists {
                what: "SIM line on this slot",
                id: existing.id,
            },
            None => ApiError::internal("the slot was taken, then freed"),
        },
        Err(err) => ApiError::internal(err),
    }
}

/// Lists phones with their live state, cursor paged.
#[utoipa::path(
    get,
    path = "/v1/phones",
    tag = "phones",
    params(
        PageParams,
    ),
    responses((status = 200, description = "A page of phones.", body = PhonePageEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn list(state: web::Data<AppState>, caller: Caller, page: PageRequest) -> Answer {
    let rows = state.list_scoped(&caller, page, phones::list).await?;
    let live = live_states(&state, &rows.items).await;
    let facts = Facts::of(&state, &rows.items).await;
    let items = rows.map(|p| phone_out(&state, p, live.get(&p.id).copied(), &facts));
    Ok(items.answer::<PhonePage>("phones"))
}

/// One phone with its live state.
#[utoipa::path(
    get,
    path = "/v1/phones/{id}",
    tag = "phones",
    params(("id" = Uuid, Path, description = "phone id (device_id)")),
    responses((status = 200, description = "The phone.", body = PhoneEnvelope))
)]
#[tracing::instrument(skip_all, fields(phone_id = %path))]
async fn get(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let phone: PhoneRecord = state.find(&caller, &path).await?;
    Ok(success(
        StatusCode::OK,
        "phone",
        live_phone_out(&state, &phone).await,
    ))
}

/// Renames a phone or overrides its pace.
#[utoipa::path(
    patch,
    path = "/v1/phones/{id}",
    tag = "phones",
    params(("id" = Uuid, Path, description = "phone id (device_id)")),
    request_body = UpdatePhoneIn,
    responses((status = 200, description = "The updated phone.", body = PhoneEnvelope))
)]
#[tracing::instrument(skip_all, fields(phone_id = %path))]
async fn update(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    JsonBody(body): JsonBody<UpdatePhoneIn>,
) -> Answer {
    let id = parse_id(&path, "phone")?;
    let name = body.name.map(validate_name).transpose()?;
    let pace = match body.pace {
        None => None,
        Some(None) => Some(None),
        Some(Some(p)) => {
            let current = phones::get(&state.db, caller.scope(), id)
                .await
                .map_err(missing("phone"))?;
            Some(Some(p.parse(current.pace.unwrap_or(state.settings.pace))?))
        }
    };
    let phone = phones::update(&state.db, caller.scope(), id, name, pace)
        .await
        .map_err(missing("phone"))?;
    if pace.is_some() {
        state.registry.do_send(PaceChanged {
            phone_id: id,
            pace: phone.pace,
        });
    }
    Ok(success(
        StatusCode::OK,
        "phone updated",
        live_phone_out(&state, &phone).await,
    ))
}

/// Unpairs a phone: its session is closed, messages pinned to it fail; a device's SIM lines go
/// with it.
#[utoipa::path(
    delete,
    path = "/v1/phones/{id}",
    tag = "phones",
    params(("id" = Uuid, Path, description = "phone id (device_id)")),
    responses((status = 200, description = "Unpaired.", body = DeletedEnvelope))
)]
#[tracing::instrument(skip_all, fields(phone_id = %path))]
async fn delete(state: web::Data<AppState>, caller: Caller, path: web::Path<String>) -> Answer {
    let id = parse_id(&path, "phone")?;
    phones::delete(&state.db, caller.scope(), id)
        .await
        .map_err(missing("phone"))?;
    state.device_links.forget_tokens_of(id);
    state.registry.do_send(Unpaired { phone_id: id });
    Ok(deleted("phone unpaired", id))
}

/// Issues a new device token; the old one stops working and the session is closed.
#[utoipa::path(
    post,
    path = "/v1/phones/{id}/rotate-token",
    tag = "phones",
    params(("id" = Uuid, Path, description = "phone id (device_id)")),
    responses((status = 200, description = "The phone and its new token.", body = PhoneWithTokenEnvelope))
)]
#[tracing::instrument(skip_all, fields(phone_id = %path))]
async fn rotate_token(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Answer {
    let id = parse_id(&path, "phone")?;
    let current: PhoneRecord = state.find_id(&caller, id).await?;
    if current.line.is_some() {
        return Err(ApiError::validation(
            "id",
            "a SIM line has no device token; rotate its device's token",
        ));
    }
    let token = keys::generate_device_token();
    let phone = phones::set_token(&state.db, caller.scope(), id, keys::hash_secret(&token))
        .await
        .map_err(missing("phone"))?;
    state.device_links.forget_tokens_of(id);
    state.registry.do_send(TokenRotated { phone_id: id });
    let out = PhoneWithTokenOut {
        phone: phone_out(&state, &phone, None, &Facts::default()),
        device_token: Some(token),
    };
    Ok(success(
        StatusCode::OK,
        "device token rotated; the old one no longer works",
        out,
    ))
}
