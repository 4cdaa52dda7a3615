//! Campaigns over a pool: `from_pool` on `POST /v1/campaigns` spreads the recipients over the
//! pool's lines by the send's choice, and `GET /v1/campaigns/{id}` shows each line's progress
//! in `lines`.

use smsgw::domain::protocol::{PhoneFrame, ServerFrame};

use super::*;
use crate::helpers::{eventually, spawn_paced};

const LINES: [&str; 3] = ["+14155550101", "+14155550102", "+14155550103"];

async fn a_pool_campaign_spreads_and_reports_per_line(backend: Backend) {
    let app = spawn_paced(backend, 2, 25).await;
    let mut ids = Vec::new();
    let mut phones = Vec::new();
    for number in LINES {
        let (id, phone) = app.online_phone(number).await;
        ids.push(id);
        phones.push(phone);
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let pool = create_pool(&app, "fleet", &refs).await;
    let recipients: Vec<Value> = (0..6)
        .map(|i| json!({ "to": format!("+1415555030{i}") }))
        .collect();
    // Both or neither sender: refused by field.
    let both = json!({ "name": "c", "from_number": LINES[0], "from_pool": "fleet", "body": "hi", "recipients": recipients });
    let reply = app
        .post("/v1/campaigns", &app.live_key, both)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "from_pool");
    let unknown =
        json!({ "name": "c", "from_pool": "nope", "body": "hi", "recipients": recipients });
    let reply = app
        .post("/v1/campaigns", &app.live_key, unknown)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "from_pool");

    let body = json!({
        "name": "spread",
        "from_pool": "fleet",
        "body": "hello",
        "recipients": recipients,
        "launch_now": true,
    });
    let created = app
        .post("/v1/campaigns", &app.live_key, body)
        .await
        .expect(201)
        .data()
        .clone();
    assert_eq!(created["pool_id"], pool["id"]);
    assert_eq!(created["from_number"], Value::Null);
    let path = format!("/v1/campaigns/{}", created["id"].as_str().unwrap());
    // Two a minute per line: all six go out at once only over the three lines.
    for phone in &mut phones {
        let mut handed = Vec::new();
        for _ in 0..2 {
            match phone.next_frame_within(Duration::from_secs(10)).await {
                Some(ServerFrame::Send { message_id, .. }) => handed.push(message_id),
                other => panic!("expected a send, got {other:?}"),
            }
        }
        for (n, message_id) in handed.into_iter().enumerate() {
            let reference = Some(format!("s{n}"));
            phone
                .send(&PhoneFrame::Sent {
                    message_id,
                    reference,
                })
                .await;
        }
    }
    let mut campaign = Value::Null;
    eventually(
        "every line reports two sent",
        Duration::from_secs(10),
        async || {
            campaign = app
                .get(&path, &app.live_key)
                .await
                .expect(200)
                .data()
                .clone();
            campaign["lines"]
                .as_array()
                .is_some_and(|lines| lines.len() == 3 && lines.iter().all(|l| l["sent"] == 2))
        },
    )
    .await;
    let lines = campaign["lines"].as_array().unwrap();
    for (line, (number, id)) in lines.iter().zip(LINES.iter().zip(&ids)) {
        assert_eq!(line["from_number"], *number);
        assert_eq!(line["phone_id"], *id);
        assert_eq!(
            (&line["queued"], &line["delivered"], &line["failed"]),
            (&json!(0), &json!(0), &json!(0))
        );
    }
}

/// A line dies mid-campaign: what it held (handed and unreported, or waiting) moves to the
/// pool's other line, and the campaign completes with every recipient delivered once.
async fn a_campaign_survives_a_line_dying(backend: Backend) {
    let app = crate::helpers::spawn_app_with(backend, |s| {
        s.pace.per_minute = 2;
        s.pace.per_30_minutes = 25;
        s.pools.failover_after = Duration::from_secs(1);
    })
    .await;
    let (a, mut phone_a) = app.online_phone(LINES[0]).await;
    let (b, mut phone_b) = app.online_phone(LINES[1]).await;
    app.set_pace(&b, 100, 1000).await;
    create_pool(&app, "fleet", &[&a, &b]).await;
    let recipients: Vec<Value> = (0..6)
        .map(|i| json!({ "to": format!("+1415555040{i}") }))
        .collect();
    let created = app
        .post(
            "/v1/campaigns",
            &app.live_key,
            json!({ "name": "dies", "from_pool": "fleet", "body": "hello",
                    "recipients": recipients, "launch_now": true }),
        )
        .await
        .expect(201)
        .data()
        .clone();
    let path = format!("/v1/campaigns/{}", created["id"].as_str().unwrap());
    // Line A takes its share and dies before reporting anything.
    let (on_a, ..) = phone_a.expect_send().await;
    phone_a.close().await;
    // Line B sends everything, A's share included, each message once.
    let mut seen = std::collections::HashSet::new();
    let mut n = 0;
    while seen.len() < 6 {
        match phone_b.next_frame_within(Duration::from_secs(15)).await {
            Some(ServerFrame::Send { message_id, .. }) => {
                assert!(seen.insert(message_id), "{message_id} handed to B twice");
                n += 1;
                phone_b
                    .report_sent_then_delivered(message_id, [format!("s{n}"), format!("d{n}")])
                    .await;
            }
            Some(_) => {}
            None => panic!("B got {} of 6", seen.len()),
        }
    }
    assert!(seen.contains(&on_a), "A's unreported message moved to B");
    let mut campaign = Value::Null;
    eventually(
        "the campaign completes",
        Duration::from_secs(15),
        async || {
            campaign = app
                .get(&path, &app.live_key)
                .await
                .expect(200)
                .data()
                .clone();
            campaign["status"] == "completed"
        },
    )
    .await;
    assert_eq!(campaign["counts"]["delivered"], 6, "{campaign}");
    let moved = app.message(&app.live_key, &on_a.to_string()).await;
    assert_eq!(moved["from_number"], LINES[1]);
    assert!(
        crate::helpers::timeline(&moved).contains(&"rerouted"),
        "{moved}"
    );
}

backend_tests!(
    a_pool_campaign_spreads_and_reports_per_line,
    a_campaign_survives_a_line_dying
);
