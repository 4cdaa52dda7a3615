//! Per-workspace quotas (docs/api.md, "Quotas"): stored phones, webhook endpoints, contacts,
//! campaigns and their recipients, queued messages, test-mode messages per day (campaigns
//! included), and the outbound webhook delivery budget.

use std::time::Duration;

use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::typed;
use crate::helpers::{Backend, SENDER, TestApp, WebhookReceiver, poll, spawn_app_with};
use smsgw::api::campaigns::CampaignOut;

/// How long a condition may take to come true before a poll gives up.
const DEADLINE: Duration = Duration::from_secs(10);

const RECIPIENT: &str = "+14155550123";

/// A send from the test key held an hour (it stays `queued`).
fn held(to: &str) -> Value {
    let at = chrono::Utc::now() + chrono::Duration::hours(1);
    json!({ "from_number": SENDER, "to_number": to, "content": "held",
            "scheduled_for": at.to_rfc3339() })
}

fn assert_quota(reply: &Value, quota: &str, limit: u64) {
    assert_eq!(reply["data"]["quota"], quota, "body: {reply}");
    assert_eq!(reply["data"]["limit"], limit, "body: {reply}");
}

async fn count(app: &TestApp, path: &str, key: &str, field: &str) -> usize {
    app.get(&format!("{path}?limit=100"), key)
        .await
        .expect(200)
        .data()[field]
        .as_array()
        .expect("a list")
        .len()
}

async fn phone_and_webhook_quotas_refuse_the_next_one(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.quotas.phones = 2;
        s.quotas.webhook_endpoints = 1;
        s.webhooks.allow_insecure_targets = true;
    })
    .await;
    for number in ["+14155550001", "+14155550002"] {
        app.post(
            "/v1/phones",
            &app.live_key,
            json!({ "phone_number": number }),
        )
        .await
        .expect(201);
    }
    let refused = app
        .post(
            "/v1/phones",
            &app.live_key,
            json!({ "phone_number": "+14155550003" }),
        )
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "phones", 2);
    assert_eq!(count(&app, "/v1/phones", &app.live_key, "phones").await, 2);
    // Each mode has its own quotas: the test side is not full.
    app.post(
        "/v1/phones",
        &app.test_key,
        json!({ "phone_number": "+14155550003" }),
    )
    .await
    .expect(201);

    let hook = json!({ "url": "http://127.0.0.1:9/hook", "events": ["message.sent"] });
    app.post("/v1/webhooks", &app.test_key, hook.clone())
        .await
        .expect(201);
    let refused = app
        .post("/v1/webhooks", &app.test_key, hook)
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "webhook_endpoints", 1);
    assert_eq!(
        count(&app, "/v1/webhooks", &app.test_key, "webhooks").await,
        1
    );
}

async fn contact_quota_refuses_a_whole_import(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.quotas.contacts = 3).await;
    for number in ["+14155550101", "+14155550102"] {
        app.post(
            "/v1/contacts",
            &app.test_key,
            json!({ "phone_number": number }),
        )
        .await
        .expect(201);
    }
    // Two new contacts would make four: refused whole, nothing stored or changed.
    let refused = app
        .post(
            "/v1/contacts/import",
            &app.test_key,
            json!({ "contacts": [
                { "phone_number": "+14155550101", "first_name": "Changed" },
                { "phone_number": "+14155550103" },
                { "phone_number": "+14155550104" },
            ] }),
        )
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "contacts", 3);
    let listed = app
        .get("/v1/contacts?limit=100", &app.test_key)
        .await
        .expect(200);
    let contacts = listed.data()["contacts"].as_array().unwrap();
    assert_eq!(contacts.len(), 2);
    for c in contacts {
        crate::helpers::assert_null(c, "first_name");
    }
    // Updates of existing contacts and one new contact fit.
    app.post(
        "/v1/contacts/import",
        &app.test_key,
        json!({ "contacts": [
            { "phone_number": "+14155550101", "first_name": "Changed" },
            { "phone_number": "+14155550103" },
        ] }),
    )
    .await
    .expect(200);
    let refused = app
        .post(
            "/v1/contacts",
            &app.test_key,
            json!({ "phone_number": "+14155550105" }),
        )
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "contacts", 3);
    assert_eq!(
        count(&app, "/v1/contacts", &app.test_key, "contacts").await,
        3
    );
}

