//! Logging: human-readable by default, JSON with `log.format = "json"`; `RUST_LOG` overrides
//! `log.level`. Secrets and message content are never logged at info level.
//!
//! Requests: [`observe_request`], the outermost middleware, gives each request its id
//! (`x-request-id`, echoed or generated) and the `request` span every log line of the request
//! inherits, and counts it by route *pattern* (ids never become label values), method and
//! status.
//!
//! Metrics go through the `metrics` facade to one process-wide Prometheus recorder
//! ([`metrics_handle`]), rendered at `/metrics` (docs/api.md, "Operations"). Every name and label
//! value is in [`names`], described and created at zero when the recorder is installed.
//! Counters are recorded where the event happens (the writer's change listener for
//! transitions, the Phone actors for queue depth, the writer for batch sizes); live gauges are
//! read at scrape time (`api::ops`: phones online from the Registry, messages by status from
//! the database at most every [`MESSAGE_COUNTS_EVERY`]).

use crate::config::LogFormat;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Installs the global subscriber once; later calls (tests start many apps) are no-ops.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // Colour only for a terminal: a log file or a pipe gets plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = if format == LogFormat::Json {
        Box::new(fmt.json().flatten_event(true))
    } else {
        Box::new(fmt)
    };
    let _ = tracing_subscriber::registry()
        .with(
            fmt.with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                !is_client_error(meta)
            })),
        )
        .with(ClientErrors)
        .with(filter)
        .try_init();
}

/// actix-http logs at ERROR what a client caused: a request it cannot parse, a head too large,
/// a connection reset mid-request (its dispatcher's "stream error"), or an upgraded connection
/// gone before its answer. Those are not the server's errors.
fn is_client_error(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() == tracing::Level::ERROR && meta.target().starts_with("actix_http::h1")
}

/// Logs again at WARN the events [`is_client_error`] keeps from the log's ERROR level.
struct ClientErrors;

impl<S: tracing::Subscriber> Layer<S> for ClientErrors {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !is_client_error(event.metadata()) {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        tracing::warn!(target: "actix_http", client_error = true, "{}", message.0);
    }
}

/// The `message` field of an event.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

use std::sync::OnceLock;
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::Instrument;

use crate::domain::campaign::RecipientStatus;
use crate::domain::status::QueueClass;

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The node id every series is labelled with (`node`), set once before the recorder is
/// installed. The recorder is process-wide: in a process running several nodes (tests), the
/// first node's id labels them all.
static NODE: OnceLock<String> = OnceLock::new();

/// Labels every series of this process with `node="<id>"` (docs/api.md, "Operations"); only the
/// first call before [`metrics_handle`] counts.
pub fn set_node(id: uuid::Uuid) {
    let _ = NODE.set(id.to_string());
}

/// Latency buckets of the request histogram, in seconds (0.5 ms to 10 s).
const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of the writer's batch-size histogram (jobs per transaction, up to its 512).
const BATCH_JOBS_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// Installs the process-wide Prometheus recorder once and returns its handle; every metric of
/// [`names`] is described and exists (at zero) from the start.
pub fn metrics_handle() -> Option<PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| {
            let mut builder = PrometheusBuilder::new();
            if let Some(node) = NODE.get() {
                builder = builder.add_global_label("node", node);
            }
            let handle = builder
                .set_buckets(LATENCY_BUCKETS_SECONDS)
                .ok()?
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(names::WRITER_BATCH_JOBS.into()),
                    BATCH_JOBS_BUCKETS,
                )
                .ok()?
                .install_recorder()
                .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
                .ok()?;
            register_metrics();
            Some(handle)
        })
        .clone()
}

