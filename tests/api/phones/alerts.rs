//! Phone alerts as signed webhook events (docs/api.md, "Phone health"): `phone.stalled`,
//! `phone.low_battery`, `phone.offline` and `phone.online`, each once per episode, with
//! `{phone_id, phone_number, name, since, health}`.

use smsgw::domain::signing;

use super::*;
use crate::helpers::WebhookReceiver;

/// The received events named `event`, their signatures checked with `key`.
fn events_named(receiver: &WebhookReceiver, key: &str, event: &str) -> Vec<serde_json::Value> {
    let now = chrono::Utc::now().timestamp();
    receiver
        .received()
        .into_iter()
        .filter(|r| r.json()["event"] == event)
        .map(|r| {
            let timestamp: i64 = r.header("x-timestamp").parse().unwrap();
            signing::verify(key, &r.body, r.header("x-signature"), timestamp, now)
                .expect("X-Signature verifies");
            r.assert_standard_signature(key, now);
            r.json()
        })
        .collect()
}

/// Waits until exactly `n` events named `event` arrived; answers them.
async fn wait_events(
    receiver: &WebhookReceiver,
    key: &str,
    event: &str,
    n: usize,
) -> Vec<serde_json::Value> {
    // Generous: after a restart on PostgreSQL the offline sweep first waits for its lease.
    crate::helpers::poll(
        Duration::from_secs(30),
        Duration::from_millis(20),
        async || {
            let got = events_named(receiver, key, event);
            match got.len() == n {
                true => Ok(got),
                false => Err(format!("{} {event} events, not {n}", got.len())),
            }
        },
    )
    .await
}

async fn fail_twice(device: &mut FakePhone, tag: &str) {
    for n in 0..2 {
        let (message_id, ..) = device.expect_send().await;
        device
            .report_acked(PhoneFrame::Failed {
                message_id,
                error: "RESULT_ERROR_GENERIC_FAILURE".into(),
                reference: Some(format!("{tag}{n}")),
            })
            .await;
    }
}

async fn succeed(device: &mut FakePhone, tag: &str) {
    let (message_id, ..) = device.expect_send().await;
    device
        .report_acked(PhoneFrame::Sent {
            message_id,
            reference: Some(tag.into()),
        })
        .await;
}

async fn stalled_fires_once_per_stall(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.phones.stall_failures = 2;
        s.messages.max_send_attempts = 3;
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let created = app
        .subscribe(&app.live_key, &receiver, &["phone.stalled"])
        .await;
    let key = created["signing_key"].as_str().unwrap().to_string();
    let (phone_id, mut device) = app.online_phone(SENDER).await;
    app.send_live("one").await;
    fail_twice(&mut device, "a").await;
    let first = wait_events(&receiver, &key, "phone.stalled", 1).await;
    let data = &first[0]["data"];
    assert_eq!(data["phone_id"], phone_id.as_str());
    assert_eq!(data["phone_number"], SENDER);
    assert!(data["since"].is_string(), "{data}");
    assert!(data.get("health").is_some(), "{data}");
    // Still stalled: a third failure fires nothing; a success ends the episode.
    succeed(&mut device, "ok").await;
    app.send_live("two").await;
    fail_twice(&mut device, "b").await;
    // A new stall is a new episode.
    wait_events(&receiver, &key, "phone.stalled", 2).await;
}

