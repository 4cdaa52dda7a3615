//! Delivery by line (docs/api.md, "Phone stats"): what a line sent, delivered and failed (by
//! reason) shows in its own stats and no other phone's, per UTC day, with the delivery rate
//! and the median time from hand-over to delivery; `days` is validated by name; another
//! workspace's phone is 404; a deleted phone's figures go with it.

use sea_orm::ConnectionTrait;

use super::*;
use crate::helpers::{TestClock, eventually, spawn_app_with_clock};

/// The number of the device's second SIM.
const LINE: &str = "+14155550101";
/// A phone of its own.
const OTHER: &str = "+14155550102";
/// Milliseconds in a day.
const DAY_MS: i64 = 24 * 3600 * 1000;

/// `GET /v1/phones/{id}/stats?days=N`'s data.
async fn stats(app: &TestApp, phone_id: &str, days: u32) -> serde_json::Value {
    app.get(
        &format!("/v1/phones/{phone_id}/stats?days={days}"),
        &app.live_key,
    )
    .await
    .expect(200)
    .data()
    .clone()
}

/// Waits until the phone's totals over `days` read `sent`, `delivered` and `failed` (the
/// counts are written every second); its stats then.
async fn wait_totals(
    app: &TestApp,
    phone_id: &str,
    days: u32,
    [sent, delivered, failed]: [u64; 3],
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    eventually(
        "the phone's totals add up",
        Duration::from_secs(10),
        async || {
            last = stats(app, phone_id, days).await;
            let t = &last["totals"];
            t["sent"] == sent && t["delivered"] == delivered && t["failed"] == failed
        },
    )
    .await;
    last
}