async fn queued_message_quota_counts_held_messages(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.quotas.queued_messages = 3).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let reply = app.send(&app.test_key, held(RECIPIENT)).await.expect(202);
        ids.push(reply.data()["id"].as_str().unwrap().to_string());
    }
    // A bulk send that would make four queued messages is refused whole.
    let refused = app
        .bulk_send(
            &app.test_key,
            json!({ "from_number": SENDER, "content": "bulk",
                    "to_numbers": [RECIPIENT, "+447911123456"] }),
        )
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "queued_messages", 3);
    app.send(&app.test_key, held("+447911123456"))
        .await
        .expect(202);
    let refused = app
        .send(&app.test_key, held(RECIPIENT))
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "queued_messages", 3);
    assert_eq!(
        count(&app, "/v1/messages", &app.test_key, "messages").await,
        3
    );
    // A canceled message is no longer queued: its place is free again.
    app.delete(&format!("/v1/messages/{}", ids[0]), &app.test_key)
        .await
        .expect(200);
    app.send(&app.test_key, held(RECIPIENT)).await.expect(202);
}

async fn concurrent_sends_never_pass_the_queued_quota(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.quotas.queued_messages = 5).await;
    let sends = (0..20).map(|i| {
        let body = held(&format!("+1415555{:04}", 2000 + i));
        let app = &app;
        async move { app.send(&app.test_key, body).await }
    });
    let replies = futures_util::future::join_all(sends).await;
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    let refused = replies
        .iter()
        .filter(|r| r.status == 422 && r.body["error_code"] == "quota_exceeded")
        .count();
    assert_eq!((accepted, refused), (5, 15));
    assert_eq!(
        count(&app, "/v1/messages", &app.test_key, "messages").await,
        5
    );
}

async fn test_mode_messages_per_day_are_capped(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.quotas.test_messages_per_day = 3).await;
    let mut last = String::new();
    for i in 0..3 {
        let reply = app.send_test(RECIPIENT, &format!("m{i}")).await.expect(202);
        last = reply.data()["id"].as_str().unwrap().to_string();
    }
    // Delivered messages still count: the cap is on messages accepted today.
    app.wait_for_status(&app.test_key, &last, "delivered").await;
    let refused = app
        .send_test(RECIPIENT, "one too many")
        .await
        .expect_error(429, "daily_quota_exceeded");
    assert_quota(&refused.body, "test_messages_per_day", 3);
    let resets_at = refused.data()["resets_at"].as_str().unwrap();
    let resets_at = chrono::DateTime::parse_from_rfc3339(resets_at)
        .unwrap()
        .with_timezone(&chrono::Utc);
    let now = chrono::Utc::now();
    assert!(resets_at > now && resets_at - now <= chrono::Duration::days(1));
    app.bulk_send(
        &app.test_key,
        json!({ "from_number": SENDER, "content": "bulk", "to_numbers": [RECIPIENT] }),
    )
    .await
    .expect_error(429, "daily_quota_exceeded");
    assert_eq!(
        count(&app, "/v1/messages", &app.test_key, "messages").await,
        3
    );
}