async fn low_battery_fires_once_per_discharge(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let created = app
        .subscribe(&app.live_key, &receiver, &["phone.low_battery"])
        .await;
    let key = created["signing_key"].as_str().unwrap().to_string();
    let (phone_id, mut device) = app.online_phone(SENDER).await;
    device
        .send_text(r#"{"type":"status","battery_percent":14,"charging":false}"#)
        .await;
    let first = wait_events(&receiver, &key, "phone.low_battery", 1).await;
    assert_eq!(first[0]["data"]["phone_id"], phone_id.as_str());
    assert_eq!(first[0]["data"]["health"]["battery_percent"], 14);
    // Lower still, same discharge: nothing new.
    device
        .send_text(r#"{"type":"status","battery_percent":9}"#)
        .await;
    crate::helpers::eventually("battery 9 shows", Duration::from_secs(10), async || {
        app.get(&format!("/v1/phones/{phone_id}"), &app.live_key)
            .await
            .data()["health"]["battery_percent"]
            == 9
    })
    .await;
    // Charged: the episode ends; the next discharge alerts again.
    device
        .send_text(r#"{"type":"status","battery_percent":12,"charging":true}"#)
        .await;
    crate::helpers::eventually("the episode ends", Duration::from_secs(10), async || {
        app.get(&format!("/v1/phones/{phone_id}"), &app.live_key)
            .await
            .data()["alerts"]
            == json!([])
    })
    .await;
    assert_eq!(events_named(&receiver, &key, "phone.low_battery").len(), 1);
    device
        .send_text(r#"{"type":"status","charging":false}"#)
        .await;
    wait_events(&receiver, &key, "phone.low_battery", 2).await;
}

async fn offline_fires_once_per_outage_and_online_after_it(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.phones.offline_alert_after = Duration::from_millis(300);
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let created = app
        .subscribe(&app.live_key, &receiver, &["phone.offline", "phone.online"])
        .await;
    let key = created["signing_key"].as_str().unwrap().to_string();
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let device = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    device.close().await;
    app.wait_online(&phone_id, false).await;
    let offline = wait_events(&receiver, &key, "phone.offline", 1).await;
    assert_eq!(offline[0]["data"]["phone_id"], phone_id.as_str());
    // Alerted: shown on the phone.
    let shown = app
        .get(&format!("/v1/phones/{phone_id}"), &app.live_key)
        .await
        .data()
        .clone();
    assert_eq!(shown["alerts"][0]["kind"], "offline", "{shown}");
    assert_eq!(shown["alerts"][0]["alerted"], true, "{shown}");
    // Back: phone.online, and the outage is over.
    let device = app.connect_phone(&token).await;
    let online = wait_events(&receiver, &key, "phone.online", 1).await;
    assert_eq!(online[0]["data"]["phone_id"], phone_id.as_str());
    assert_eq!(events_named(&receiver, &key, "phone.offline").len(), 1);
    // A second outage is a new episode.
    device.close().await;
    wait_events(&receiver, &key, "phone.offline", 2).await;
    assert_eq!(events_named(&receiver, &key, "phone.online").len(), 1);
}

/// An outage that began before a restart alerts after it, once: the episode is a row.
async fn an_outage_alerts_across_a_restart(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.phones.offline_alert_after = Duration::from_secs(2);
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let created = app
        .subscribe(&app.live_key, &receiver, &["phone.offline"])
        .await;
    let key = created["signing_key"].as_str().unwrap().to_string();
    let (phone_id, device) = app.online_phone(SENDER).await;
    device.close().await;
    app.wait_online(&phone_id, false).await;
    let app = app.restart().await;
    let offline = wait_events(&receiver, &key, "phone.offline", 1).await;
    assert_eq!(offline[0]["data"]["phone_id"], phone_id.as_str());
    let shown = app
        .get(&format!("/v1/phones/{phone_id}"), &app.live_key)
        .await
        .data()
        .clone();
    assert_eq!(shown["alerts"][0]["alerted"], true, "{shown}");
}

/// A phone still connected when its server stopped (a crash: no disconnect was stored) alerts
/// after the restart, from its stored last-seen time.
async fn a_phone_lost_in_a_crash_alerts_after_the_restart(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.phones.offline_alert_after = Duration::from_secs(1);
        s.phones.heartbeat_timeout = Duration::from_secs(1);
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let created = app
        .subscribe(&app.live_key, &receiver, &["phone.offline"])
        .await;
    let key = created["signing_key"].as_str().unwrap().to_string();
    let (phone_id, _device) = app.online_phone(SENDER).await;
    let _app = app.restart().await;
    let offline = wait_events(&receiver, &key, "phone.offline", 1).await;
    assert_eq!(offline[0]["data"]["phone_id"], phone_id.as_str());
}

backend_tests!(
    an_outage_alerts_across_a_restart,
    a_phone_lost_in_a_crash_alerts_after_the_restart,
    stalled_fires_once_per_stall,
    low_battery_fires_once_per_discharge,
    offline_fires_once_per_outage_and_online_after_it,
);
