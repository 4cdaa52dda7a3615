//! Operational routes: liveness and readiness.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde_json::json;

use super::AppState;
use crate::error::{ApiError, success};

/// Registers `/health` and `/ready`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/health", web::get().to(health))
        .route("/ready", web::get().to(ready));
}

async fn health() -> HttpResponse {
    success(StatusCode::OK, "serving", json!({}))
}

async fn ready(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if crate::store::ping(&state.db).await {
        Ok(success(
            StatusCode::OK,
            "ready",
            json!({ "database": "ok" }),
        ))
    } else {
        Ok(HttpResponse::ServiceUnavailable().json(json!({
            "status": "error",
            "message": "the database does not answer",
            "data": { "database": "unavailable" },
            "error_code": "not_ready",
        })))
    }
}
