//! Retention (docs/api.md, Retention) with short configured windows: content emptied, then the
//! record and its timeline gone; a queued message is never touched.

use std::time::Duration;

use serde_json::json;

use crate::backend_tests;
use crate::helpers::{
    Backend, RECIPIENT, SENDER, TestApp, WebhookReceiver, poll, spawn_app_with, timeline,
};

async fn wait_gone(app: &TestApp, id: &str) {
    poll(
        Duration::from_secs(15),
        Duration::from_millis(50),
        async || {
            let reply = app.get(&format!("/v1/messages/{id}"), &app.test_key).await;
            if reply.status == 404 {
                assert_eq!(reply.code(), "not_found");
                return Ok(());
            }
            Err(format!(
                "message {id} was never deleted; last: {}",
                reply.body
            ))
        },
    )
    .await
}

async fn content_then_records_are_removed(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.retention.content_after = Duration::from_millis(600);
        s.retention.record_after = Duration::from_millis(2500);
        s.retention.interval = Duration::from_millis(100);
    })
    .await;
    let outbound = app
        .send_test(RECIPIENT, "secret outbound")
        .await
        .expect(202);
    let outbound_id = outbound.data()["id"].as_str().unwrap().to_string();
    let inbound = app.test_inbound(RECIPIENT, "secret inbound").await;
    let inbound_id = inbound["id"].as_str().unwrap().to_string();
    let held = app
        .send(
            &app.test_key,
            json!({
                "from_number": SENDER, "to_number": RECIPIENT, "content": "held for later",
                "scheduled_for": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339(),
            }),
        )
        .await
        .expect(202);
    let held_id = held.data()["id"].as_str().unwrap().to_string();

    // Before the window the text is there.
    let delivered = app
        .wait_for_status(&app.test_key, &outbound_id, "delivered")
        .await;
    assert_eq!(delivered["content"], "secret outbound");

    // Then it is emptied, with a timeline entry, the rest of the record intact.
    for id in [&outbound_id, &inbound_id] {
        let m = app
            .wait_for_message(&app.test_key, id, Duration::from_secs(10), |m| {
                m["content"] == ""
            })
            .await;
        assert_eq!(m["status"], "delivered");
        let kinds = timeline(&m);
        assert_eq!(kinds.last(), Some(&"content_removed"), "{kinds:?}");
        assert_eq!(
            kinds.iter().filter(|k| **k == "content_removed").count(),
            1,
            "removed once"
        );
    }
    let listed = app
        .get("/v1/messages?limit=100", &app.test_key)
        .await
        .expect(200);
    assert_eq!(listed.data()["messages"].as_array().unwrap().len(), 3);

    // Then the records go.
    wait_gone(&app, &outbound_id).await;
    wait_gone(&app, &inbound_id).await;
    let listed = app
        .get("/v1/messages?limit=100", &app.test_key)
        .await
        .expect(200);
    let ids: Vec<&str> = listed.data()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [held_id.as_str()]);

    // The queued message keeps its text and its place in the queue.
    let held = app.message(&app.test_key, &held_id).await;
    assert_eq!(held["status"], "queued");
    assert_eq!(held["content"], "held for later");
}

/// Finished webhook deliveries go with the records they were about; a delivery still pending
/// (its endpoint failing, its next attempt due later) stays.
async fn finished_webhook_deliveries_are_removed(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.retention.record_after = Duration::from_millis(2500);
        s.retention.interval = Duration::from_millis(100);
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.retry_schedule = vec![Duration::from_secs(3600)];
    })
    .await;
    let healthy = WebhookReceiver::start().await;
    let failing = WebhookReceiver::start().await;
    failing.answer(&[500; 10]);
    let ok = app
        .subscribe(&app.test_key, &healthy, &["message.sent"])
        .await;
    let bad = app
        .subscribe(&app.test_key, &failing, &["message.sent"])
        .await;
    app.send_test(RECIPIENT, "hello").await.expect(202);
    let log = |endpoint: &serde_json::Value| {
        format!(
            "/v1/webhooks/{}/deliveries?limit=100",
            endpoint["id"].as_str().unwrap()
        )
    };
    let attempts = async |endpoint: &serde_json::Value| {
        app.get(&log(endpoint), &app.test_key)
            .await
            .expect(200)
            .data()["deliveries"]
            .as_array()
            .unwrap()
            .clone()
    };
    poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let (good, failed) = (attempts(&ok).await, attempts(&bad).await);
            match (good.as_slice(), failed.as_slice()) {
                ([g], [f]) if g["state"] == "succeeded" && f["state"] == "pending" => Ok(()),
                _ => Err(format!("not attempted yet: {good:?} {failed:?}")),
            }
        },
    )
    .await;
    poll(
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || match attempts(&ok).await.len() {
            0 => Ok(()),
            n => Err(format!("{n} attempts of a finished delivery left")),
        },
    )
    .await;
    let pending = attempts(&bad).await;
    assert_eq!(pending.len(), 1, "a pending delivery stays: {pending:?}");
    assert_eq!(pending[0]["state"], "pending");
}

backend_tests!(
    content_then_records_are_removed,
    finished_webhook_deliveries_are_removed
);
