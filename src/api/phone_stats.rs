//! Delivery by line (docs/api.md, "Phone stats"): a phone's sent, delivered and failed
//! messages per UTC day, its failures by reason, delivery rate and median time to deliver, read
//! from the per-phone day counters `actors::daily_stats` keeps (`store::phone_stats`). The read
//! is three primary-key ranges of one phone, however many messages it sent.

use actix_web::http::StatusCode;
use actix_web::web;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::envelope_of;
use super::stats::{date_of, days_of};
use super::{Answer, AppState, Caller, DocumentedRoute, QueryParams};
use crate::domain::delivery_time::DeliveryTimes;
use crate::error::{ErrorCode, success};
use crate::store::phone_stats::{self, LineDay};
use crate::store::phones::PhoneRecord;
use crate::store::stats::day_of;

/// The phone stats operation (route registry, see `super::documented_routes`).
pub fn documented_routes() -> Vec<DocumentedRoute> {
    vec![
        DocumentedRoute::of::<__path_phone_stats>(|| web::to(phone_stats))
            .errors(&[ErrorCode::ValidationFailed]),
    ]
}

/// Messages failed for one reason.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FailureCountOut {
    /// The message's `failure_reason` (its first 100 characters): `expired`, or the error the
    /// phone reported.
    pub reason: String,
    pub count: u64,
}

/// A phone's figures over a day or over the whole window.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PhoneFiguresOut {
    /// Messages the phone reported sent.
    pub sent: u64,
    /// Messages the carrier confirmed delivered.
    pub delivered: u64,
    /// Messages assigned to the phone that failed after all attempts or expired.
    pub failed: u64,
    /// `failed` by reason, most frequent first. A failure without a reason is in `failed`
    /// only, so the counts may add up to less.
    pub failed_by_reason: Vec<FailureCountOut>,
    /// `delivered / (delivered + failed)`, from 0 to 1; null when both are 0.
    #[schema(nullable = true)]
    pub delivery_rate: Option<f64>,
    /// Median time from hand-over to the phone to delivery, in seconds, within about ±9 %
    /// (docs/api.md, "Phone stats"); null without deliveries.
    #[schema(nullable = true)]
    pub median_seconds_to_deliver: Option<f64>,
}

/// A phone's figures on one UTC day.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PhoneDayOut {
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    #[serde(flatten)]
    pub figures: PhoneFiguresOut,
}

/// A phone's delivery figures for the last days.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PhoneStatsOut {
    pub phone_id: Uuid,
    pub phone_number: String,
    /// The whole window.
    pub totals: PhoneFiguresOut,
    /// Per UTC day, oldest first, every day present (zeros when nothing happened).
    pub days: Vec<PhoneDayOut>,
}
envelope_of!(
    PhoneStatsEnvelope,
    PhoneStatsOut,
    "A phone's delivery figures."
);

/// The figures `LineDay` holds, as the API shows them.
fn figures_of(day: &LineDay) -> PhoneFiguresOut {
    let mut failed_by_reason: Vec<FailureCountOut> = day
        .failures
        .iter()
        .map(|(reason, count)| FailureCountOut {
            reason: reason.clone(),
            count: *count,
        })
        .collect();
    failed_by_reason.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
    let ended = day.delivered + day.failed;
    PhoneFiguresOut {
        sent: day.sent,
        delivered: day.delivered,
        failed: day.failed,
        failed_by_reason,
        delivery_rate: (ended > 0).then(|| day.delivered as f64 / ended as f64),
        median_seconds_to_deliver: median_seconds(&day.times),
    }
}

/// The median of `times` in seconds, to the millisecond.
fn median_seconds(times: &DeliveryTimes) -> Option<f64> {
    times.median_ms().map(|ms| ms.round() / 1000.0)
}

/// A phone's delivery figures: totals and per UTC day for the last `days` days (today
/// included), oldest first.
#[utoipa::path(
    get,
    path = "/v1/phones/{id}/stats",
    tag = "phones",
    params(
        ("id" = Uuid, Path, description = "phone id (a SIM line's own id for its figures)"),
        ("days" = Option<u32>, Query, description = "1–90, default 7: the last days, today included")
    ),
    responses((status = 200, description = "Totals and figures per day, oldest first, every day present.", body = PhoneStatsEnvelope))
)]
#[tracing::instrument(skip_all, fields(phone_id = %path))]
async fn phone_stats(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: QueryParams,
) -> Answer {
    let days = days_of(&query)?;
    let phone: PhoneRecord = state.find(&caller, &path).await?;
    let today = day_of(state.clock.now_ms());
    let first = today - days + 1;
    let stored = phone_stats::days(&state.db, phone.id, first, today).await?;
    let mut totals = LineDay::default();
    let mut out = Vec::with_capacity(days as usize);
    let empty = LineDay::default();
    for day in first..=today {
        let figures = stored.get(&day).unwrap_or(&empty);
        totals.add(figures);
        out.push(PhoneDayOut {
            date: date_of(day),
            figures: figures_of(figures),
        });
    }
    Ok(success(
        StatusCode::OK,
        "phone stats",
        PhoneStatsOut {
            phone_id: phone.id,
            phone_number: phone.phone_number,
            totals: figures_of(&totals),
            days: out,
        },
    ))
}
