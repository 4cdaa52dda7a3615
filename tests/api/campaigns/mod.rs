//! Campaigns (docs/api.md, Campaigns): what the topic files share (request bodies, reads,
//! waits and a paced live phone). `create` holds creation, validation, limits, scoping and
//! paging; `recipients` rendering, skips and contact tags; `run` the state machine on a live
//! phone (schedules, pace, pause, cancel, restarts).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};
use smsgw::domain::protocol::{PhoneFrame, ServerFrame};
use uuid::Uuid;

use crate::backend_tests;
use crate::helpers::{
    Backend, FakePhone, RECIPIENT, Reply, SENDER, TestApp, poll, send_body, spawn_app,
    spawn_app_with, spawn_paced,
};

mod create;
mod delete;
mod recipients;
mod run;

/// A US premium-rate number (+1 900): skipped by a campaign, never sent.
const PREMIUM: &str = "+19005550123";
/// Test mode's magic recipient that is sent but never delivered: keeps a campaign `running`.
const NEVER_DELIVERED: &str = "+15005550002";
/// How long a condition may take to come true before a poll gives up.
const DEADLINE: Duration = Duration::from_secs(10);
/// How long "nothing happens" is watched for.
const QUIET: Duration = Duration::from_millis(1000);

/// `n` distinct valid US numbers in ascending order, different from the helpers' `SENDER`
/// and `RECIPIENT` (+1 415 555 0200 onwards, then +1 415 556 …).
fn numbers(n: usize) -> Vec<String> {
    (200..200 + n)
        .map(|k| format!("+1415{}{:04}", 555 + k / 10_000, k % 10_000))
        .collect()
}

/// Runs a one-recipient test-mode campaign to `completed` and returns its message's id: a
/// campaign's whole life has passed (launch, step, send, report), so what the campaign
/// machinery would have done meanwhile for another campaign has been done. A "nothing was
/// sent" check waits for this instead of sleeping, and leaves the returned message out.
async fn control_campaign_completes(app: &TestApp) -> String {
    let body = launched(campaign("Control", plain(&["+14155550190".to_string()])));
    let id = id_of(&create(app, &app.test_key, body).await);
    wait_for_campaign_status(app, &app.test_key, &id, "completed").await;
    let list = recipients(app, &app.test_key, &id).await;
    list[0]["message_id"].as_str().unwrap().to_string()
}

/// The outbound messages of `key`'s mode but the control campaign's `control_message`.
async fn outbound_besides(app: &TestApp, key: &str, control_message: &str) -> Vec<Value> {
    let mut all = outbound_messages(app, key).await;
    all.retain(|m| m["id"] != control_message);
    all
}

/// Recipients without vars.
fn plain(numbers: &[String]) -> Value {
    Value::Array(numbers.iter().map(|n| json!({ "to": n })).collect())
}

/// A minimal valid create body (a draft from `SENDER`).
fn campaign(name: &str, recipients: Value) -> Value {
    json!({ "name": name, "from_number": SENDER, "body": "Hello", "recipients": recipients })
}

/// `body` with `launch_now: true`.
fn launched(mut body: Value) -> Value {
    body["launch_now"] = json!(true);
    body
}

/// The expected `counts` object: every count 0 except the ones given.
fn counts(given: &[(&str, u64)]) -> Value {
    let mut all = json!({ "total": 0, "pending": 0, "queued": 0, "sent": 0, "delivered": 0,
                          "failed": 0, "canceled": 0 });
    for (name, value) in given {
        assert!(all.get(name).is_some(), "unknown count {name}");
        all[*name] = json!(value);
    }
    all
}

/// docs/api.md: `total = pending + queued + sent + delivered + failed + canceled`.
#[track_caller]
fn assert_counts_add_up(campaign: &Value) {
    let c = &campaign["counts"];
    let part = |name: &str| {
        c[name]
            .as_u64()
            .unwrap_or_else(|| panic!("counts.{name} is a number: {campaign}"))
    };
    let sum: u64 = [
        "pending",
        "queued",
        "sent",
        "delivered",
        "failed",
        "canceled",
    ]
    .iter()
    .map(|name| part(name))
    .sum();
    assert_eq!(part("total"), sum, "counts add up: {campaign}");
}

fn id_of(value: &Value) -> String {
    value["id"].as_str().expect("an id").to_string()
}

fn parse_time(value: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(value.as_str().expect("a timestamp"))
        .unwrap_or_else(|e| panic!("{value} is RFC 3339: {e}"))
}

async fn create(app: &TestApp, key: &str, body: Value) -> Value {
    let data = app
        .post("/v1/campaigns", key, body)
        .await
        .expect(201)
        .data()
        .clone();
    assert_counts_add_up(&data);
    data
}

async fn read(app: &TestApp, key: &str, id: &str) -> Value {
    let data = app
        .get(&format!("/v1/campaigns/{id}"), key)
        .await
        .expect(200)
        .data()
        .clone();
    assert_counts_add_up(&data);
    data
}

/// `POST /v1/campaigns/{id}/{operation}` without a body.
async fn control(app: &TestApp, key: &str, id: &str, operation: &str) -> Reply {
    app.request(
        "POST",
        &format!("/v1/campaigns/{id}/{operation}"),
        Some(key),
        None,
    )
    .await
}

