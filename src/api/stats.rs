//! Figures for the portal's home page (docs/api.md, "Statistics"): message counts per UTC day
//! (`store::stats`, kept by `actors::daily_stats`) and an overview of today, phones, campaigns
//! and webhook endpoints. Every figure is a primary-key range or an indexed read.

use actix_web::http::StatusCode;
use actix_web::web;
use chrono::{DateTime, Duration as Days, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::envelope::envelope_of;
use super::phones::live_states;
use super::{Answer, AppState, Caller, DocumentedRoute, QueryParams};
use crate::error::{ApiError, ErrorCode, success};
use crate::store::phones;
use crate::store::stats::{self, DayCounts, day_of};

/// Days `GET /v1/stats/daily` answers: default and most.
const DEFAULT_DAYS: i32 = 7;
const MAX_DAYS: i32 = 90;
/// Phones an overview counts at most (the `phones` quota is 100 by default).
const MAX_COUNTED_PHONES: u64 = 1_000;

/// The statistics operations (route registry, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    vec![
        DocumentedRoute::of::<__path_daily>(|| web::to(daily))
            .errors(&[ErrorCode::ValidationFailed]),
        DocumentedRoute::of::<__path_overview>(|| web::to(overview)),
    ]
}

/// The counts of one UTC day.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DayOut {
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    /// Outbound messages the phone radio sent that day.
    pub sent: u64,
    /// Outbound messages the carrier confirmed that day.
    pub delivered: u64,
    /// Outbound messages that failed or expired that day.
    pub failed: u64,
    /// Inbound messages received that day.
    pub received: u64,
}

/// Counts per day, oldest first, every day present.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DailyStatsOut {
    pub days: Vec<DayOut>,
}
envelope_of!(
    DailyStatsEnvelope,
    DailyStatsOut,
    "Message counts per UTC day."
);

/// Today's counts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TodayOut {
    pub sent: u64,
    pub delivered: u64,
    pub failed: u64,
    pub received: u64,
}

/// Phones paired and online.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PhonesCountOut {
    pub total: u64,
    pub online: u64,
}

/// The home page's figures.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OverviewOut {
    /// The current UTC day's counts.
    pub today: TodayOut,
    pub phones: PhonesCountOut,
    /// Campaigns `running`.
    pub campaigns_running: u64,
    /// Webhook endpoints disabled, or whose latest delivery attempt got no 2xx answer.
    pub webhook_endpoints_failing: u64,
}
envelope_of!(OverviewEnvelope, OverviewOut, "The workspace at a glance.");

/// The `days` query parameter of a figures-per-day route: 1 to 90, 7 when left out; anything
/// else is 422 naming `days`.
pub(super) fn days_of(query: &QueryParams) -> Result<i32, ApiError> {
    match query.get("days") {
        None => Ok(DEFAULT_DAYS),
        Some(text) => match text.parse::<i32>() {
            Ok(n) if (1..=MAX_DAYS).contains(&n) => Ok(n),
            _ => Err(ApiError::validation(
                "days",
                "days must be an integer from 1 to 90",
            )),
        },
    }
}

/// `YYYY-MM-DD` of a UTC day.
pub(super) fn date_of(day: i32) -> String {
    let start = DateTime::<Utc>::UNIX_EPOCH + Days::days(i64::from(day));
    start.format("%Y-%m-%d").to_string()
}

/// Message counts per UTC day for the last `days` days (today included), oldest first.
#[utoipa::path(
    get,
    path = "/v1/stats/daily",
    tag = "statistics",
    params(("days" = Option<u32>, Query, description = "1–90, default 7: the last days, today included")),
    responses((status = 200, description = "Counts per day, oldest first, every day present.", body = DailyStatsEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn daily(state: web::Data<AppState>, caller: Caller, query: QueryParams) -> Answer {
    let days = days_of(&query)?;
    let today = day_of(state.clock.now_ms());
    let first = today - days + 1;
    let stored = stats::days(&state.db, caller.scope(), first, today).await?;
    let days = (first..=today)
        .map(|day| {
            let c = stored.get(&day).copied().unwrap_or_default();
            DayOut {
                date: date_of(day),
                sent: c.sent,
                delivered: c.delivered,
                failed: c.failed,
                received: c.received,
            }
        })
        .collect();
    Ok(success(
        StatusCode::OK,
        "daily counts",
        DailyStatsOut { days },
    ))
}

/// Today's counts, phones online, running campaigns and failing webhook endpoints.
#[utoipa::path(
    get,
    path = "/v1/overview",
    tag = "statistics",
    responses((status = 200, description = "The workspace at a glance.", body = OverviewEnvelope))
)]
#[tracing::instrument(skip_all, fields(workspace_id = %caller.workspace_id))]
async fn overview(state: web::Data<AppState>, caller: Caller) -> Answer {
    let scope = caller.scope();
    let today = day_of(state.clock.now_ms());
    let counts: DayCounts = stats::days(&state.db, scope, today, today)
        .await?
        .remove(&today)
        .unwrap_or_default();
    let (paired, _) = phones::list(&state.db, scope, None, MAX_COUNTED_PHONES).await?;
    let live = live_states(&state, &paired).await;
    let online = live.values().filter(|s| s.online).count() as u64;
    let out = OverviewOut {
        today: TodayOut {
            sent: counts.sent,
            delivered: counts.delivered,
            failed: counts.failed,
            received: counts.received,
        },
        phones: PhonesCountOut {
            total: paired.len() as u64,
            online,
        },
        campaigns_running: stats::running_campaigns(&state.db, scope).await?,
        webhook_endpoints_failing: stats::failing_endpoints(&state.db, scope).await?,
    };
    Ok(success(StatusCode::OK, "overview", out))
}
