//! Retries: which answers are retried and how each attempt is recorded, retries across a
//! restart, by hand, and after the message or the endpoint is gone.

use super::*;
use crate::helpers::typed;
use smsgw::api::webhooks::DeliveryAttemptOut;

async fn server_errors_are_retried_and_every_attempt_recorded(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let (receiver, id) = sent_hook(&app, &[500, 503]).await;
    let before = (
        outcome_count(&app, "server_error").await,
        outcome_count(&app, "success").await,
    );
    app.send_test(RECIPIENT, "retry me").await.expect(202);
    let received = receiver.wait_for(3, Duration::from_secs(10)).await;
    // Same event id on every attempt, each signed anew.
    let ids: Vec<&str> = received.iter().map(|r| r.header("x-event-id")).collect();
    assert!(ids.iter().all(|i| *i == ids[0]));
    let rows = wait_for_attempts(&app, &app.test_key, &id, 3).await;
    assert_eq!(rows[0]["attempt"], 3);
    assert_eq!(rows[0]["status_code"], 200);
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(typed::<DeliveryAttemptOut>(&rows[0]).error, None);
    assert_eq!(rows[1]["attempt"], 2);
    assert_eq!(rows[1]["status_code"], 503);
    assert_eq!(rows[1]["error"], "http_status");
    assert_eq!(rows[1]["state"], "pending");
    assert!(rows[1]["next_attempt_at"].is_string());
    assert_eq!(rows[2]["attempt"], 1);
    assert_eq!(rows[2]["status_code"], 500);
    // The attempts are counted under the documented outcome labels (the recorder is shared by
    // the tests of this process: compare with before).
    assert!(outcome_count(&app, "server_error").await >= before.0 + 2);
    assert!(outcome_count(&app, "success").await > before.1);
    for row in &rows {
        assert_eq!(row["event"], "message.sent");
        assert_eq!(row["event_id"], ids[0]);
        assert!(row["duration_ms"].is_i64());
        assert!(is_api_timestamp(row["attempted_at"].as_str().unwrap()));
    }
    // Paging: newest first, one per page.
    let page = app
        .get(
            &format!("/v1/webhooks/{id}/deliveries?limit=2"),
            &app.test_key,
        )
        .await
        .expect(200);
    assert_eq!(page.data()["has_more"], true);
    let cursor = page.data()["next_cursor"].as_str().unwrap();
    let next = app
        .get(
            &format!("/v1/webhooks/{id}/deliveries?limit=2&cursor={cursor}"),
            &app.test_key,
        )
        .await
        .expect(200);
    assert_eq!(next.data()["deliveries"][0]["attempt"], 1);
    assert_eq!(next.data()["has_more"], false);
    receiver.stop().await;
}

async fn client_errors_stop_at_once(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let (receiver, id) = sent_hook(&app, &[410, 404]).await;
    let control = failing_control(&app, 4).await;
    app.send_test(RECIPIENT, "gone").await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 1).await;
    assert_eq!(rows[0]["status_code"], 410);
    assert_eq!(rows[0]["state"], "failed");
    assert_eq!(typed::<DeliveryAttemptOut>(&rows[0]).next_attempt_at, None);
    // The control endpoint had the whole retry schedule (4 attempts) for the same event:
    // nothing more arrived here.
    control.wait_for(4, Duration::from_secs(10)).await;
    assert_eq!(receiver.received().len(), 1);
    control.stop().await;
    receiver.stop().await;
}

async fn timeouts_are_retried(backend: Backend) {
    let app = spawn_insecure(backend).await;
    let (receiver, id) = sent_hook(&app, &[]).await;
    receiver.delay(&[Duration::from_secs(3)]);
    app.send_test(RECIPIENT, "slow").await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[1]["error"], "timeout");
    assert_eq!(typed::<DeliveryAttemptOut>(&rows[1]).status_code, None);
    assert!(rows[1]["duration_ms"].as_i64().unwrap() >= 400);
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(rows[0]["status_code"], 200);
    receiver.stop().await;
}