async fn recipients(app: &TestApp, key: &str, id: &str) -> Vec<Value> {
    app.all_pages(key, &format!("/v1/campaigns/{id}/recipients"), "recipients")
        .await
}

async fn campaigns(app: &TestApp, key: &str) -> Vec<Value> {
    app.all_pages(key, "/v1/campaigns", "campaigns").await
}

async fn outbound_messages(app: &TestApp, key: &str) -> Vec<Value> {
    app.all_pages(key, "/v1/messages?direction=outbound", "messages")
        .await
}

/// Polls the campaign until `check` holds; panics after [`DEADLINE`].
async fn wait_for_campaign(
    app: &TestApp,
    key: &str,
    id: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    poll(DEADLINE, Duration::from_millis(20), async || {
        let campaign = read(app, key, id).await;
        match check(&campaign) {
            true => Ok(campaign),
            false => Err(format!(
                "campaign {id} never reached the expected state; last: {campaign}"
            )),
        }
    })
    .await
}

async fn wait_for_campaign_status(app: &TestApp, key: &str, id: &str, status: &str) -> Value {
    wait_for_campaign(app, key, id, |c| c["status"] == status).await
}

/// Polls the recipient list until `check` holds; panics after [`DEADLINE`].
async fn wait_for_recipients(
    app: &TestApp,
    key: &str,
    id: &str,
    check: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    poll(DEADLINE, Duration::from_millis(20), async || {
        let list = recipients(app, key, id).await;
        match check(&list) {
            true => Ok(list),
            false => Err(format!(
                "recipients of {id} never reached the expected state; last: {list:?}"
            )),
        }
    })
    .await
}

fn statuses(list: &[Value]) -> Vec<&str> {
    list.iter().map(|r| r["status"].as_str().unwrap()).collect()
}

fn tos(list: &[Value]) -> Vec<&str> {
    list.iter().map(|r| r["to"].as_str().unwrap()).collect()
}

/// Asserts an error reply names `field`.
#[track_caller]
fn assert_field(reply: &Reply, field: &str) {
    assert_eq!(reply.data()["field"], field, "body: {}", reply.body);
}

/// Asserts a 409 `invalid_state` carrying the current status.
#[track_caller]
fn assert_invalid_state(reply: Reply, current: &str) {
    let reply = reply.expect_error(409, "invalid_state");
    assert_eq!(reply.data()["status"], current, "body: {}", reply.body);
}

/// A live campaign of five recipients launched on a connected phone paced at 2 a minute: the
/// phone takes the first two, the pace holds the other three in its queue.
struct PacedCampaign {
    app: TestApp,
    phone_id: String,
    token: String,
    phone: FakePhone,
    to: Vec<String>,
    id: String,
    /// The first two `send` frames.
    first: Vec<(Uuid, String, String)>,
}

async fn paced_campaign(backend: Backend, name: &str) -> PacedCampaign {
    let app = spawn_paced(backend, 2, 2).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    let to = numbers(5);
    let id = id_of(&create(&app, &app.live_key, launched(campaign(name, plain(&to)))).await);
    let first = expect_sends(&mut phone, 2).await;
    PacedCampaign {
        app,
        phone_id,
        token,
        phone,
        to,
        id,
        first,
    }
}

/// The phone delivers `sends` (the two it had) while the paced campaign is paused: it stays
/// paused, two delivered and three pending.
async fn finish_while_paused(
    app: &TestApp,
    id: &str,
    phone: &mut FakePhone,
    sends: &[(Uuid, String, String)],
) {
    let ids: Vec<Uuid> = sends.iter().map(|(id, ..)| *id).collect();
    report_delivered(phone, &ids).await;
    let campaign =
        wait_for_campaign(app, &app.live_key, id, |c| c["counts"]["delivered"] == 2).await;
    assert_eq!(campaign["status"], "paused");
    assert_eq!(
        campaign["counts"],
        counts(&[("total", 5), ("delivered", 2), ("pending", 3)])
    );
}

/// The next `n` `send` frames: (message_id, to, content).
async fn expect_sends(phone: &mut FakePhone, n: usize) -> Vec<(Uuid, String, String)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let (message_id, to, content, _) = phone.expect_send().await;
        out.push((message_id, to, content));
    }
    out
}

/// Reports each message `sent` then `delivered` and waits for every ack; any other frame in
/// between (a `send` above all) fails the test.
async fn report_delivered(phone: &mut FakePhone, ids: &[Uuid]) {
    let mut waiting: HashSet<String> = HashSet::new();
    for id in ids {
        for (kind, frame) in [
            (
                "s",
                PhoneFrame::Sent {
                    message_id: *id,
                    reference: Some(format!("s-{id}")),
                },
            ),
            (
                "d",
                PhoneFrame::Delivered {
                    message_id: *id,
                    reference: Some(format!("d-{id}")),
                },
            ),
        ] {
            phone.send(&frame).await;
            waiting.insert(format!("{kind}-{id}"));
        }
    }
    while !waiting.is_empty() {
        match phone.next_frame().await {
            Some(ServerFrame::Ack { reference }) => {
                assert!(waiting.remove(&reference), "unexpected ack {reference}")
            }
            other => panic!("expected acks of the reports, got {other:?}"),
        }
    }
}
