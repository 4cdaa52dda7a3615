//! SIM lines (docs/api.md, "Phones"): a dual-SIM phone is two senders on one device. A line
//! has its own number, queue and pace but no token: the device's WebSocket session carries it,
//! its `send` frames name their `sim_slot`, and an SMS received on its slot is stored on it.

use super::*;

/// The number of the second SIM.
const LINE: &str = "+14155550101";
/// Who texts the phone.
const TEXTER: &str = "+14155550177";

/// Adds a SIM line for `number` on `slot` to the device `device_id`; its answer's data.
async fn add_line(app: &TestApp, device_id: &str, number: &str, slot: u8) -> serde_json::Value {
    app.post(
        "/v1/phones",
        &app.live_key,
        json!({ "phone_number": number, "device_phone_id": device_id, "sim_slot": slot }),
    )
    .await
    .expect(201)
    .data()
    .clone()
}

/// The next `send` frame: its message id and slot.
async fn next_send(phone: &mut FakePhone) -> (uuid::Uuid, Option<u8>) {
    match phone.next_frame().await {
        Some(ServerFrame::Send {
            message_id,
            sim_slot,
            ..
        }) => (message_id, sim_slot.map(|s| s.get())),
        other => panic!("expected a send frame, got {other:?}"),
    }
}

/// Forwards an SMS received on `slot` (raw JSON: the frame type has no slot) and waits for
/// the ack.
async fn receive_on(phone: &mut FakePhone, reference: &str, content: &str, slot: Option<u8>) {
    let mut frame = json!({
        "type": "received", "ref": reference, "from": TEXTER, "content": content,
        "received_at": "2026-11-25T10:00:00Z"
    });
    if let Some(slot) = slot {
        frame["sim_slot"] = json!(slot);
    }
    phone.send_text(&frame.to_string()).await;
    assert_eq!(
        phone.next_frame().await,
        Some(ServerFrame::Ack {
            reference: reference.into()
        })
    );
}

