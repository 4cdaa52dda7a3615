//! Operational routes: liveness, readiness and Prometheus metrics.

use std::time::Duration;

use super::schemas::{Empty, Readiness};
use super::{Answer, AppState};
use crate::error::{ApiError, success};
use crate::telemetry::MESSAGE_COUNTS_EVERY;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};

/// Registers `/health`, `/ready` and `/metrics`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/health", web::get().to(health))
        .route("/ready", web::get().to(ready))
        .route("/metrics", web::get().to(metrics));
}

async fn health() -> HttpResponse {
    success(StatusCode::OK, "serving", Empty {})
}

/// Longest wait for the database before `/ready` answers 503.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

async fn ready(state: web::Data<AppState>) -> Answer {
    let answered = tokio::time::timeout(READY_TIMEOUT, crate::store::ping(&state.db))
        .await
        .unwrap_or(false);
    // In a cluster the node is ready only while its leases are renewed in time.
    let leases = state.cluster.as_ref().map(|c| c.healthy());
    if answered && leases == Some(false) {
        return Err(ApiError::LeasesNotRenewed);
    }
    if answered {
        let readiness = Readiness {
            database: "ok",
            node: state.cluster.as_ref().map(|c| c.node().to_string()),
            leases: state.cluster.as_ref().map(|_| "ok"),
        };
        Ok(success(StatusCode::OK, "ready", readiness))
    } else {
        Err(ApiError::NotReady)
    }
}

/// Prometheus text format; live gauges (phones online, messages by status) are refreshed on
/// each scrape, the message counts at most every [`MESSAGE_COUNTS_EVERY`].
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let due = state.messages_counted_at.lock().is_ok_and(|mut at| {
        let due = at.is_none_or(|t| t.elapsed() >= MESSAGE_COUNTS_EVERY);
        if due {
            *at = Some(std::time::Instant::now());
        }
        due
    });
    if due {
        match crate::store::messages::count_by_status(&state.db).await {
            Ok(counts) => crate::telemetry::set_message_counts(&counts),
            Err(err) => tracing::warn!(error = %err, "messages not counted for /metrics"),
        }
    }
    if let Ok(online) = state
        .registry
        .send(crate::actors::registry::CountOnline)
        .await
    {
        metrics::gauge!(crate::telemetry::names::PHONES_ONLINE).set(online as f64);
    }
    let body = crate::telemetry::metrics_handle()
        .map(|h| h.render())
        .unwrap_or_default();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(body)
}