/// Every metric the server exports (Prometheus text at `GET /metrics`, all prefixed `smsgw_`),
/// with the label values each takes. Record through these names (and the helpers below) so the
/// names in docs/api.md stay true.
pub mod names {
    /// Counter `{route, method, status}`: HTTP requests; `route` is the route pattern
    /// (`/v1/messages/{id}`), `unmatched` for unknown paths.
    pub const HTTP_REQUESTS: &str = "smsgw_http_requests_total";
    /// Histogram `{route, method, status}`, seconds: HTTP request latency.
    pub const HTTP_REQUEST_DURATION: &str = "smsgw_http_request_duration_seconds";
    /// Counter `{kind}`: message status transitions committed (`queued`, `sending`, `sent`,
    /// `delivered`, `failed`, `expired`, `canceled`, …).
    pub const MESSAGE_TRANSITIONS: &str = "smsgw_message_transitions_total";
    /// Gauge `{status}`: messages stored in each status (read from the database at a scrape,
    /// at most every [`super::MESSAGE_COUNTS_EVERY`]).
    pub const MESSAGES: &str = "smsgw_messages";
    /// Gauge: phones with an open WebSocket session (refreshed at each scrape).
    pub const PHONES_ONLINE: &str = "smsgw_phones_online";
    /// Gauge `{class}`: messages waiting in phone queues (held ones included) by priority class.
    pub const QUEUE_DEPTH: &str = "smsgw_queue_depth";
    /// Counter `{outcome}`: webhook delivery attempts.
    pub const WEBHOOK_ATTEMPTS: &str = "smsgw_webhook_attempts_total";
    /// Histogram `{outcome}`, seconds: webhook attempt duration.
    pub const WEBHOOK_ATTEMPT_DURATION: &str = "smsgw_webhook_attempt_duration_seconds";
    /// Counter `{state}`: campaign recipients reaching a state.
    pub const CAMPAIGN_RECIPIENTS: &str = "smsgw_campaign_recipients_total";
    /// Histogram: jobs (accepts, transitions, attempt records, …) per writer transaction.
    pub const WRITER_BATCH_JOBS: &str = "smsgw_writer_batch_jobs";
    /// Histogram, seconds: one writer transaction, from `BEGIN` to the end of its commit.
    pub const WRITER_COMMIT_DURATION: &str = "smsgw_writer_commit_duration_seconds";
    /// Counter `{outcome}`: AI drafts by outcome.
    pub const AI_DRAFTS: &str = "smsgw_ai_drafts_total";
}

/// `outcome` of [`names::WEBHOOK_ATTEMPTS`]: one webhook delivery attempt's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum WebhookOutcome {
    /// 2xx.
    Success,
    /// 3xx or 4xx: not retried.
    Rejected,
    /// 5xx.
    ServerError,
    Timeout,
    /// DNS, connect or TLS failed.
    ConnectionError,
    /// The target was refused by the address rules at delivery.
    Blocked,
    /// Retention removed the message record (no request made).
    MessageDeleted,
}

/// `outcome` of [`names::AI_DRAFTS`]: what became of one AI reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum AiDraftOutcome {
    /// Stored as a pending draft.
    Created,
    /// Sent at once (auto mode).
    AutoSent,
    /// Sent from a draft.
    Sent,
    Discarded,
    /// The provider failed: no draft.
    ProviderError,
    /// The sender texted STOP or STOP AI while the provider answered: neither sent nor stored.
    OptedOut,
}

/// Describes every metric and creates the labelled series known in advance at zero, so a
/// scrape shows them before the first event.
fn register_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        names::HTTP_REQUESTS,
        "HTTP requests by route pattern, method and status"
    );
    describe_histogram!(
        names::HTTP_REQUEST_DURATION,
        Unit::Seconds,
        "HTTP request latency by route pattern, method and status"
    );
    describe_counter!(
        names::MESSAGE_TRANSITIONS,
        "Message status transitions committed, by kind"
    );
    describe_gauge!(
        names::MESSAGES,
        "Messages stored in each status (read at most every 10 s)"
    );
    describe_gauge!(names::PHONES_ONLINE, "Phones with an open session");
    describe_gauge!(
        names::QUEUE_DEPTH,
        "Messages waiting in phone queues by priority class"
    );
    describe_counter!(
        names::WEBHOOK_ATTEMPTS,
        "Webhook delivery attempts by outcome"
    );
    describe_histogram!(
        names::WEBHOOK_ATTEMPT_DURATION,
        Unit::Seconds,
        "Webhook attempt duration by outcome"
    );
    describe_counter!(
        names::CAMPAIGN_RECIPIENTS,
        "Campaign recipients reaching each state"
    );
    describe_counter!(names::AI_DRAFTS, "AI drafts by outcome");
    describe_histogram!(
        names::WRITER_BATCH_JOBS,
        Unit::Count,
        "Jobs committed per writer transaction"
    );
    describe_histogram!(
        names::WRITER_COMMIT_DURATION,
        Unit::Seconds,
        "Writer transaction duration, BEGIN to commit"
    );
    metrics::gauge!(names::PHONES_ONLINE).increment(0.0);
    for class in [QueueClass::Single, QueueClass::Bulk, QueueClass::Campaign] {
        metrics::gauge!(names::QUEUE_DEPTH, "class" => class.as_str()).increment(0.0);
    }
    use strum::IntoEnumIterator;
    for outcome in WebhookOutcome::iter() {
        let outcome: &'static str = outcome.into();
        metrics::counter!(names::WEBHOOK_ATTEMPTS, "outcome" => outcome).increment(0);
    }
    for state in RecipientStatus::ALL {
        metrics::counter!(names::CAMPAIGN_RECIPIENTS, "state" => state.as_str()).increment(0);
    }
    for outcome in AiDraftOutcome::iter() {
        let outcome: &'static str = outcome.into();
        metrics::counter!(names::AI_DRAFTS, "outcome" => outcome).increment(0);
    }
}