async fn two_lines_on_one_websocket_send_and_receive_on_their_slots(backend: Backend) {
    let app = spawn_app(backend).await;
    let (device_id, token) = app.pair_phone(SENDER).await;
    let line = add_line(&app, &device_id, LINE, 2).await;
    let line_id = line["id"].as_str().unwrap().to_string();
    assert!(
        line.get("device_token").is_none(),
        "a line has no token: {line}"
    );
    assert_eq!(line["sim_slot"], 2);
    assert_eq!(line["device_phone_id"], device_id.as_str());
    assert_eq!(line["online"], false);
    let device = app
        .get(&format!("/v1/phones/{device_id}"), &app.live_key)
        .await
        .expect(200);
    assert!(device.data()["sim_slot"].is_null());
    assert!(device.data()["device_phone_id"].is_null());

    // One connection, one hello: the line comes online with its device.
    let mut phone = app.connect_phone(&token).await;
    app.wait_online(&device_id, true).await;
    app.wait_online(&line_id, true).await;

    // Each number sends from its own SIM.
    let from_line = app
        .send(
            &app.live_key,
            send_body(LINE, RECIPIENT, "from the second SIM"),
        )
        .await
        .expect(202);
    let from_line = from_line.data()["id"].as_str().unwrap().to_string();
    let (sent, slot) = next_send(&mut phone).await;
    assert_eq!((sent.to_string(), slot), (from_line.clone(), Some(2)));
    let from_device = app
        .send(
            &app.live_key,
            send_body(SENDER, RECIPIENT, "from the first SIM"),
        )
        .await
        .expect(202);
    let from_device = from_device.data()["id"].as_str().unwrap().to_string();
    let (sent, slot) = next_send(&mut phone).await;
    assert_eq!((sent.to_string(), slot), (from_device.clone(), None));

    // Reports without a slot reach each message's own phone (the session remembers the slot).
    for id in [&from_line, &from_device] {
        let id: uuid::Uuid = id.parse().unwrap();
        phone
            .report_acked(PhoneFrame::Sent {
                message_id: id,
                reference: Some(format!("s-{id}")),
            })
            .await;
        phone
            .report_acked(PhoneFrame::Delivered {
                message_id: id,
                reference: Some(format!("d-{id}")),
            })
            .await;
    }
    let line_message = app
        .wait_for_status(&app.live_key, &from_line, "delivered")
        .await;
    assert_eq!(line_message["device_id"], line_id.as_str());
    assert_eq!(line_message["from_number"], LINE);
    let device_message = app
        .wait_for_status(&app.live_key, &from_device, "delivered")
        .await;
    assert_eq!(device_message["device_id"], device_id.as_str());

    // An SMS on slot 2 is the line's; without a slot (or on a slot without a line), the
    // device's.
    receive_on(&mut phone, "in-1", "to the second SIM", Some(2)).await;
    receive_on(&mut phone, "in-2", "to the first SIM", None).await;
    receive_on(&mut phone, "in-3", "to a third SIM", Some(3)).await;
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
    assert_eq!(to_of("to a third SIM"), (json!(SENDER), json!(device_id)));

    // A slot outside 1–3 is refused like any malformed frame; the session stays.
    phone
        .send_text(r#"{"type":"received","ref":"in-4","from":"+14155550177","content":"x","received_at":"2026-11-25T10:00:00Z","sim_slot":7}"#)
        .await;
    assert!(matches!(
        phone.next_frame().await,
        Some(ServerFrame::Error { .. })
    ));

    // Online follows the device.
    phone.close().await;
    app.wait_online(&device_id, false).await;
    app.wait_online(&line_id, false).await;
}

async fn lines_are_validated_and_go_with_their_device(backend: Backend) {
    let app = spawn_app(backend).await;
    let (device_id, token) = app.pair_phone(SENDER).await;
    let post = |body: serde_json::Value| {
        let app = &app;
        async move { app.post("/v1/phones", &app.live_key, body).await }
    };
    let field = |reply: &crate::helpers::Reply| reply.data()["field"].clone();
    // The two fields come together.
    let reply = post(json!({ "phone_number": LINE, "device_phone_id": device_id })).await;
    let reply = reply.expect_error(422, "validation_failed");
    assert_eq!(field(&reply), "sim_slot", "{:?}", reply.data());
    let reply = post(json!({ "phone_number": LINE, "sim_slot": 2 })).await;
    let reply = reply.expect_error(422, "validation_failed");
    assert_eq!(field(&reply), "device_phone_id");
    // Slots 1–3.
    for slot in [0, 4, -1] {
        let reply =
            post(json!({ "phone_number": LINE, "device_phone_id": device_id, "sim_slot": slot }))
                .await;
        let reply = reply.expect_error(422, "validation_failed");
        assert_eq!(field(&reply), "sim_slot");
    }
    // The device is a phone of this workspace and mode, not a line.
    let unknown = uuid::Uuid::now_v7().to_string();
    for device in [unknown.as_str(), "not-an-id"] {
        let reply =
            post(json!({ "phone_number": LINE, "device_phone_id": device, "sim_slot": 2 })).await;
        let reply = reply.expect_error(422, "validation_failed");
        assert_eq!(field(&reply), "device_phone_id");
    }
    let test_phone = app
        .post(
            "/v1/phones",
            &app.test_key,
            json!({ "phone_number": "+14155550109" }),
        )
        .await
        .expect(201);
    let test_id = test_phone.data()["id"].as_str().unwrap().to_string();
    let reply =
        post(json!({ "phone_number": LINE, "device_phone_id": test_id, "sim_slot": 2 })).await;
    reply.expect_error(422, "validation_failed");
    let line = add_line(&app, &device_id, LINE, 2).await;
    let line_id = line["id"].as_str().unwrap().to_string();
    let reply =
        post(json!({ "phone_number": "+14155550102", "device_phone_id": line_id, "sim_slot": 3 }))
            .await;
    let reply = reply.expect_error(422, "validation_failed");
    assert_eq!(field(&reply), "device_phone_id");
    // One line per slot: the one there is named.
    let reply = post(
        json!({ "phone_number": "+14155550102", "device_phone_id": device_id, "sim_slot": 2 }),
    )
    .await;
    let reply = reply.expect_error(409, "already_exists");
    assert_eq!(reply.data()["id"], line_id.as_str());
    // A line has no token to rotate.
    app.post(
        &format!("/v1/phones/{line_id}/rotate-token"),
        &app.live_key,
        json!({}),
    )
    .await
    .expect_error(422, "validation_failed");
    let phones = app.all_pages(&app.live_key, "/v1/phones", "phones").await;
    assert_eq!(phones.len(), 2, "nothing refused was stored: {phones:?}");

    // Deleting a line leaves its device connected; deleting the device takes its lines.
    let mut phone = app.connect_phone(&token).await;
    app.wait_online(&line_id, true).await;
    let second = add_line(&app, &device_id, "+14155550102", 3).await;
    let second_id = second["id"].as_str().unwrap().to_string();
    app.wait_online(&second_id, true).await;
    app.delete(&format!("/v1/phones/{line_id}"), &app.live_key)
        .await
        .expect(200);
    app.get(&format!("/v1/phones/{line_id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    let from_device = app
        .send(&app.live_key, send_body(SENDER, RECIPIENT, "still here"))
        .await
        .expect(202);
    let (sent, slot) = next_send(&mut phone).await;
    assert_eq!(sent.to_string(), from_device.data()["id"].as_str().unwrap());
    assert_eq!(slot, None);
    app.delete(&format!("/v1/phones/{device_id}"), &app.live_key)
        .await
        .expect(200);
    app.get(&format!("/v1/phones/{second_id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    assert_eq!(phone.close_code().await, Some(4001));
    let phones = app.all_pages(&app.live_key, "/v1/phones", "phones").await;
    assert!(phones.is_empty(), "{phones:?}");
}

backend_tests!(
    two_lines_on_one_websocket_send_and_receive_on_their_slots,
    lines_are_validated_and_go_with_their_device,
);

/// Across nodes: a line added on node A while its device is connected to node B comes online
/// there, is online on A too, and a send from its number accepted by A leaves on B's session
/// from slot 2; it goes offline everywhere with its device.
#[test]
#[ignore = "needs SMSGW_TEST_DATABASE_URL (PostgreSQL)"]
fn a_line_follows_its_device_across_nodes() {
    crate::helpers::run_on_postgres(async {
        let (a, b) = crate::cluster::two_nodes(|_| {}).await;
        let (device_id, token) = a.pair_phone(SENDER).await;
        let mut phone = b.connect_phone(&token).await;
        a.wait_online(&device_id, true).await;
        let line = add_line(&a, &device_id, LINE, 2).await;
        let line_id = line["id"].as_str().unwrap().to_string();
        b.wait_online(&line_id, true).await;
        a.wait_online(&line_id, true).await;

        let id = a
            .send(&a.live_key, send_body(LINE, RECIPIENT, "across nodes"))
            .await
            .expect(202)
            .data()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let (sent, slot) = next_send(&mut phone).await;
        assert_eq!((sent.to_string(), slot), (id.clone(), Some(2)));
        phone
            .report_acked(PhoneFrame::Delivered {
                message_id: sent,
                reference: Some("d1".into()),
            })
            .await;
        let stored = a.wait_for_status(&a.live_key, &id, "delivered").await;
        assert_eq!(stored["device_id"], line_id.as_str());
        receive_on(&mut phone, "in-1", "to the second SIM on B", Some(2)).await;
        let inbound = a.messages(&a.live_key, "direction=inbound").await;
        assert_eq!(inbound[0]["to_number"], LINE, "{inbound:?}");

        phone.close().await;
        a.wait_online(&line_id, false).await;
        b.wait_online(&line_id, false).await;
    })
}
