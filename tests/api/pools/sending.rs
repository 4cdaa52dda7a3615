//! Sending from a pool: `from_pool` (id or name) instead of `from_number`, exactly one of the
//! two; a pool of three lines with a tight pace spreads six sends over the three at once; a
//! recipient sticks to the line that answered it; with no line online the send is 503 and
//! nothing is stored.

use super::*;
use crate::helpers::{FakePhone, spawn_paced};

const LINES: [&str; 3] = ["+14155550101", "+14155550102", "+14155550103"];

/// Three online lines (ids and sessions) and a pool "fleet" of them, in that order.
async fn three_line_pool(app: &TestApp) -> (Vec<String>, Vec<FakePhone>, Value) {
    let mut ids = Vec::new();
    let mut phones = Vec::new();
    for number in LINES {
        let (id, phone) = app.online_phone(number).await;
        ids.push(id);
        phones.push(phone);
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let pool = create_pool(app, "fleet", &refs).await;
    (ids, phones, pool)
}

fn recipient(i: usize) -> String {
    format!("+1415555020{i}")
}

async fn six_sends_spread_over_three_lines_at_once(backend: Backend) {
    // Two sends a minute per line: six go out at once only over three lines.
    let app = spawn_paced(backend, 2, 25).await;
    let (ids, mut phones, pool) = three_line_pool(&app).await;
    let pool_id = pool["id"].as_str().unwrap();
    let mut by_number = std::collections::HashMap::<String, usize>::new();
    for i in 0..6 {
        // By id and by name alike.
        let from_pool = if i % 2 == 0 { pool_id } else { "fleet" };
        let body = json!({ "from_pool": from_pool, "to_number": recipient(i), "content": "hi" });
        let sent = app
            .send(&app.live_key, body)
            .await
            .expect(202)
            .data()
            .clone();
        assert_eq!(sent["pool_id"], pool_id);
        let line = LINES
            .iter()
            .position(|n| sent["from_number"] == *n)
            .expect("from one of the pool's lines");
        assert_eq!(sent["device_id"], ids[line], "the chosen line is named");
        *by_number.entry(LINES[line].to_string()).or_default() += 1;
    }
    assert_eq!(
        by_number.len(),
        3,
        "every line takes a share: {by_number:?}"
    );
    assert!(by_number.values().all(|&n| n == 2), "{by_number:?}");
    for phone in &mut phones {
        for _ in 0..2 {
            let frame = phone.next_frame_within(Duration::from_secs(5)).await;
            assert!(frame.is_some(), "each line sends its two at once");
        }
    }
    // A bulk send spreads the same way, each message naming its line.
    let body = json!({
        "from_pool": "fleet",
        "to_numbers": [recipient(7), recipient(8), recipient(9)],
        "content": "bulk",
    });
    let bulk = app
        .bulk_send(&app.live_key, body)
        .await
        .expect(202)
        .data()
        .clone();
    let mut numbers = Vec::new();
    for id in bulk["message_ids"].as_array().unwrap() {
        let m = app.message(&app.live_key, id.as_str().unwrap()).await;
        assert_eq!(m["pool_id"], pool_id);
        numbers.push(m["from_number"].as_str().unwrap().to_string());
    }
    numbers.sort();
    assert_eq!(numbers, LINES, "one recipient per line");
}

async fn a_recipient_sticks_to_the_line_that_answered(backend: Backend) {
    let app = spawn_app(backend).await;
    let (ids, mut phones, _) = three_line_pool(&app).await;
    let customer = recipient(1);
    // The customer texts the third line.
    phones[2].receive("in-1", &customer, "hello?").await;
    for _ in 0..3 {
        let body = json!({ "from_pool": "fleet", "to_number": customer, "content": "answer" });
        let sent = app
            .send(&app.live_key, body)
            .await
            .expect(202)
            .data()
            .clone();
        assert_eq!(sent["from_number"], LINES[2], "the line it texted answers");
        assert_eq!(sent["device_id"], ids[2]);
    }
    // A new recipient sticks to the line that first sent to it.
    let other = recipient(2);
    let body = json!({ "from_pool": "fleet", "to_number": other, "content": "first" });
    let first = app
        .send(&app.live_key, body.clone())
        .await
        .expect(202)
        .data()
        .clone();
    for _ in 0..2 {
        let again = app
            .send(&app.live_key, body.clone())
            .await
            .expect(202)
            .data()
            .clone();
        assert_eq!(again["from_number"], first["from_number"]);
    }
}

async fn sends_name_one_sender_and_a_pool_without_online_lines_is_503(backend: Backend) {
    let app = spawn_app(backend).await;
    let (a, _) = app.pair_phone(LINES[0]).await;
    let pool = create_pool(&app, "offline", &[&a]).await;
    let cases = [
        (
            json!({ "to_number": RECIPIENT_1, "content": "x" }),
            "from_number",
        ),
        (
            json!({ "from_number": LINES[0], "from_pool": "offline", "to_number": RECIPIENT_1, "content": "x" }),
            "from_pool",
        ),
        (
            json!({ "from_pool": "nope", "to_number": RECIPIENT_1, "content": "x" }),
            "from_pool",
        ),
        (
            json!({ "from_pool": "", "to_number": RECIPIENT_1, "content": "x" }),
            "from_pool",
        ),
        (
            json!({ "from_pool": "offline", "device_id": a, "to_number": RECIPIENT_1, "content": "x" }),
            "device_id",
        ),
    ];
    for (body, field) in cases {
        let reply = app
            .send(&app.live_key, body.clone())
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field, "{body}");
    }
    // Another mode's pool is unknown.
    let body = json!({ "from_pool": pool["id"], "to_number": RECIPIENT_1, "content": "x" });
    let reply = app
        .send(&app.test_key, body)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "from_pool");
    for body in [
        json!({ "from_pool": "offline", "to_number": RECIPIENT_1, "content": "x" }),
        json!({ "from_pool": pool["id"], "to_number": RECIPIENT_1, "content": "x" }),
    ] {
        let reply = app
            .send(&app.live_key, body)
            .await
            .expect_error(503, "no_device_available");
        assert_eq!(reply.data()["field"], "from_pool");
    }
    let body = json!({ "from_pool": "offline", "to_numbers": [RECIPIENT_1], "content": "x" });
    app.bulk_send(&app.live_key, body)
        .await
        .expect_error(503, "no_device_available");
    assert!(
        app.messages(&app.live_key, "").await.is_empty(),
        "nothing stored"
    );
}

const RECIPIENT_1: &str = "+14155550201";

backend_tests!(
    six_sends_spread_over_three_lines_at_once,
    a_recipient_sticks_to_the_line_that_answered,
    sends_name_one_sender_and_a_pool_without_online_lines_is_503,
);
