//! Health events the SMSGate app posts (docs/api.md, "Phone health"): `GET /webhooks` lists
//! `system:ping` and `app:started`, their facts show on `GET /v1/phones/{id}`, and a post out
//! of bounds is refused naming the field and changes nothing.

use super::*;

/// Posts a signed webhook body to the phone's inbound URL as the app does; the status and body.
async fn post_signed(url: &str, body: String, sign_with: &str) -> (u16, Value) {
    use hmac::{Hmac, KeyInit, Mac};
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(sign_with.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    mac.update(timestamp.as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    let mut response = Client::default()
        .post(url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("x-timestamp", timestamp))
        .insert_header(("x-signature", signature))
        .send_body(body)
        .await
        .expect("post completes");
    let bytes = response.body().limit(1 << 20).await.expect("body");
    (response.status().as_u16(), json_body(&bytes))
}

/// A `system:ping` body with these observed values, in the shape of the app's health checks.
fn ping(battery: Value, charging_flags: i64, transport_flags: i64) -> String {
    json!({
        "id": "ping-1", "webhookId": "smsgw-system-ping", "event": "system:ping",
        "deviceId": "device",
        "payload": { "health": {
            "checks": {
                "battery:level": { "description": "Battery level in percent",
                                   "observedUnit": "percent", "observedValue": battery,
                                   "status": "pass" },
                "battery:charging": { "observedUnit": "flags", "observedValue": charging_flags,
                                      "status": "pass" },
                "connection:status": { "observedValue": 1, "status": "pass" },
                "connection:transport": { "observedValue": transport_flags, "status": "pass" },
                "connection:cellular": { "observedValue": 0, "status": "pass" },
                "messages:failed": { "observedValue": 0, "status": "pass" }
            },
            "releaseId": 1, "status": "pass", "version": "1.0.0"
        }}
    })
    .to_string()
}

async fn health(app: &TestApp, phone_id: &str) -> Value {
    app.get(&format!("/v1/phones/{phone_id}"), &app.live_key)
        .await
        .expect(200)
        .data()["health"]
        .clone()
}

async fn health_events_show_on_the_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(&app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let hooks = phone.call("GET", "/webhooks", None).await.body;
    let hooks = hooks.as_array().unwrap();
    let events: Vec<&str> = hooks.iter().map(|h| h["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["sms:received", "system:ping", "app:started"]);
    assert!(
        hooks.iter().all(|h| h["url"] == hooks[0]["url"]),
        "{hooks:?}"
    );
    let url = hooks[1]["url"].as_str().unwrap().to_string();
    let key = phone.call("GET", "/settings", None).await.body["webhooks"]["signing_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        health(&app, &phone_id).await,
        Value::Null,
        "null before any report"
    );

    // USB charging (flags 1 + 4), Wi-Fi (4).
    let (status, _) = post_signed(&url, ping(json!(80), 5, 4), &key).await;
    assert_eq!(status, 200);
    let shown = health(&app, &phone_id).await;
    assert_eq!(shown["battery_percent"], 80);
    assert_eq!(shown["charging"], true);
    assert_eq!(shown["network"], "wifi");
    assert_eq!(shown["sims"], Value::Null);
    assert!(shown["reported_at"].is_string());

    // app:started lists the SIMs and keeps the rest.
    let started = json!({
        "id": "start-1", "webhookId": "x", "event": "app:started", "deviceId": "device",
        "payload": { "simCards": [
            { "slotIndex": 0, "simNumber": 1, "phoneNumber": null, "carrierName": "T-Mobile",
              "iccid": null },
            { "slotIndex": 1, "simNumber": 2, "phoneNumber": "+14155550123",
              "carrierName": "Vodafone", "iccid": null }
        ]}
    })
    .to_string();
    assert_eq!(post_signed(&url, started, &key).await.0, 200);
    let shown = health(&app, &phone_id).await;
    assert_eq!(shown["battery_percent"], 80);
    assert_eq!(
        shown["sims"],
        json!([
            { "slot": 1, "carrier": "T-Mobile", "phone_number": null },
            { "slot": 2, "carrier": "Vodafone", "phone_number": "+14155550123" }
        ])
    );

    // Refused, naming the field, and nothing changes.
    let (status, body) = post_signed(&url, ping(json!(140), 0, 2), &key).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("battery:level"),
        "{body}"
    );
    let bad_sims = json!({
        "id": "start-2", "event": "app:started",
        "payload": { "simCards": [{ "simNumber": 7, "carrierName": "X" }] }
    })
    .to_string();
    let (status, body) = post_signed(&url, bad_sims, &key).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("simCards[0].slot"),
        "{body}"
    );
    let no_payload = json!({ "id": "p", "event": "system:ping" }).to_string();
    assert_eq!(post_signed(&url, no_payload, &key).await.0, 400);
    let huge = ping(json!(50), 0, 2).replace("1.0.0", &"9".repeat(20 * 1024));
    assert_eq!(post_signed(&url, huge, &key).await.0, 413);
    let shown = health(&app, &phone_id).await;
    assert_eq!(shown["battery_percent"], 80);
    assert_eq!(shown["network"], "wifi");
    assert_eq!(shown["sims"].as_array().map(Vec::len), Some(2));
}

backend_tests!(health_events_show_on_the_phone);
