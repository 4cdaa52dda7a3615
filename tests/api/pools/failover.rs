//! Failover: a line offline past `pools.failover_after` has its pooled queue moved to the
//! pool's other lines, each message with a `rerouted` entry naming both numbers and its new
//! `from_number`; a message sent with `from_number` stays. The database is the truth: a
//! restart while the line is offline still moves its queue.

use super::*;
use crate::helpers::{eventually, spawn_app_with, timeline};
use smsgw::domain::protocol::PhoneFrame;

const A: &str = "+14155550101";
const B: &str = "+14155550102";
const C: &str = "+14155550103";

/// One send a minute per line, and failover after 1 s offline.
fn paced_failover(s: &mut smsgw::config::Settings) {
    s.pace.per_minute = 1;
    s.pace.per_30_minutes = 25;
    s.pools.failover_after = Duration::from_secs(1);
}

/// Sends `content` to `to` from the pool "fleet"; the message's id and number.
async fn send_pooled(app: &TestApp, to: &str, content: &str) -> (String, String) {
    let body = json!({ "from_pool": "fleet", "to_number": to, "content": content });
    let sent = app
        .send(&app.live_key, body)
        .await
        .expect(202)
        .data()
        .clone();
    (
        sent["id"].as_str().unwrap().to_string(),
        sent["from_number"].as_str().unwrap().to_string(),
    )
}

