//! SIM lines over the device API (docs/api.md, "Phones"): the app's one registration carries
//! every line of its device; a line's messages are served with its `simNumber`, their reports
//! move them, and an SMS the app posts with a line's `simNumber` is stored on that line.

use super::*;

/// The number of the second SIM.
const LINE: &str = "+14155550101";

/// Posts an `sms:received` webhook as the app does, received on SIM `sim_number`.
async fn post_received(url: &str, key: &str, event_id: &str, content: &str, sim_number: u8) {
    use hmac::{Hmac, KeyInit, Mac};
    let timestamp = chrono::Utc::now().timestamp();
    let body = json!({
        "id": event_id,
        "webhookId": "smsgw-inbound",
        "event": "sms:received",
        "deviceId": "device",
        "payload": {
            "messageId": event_id, "message": content, "sender": "+14155550177",
            "recipient": "***0100", "simNumber": sim_number, "phoneNumber": "+14155550177",
            "receivedAt": "2026-11-25T10:00:00.000+00:00"
        }
    })
    .to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    mac.update(timestamp.to_string().as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    let status = Client::default()
        .post(url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("x-timestamp", timestamp.to_string()))
        .insert_header(("x-signature", signature))
        .send_body(body)
        .await
        .expect("post completes")
        .status()
        .as_u16();
    assert_eq!(status, 200);
}

/// Polls `GET /message` until it serves one message; that message.
async fn fetch_one(phone: &AppClient) -> Value {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || match phone.fetch("fifo").await.as_slice() {
            [one] => Ok(one.clone()),
            other => Err(format!("one message never served; last {other:?}")),
        },
    )
    .await
}

async fn two_lines_on_the_app_send_and_receive_on_their_sims(backend: Backend) {
    let app = spawn_app(backend).await;
    let (device_id, token) = app.pair_phone(SENDER).await;
    let line = app
        .post(
            "/v1/phones",
            &app.live_key,
            json!({ "phone_number": LINE, "device_phone_id": device_id, "sim_slot": 2 }),
        )
        .await
        .expect(201);
    let line_id = line.data()["id"].as_str().unwrap().to_string();
    let phone = AppClient::new(&app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let _events = phone.events().await;
    app.wait_online(&device_id, true).await;
    app.wait_online(&line_id, true).await;

    // The line's message is served with its SIM, the device's without one.
    for (from, sim_number, owner) in [
        (LINE, json!(2), &line_id),
        (SENDER, Value::Null, &device_id),
    ] {
        let id = app
            .send(
                &app.live_key,
                crate::helpers::send_body(from, RECIPIENT, "hello"),
            )
            .await
            .expect(202)
            .data()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let served = fetch_one(&phone).await;
        assert_eq!(served["id"], id.as_str());
        assert_eq!(served["simNumber"], sim_number, "{served}");
        phone.report(&id, "Sent", None).await;
        phone.report(&id, "Delivered", None).await;
        let stored = app.wait_for_status(&app.live_key, &id, "delivered").await;
        assert_eq!(stored["device_id"], owner.as_str());
        assert_eq!(stored["from_number"], from);
    }

    // An SMS on SIM 2 is the line's; on SIM 1 (no line there), the device's.
    let hooks = phone.call("GET", "/webhooks", None).await.body;
    let url = hooks[0]["url"].as_str().unwrap().to_string();
    let settings = phone.call("GET", "/settings", None).await.body;
    let key = settings["webhooks"]["signing_key"]
        .as_str()
        .unwrap()
        .to_string();
    post_received(&url, &key, "ev-2", "to the second SIM", 2).await;
    post_received(&url, &key, "ev-1", "to the first SIM", 1).await;
    let inbound = app.messages(&app.live_key, "direction=inbound").await;
    let to_of = |content: &str| {
        inbound
            .iter()
            .find(|m| m["content"] == content)
            .map(|m| (m["to_number"].clone(), m["device_id"].clone()))
            .unwrap_or_else(|| panic!("{content} not stored: {inbound:?}"))
    };
    assert_eq!(to_of("to the second SIM"), (json!(LINE), json!(line_id)));
    assert_eq!(to_of("to the first SIM"), (json!(SENDER), json!(device_id)));
}

backend_tests!(two_lines_on_the_app_send_and_receive_on_their_sims,);
