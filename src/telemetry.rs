//! Logging: human-readable by default, JSON with `log.format = "json"`; `RUST_LOG` overrides
//! `log.level`. Secrets and message content are never logged at info level.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls (tests start many apps) are no-ops.
pub fn init(format: &str, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}

use std::sync::OnceLock;
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::Instrument;

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Latency buckets of the request histogram, in seconds (0.5 ms to 10 s).
const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Installs the process-wide Prometheus recorder once and returns its handle.
pub fn metrics_handle() -> Option<PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets(LATENCY_BUCKETS_SECONDS)
                .ok()?
                .install_recorder()
                .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
                .ok()
        })
        .clone()
}

/// Gives every request an id (the `x-request-id` header, echoed or generated), a tracing span,
/// and counts it by route pattern and status with its latency.
pub async fn observe_request(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string());
    let method = req.method().to_string();
    let route = req
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_string());
    let span =
        tracing::info_span!("request", request_id = %request_id, method = %method, route = %route);
    let started = Instant::now();
    let result = next.call(req).instrument(span.clone()).await;
    let elapsed = started.elapsed().as_secs_f64();
    let status = match &result {
        Ok(res) => res.status().as_u16(),
        Err(err) => err.as_response_error().status_code().as_u16(),
    };
    metrics::counter!("smsgw_http_requests_total", "route" => route.clone(), "method" => method.clone(), "status" => status.to_string()).increment(1);
    metrics::histogram!("smsgw_http_request_duration_seconds", "route" => route, "method" => method).record(elapsed);
    span.in_scope(|| tracing::debug!(status, elapsed_ms = elapsed * 1000.0, "request finished"));
    result.map(|mut res| {
        if let Ok(value) = HeaderValue::from_str(&request_id) {
            res.headers_mut()
                .insert(HeaderName::from_static("x-request-id"), value);
        }
        res
    })
}
