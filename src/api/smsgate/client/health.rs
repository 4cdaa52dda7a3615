//! Health checks in the SMSGate shape, unauthenticated (credentials sent anyway are not
//! read): `/health`, `/health/live`, `/health/ready`, `/health/startup` (docs/compat.md,
//! Health).

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde_json::{Value, json};

use crate::api::AppState;
use crate::api::ops::READY_TIMEOUT;

/// Registers the four health routes.
pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/health", web::get().to(ready))
        .route("/health/ready", web::get().to(ready))
        .route("/health/live", web::get().to(live))
        .route("/health/startup", web::get().to(live));
}

/// The body: `status` is `pass` or `fail`, with one entry per check.
fn report(checks: Value, pass: bool) -> HttpResponse {
    let status = if pass { "pass" } else { "fail" };
    let code = if pass {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    super::wire::json(
        code,
        json!({
            "status": status,
            "version": env!("CARGO_PKG_VERSION"),
            "releaseId": 0,
            "checks": checks,
        }),
    )
}

/// The process answers: it is live, and past start-up once it serves requests.
async fn live() -> HttpResponse {
    report(json!({}), true)
}

/// Ready when the database answers within [`READY_TIMEOUT`]; 503 `fail` otherwise.
async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let answered = tokio::time::timeout(READY_TIMEOUT, crate::store::ping(&state.db))
        .await
        .unwrap_or(false);
    let status = if answered { "pass" } else { "fail" };
    let checks = json!({
        "db:ping": {
            "status": status,
            "description": "the database answers",
            "observedValue": i32::from(answered),
            "observedUnit": "boolean",
        }
    });
    report(checks, answered)
}