/// Sends `content` from `from` with the live key; the message id.
async fn send_from(app: &TestApp, from: &str, content: &str) -> uuid::Uuid {
    app.send(&app.live_key, send_body(from, RECIPIENT, content))
        .await
        .expect(202)
        .data()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The phone takes the next send, which must be `id`, and reports it as told: delivered
/// (after sent), or failed with `error`.
async fn take(phone: &mut FakePhone, id: uuid::Uuid, failure: Option<&str>) {
    let (handed, ..) = phone.expect_send().await;
    assert_eq!(handed, id);
    match failure {
        None => {
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
        Some(error) => {
            phone
                .report_acked(PhoneFrame::Failed {
                    message_id: id,
                    error: error.into(),
                    reference: Some(format!("f-{id}")),
                })
                .await;
        }
    }
}

async fn a_lines_sends_count_in_its_own_stats(backend: Backend) {
    // Noon, so the test never straddles a UTC midnight.
    let clock = std::sync::Arc::new(TestClock::default());
    let noon = (chrono::Utc::now().timestamp_millis() / DAY_MS) * DAY_MS + DAY_MS / 2;
    clock.set_ms(noon);
    let app = spawn_app_with_clock(backend, clock, |s| s.messages.max_send_attempts = 1).await;
    let (device_id, token) = app.pair_phone(SENDER).await;
    let line_id = app
        .post(
            "/v1/phones",
            &app.live_key,
            json!({ "phone_number": LINE, "device_phone_id": device_id, "sim_slot": 2 }),
        )
        .await
        .expect(201)
        .data()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (other_id, mut other) = app.online_phone(OTHER).await;
    let mut phone = app.connect_phone(&token).await;
    app.wait_online(&line_id, true).await;

    // Nothing yet: every day present, at zero, rates and medians null.
    let empty = stats(&app, &line_id, 7).await;
    assert_eq!(empty["phone_id"], line_id.as_str());
    assert_eq!(empty["phone_number"], LINE);
    let days = empty["days"].as_array().unwrap();
    assert_eq!(days.len(), 7);
    for day in days {
        assert_eq!(day["sent"], 0);
        assert!(day["delivery_rate"].is_null(), "{day}");
        assert!(day["median_seconds_to_deliver"].is_null(), "{day}");
        assert_eq!(day["failed_by_reason"], json!([]));
    }

    // The line: one delivered, three failed for two reasons. The device and the other phone:
    // one delivered each.
    let outcomes = [
        None,
        Some("RESULT_ERROR_NO_SERVICE"),
        Some("RESULT_ERROR_GENERIC_FAILURE"),
        Some("RESULT_ERROR_NO_SERVICE"),
    ];
    for (n, failure) in outcomes.into_iter().enumerate() {
        let id = send_from(&app, LINE, &format!("line {n}")).await;
        take(&mut phone, id, failure).await;
    }
    let id = send_from(&app, SENDER, "device").await;
    take(&mut phone, id, None).await;
    let id = send_from(&app, OTHER, "other").await;
    take(&mut other, id, None).await;

    let line = wait_totals(&app, &line_id, 7, [1, 1, 3]).await;
    let totals = &line["totals"];
    assert_eq!(
        totals["failed_by_reason"],
        json!([
            { "reason": "RESULT_ERROR_NO_SERVICE", "count": 2 },
            { "reason": "RESULT_ERROR_GENERIC_FAILURE", "count": 1 },
        ])
    );
    assert_eq!(totals["delivery_rate"], 0.25);
    let median = totals["median_seconds_to_deliver"].as_f64().unwrap();
    assert!((0.0..5.0).contains(&median), "a prompt delivery: {median}");
    // All on today, the last day (the per-day split has its own test, on a clock of its own).
    let days = line["days"].as_array().unwrap();
    let today = days.last().unwrap();
    let date = chrono::DateTime::from_timestamp_millis(noon).unwrap();
    assert_eq!(today["date"], date.format("%Y-%m-%d").to_string());
    assert_eq!(
        (today["sent"].clone(), today["failed"].clone()),
        (json!(1), json!(3))
    );
    assert_eq!(today["failed_by_reason"], totals["failed_by_reason"]);

    for phone_id in [&device_id, &other_id] {
        let figures = wait_totals(&app, phone_id, 7, [1, 1, 0]).await;
        assert_eq!(figures["totals"]["delivery_rate"], 1.0);
        assert_eq!(figures["totals"]["failed_by_reason"], json!([]));
    }

    // `days` by name; 1 and 90 are the bounds.
    for bad in ["0", "91", "-1", "7.5", "week", ""] {
        let reply = app
            .get(
                &format!("/v1/phones/{line_id}/stats?days={bad}"),
                &app.live_key,
            )
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], "days", "days={bad}");
    }
    assert_eq!(
        stats(&app, &line_id, 1).await["days"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let ninety = stats(&app, &line_id, 90).await;
    assert_eq!(ninety["days"].as_array().unwrap().len(), 90);
    assert_eq!(ninety["totals"], line["totals"]);
    let default = app
        .get(&format!("/v1/phones/{line_id}/stats"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(default.data()["days"].as_array().unwrap().len(), 7);

    // Unknown, another mode's and another workspace's phones are 404.
    for (path, key) in [
        (
            format!("/v1/phones/{}/stats", uuid::Uuid::new_v4()),
            &app.live_key,
        ),
        (format!("/v1/phones/{line_id}/stats"), &app.test_key),
    ] {
        app.get(&path, key).await.expect_error(404, "not_found");
    }
    let other_live_key = crate::helpers::create_workspace_with_cli(&app, "other")
        .await
        .live_key;
    app.get(&format!("/v1/phones/{line_id}/stats"), &other_live_key)
        .await
        .expect_error(404, "not_found");

    // Unpairing the device takes its figures and its line's with it; the other phone keeps its.
    app.delete(&format!("/v1/phones/{device_id}"), &app.live_key)
        .await
        .expect(200);
    app.get(&format!("/v1/phones/{line_id}/stats"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    let db = sea_orm::Database::connect(&app.database_url).await.unwrap();
    for table in [
        "phone_daily_stats",
        "phone_daily_failures",
        "phone_daily_delivery_times",
    ] {
        let rows = db
            .query_one_raw(sea_orm::Statement::from_string(
                db.get_database_backend(),
                format!(
                    "SELECT COUNT(*) AS n FROM {table} WHERE phone_id IN ('{device_id}', '{line_id}')"
                ),
            ))
            .await
            .unwrap()
            .unwrap()
            .try_get::<i64>("", "n")
            .unwrap();
        assert_eq!(rows, 0, "{table} forgot the unpaired phones");
    }
    db.close().await.unwrap();
    wait_totals(&app, &other_id, 7, [1, 1, 0]).await;
}

async fn figures_split_by_utc_day_and_the_median_is_within_its_precision(backend: Backend) {
    let clock = std::sync::Arc::new(TestClock::default());
    // A minute before the next UTC midnight.
    let now = chrono::Utc::now().timestamp_millis();
    let midnight = (now / DAY_MS + 1) * DAY_MS;
    clock.set_ms(midnight - 60_000);
    let app =
        spawn_app_with_clock(backend, clock.clone(), |s| s.messages.max_send_attempts = 1).await;
    let (phone_id, mut phone) = app.online_phone(SENDER).await;

    // Before midnight: three handed over and sent.
    let mut ids = Vec::new();
    for n in 0..3 {
        let id = send_from(&app, SENDER, &format!("late {n}")).await;
        let (handed, ..) = phone.expect_send().await;
        assert_eq!(handed, id);
        phone
            .report_acked(PhoneFrame::Sent {
                message_id: id,
                reference: Some(format!("s-{id}")),
            })
            .await;
        ids.push(id);
    }
    // Delivered 90 s, 90 s and 20 min after their hand-over, past midnight.
    clock.advance(Duration::from_secs(90));
    for id in &ids[..2] {
        phone
            .report_acked(PhoneFrame::Delivered {
                message_id: *id,
                reference: Some(format!("d-{id}")),
            })
            .await;
    }
    clock.advance(Duration::from_secs(20 * 60 - 90));
    phone
        .report_acked(PhoneFrame::Delivered {
            message_id: ids[2],
            reference: Some(format!("d-{}", ids[2])),
        })
        .await;
    // After midnight: one more, failed.
    let id = send_from(&app, SENDER, "early").await;
    take(&mut phone, id, Some("RESULT_ERROR_RADIO_OFF")).await;

    let figures = wait_totals(&app, &phone_id, 2, [3, 3, 1]).await;
    let days = figures["days"].as_array().unwrap();
    let day_before = chrono::DateTime::from_timestamp_millis(midnight - 1).unwrap();
    let day_after = chrono::DateTime::from_timestamp_millis(midnight).unwrap();
    assert_eq!(days[0]["date"], day_before.format("%Y-%m-%d").to_string());
    assert_eq!(days[1]["date"], day_after.format("%Y-%m-%d").to_string());
    assert_eq!(
        [&days[0]["sent"], &days[0]["delivered"], &days[0]["failed"]],
        [&json!(3), &json!(0), &json!(0)],
        "sent before midnight: {days:?}"
    );
    assert!(days[0]["delivery_rate"].is_null());
    assert!(days[0]["median_seconds_to_deliver"].is_null());
    assert_eq!(
        [&days[1]["sent"], &days[1]["delivered"], &days[1]["failed"]],
        [&json!(0), &json!(3), &json!(1)],
        "delivered and failed after: {days:?}"
    );
    assert_eq!(days[1]["delivery_rate"], 0.75);
    assert_eq!(
        days[1]["failed_by_reason"],
        json!([{ "reason": "RESULT_ERROR_RADIO_OFF", "count": 1 }])
    );
    // The median of 90 s, 90 s and 20 min is 90 s (plus the test's own few milliseconds),
    // within the documented ±9 %.
    for median in [
        &days[1]["median_seconds_to_deliver"],
        &figures["totals"]["median_seconds_to_deliver"],
    ] {
        let median = median.as_f64().unwrap();
        assert!((median / 90.0 - 1.0).abs() <= 0.091, "median {median} s");
    }
}

backend_tests!(
    a_lines_sends_count_in_its_own_stats,
    figures_split_by_utc_day_and_the_median_is_within_its_precision,
);