async fn pending_retries_survive_a_restart(backend: Backend) {
    let app = spawn_retrying(backend, vec![Duration::from_secs(2)]).await;
    let (receiver, id) = sent_hook(&app, &[500]).await;
    app.send_test("+15005550002", "survive").await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 1).await;
    assert_eq!(rows[0]["state"], "pending");
    let app = app.restart().await;
    let received = receiver.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(
        received[0].header("x-event-id"),
        received[1].header("x-event-id")
    );
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[0]["attempt"], 2);
    assert_eq!(rows[0]["state"], "succeeded");
    // It fired on schedule, not at once after the restart's first instant.
    let gap = received[1].at.duration_since(received[0].at);
    assert!(gap >= Duration::from_millis(1800), "retried after {gap:?}");
    receiver.stop().await;
}

/// An app whose `message.sent` endpoint answered its first attempt with `first`, the receiver,
/// the endpoint id, and the attempt rows (newest first).
async fn first_attempt_answered(
    backend: Backend,
    first: u16,
    content: &str,
) -> (TestApp, WebhookReceiver, String, Vec<Value>) {
    let app = spawn_insecure(backend).await;
    let (receiver, id) = sent_hook(&app, &[first]).await;
    app.send_test(RECIPIENT, content).await.expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 1).await;
    (app, receiver, id, rows)
}

/// `POST /v1/webhooks/{id}/deliveries/{delivery}/retry` (a delivery or an attempt id).
async fn retry_by_hand(app: &TestApp, key: &str, id: &str, delivery: &str) -> Reply {
    app.post(
        &format!("/v1/webhooks/{id}/deliveries/{delivery}/retry"),
        key,
        json!({}),
    )
    .await
}

/// A delivery waiting for its next retry (the default schedule waits a minute) is sent at once
/// when retried by hand, and only once.
async fn manual_retry_of_a_waiting_delivery_sends_it_now(backend: Backend) {
    let (app, receiver, id, rows) = first_attempt_answered(backend, 500, "wait").await;
    assert_eq!(rows[0]["status_code"], 500);
    let delivery_id = rows[0]["delivery_id"].as_str().unwrap();
    retry_by_hand(&app, &app.test_key, &id, delivery_id)
        .await
        .expect(202);
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[0]["attempt"], 2);
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(rows[0]["event_id"], rows[1]["event_id"]);
    // The delivery is over (succeeded): no scheduled retry is left to send it again.
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(receiver.received().len(), 2, "sent once more, not twice");
    receiver.stop().await;
}

async fn manual_retry_sends_again(backend: Backend) {
    let (app, receiver, id, rows) = first_attempt_answered(backend, 400, "again").await;
    assert_eq!(rows[0]["state"], "failed");
    let delivery_id = rows[0]["delivery_id"].as_str().unwrap();
    let reply = retry_by_hand(&app, &app.test_key, &id, delivery_id)
        .await
        .expect(202);
    assert_eq!(reply.data()["state"], "pending");
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[0]["attempt"], 2);
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(rows[0]["event_id"], rows[1]["event_id"]);
    // The attempt id works too; unknown ids and other modes are 404.
    let attempt_id = rows[1]["id"].as_str().unwrap();
    retry_by_hand(&app, &app.test_key, &id, attempt_id)
        .await
        .expect(202);
    receiver.wait_for(3, Duration::from_secs(10)).await;
    retry_by_hand(&app, &app.test_key, &id, &uuid::Uuid::new_v4().to_string())
        .await
        .expect_error(404, "not_found");
    retry_by_hand(&app, &app.live_key, &id, delivery_id)
        .await
        .expect_error(404, "not_found");
    receiver.stop().await;
}