/// Counts one webhook attempt and its duration.
pub fn record_webhook_attempt(outcome: WebhookOutcome, seconds: f64) {
    let outcome: &'static str = outcome.into();
    metrics::counter!(names::WEBHOOK_ATTEMPTS, "outcome" => outcome).increment(1);
    metrics::histogram!(names::WEBHOOK_ATTEMPT_DURATION, "outcome" => outcome).record(seconds);
}

/// Counts campaign recipients reaching `state`.
pub fn count_campaign_recipients(state: RecipientStatus, count: u64) {
    metrics::counter!(names::CAMPAIGN_RECIPIENTS, "state" => state.as_str()).increment(count);
}

/// Counts a campaign recipient whose message changed (`kind` of the writer's change): the
/// moves that take a recipient to another [`RecipientStatus`].
pub fn count_campaign_message(kind: crate::domain::change::ChangeKind) {
    use crate::domain::status::MessageStatus;
    let crate::domain::change::ChangeKind::Moved(status) = kind else {
        return;
    };
    let state = match status {
        MessageStatus::Queued => RecipientStatus::Queued,
        MessageStatus::Sent => RecipientStatus::Sent,
        MessageStatus::Delivered => RecipientStatus::Delivered,
        MessageStatus::Failed | MessageStatus::Expired => RecipientStatus::Failed,
        MessageStatus::Canceled => RecipientStatus::Canceled,
        MessageStatus::Sending => return,
    };
    count_campaign_recipients(state, 1);
}

/// How often a scrape may count the stored messages by status (a grouped count over the
/// messages table; scrapes in between show the last counts).
pub const MESSAGE_COUNTS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Sets the `smsgw_messages{status}` gauges (every status, 0 when none).
pub fn set_message_counts(counts: &[(crate::domain::status::MessageStatus, u64)]) {
    for status in crate::domain::status::MessageStatus::ALL {
        let n = counts
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n);
        metrics::gauge!(names::MESSAGES, "status" => status.as_str()).set(n as f64);
    }
}

/// Counts one AI draft outcome.
pub fn count_ai_draft(outcome: AiDraftOutcome) {
    let outcome: &'static str = outcome.into();
    metrics::counter!(names::AI_DRAFTS, "outcome" => outcome).increment(1);
}

/// Longest `x-request-id` a client may choose, in characters.
pub const REQUEST_ID_MAX_CHARS: usize = 64;

/// The request's id: its `x-request-id` header when it is 1–64 characters of
/// `[A-Za-z0-9._:-]`, else a new one. The id goes into every log line of the request, so a
/// client must not be able to forge log fields or lines with it (quotes, `=`, spaces).
pub fn request_id(headers: &actix_web::http::header::HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| is_request_id(v))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string())
}

/// Whether a client's request id may be used as it is.
fn is_request_id(id: &str) -> bool {
    (1..=REQUEST_ID_MAX_CHARS).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Echoes the request id on a response (`x-request-id`).
pub fn tag_response(headers: &mut actix_web::http::header::HeaderMap, request_id: &str) {
    if let Ok(value) = HeaderValue::from_str(request_id) {
        headers.insert(HeaderName::from_static("x-request-id"), value);
    }
}

/// Counts one answered request by route pattern, method and status, with its latency.
pub fn record_request(route: String, method: String, status: u16, elapsed: std::time::Duration) {
    let status = status.to_string();
    metrics::counter!(names::HTTP_REQUESTS, "route" => route.clone(), "method" => method.clone(), "status" => status.clone()).increment(1);
    metrics::histogram!(names::HTTP_REQUEST_DURATION, "route" => route, "method" => method, "status" => status).record(elapsed.as_secs_f64());
}

/// Gives every request an id (the `x-request-id` header, echoed or generated), a tracing span,
/// and counts it by route pattern and status with its latency.
pub async fn observe_request(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let request_id = request_id(req.headers());
    let method = req.method().to_string();
    let route = req
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_string());
    let span =
        tracing::info_span!("request", request_id = %request_id, method = %method, route = %route);
    let started = Instant::now();
    let result = next.call(req).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let status = match &result {
        Ok(res) => res.status().as_u16(),
        Err(err) => err.as_response_error().status_code().as_u16(),
    };
    record_request(route, method, status, elapsed);
    span.in_scope(|| {
        tracing::debug!(
            status,
            elapsed_ms = elapsed.as_secs_f64() * 1000.0,
            "request finished"
        )
    });
    result.map(|mut res| {
        tag_response(res.headers_mut(), &request_id);
        res
    })
}