/// Most of `times` (ms, sorted) within any `window_ms`.
fn most_in_window(times: &[i64], window_ms: i64) -> usize {
    let mut most = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= window_ms {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most
}

async fn webhook_budget_delays_deliveries_and_loses_none(backend: Backend) {
    const ENDPOINTS: usize = 50;
    const MESSAGES: usize = 4;
    const BUDGET: u32 = 50;
    let app = spawn_app_with(backend, |s| {
        s.webhooks.allow_insecure_targets = true;
        s.quotas.webhook_endpoints = ENDPOINTS as u32;
        s.quotas.webhook_deliveries = BUDGET;
        s.quotas.webhook_delivery_window = Duration::from_secs(1);
    })
    .await;
    let receiver = WebhookReceiver::start().await;
    let mut endpoints = Vec::new();
    for i in 0..ENDPOINTS {
        let created = app
            .post(
                "/v1/webhooks",
                &app.test_key,
                json!({ "url": format!("{}?endpoint={i}", receiver.url),
                        "events": ["message.delivered"] }),
            )
            .await
            .expect(201);
        endpoints.push(created.data()["id"].as_str().unwrap().to_string());
    }
    for i in 0..MESSAGES {
        app.send_test(RECIPIENT, &format!("m{i}")).await.expect(202);
    }
    let expected = ENDPOINTS * MESSAGES;
    // 200 deliveries at 50 per second: three seconds of them wait, none is dropped.
    receiver.wait_for(expected, Duration::from_secs(30)).await;
    // When each attempt started, as the server recorded it (the receiver's arrival times
    // bunch up when the machine is busy).
    // An attempt is recorded just after its answer: poll until every one is.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut started = Vec::new();
    loop {
        started.clear();
        for id in &endpoints {
            let attempts = app
                .get(
                    &format!("/v1/webhooks/{id}/deliveries?limit=100"),
                    &app.test_key,
                )
                .await
                .expect(200);
            for attempt in attempts.data()["deliveries"].as_array().unwrap() {
                assert_eq!(attempt["state"], "succeeded", "{attempt}");
                let at = attempt["attempted_at"].as_str().unwrap();
                started.push(
                    chrono::DateTime::parse_from_rfc3339(at)
                        .unwrap()
                        .timestamp_millis(),
                );
            }
        }
        if started.len() >= expected || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(started.len(), expected, "one attempt per delivery");
    started.sort();
    // The budget is taken just before `attempted_at` is: a window a few ms shorter than the
    // budget's absorbs that.
    let most = most_in_window(&started, 950);
    assert!(
        most <= BUDGET as usize,
        "{most} attempts started within 950 ms; the budget is {BUDGET} per second"
    );
    let span = started[started.len() - 1] - started[0];
    assert!(
        span >= 3000,
        "200 attempts at 50 per second spread over {span} ms"
    );
    // Every attempt is recorded succeeded, which ends its delivery: none is sent again.
    let received = receiver.received();
    assert_eq!(received.len(), expected, "each delivery arrives once");
    let mut event_ids: Vec<_> = received
        .iter()
        .map(|r| r.headers["x-event-id"].clone())
        .collect();
    event_ids.sort();
    event_ids.dedup();
    assert_eq!(event_ids.len(), expected, "no delivery twice");
}

/// A campaign of `to` numbers from `SENDER`, a draft unless `launch`.
fn campaign_of(name: &str, to: &[&str], launch: bool) -> Value {
    let recipients: Vec<Value> = to.iter().map(|n| json!({ "to": n })).collect();
    json!({ "name": name, "from_number": SENDER, "body": "Hi", "recipients": recipients,
            "launch_now": launch })
}

const NUMBERS: [&str; 5] = [
    "+14155550201",
    "+14155550202",
    "+14155550203",
    "+14155550204",
    "+14155550205",
];

/// Stored campaigns and their recipients are capped per workspace and mode: the campaign over
/// either quota is refused whole (422 `quota_exceeded`), and deleting one frees its place.
async fn campaign_quotas_refuse_the_next_campaign(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.quotas.campaigns = 2;
        s.quotas.campaign_recipients = 5;
    })
    .await;
    let key = &app.test_key;
    let first = app
        .post("/v1/campaigns", key, campaign_of("a", &NUMBERS[..3], false))
        .await
        .expect(201);
    let refused = app
        .post("/v1/campaigns", key, campaign_of("b", &NUMBERS[..3], true))
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "campaign_recipients", 5);
    app.post("/v1/campaigns", key, campaign_of("b", &NUMBERS[..2], false))
        .await
        .expect(201);
    let refused = app
        .post("/v1/campaigns", key, campaign_of("c", &NUMBERS[..1], false))
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "campaigns", 2);
    assert_eq!(count(&app, "/v1/campaigns", key, "campaigns").await, 2);
    assert_eq!(
        count(&app, "/v1/messages", key, "messages").await,
        0,
        "the refused launch sent nothing"
    );

    // The live side of the workspace has quotas of its own.
    app.pair_phone(SENDER).await;
    app.post(
        "/v1/campaigns",
        &app.live_key,
        campaign_of("live", &NUMBERS[..1], false),
    )
    .await
    .expect(201);

    let first = first.data()["id"].as_str().unwrap().to_string();
    app.delete(&format!("/v1/campaigns/{first}"), key)
        .await
        .expect(200);
    app.post("/v1/campaigns", key, campaign_of("c", &NUMBERS[..3], false))
        .await
        .expect(201);
}