async fn a_message_removed_by_retention_ends_its_delivery(backend: Backend) {
    let app = spawn_retrying(backend, vec![Duration::from_millis(500)]).await;
    let (receiver, id) = sent_hook(&app, &[500]).await;
    let sent = app
        .send_test("+15005550002", "short-lived")
        .await
        .expect(202);
    let message_id = sent.data()["id"].as_str().unwrap().to_string();
    wait_for_attempts(&app, &app.test_key, &id, 1).await;
    // Retention removes the record between two attempts.
    let db = sea_orm::Database::connect(&app.database_url).await.unwrap();
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entity::messages::Entity::delete_many()
        .filter(entity::messages::Column::Id.eq(uuid::Uuid::parse_str(&message_id).unwrap()))
        .exec(&db)
        .await
        .unwrap();
    let rows = wait_for_attempts(&app, &app.test_key, &id, 2).await;
    assert_eq!(rows[0]["error"], "message_deleted", "{}", rows[0]);
    assert_eq!(rows[0]["state"], "failed");
    assert_eq!(typed::<DeliveryAttemptOut>(&rows[0]).status_code, None);
    assert_eq!(receiver.received().len(), 1);
    receiver.stop().await;
}

async fn deleting_an_endpoint_stops_its_retries(backend: Backend) {
    let app = spawn_retrying(backend, vec![Duration::from_millis(500); 3]).await;
    let (receiver, id) = sent_hook(&app, &[500, 500, 500, 500]).await;
    let control = failing_control(&app, 4).await;
    app.send_test(RECIPIENT, "doomed").await.expect(202);
    receiver.wait_for(1, Duration::from_secs(10)).await;
    app.delete(&format!("/v1/webhooks/{id}"), &app.test_key)
        .await
        .expect(200);
    let before = receiver.received().len();
    // The control endpoint, on the same schedule, had every retry of the same event.
    control.wait_for(4, Duration::from_secs(10)).await;
    control.stop().await;
    assert_eq!(
        receiver.received().len(),
        before,
        "retries continued after delete"
    );
    // Another endpoint still gets events.
    let second = WebhookReceiver::start().await;
    app.subscribe(&app.test_key, &second, &["message.sent"])
        .await;
    app.send_test(RECIPIENT, "alive").await.expect(202);
    second.wait_for(1, Duration::from_secs(10)).await;
    receiver.stop().await;
    second.stop().await;
}

/// A retry after retention emptied the message's content carries `content: ""` (the body is
/// rebuilt from the record at each attempt), with the same event id and a fresh signature.
async fn retries_after_content_removal_carry_empty_content(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.webhooks.retry_schedule = vec![Duration::from_millis(1500); 2];
        s.webhooks.timeout = Duration::from_millis(500);
        s.retention.content_after = Duration::from_millis(200);
        s.retention.record_after = Duration::from_secs(3600);
        s.retention.interval = Duration::from_millis(100);
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    receiver.answer(&[500, 200]);
    let endpoint = app
        .subscribe(&app.test_key, &receiver, &["message.received"])
        .await;
    let signing_key = endpoint["signing_key"].as_str().unwrap().to_string();
    let inbound = app.test_inbound(RECIPIENT, "short-lived").await;
    let id = inbound["id"].as_str().unwrap().to_string();
    let got = receiver.wait_for(2, Duration::from_secs(15)).await;
    let (first, retry) = (got[0].json(), got[1].json());
    assert_eq!(first["message"]["id"], id.as_str());
    assert_eq!(first["message"]["content"], "short-lived");
    assert_eq!(retry["message"]["id"], id.as_str());
    assert_eq!(retry["message"]["content"], "", "{retry}");
    assert_eq!(retry["event_id"], first["event_id"]);
    assert_eq!(
        got[1].header("x-signature"),
        signing::signature_hex(&signing_key, &got[1].body)
    );
    let stored = app.message(&app.test_key, &id).await;
    assert_eq!(stored["content"], "");
    receiver.stop().await;
}

backend_tests!(
    server_errors_are_retried_and_every_attempt_recorded,
    client_errors_stop_at_once,
    timeouts_are_retried,
    pending_retries_survive_a_restart,
    manual_retry_sends_again,
    manual_retry_of_a_waiting_delivery_sends_it_now,
    a_message_removed_by_retention_ends_its_delivery,
    deleting_an_endpoint_stops_its_retries,
    retries_after_content_removal_carry_empty_content,
);