/// Waits until the message left line A for B or C with a `rerouted` entry naming both.
async fn wait_rerouted(app: &TestApp, id: &str) -> Value {
    let mut last = Value::Null;
    eventually(
        "the message moves to another line",
        Duration::from_secs(10),
        async || {
            last = app.message(&app.live_key, id).await;
            last["from_number"] != A
        },
    )
    .await;
    assert!(
        last["from_number"] == B || last["from_number"] == C,
        "{last}"
    );
    assert!(timeline(&last).contains(&"rerouted"), "{last}");
    let entry = last["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "rerouted")
        .unwrap();
    let detail = entry["detail"].as_str().unwrap();
    assert!(detail.contains(A), "{detail}");
    assert!(
        detail.contains(last["from_number"].as_str().unwrap()),
        "{detail}"
    );
    last
}

async fn an_offline_line_hands_its_pooled_queue_to_the_others(backend: Backend) {
    let app = spawn_app_with(backend, paced_failover).await;
    let (a, mut phone_a) = app.online_phone(A).await;
    let (b, token_b) = app.pair_phone(B).await;
    let (c, token_c) = app.pair_phone(C).await;
    create_pool(&app, "fleet", &[&a, &b, &c]).await;
    // Only A is online: it takes everything, and its pace holds all but the first.
    let (first, from) = send_pooled(&app, "+14155550201", "one").await;
    assert_eq!(from, A);
    phone_a.expect_send().await;
    let (second, _) = send_pooled(&app, "+14155550202", "two").await;
    let (third, _) = send_pooled(&app, "+14155550203", "three").await;
    let plain = app
        .send(
            &app.live_key,
            json!({ "from_number": A, "to_number": "+14155550204", "content": "mine" }),
        )
        .await
        .expect(202)
        .data()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut phone_b = app.connect_phone(&token_b).await;
    let mut phone_c = app.connect_phone(&token_c).await;
    app.wait_online(&b, true).await;
    app.wait_online(&c, true).await;
    phone_a.close().await;
    app.wait_online(&a, false).await;

    let mut moved = Vec::new();
    for id in [&first, &second, &third] {
        moved.push(wait_rerouted(&app, id).await);
    }
    // Each line sends what it was given (one at once under its pace).
    let mut frames = 0;
    for phone in [&mut phone_b, &mut phone_c] {
        while phone
            .next_frame_within(Duration::from_millis(500))
            .await
            .is_some()
        {
            frames += 1;
        }
    }
    assert!(frames >= 2, "the other lines send the moved messages");
    // The sticky line follows: the recipient's next pooled send goes to its new line.
    let (_, again) = send_pooled(&app, "+14155550202", "again").await;
    assert_eq!(again, moved[1]["from_number"].as_str().unwrap());
    // A from_number send never leaves its number.
    let mine = app.message(&app.live_key, &plain).await;
    assert_eq!(mine["from_number"], A);
    assert_eq!(mine["status"], "queued");
    assert!(!timeline(&mine).contains(&"rerouted"));
}

async fn failover_survives_a_restart(backend: Backend) {
    // Failover only after 2 s; the server restarts before that.
    let app = spawn_app_with(backend, |s| {
        paced_failover(s);
        s.pools.failover_after = Duration::from_secs(2);
    })
    .await;
    let (a, mut phone_a) = app.online_phone(A).await;
    let (b, token_b) = app.pair_phone(B).await;
    create_pool(&app, "fleet", &[&a, &b]).await;
    send_pooled(&app, "+14155550201", "one").await;
    phone_a.expect_send().await;
    let (second, _) = send_pooled(&app, "+14155550202", "two").await;
    phone_a.close().await;
    app.wait_online(&a, false).await;
    let app = app.restart().await;
    let mut phone_b = app.connect_phone(&token_b).await;
    app.wait_online(&b, true).await;
    let moved = wait_rerouted(&app, &second).await;
    assert_eq!(moved["from_number"], B);
    assert!(
        phone_b
            .next_frame_within(Duration::from_secs(5))
            .await
            .is_some()
    );
}

async fn a_line_out_of_its_daily_cap_hands_its_pooled_queue_on(backend: Backend) {
    let app = spawn_app_with(backend, paced_failover).await;
    let (a, mut phone_a) = app.online_phone(A).await;
    let (b, token_b) = app.pair_phone(B).await;
    app.patch(
        &format!("/v1/phones/{a}"),
        &app.live_key,
        json!({ "pace": { "per_minute": 10, "per_30_minutes": 100, "per_day": 1 } }),
    )
    .await
    .expect(200);
    create_pool(&app, "fleet", &[&a, &b]).await;
    // A alone is online: it sends one and its daily cap holds the rest.
    send_pooled(&app, "+14155550201", "one").await;
    phone_a.expect_send().await;
    let (second, from) = send_pooled(&app, "+14155550202", "two").await;
    assert_eq!(from, A);
    // B comes online: A's waiting pooled message moves to it.
    let mut phone_b = app.connect_phone(&token_b).await;
    app.wait_online(&b, true).await;
    let moved = wait_rerouted(&app, &second).await;
    assert_eq!(moved["from_number"], B);
    let entry = timeline(&moved);
    assert!(entry.contains(&"rerouted"), "{moved}");
    assert!(
        moved.to_string().contains("daily cap"),
        "the entry says why: {moved}"
    );
    assert!(
        phone_b
            .next_frame_within(Duration::from_secs(5))
            .await
            .is_some()
    );
}

async fn a_stalled_line_hands_its_pooled_queue_on(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        paced_failover(s);
        s.phones.stall_failures = 1;
    })
    .await;
    let (a, mut phone_a) = app.online_phone(A).await;
    let (b, token_b) = app.pair_phone(B).await;
    app.set_pace(&b, 10, 100).await;
    create_pool(&app, "fleet", &[&a, &b]).await;
    // A alone is online: it takes both, sends one and its pace holds the other.
    let (first, _) = send_pooled(&app, "+14155550201", "one").await;
    let (message_id, ..) = phone_a.expect_send().await;
    assert_eq!(message_id.to_string(), first);
    let (second, from) = send_pooled(&app, "+14155550202", "two").await;
    assert_eq!(from, A);
    let mut phone_b = app.connect_phone(&token_b).await;
    app.wait_online(&b, true).await;
    // A's attempt fails (a blocked SIM): the watchdog marks it stalled, and its waiting
    // pooled message moves to B.
    phone_a
        .report_acked(PhoneFrame::Failed {
            message_id,
            error: "RESULT_ERROR_GENERIC_FAILURE".into(),
            reference: Some("f1".into()),
        })
        .await;
    let moved = wait_rerouted(&app, &second).await;
    assert_eq!(moved["from_number"], B);
    assert!(
        moved.to_string().contains("stalled"),
        "the entry says why: {moved}"
    );
    // The failed one waits for another attempt: it leaves the stalled line too.
    let mut handed = vec![
        phone_b.expect_send().await.0.to_string(),
        phone_b.expect_send().await.0.to_string(),
    ];
    handed.sort();
    let mut both = vec![first, second];
    both.sort();
    assert_eq!(handed, both);
    let phone = app
        .get(&format!("/v1/phones/{a}"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(phone.data()["stalled"], true);
}

backend_tests!(
    an_offline_line_hands_its_pooled_queue_to_the_others,
    failover_survives_a_restart,
    a_line_out_of_its_daily_cap_hands_its_pooled_queue_on,
    a_stalled_line_hands_its_pooled_queue_on,
);
