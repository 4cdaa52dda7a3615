//! One attempt: build the body, sign it, post it, classify the answer.

use super::retry;
use crate::actors::Deps;
use crate::domain::signing;
use crate::domain::webhook_event::WebhookFormat;
use crate::outbound::body::{Subject, payload, phone_payload};
use crate::outbound::smsgate_body;
use crate::outbound::target::{self as webhook_target, AttemptError};
use crate::store::messages;
use crate::store::scoped::Scope;
use crate::store::settings::SettingsSecret;
use crate::store::webhooks::{AttemptRecord, EndpointRecord, PendingDelivery};

/// Largest response body read (and discarded) so the connection can be reused, in bytes.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// The User-Agent of every delivery (docs/api.md, Webhooks).
const USER_AGENT: &str = "smsgw-webhooks";

/// What one attempt ended with, before the retry decision.
struct Answer {
    status_code: Option<u16>,
    error: Option<AttemptError>,
    detail: Option<String>,
}

/// Makes one attempt and decides what follows (succeeded, failed, or the next retry time).
pub(super) async fn attempt(
    deps: Deps,
    client: awc::Client,
    endpoint: EndpointRecord,
    smsgate_key: Option<String>,
    delivery: PendingDelivery,
    message: Result<Option<Subject>, String>,
) -> AttemptRecord {
    let settings = &deps.settings.webhooks;
    let attempt_no = delivery.attempts + 1;
    let attempted_at = deps.clock.now_ms();
    let started = tokio::time::Instant::now();
    let answer = send(&deps, &client, &endpoint, smsgate_key, &delivery, message).await;
    let duration = started.elapsed();
    let duration_ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
    let retry::Next {
        state,
        next_attempt_at,
    } = retry::decide(
        answer.status_code,
        answer.error,
        attempt_no,
        &settings.retry_schedule,
        deps.clock.now_ms(),
    );
    crate::telemetry::record_webhook_attempt(
        retry::metric_outcome(answer.status_code, answer.error),
        duration.as_secs_f64(),
    );
    AttemptRecord {
        delivery,
        attempt: attempt_no,
        status_code: answer.status_code,
        error: answer.error.map(AttemptError::as_str),
        error_detail: answer.detail,
        duration_ms,
        attempted_at,
        next_attempt_at,
        state,
        // Set by the actor: the lease it made the attempt under.
        lease: None,
    }
}

/// Builds, signs and posts the body; never panics, every failure becomes a typed error.
async fn send(
    deps: &Deps,
    client: &awc::Client,
    endpoint: &EndpointRecord,
    smsgate_key: Option<String>,
    delivery: &PendingDelivery,
    message: Result<Option<Subject>, String>,
) -> Answer {
    let settings = &deps.settings.webhooks;
    let message = match message {
        Ok(Some(message)) => message,
        Ok(None) => {
            return Answer {
                status_code: None,
                error: Some(AttemptError::MessageDeleted),
                detail: Some("the message record was removed by retention".into()),
            };
        }
        Err(err) => {
            // A storage hiccup is not the endpoint's fault: retried like a connection error.
            return Answer {
                status_code: None,
                error: Some(AttemptError::Connect),
                detail: Some(format!("message not read: {err}")),
            };
        }
    };
    if let Err(error) =
        webhook_target::check_literal(&endpoint.url, settings.allow_insecure_targets)
    {
        let detail = match error {
            AttemptError::BlockedAddress => "the URL targets a blocked address",
            _ => "the URL is not one a request can be made to",
        };
        return Answer {
            status_code: None,
            error: Some(error),
            detail: Some(detail.into()),
        };
    }
    let serialized = match &message {
        Subject::Message { message, .. } if endpoint.format == WebhookFormat::Smsgate => {
            return send_smsgate(deps, client, endpoint, smsgate_key, delivery, message).await;
        }
        Subject::Message { message, draft } => {
            serde_json::to_vec(&payload(delivery, message, draft.as_ref()))
        }
        Subject::Phone { data } => serde_json::to_vec(&phone_payload(delivery, data)),
    };
    let body = match serialized {
        Ok(body) => body,
        Err(err) => {
            return Answer {
                status_code: None,
                error: Some(AttemptError::Connect),
                detail: Some(format!("body not serialized: {err}")),
            };
        }
    };
    let event_id = delivery.event_id.to_string();
    let timestamp = deps.clock.now().timestamp();
    // Opened per attempt, so the clear key lives only for the request. Start-up checked that
    // every stored key opens; a failure here means the row changed under a running server.
    let signing_key = match deps.webhooks.secrets.open(
        &endpoint.sealed_signing_key,
        endpoint.id.as_uuid().as_bytes(),
    ) {
        Ok(key) => key,
        Err(err) => {
            return Answer {
                status_code: None,
                error: Some(AttemptError::Connect),
                detail: Some(format!("signing key not opened: {err}")),
            };
        }
    };
    let signed = signing::sign(&signing_key, &event_id, timestamp, &body);
    let mut request = client
        .post(&endpoint.url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("user-agent", USER_AGENT))
        .insert_header(("x-signature", signed.signature))
        .insert_header(("x-timestamp", timestamp.to_string()))
        .insert_header(("x-event-id", event_id.clone()))
        .insert_header(("webhook-id", event_id))
        .insert_header(("webhook-timestamp", timestamp.to_string()));
    if !signed.webhook_signature.is_empty() {
        request = request.insert_header(("webhook-signature", signed.webhook_signature));
    }
    post(settings, request, body).await
}

