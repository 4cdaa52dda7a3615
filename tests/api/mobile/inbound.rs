//! Inbound SMS the app posts as signed webhooks: verified, and stored once.

use super::*;

/// Posts an `sms:received` webhook the way the app does: body, then X-Timestamp and X-Signature
/// (hex HMAC-SHA256 of body + timestamp). Returns the status.
async fn post_inbound(url: &str, event_id: &str, timestamp: i64, sign_with: &str) -> u16 {
    use hmac::{Hmac, KeyInit, Mac};
    let body = json!({
        "id": event_id,
        "webhookId": "smsgw-inbound",
        "event": "sms:received",
        "deviceId": "device",
        "payload": {
            "messageId": "3f2a", "message": "STOP", "sender": "+14155550177",
            "recipient": "***0100", "simNumber": 1, "phoneNumber": "+14155550177",
            "receivedAt": "2026-11-25T10:00:00.000+00:00"
        }
    })
    .to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(sign_with.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    mac.update(timestamp.to_string().as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    Client::default()
        .post(url)
        .insert_header(("content-type", "application/json"))
        .insert_header(("x-timestamp", timestamp.to_string()))
        .insert_header(("x-signature", signature))
        .send_body(body)
        .await
        .expect("post completes")
        .status()
        .as_u16()
}

async fn inbound_posts_are_verified_and_stored_once(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    app.subscribe(&app.live_key, &receiver, &["message.received"])
        .await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let phone = AppClient::new(&app, BASE, &token);
    assert_eq!(phone.register().await.status, 201);
    let hooks = phone.call("GET", "/webhooks", None).await.body;
    let hooks = hooks.as_array().unwrap();
    // sms:received, then the health events (docs/api.md, "Phone health").
    assert_eq!(hooks.len(), 3, "{hooks:?}");
    assert_eq!(hooks[0]["event"], "sms:received");
    assert_eq!(hooks[0]["deviceId"], phone_id.as_str());
    let url = hooks[0]["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&app.address), "{url}");
    let settings = phone.call("GET", "/settings", None).await.body;
    let key = settings["webhooks"]["signing_key"]
        .as_str()
        .unwrap()
        .to_string();
    let now = chrono::Utc::now().timestamp();

    // Refused and not stored: a bad signature, a stale or future timestamp, a wrong path.
    assert_eq!(post_inbound(&url, "ev-1", now, "wrong key").await, 401);
    assert_eq!(post_inbound(&url, "ev-1", now - 301, &key).await, 401);
    // (10 s of margin: the server reads its clock after this test read its own, and a loaded
    // machine can put seconds between the two.)
    assert_eq!(post_inbound(&url, "ev-1", now + 310, &key).await, 401);
    let wrong_path = format!("{}0", url.trim_end_matches(char::is_alphanumeric));
    assert_eq!(post_inbound(&wrong_path, "ev-1", now, &key).await, 404);
    assert!(
        app.messages(&app.live_key, "direction=inbound")
            .await
            .is_empty()
    );

    // Posted twice (the app retries): stored once.
    assert_eq!(post_inbound(&url, "ev-1", now, &key).await, 200);
    let now = chrono::Utc::now().timestamp();
    assert_eq!(post_inbound(&url, "ev-1", now - 290, &key).await, 200);
    let stored = app.messages(&app.live_key, "direction=inbound").await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["from_number"], "+14155550177");
    assert_eq!(stored[0]["to_number"], SENDER);
    assert_eq!(stored[0]["content"], "STOP");
    // The same path as a WebSocket `received` frame: the opt-out keyword and the webhook.
    let contacts = app.get("/v1/contacts", &app.live_key).await.expect(200);
    let contact = &contacts.data()["contacts"][0];
    assert_eq!(contact["phone_number"], "+14155550177");
    assert_eq!(contact["opted_out"], true, "{contact}");
    let hooks = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(hooks[0].json()["event"], "message.received");
    receiver.stop().await;
}

backend_tests!(inbound_posts_are_verified_and_stored_once,);
