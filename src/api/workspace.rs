//! Workspace API: the caller's workspace as the portal shows it on entry (name, mode, default
//! country, what a phone needs to pair), and its settings (docs/api.md, "Workspace").

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::body::present;
use super::envelope::envelope_of;
use super::{Answer, AppState, Caller, DocumentedRoute, JsonBody, missing};
use crate::clock::format_ms;
use crate::domain::number_lookup::Country;
use crate::domain::status::Mode;
use crate::error::{ApiError, ErrorCode, success};
use crate::store::workspaces::{self, Workspace, WorkspaceChange};

/// Longest workspace name, in characters.
const MAX_NAME_CHARS: usize = 120;

/// The workspace operations (route registry, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    vec![
        DocumentedRoute::of::<__path_get>(|| web::to(get)),
        DocumentedRoute::of::<__path_update>(|| web::to(update))
            .errors(&[ErrorCode::ValidationFailed]),
    ]
}

/// What the SMSGate Android app and smsgw's own WebSocket phones connect to.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PairingOut {
    /// The "API URL" the SMSGate app asks for: `<base>/mobile/v1`.
    pub device_api_url: String,
    /// The phone WebSocket (`ws://` or `wss://…/v1/phones/connect`).
    pub websocket_url: String,
}

/// A key's mode, as the API names it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyMode {
    Live,
    Test,
}

impl From<Mode> for KeyMode {
    fn from(mode: Mode) -> KeyMode {
        match mode {
            Mode::Live => KeyMode::Live,
            Mode::Test => KeyMode::Test,
        }
    }
}

/// The caller's workspace.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceOut {
    pub id: Uuid,
    pub name: String,
    /// The key's mode.
    pub mode: KeyMode,
    /// ISO 3166-1 alpha-2 country national numbers are read in: the workspace's own, else
    /// the server's `portal.default_country`; null when neither is set.
    pub default_country: Option<String>,
    /// Whether `default_country` is the workspace's own (false: the server default).
    pub default_country_set: bool,
    pub created_at: String,
    pub pairing: PairingOut,
}
envelope_of!(WorkspaceEnvelope, WorkspaceOut, "The caller's workspace.");

/// Body of `PATCH /v1/workspace`: absent fields stay; `default_country: null` returns to the
/// server default.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UpdateWorkspaceIn {
    /// 1–120 characters.
    pub name: Option<String>,
    /// ISO 3166-1 alpha-2 (`US`, `GB`); null: the server's default.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub default_country: Option<Option<String>>,
}

/// The country national numbers are read in for this workspace: its own, else the server's.
pub fn default_country(state: &AppState, workspace: &Workspace) -> Option<Country> {
    workspace
        .default_country
        .as_deref()
        .or(state.settings.portal.default_country.as_deref())
        .and_then(|code| Country::parse(code).ok())
}

fn workspace_out(
    state: &AppState,
    req: &HttpRequest,
    caller: &Caller,
    workspace: Workspace,
) -> WorkspaceOut {
    let base = super::origin::public_base(state, req);
    let websocket_base = super::origin::websocket_base(&base);
    WorkspaceOut {
        default_country: default_country(state, &workspace).map(|c| c.as_str().to_string()),
        default_country_set: workspace.default_country.is_some(),
        id: workspace.id.as_uuid(),
        name: workspace.name,
        mode: caller.mode.into(),
        created_at: format_ms(workspace.created_at),
        pairing: PairingOut {
            device_api_url: format!("{base}/mobile/v1"),
            websocket_url: format!("{websocket_base}/v1/phones/connect"),
        },
    }
}

/// The caller's workspace; the portal calls it to verify a key on entry.
#[utoipa::path(
    get,
    path = "/v1/workspace",
    tag = "workspace",
    responses((status = 200, description = "The workspace of the key.", body = WorkspaceEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn get(state: web::Data<AppState>, req: HttpRequest, caller: Caller) -> Answer {
    let workspace = workspaces::get(&state.db, caller.workspace_id)
        .await
        .map_err(missing("workspace"))?;
    Ok(success(
        StatusCode::OK,
        "workspace",
        workspace_out(&state, &req, &caller, workspace),
    ))
}

/// Renames the workspace or sets its default country (both modes share them).
#[utoipa::path(
    patch,
    path = "/v1/workspace",
    tag = "workspace",
    request_body = UpdateWorkspaceIn,
    responses((status = 200, description = "The updated workspace.", body = WorkspaceEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn update(
    state: web::Data<AppState>,
    req: HttpRequest,
    caller: Caller,
    JsonBody(body): JsonBody<UpdateWorkspaceIn>,
) -> Answer {
    let name = match body.name {
        Some(name) if name.trim().is_empty() || name.chars().count() > MAX_NAME_CHARS => {
            return Err(ApiError::validation(
                "name",
                "name must be 1 to 120 characters and not blank",
            ));
        }
        other => other,
    };
    let default_country = match body.default_country {
        Some(Some(code)) => {
            let country = Country::parse(&code)
                .map_err(|err| ApiError::validation("default_country", err.to_string()))?;
            Some(Some(country.as_str().to_string()))
        }
        other => other,
    };
    let workspace = workspaces::update(
        &state.db,
        caller.workspace_id,
        WorkspaceChange {
            name,
            default_country,
        },
    )
    .await
    .map_err(missing("workspace"))?;
    Ok(success(
        StatusCode::OK,
        "workspace updated",
        workspace_out(&state, &req, &caller, workspace),
    ))
}