/// Builds, signs (as the SMSGate app signs, with the workspace's key) and posts the body of a
/// delivery to an SMSGate-format endpoint (docs/compat.md, Webhooks).
async fn send_smsgate(
    deps: &Deps,
    client: &awc::Client,
    endpoint: &EndpointRecord,
    sealed_key: Option<String>,
    delivery: &PendingDelivery,
    message: &messages::Message,
) -> Answer {
    let fail = |detail: String| Answer {
        status_code: None,
        error: Some(AttemptError::Connect),
        detail: Some(detail),
    };
    let body = match smsgate_body::body(endpoint, delivery, message) {
        Some(Ok(body)) => body,
        Some(Err(err)) => return fail(format!("body not serialized: {err}")),
        None => return fail(format!("{} is never delivered", delivery.event)),
    };
    let scope = Scope {
        workspace_id: endpoint.workspace_id,
        mode: endpoint.mode,
    };
    let Some(sealed_key) = sealed_key else {
        return fail("the workspace's webhooks.signing_key was not read".into());
    };
    let signing_key = match deps
        .webhooks
        .secrets
        .open(&sealed_key, &SettingsSecret::SigningKey.context(scope))
    {
        Ok(key) => key,
        Err(err) => return fail(format!("signing key not opened: {err}")),
    };
    let timestamp = deps.clock.now().timestamp();
    let request = client
        .post(&endpoint.url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("user-agent", USER_AGENT))
        .insert_header((
            "x-signature",
            signing::smsgate_signature(&signing_key, &body, timestamp),
        ))
        .insert_header(("x-timestamp", timestamp.to_string()));
    post(&deps.settings.webhooks, request, body).await
}

/// Posts a signed body and classifies the answer.
async fn post(
    settings: &crate::config::WebhookSettings,
    request: awc::ClientRequest,
    body: Vec<u8>,
) -> Answer {
    match request.send_body(body).await {
        Ok(mut response) => {
            let status = response.status().as_u16();
            // Drain a little of the body so the connection can be reused; its content is ignored.
            let _ =
                tokio::time::timeout(settings.timeout, response.body().limit(MAX_RESPONSE_BYTES))
                    .await;
            let error = match status {
                200..=299 => None,
                300..=399 => Some(AttemptError::Redirect),
                _ => Some(AttemptError::HttpStatus),
            };
            Answer {
                status_code: Some(status),
                error,
                detail: error.map(|_| format!("HTTP {status}")),
            }
        }
        Err(err) => Answer {
            status_code: None,
            error: Some(webhook_target::classify(&err)),
            detail: Some(err.to_string()),
        },
    }
}
