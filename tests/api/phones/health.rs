//! Phone health over the WebSocket and the stall watchdog (docs/api.md, "Phone health"): a
//! `status` frame shows on the phone and on its SIM lines; a bad one is refused by name and
//! changes nothing; a line whose messages get no report for `phones.stall_after`, or whose
//! last `phones.stall_failures` attempts failed, is `stalled` until its next success.

use super::*;

async fn phone(app: &TestApp, phone_id: &str) -> serde_json::Value {
    app.get(&format!("/v1/phones/{phone_id}"), &app.live_key)
        .await
        .expect(200)
        .data()
        .clone()
}

/// Waits until the phone's `stalled` is `stalled`.
async fn wait_stalled(app: &TestApp, phone_id: &str, stalled: bool) -> serde_json::Value {
    crate::helpers::poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let shown = phone(app, phone_id).await;
            match shown["stalled"] == stalled {
                true => Ok(shown),
                false => Err(format!("stalled never became {stalled}: {shown}")),
            }
        },
    )
    .await
}

async fn a_status_frame_shows_on_the_phone_and_its_lines(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, mut device) = app.online_phone(SENDER).await;
    let line = app
        .post(
            "/v1/phones",
            &app.live_key,
            json!({ "phone_number": "+14155550111", "device_phone_id": phone_id, "sim_slot": 2 }),
        )
        .await
        .expect(201);
    let line_id = line.data()["id"].as_str().unwrap().to_string();
    assert_eq!(
        phone(&app, &phone_id).await["health"],
        serde_json::Value::Null
    );
    assert_eq!(phone(&app, &phone_id).await["stalled"], false);

    device
        .send_text(
            r#"{"type":"status","battery_percent":55,"charging":false,"network":"cellular",
                "sims":[{"slot":1,"carrier":"T-Mobile"},{"slot":2,"carrier":"O2","phone_number":"+14155550111"}]}"#,
        )
        .await;
    let shown = crate::helpers::poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let health = phone(&app, &phone_id).await["health"].clone();
            match health["battery_percent"] == 55 {
                true => Ok(health),
                false => Err(format!("no health yet: {health}")),
            }
        },
    )
    .await;
    assert_eq!(shown["charging"], false);
    assert_eq!(shown["network"], "cellular");
    assert_eq!(shown["sims"][1]["carrier"], "O2");
    assert_eq!(
        phone(&app, &line_id).await["health"],
        shown,
        "a line shows its device's"
    );
    let listed = app.all_pages(&app.live_key, "/v1/phones", "phones").await;
    assert!(listed.iter().all(|p| p["health"] == shown), "{listed:?}");

    // A fact out of bounds: an error frame naming it, nothing stored.
    device
        .send_text(r#"{"type":"status","battery_percent":101}"#)
        .await;
    match device.next_frame().await {
        Some(ServerFrame::Error { code, message }) => {
            assert_eq!(code, "bad_frame");
            assert!(message.contains("battery_percent"), "{message}");
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
    device
        .send_text(r#"{"type":"status","network":"pigeon"}"#)
        .await;
    assert!(matches!(
        device.next_frame().await,
        Some(ServerFrame::Error { .. })
    ));
    // Only what a report names changes.
    device
        .send_text(r#"{"type":"status","charging":true}"#)
        .await;
    crate::helpers::eventually("charging shows", Duration::from_secs(10), async || {
        phone(&app, &phone_id).await["health"]["charging"] == true
    })
    .await;
    let health = phone(&app, &phone_id).await["health"].clone();
    assert_eq!(health["battery_percent"], 55);
    assert_eq!(health["network"], "cellular");

    // Unpairing the device takes its health (and alert episodes) with it.
    drop(device);
    app.delete(&format!("/v1/phones/{phone_id}"), &app.live_key)
        .await
        .expect(200);
    let db = smsgw::store::connect(&app.database_url, 1).await.unwrap();
    for table in ["phone_health", "phone_alerts"] {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        let row = sea_orm::ConnectionTrait::query_one_raw(
            &db,
            sea_orm::Statement::from_string(db.get_database_backend(), sql),
        )
        .await
        .unwrap()
        .unwrap();
        let left: i64 = row.try_get_by_index(0).unwrap();
        assert_eq!(left, 0, "rows of {table} left after the unpair");
    }
    db.close().await.unwrap();
}

async fn failures_in_a_row_stall_a_line_until_a_success(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.phones.stall_failures = 2;
        s.messages.max_send_attempts = 3;
    })
    .await;
    let (phone_id, mut device) = app.online_phone(SENDER).await;
    let id = app.send_live("blocked SIM?").await;
    for n in 0..2 {
        let (message_id, ..) = device.expect_send().await;
        assert_eq!(message_id.to_string(), id);
        device
            .report_acked(PhoneFrame::Failed {
                message_id,
                error: "RESULT_ERROR_GENERIC_FAILURE".into(),
                reference: Some(format!("f{n}")),
            })
            .await;
    }
    let shown = wait_stalled(&app, &phone_id, true).await;
    assert_eq!(shown["alerts"][0]["kind"], "stalled", "{shown}");
    // The third attempt goes through: unmarked.
    let (message_id, ..) = device.expect_send().await;
    device
        .report_acked(PhoneFrame::Sent {
            message_id,
            reference: Some("ok".into()),
        })
        .await;
    let shown = wait_stalled(&app, &phone_id, false).await;
    assert_eq!(shown["alerts"], json!([]), "{shown}");
}

async fn no_report_for_stall_after_stalls_a_line_until_a_success(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.phones.stall_after = Duration::from_millis(300);
    })
    .await;
    let (phone_id, mut device) = app.online_phone(SENDER).await;
    app.send_live("into the void").await;
    let (message_id, ..) = device.expect_send().await;
    assert_eq!(phone(&app, &phone_id).await["stalled"], false);
    wait_stalled(&app, &phone_id, true).await;
    device
        .report_acked(PhoneFrame::Sent {
            message_id,
            reference: Some("late".into()),
        })
        .await;
    wait_stalled(&app, &phone_id, false).await;
}

backend_tests!(
    a_status_frame_shows_on_the_phone_and_its_lines,
    failures_in_a_row_stall_a_line_until_a_success,
    no_report_for_stall_after_stalls_a_line_until_a_success,
);