/// A test-mode campaign counts against the daily quota like single sends: it sends what is
/// left of the day's quota, then pauses itself with `paused_reason` `daily_quota_exceeded`
/// and its other recipients pending; a resume the same day pauses it again, sending nothing.
async fn a_test_campaign_pauses_at_the_daily_quota(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.quotas.test_messages_per_day = 3).await;
    let key = &app.test_key;
    app.send_test(RECIPIENT, "single").await.expect(202);
    let created = app
        .post(
            "/v1/campaigns",
            key,
            campaign_of("daily", &NUMBERS[..4], true),
        )
        .await
        .expect(201);
    let id = created.data()["id"].as_str().unwrap().to_string();
    let path = format!("/v1/campaigns/{id}");
    let paused_at_quota = |c: &Value| {
        c["status"] == "paused"
            && c["paused_reason"] == "daily_quota_exceeded"
            && c["counts"]["pending"] == 2
            && c["counts"]["delivered"] == 2
    };
    let read = async || app.get(&path, key).await.expect(200).data().clone();
    poll(DEADLINE, Duration::from_millis(20), async || {
        let campaign = read().await;
        match paused_at_quota(&campaign) {
            true => Ok(()),
            false => Err(format!("not paused at the quota: {campaign}")),
        }
    })
    .await;
    app.send_test(RECIPIENT, "one too many")
        .await
        .expect_error(429, "daily_quota_exceeded");

    let resumed = app
        .request("POST", &format!("{path}/resume"), Some(key), None)
        .await
        .expect(200);
    assert_eq!(resumed.data()["status"], "running");
    assert_eq!(resumed.read::<CampaignOut>().paused_reason, None);
    poll(DEADLINE, Duration::from_millis(20), async || {
        let campaign = read().await;
        match paused_at_quota(&campaign) {
            true => Ok(()),
            false => Err(format!("not paused again: {campaign}")),
        }
    })
    .await;
    assert_eq!(count(&app, "/v1/messages", key, "messages").await, 3);

    // A pause through the API has no reason.
    let canceled = app
        .request("POST", &format!("{path}/cancel"), Some(key), None)
        .await
        .expect(200);
    assert_eq!(canceled.read::<CampaignOut>().paused_reason, None);
    assert_eq!(canceled.data()["counts"]["canceled"], 2);
}

/// A live campaign counts against the queued quota like sends: it queues only what fits and
/// keeps the rest `pending`, still running (not paused), while sends are refused.
async fn a_campaign_queues_only_what_the_queued_quota_allows(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.quotas.queued_messages = 3;
        // The phone takes two, then its pace keeps the others `queued` for a minute.
        s.pace.per_minute = 2;
        s.pace.per_30_minutes = 2;
    })
    .await;
    let key = &app.live_key;
    let (_, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    let to = [NUMBERS.as_slice(), &["+14155550206"]].concat();
    let created = app
        .post("/v1/campaigns", key, campaign_of("queued", &to, true))
        .await
        .expect(201);
    let id = created.data()["id"].as_str().unwrap().to_string();
    phone.expect_send().await;
    phone.expect_send().await;
    // Two with the phone (`sending`) and three `queued`: the quota is full, one waits.
    let campaign = poll(DEADLINE, Duration::from_millis(20), async || {
        let campaign = app
            .get(&format!("/v1/campaigns/{id}"), key)
            .await
            .expect(200)
            .data()
            .clone();
        match campaign["counts"]["queued"] == 5 && campaign["counts"]["pending"] == 1 {
            true => Ok(campaign),
            false => Err(format!("not held at the queued quota: {campaign}")),
        }
    })
    .await;
    assert_eq!(campaign["status"], "running");
    assert_eq!(typed::<CampaignOut>(&campaign).paused_reason, None);
    let refused = app
        .send(
            key,
            json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "full" }),
        )
        .await
        .expect_error(422, "quota_exceeded");
    assert_quota(&refused.body, "queued_messages", 3);
}

backend_tests!(
    phone_and_webhook_quotas_refuse_the_next_one,
    contact_quota_refuses_a_whole_import,
    queued_message_quota_counts_held_messages,
    concurrent_sends_never_pass_the_queued_quota,
    test_mode_messages_per_day_are_capped,
    campaign_quotas_refuse_the_next_campaign,
    a_test_campaign_pauses_at_the_daily_quota,
    a_campaign_queues_only_what_the_queued_quota_allows,
    webhook_budget_delays_deliveries_and_loses_none,
);
