//! Webhooks (docs/api.md, Webhooks) against a real local receiver: the set-ups the topic files
//! share. `endpoints` holds the endpoint API and SSRF refusals, `deliveries` signed deliveries
//! and filters, `retries` retries and the attempts log.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use smsgw::domain::protocol::{PhoneFrame, ServerFrame};
use smsgw::domain::signing;
use smsgw::outbound::target::StaticResolver;

use crate::backend_tests;
use crate::helpers::{
    Backend, RECIPIENT, Reply, SENDER, TestApp, WebhookReceiver, poll, spawn_app_with,
    spawn_app_with_resolver,
};

mod deliveries;
mod endpoints;
mod retries;

/// Short retries and timeout; http to loopback allowed (the receiver is local).
async fn spawn_insecure(backend: Backend) -> TestApp {
    spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.retry_schedule = vec![Duration::from_millis(300); 3];
        s.webhooks.timeout = Duration::from_millis(500);
    })
    .await
}

/// A receiver subscribed to the test mode's `message.sent`, answering `statuses` first (then
/// 200); the receiver and the endpoint's id.
async fn sent_hook(app: &TestApp, statuses: &[u16]) -> (WebhookReceiver, String) {
    let receiver = WebhookReceiver::start().await;
    receiver.answer(statuses);
    let endpoint = app
        .subscribe(&app.test_key, &receiver, &["message.sent"])
        .await;
    (receiver, endpoint["id"].as_str().unwrap().to_string())
}

/// A second endpoint for the test mode's `message.sent` that answers 500 to every attempt:
/// once it has had `attempts` (the first and each retry of the schedule), a retry that another
/// endpoint would make for the same event has had its time too. The proof that "nothing more
/// came" waits for it instead of sleeping.
async fn failing_control(app: &TestApp, attempts: usize) -> WebhookReceiver {
    let receiver = WebhookReceiver::start().await;
    receiver.answer(&vec![500; attempts]);
    app.subscribe(&app.test_key, &receiver, &["message.sent"])
        .await;
    receiver
}

/// An app that retries webhooks after each delay of `retry_schedule`; http to loopback
/// allowed (the receiver is local).
async fn spawn_retrying(backend: Backend, retry_schedule: Vec<Duration>) -> TestApp {
    spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.retry_schedule = retry_schedule;
    })
    .await
}

/// Polls the deliveries log until it holds at least `n` attempts (newest first).
async fn wait_for_attempts(app: &TestApp, key: &str, endpoint_id: &str, n: usize) -> Vec<Value> {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let reply = app
                .get(&format!("/v1/webhooks/{endpoint_id}/deliveries"), key)
                .await
                .expect(200);
            let rows = reply.data()["deliveries"].as_array().unwrap().clone();
            if rows.len() >= n {
                return Ok(rows);
            }
            Err(format!("expected {n} attempts, log: {}", reply.body))
        },
    )
    .await
}

fn is_api_timestamp(text: &str) -> bool {
    // 2026-11-22T10:15:30.123+00:00
    text.len() == 29
        && chrono::DateTime::parse_from_rfc3339(text).is_ok()
        && text.as_bytes()[19] == b'.'
        && text.ends_with("+00:00")
}

/// `smsgw_webhook_attempts_total{outcome="…"}` now (see [`TestApp::metric`]).
async fn outcome_count(app: &TestApp, outcome: &str) -> u64 {
    let label = format!("outcome=\"{outcome}\"");
    app.metric("smsgw_webhook_attempts_total", &label).await as u64
}
