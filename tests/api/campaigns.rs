//! Campaigns (docs/api.md, Campaigns):
//! creation and validation, rendering, skips, contact tags, the state machine, feeding a live
//! phone at its pace, pause and cancel, restarts, the new-workspace limit, scoping and paging.

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

// ---------------------------------------------------------------------------------------------
// Test mode: creation, rendering, completion.
// ---------------------------------------------------------------------------------------------

/// A launched test-mode campaign renders each recipient's text (with and without spaces inside
/// the braces, a missing var as ""), sends it through the simulated phone and completes.
async fn test_mode_campaign_renders_sends_and_completes(backend: Backend) {
    let app = spawn_app(backend).await;
    let to = numbers(3);
    let created = create(
        &app,
        &app.test_key,
        json!({
            "name": "Spring sale",
            "from_number": SENDER,
            "body": "Hi {{name}}, your code is {{ code }}.",
            "recipients": [
                { "to": to[0], "vars": { "name": "Ann", "code": "A1" } },
                { "to": to[1], "vars": { "name": "Bob", "code": "B2" } },
                { "to": to[2], "vars": { "name": "Cy" } },
            ],
            "launch_now": true,
        }),
    )
    .await;
    let id = id_of(&created);
    assert!(
        created["status"] == "running" || created["status"] == "completed",
        "{created}"
    );
    assert_eq!(created["name"], "Spring sale");
    assert_eq!(created["from_number"], SENDER);
    assert_eq!(created["body"], "Hi {{name}}, your code is {{ code }}.");
    assert_eq!(created["scheduled_for"], Value::Null);
    assert!(created["created_at"].as_str().unwrap().ends_with("+00:00"));
    assert!(created["started_at"].is_string(), "{created}");
    assert_eq!(created["counts"]["total"], 3);
    assert_eq!(
        created["skipped"],
        json!({ "opted_out": 0, "premium_rate": 0 })
    );

    let done = wait_for_campaign_status(&app, &app.test_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 3), ("delivered", 3)]));
    assert!(done["finished_at"].is_string(), "{done}");
    assert!(parse_time(&done["finished_at"]) >= parse_time(&done["started_at"]));

    let list = recipients(&app, &app.test_key, &id).await;
    assert_eq!(tos(&list), [&to[0], &to[1], &to[2]], "recipient order");
    assert_eq!(statuses(&list), ["delivered"; 3]);
    let expected = [
        "Hi Ann, your code is A1.",
        "Hi Bob, your code is B2.",
        "Hi Cy, your code is .",
    ];
    let mut message_ids = HashSet::new();
    for (recipient, text) in list.iter().zip(expected) {
        assert_eq!(recipient["skip_reason"], Value::Null);
        assert_eq!(recipient["failure_reason"], Value::Null);
        let message_id = recipient["message_id"].as_str().expect("a message id");
        assert!(message_ids.insert(message_id.to_string()));
        let message = app.message(&app.test_key, message_id).await;
        assert_eq!(message["campaign_id"], id.as_str());
        assert_eq!(message["content"], text);
        assert_eq!(message["to_number"], recipient["to"]);
        assert_eq!(message["from_number"], SENDER);
        assert_eq!(message["status"], "delivered");
        assert_eq!(message["test_mode"], true);
    }
    assert_eq!(
        outbound_messages(&app, &app.test_key).await.len(),
        3,
        "one message per recipient"
    );
}

/// A draft queues nothing until launched; launching twice is refused with the current status.
/// A message sent but never delivered keeps the campaign `running` (docs/api.md, Campaigns).
async fn draft_waits_for_launch(backend: Backend) {
    let app = spawn_app(backend).await;
    let to = [RECIPIENT.to_string(), NEVER_DELIVERED.to_string()];
    let draft = create(&app, &app.test_key, campaign("Draft", plain(&to))).await;
    let id = id_of(&draft);
    assert_eq!(draft["status"], "draft", "launch_now defaults to false");
    assert_eq!(draft["counts"], counts(&[("total", 2), ("pending", 2)]));
    assert_eq!(draft["started_at"], Value::Null);
    assert_eq!(draft["finished_at"], Value::Null);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        outbound_messages(&app, &app.test_key).await.is_empty(),
        "a draft queues nothing"
    );
    let list = recipients(&app, &app.test_key, &id).await;
    assert_eq!(statuses(&list), ["pending", "pending"]);
    assert!(list.iter().all(|r| r["message_id"].is_null()), "{list:?}");
    assert_eq!(
        read(&app, &app.test_key, &id).await["status"],
        "draft",
        "still a draft"
    );

    let launched = control(&app, &app.test_key, &id, "launch")
        .await
        .expect(200);
    assert_eq!(launched.data()["status"], "running");
    assert!(launched.data()["started_at"].is_string());
    assert_invalid_state(control(&app, &app.test_key, &id, "launch").await, "running");

    let list = wait_for_recipients(&app, &app.test_key, &id, |list| {
        statuses(list) == ["delivered", "sent"]
    })
    .await;
    assert!(list.iter().all(|r| r["message_id"].is_string()));
    let campaign = read(&app, &app.test_key, &id).await;
    assert_eq!(
        campaign["counts"],
        counts(&[("total", 2), ("sent", 1), ("delivered", 1)])
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let campaign = read(&app, &app.test_key, &id).await;
    assert_eq!(
        campaign["status"], "running",
        "a sent message without a delivery report is not terminal"
    );
    assert_eq!(campaign["finished_at"], Value::Null);
}

// ---------------------------------------------------------------------------------------------
// Validation.
// ---------------------------------------------------------------------------------------------

/// Every refused create names its field and writes nothing, in either mode.
async fn invalid_campaigns_are_refused_and_write_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let to = numbers(2);
    let valid = campaign("Valid", plain(&to));
    let with = |field: &str, value: Value| {
        let mut body = valid.clone();
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = valid.clone();
        body.as_object_mut().unwrap().remove(field);
        body
    };
    let too_many: Vec<Value> = numbers(10_000)
        .into_iter()
        .chain(["+447911123456".to_string()])
        .map(|n| json!({ "to": n }))
        .collect();
    let mut cases: Vec<(&str, Value, u16, &str, &str)> = vec![
        (
            "missing name",
            without("name"),
            422,
            "validation_failed",
            "name",
        ),
        (
            "empty name",
            with("name", json!("")),
            422,
            "validation_failed",
            "name",
        ),
        (
            "name of 121 characters",
            with("name", json!("n".repeat(121))),
            422,
            "validation_failed",
            "name",
        ),
        (
            "missing from_number",
            without("from_number"),
            422,
            "validation_failed",
            "from_number",
        ),
        (
            "bad from_number",
            with("from_number", json!("4155550100")),
            422,
            "invalid_phone_number",
            "from_number",
        ),
        (
            "missing body",
            without("body"),
            422,
            "validation_failed",
            "body",
        ),
        (
            "empty body",
            with("body", json!("")),
            422,
            "validation_failed",
            "body",
        ),
        (
            "body of 4,097 characters",
            with("body", json!(format!("{}xx", "{{a}}".repeat(819)))),
            422,
            "validation_failed",
            "body",
        ),
        (
            "body whose own text is over 10 segments",
            with("body", json!(format!("{{{{name}}}}{}", "a".repeat(1531)))),
            422,
            "content_too_long",
            "body",
        ),
        (
            "var value of 1,531 characters",
            with(
                "recipients",
                json!([{ "to": to[0] }, { "to": to[1], "vars": { "name": "a".repeat(1531) } }]),
            ),
            422,
            "validation_failed",
            "recipients[1].vars.name",
        ),
        (
            "51 vars",
            with(
                "recipients",
                json!([{ "to": to[0], "vars": (0..51)
                    .map(|i| (format!("v{i}"), json!("x")))
                    .collect::<serde_json::Map<_, _>>() }]),
            ),
            422,
            "validation_failed",
            "recipients[0].vars",
        ),
        (
            "var name of 65 characters",
            with(
                "recipients",
                json!([{ "to": to[0], "vars": { "n".repeat(65): "x" } }]),
            ),
            422,
            "validation_failed",
            "recipients[0].vars",
        ),
        (
            "empty var name",
            with("recipients", json!([{ "to": to[0], "vars": { "": "x" } }])),
            422,
            "validation_failed",
            "recipients[0].vars",
        ),
        (
            "no recipients and no tags",
            without("recipients"),
            422,
            "validation_failed",
            "recipients",
        ),
        (
            "empty recipients",
            with("recipients", json!([])),
            422,
            "validation_failed",
            "recipients",
        ),
        (
            "10,001 recipients",
            with("recipients", Value::Array(too_many)),
            422,
            "validation_failed",
            "recipients",
        ),
        (
            "invalid number",
            with(
                "recipients",
                json!([{ "to": to[0] }, { "to": "+1555" }, { "to": "nope" }]),
            ),
            422,
            "invalid_phone_number",
            "recipients[1].to",
        ),
        (
            "recipient without to",
            with("recipients", json!([{ "vars": { "name": "Ann" } }])),
            422,
            "validation_failed",
            "recipients[0].to",
        ),
        (
            "bad scheduled_for",
            with("scheduled_for", json!("tomorrow")),
            422,
            "validation_failed",
            "scheduled_for",
        ),
    ];
    let mut no_tags = with("recipients", json!([]));
    no_tags["contact_tags"] = json!([]);
    cases.push((
        "empty recipients and empty contact_tags",
        no_tags,
        422,
        "validation_failed",
        "recipients",
    ));
    for (case, body, status, code, field) in cases {
        for launch_now in [false, true] {
            let mut body = body.clone();
            body["launch_now"] = json!(launch_now);
            let reply = app
                .post("/v1/campaigns", &app.test_key, body)
                .await
                .expect_error(status, code);
            assert_eq!(
                reply.data()["field"],
                field,
                "{case} (launch_now {launch_now}): {}",
                reply.body
            );
            assert!(
                campaigns(&app, &app.test_key).await.is_empty(),
                "{case}: nothing written"
            );
        }
    }
    // vars must be an object of strings: a wrong type is a JSON error.
    for vars in [json!({ "name": 5 }), json!(["Ann"]), json!("Ann")] {
        app.post(
            "/v1/campaigns",
            &app.test_key,
            with("recipients", json!([{ "to": to[0], "vars": vars }])),
        )
        .await
        .expect_error(400, "invalid_json");
    }
    assert!(campaigns(&app, &app.test_key).await.is_empty());

    // A live key needs a phone paired with from_number (online or not).
    let reply = app
        .post("/v1/campaigns", &app.live_key, launched(valid.clone()))
        .await
        .expect_error(422, "validation_failed");
    assert_field(&reply, "from_number");
    app.pair_phone("+14155550199").await;
    let reply = app
        .post("/v1/campaigns", &app.live_key, valid.clone())
        .await
        .expect_error(422, "validation_failed");
    assert_field(&reply, "from_number");
    assert!(campaigns(&app, &app.live_key).await.is_empty());
    assert!(campaigns(&app, &app.test_key).await.is_empty());
    assert!(outbound_messages(&app, &app.live_key).await.is_empty());
    assert!(outbound_messages(&app, &app.test_key).await.is_empty());

    // The boundaries themselves are accepted.
    app.pair_phone(SENDER).await;
    let live = create(&app, &app.live_key, with("name", json!("n".repeat(120)))).await;
    assert_eq!(live["status"], "draft");
    assert_eq!(live["name"].as_str().unwrap().chars().count(), 120);
    assert_eq!(campaigns(&app, &app.live_key).await.len(), 1);
    let mut widest = with("body", json!(format!("{}x", "{{a}}".repeat(819))));
    let fifty: serde_json::Map<String, Value> = (0..49)
        .map(|i| (format!("v{i}"), json!("x")))
        .chain([("n".repeat(64), json!("a".repeat(1530)))])
        .collect();
    widest["recipients"] = json!([{ "to": to[0], "vars": fifty }]);
    let widest = create(&app, &app.live_key, widest).await;
    assert_eq!(widest["body"].as_str().unwrap().chars().count(), 4096);
    let literal_of_ten_segments = with("body", json!(format!("{{{{a}}}}{}", "a".repeat(1530))));
    create(&app, &app.live_key, literal_of_ten_segments).await;
    assert_eq!(campaigns(&app, &app.live_key).await.len(), 3);
    assert!(
        campaigns(&app, &app.test_key).await.is_empty(),
        "the mode scopes the list"
    );
}

/// 10,000 recipients is the most a campaign takes, explicit or after the tags are expanded
/// (deduplicated first).
async fn ten_thousand_recipients_at_most(backend: Backend) {
    let app = spawn_app(backend).await;
    let many = numbers(10_000);
    let explicit = create(&app, &app.test_key, campaign("Big", plain(&many))).await;
    assert_eq!(explicit["status"], "draft");
    assert_eq!(
        explicit["counts"],
        counts(&[("total", 10_000), ("pending", 10_000)])
    );

    let contacts: Vec<Value> = many
        .iter()
        .map(|n| json!({ "phone_number": n, "tags": ["everyone"] }))
        .collect();
    app.post(
        "/v1/contacts/import",
        &app.test_key,
        json!({ "contacts": contacts }),
    )
    .await
    .expect(200);
    let mut over = campaign("Tags over", json!([{ "to": "+447911123456" }]));
    over["contact_tags"] = json!(["everyone"]);
    let reply = app
        .post("/v1/campaigns", &app.test_key, over)
        .await
        .expect_error(422, "validation_failed");
    assert_field(&reply, "contact_tags");
    assert_eq!(campaigns(&app, &app.test_key).await.len(), 1);

    // The explicit number is also a tagged contact: it counts once.
    let mut exact = campaign("Tags exact", json!([{ "to": many[17] }]));
    exact["contact_tags"] = json!(["everyone"]);
    let tagged = create(&app, &app.test_key, exact).await;
    assert_eq!(tagged["counts"]["total"], 10_000);
    assert_eq!(campaigns(&app, &app.test_key).await.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Skips, re-checked opt-outs, content too long.
// ---------------------------------------------------------------------------------------------

/// Premium-rate numbers and opted-out contacts (by hand or by STOP) are skipped and reported,
/// outside `counts.total`; the others are sent.
async fn premium_rate_and_opted_out_recipients_are_skipped(backend: Backend) {
    let app = spawn_app(backend).await;
    let to = numbers(4);
    // to[1] opted out by hand, to[3] by texting STOP; to[2] is a contact who did not opt out.
    let contact = app
        .post(
            "/v1/contacts",
            &app.test_key,
            json!({ "phone_number": to[1] }),
        )
        .await
        .expect(201);
    app.patch(
        &format!("/v1/contacts/{}", id_of(contact.data())),
        &app.test_key,
        json!({ "opted_out": true }),
    )
    .await
    .expect(200);
    app.post(
        "/v1/contacts",
        &app.test_key,
        json!({ "phone_number": to[2] }),
    )
    .await
    .expect(201);
    app.test_inbound(&to[3], "STOP").await;

    let order = [
        to[0].as_str(),
        PREMIUM,
        to[1].as_str(),
        to[2].as_str(),
        to[3].as_str(),
    ];
    let created = create(
        &app,
        &app.test_key,
        launched(campaign("Skips", json!(order.map(|n| json!({ "to": n }))))),
    )
    .await;
    let id = id_of(&created);
    assert_eq!(
        created["skipped"],
        json!({ "opted_out": 2, "premium_rate": 1 })
    );
    assert_eq!(created["counts"]["total"], 2, "skips are not in total");

    let done = wait_for_campaign_status(&app, &app.test_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 2), ("delivered", 2)]));
    assert_eq!(
        done["skipped"],
        json!({ "opted_out": 2, "premium_rate": 1 })
    );

    let list = recipients(&app, &app.test_key, &id).await;
    assert_eq!(tos(&list), order, "skipped recipients are listed in order");
    assert_eq!(
        statuses(&list),
        ["delivered", "skipped", "skipped", "delivered", "skipped"]
    );
    let reasons: Vec<&Value> = list.iter().map(|r| &r["skip_reason"]).collect();
    assert_eq!(
        reasons,
        [
            &Value::Null,
            &json!("premium_rate"),
            &json!("opted_out"),
            &Value::Null,
            &json!("opted_out"),
        ]
    );
    for skipped in list.iter().filter(|r| r["status"] == "skipped") {
        assert_eq!(skipped["message_id"], Value::Null, "{skipped}");
    }
    let sent_to: HashSet<String> = outbound_messages(&app, &app.test_key)
        .await
        .iter()
        .map(|m| m["to_number"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent_to, HashSet::from([to[0].clone(), to[2].clone()]));
}

/// A contact who opts out after the campaign was created is not sent when its turn comes: it is
/// canceled with skip_reason opted_out, counted both in `skipped.opted_out` and, having been in
/// `total`, in `counts.canceled`.
async fn opt_out_after_creation_is_honoured_when_queued(backend: Backend) {
    let app = spawn_app(backend).await;
    let to = numbers(2);
    app.post(
        "/v1/contacts",
        &app.test_key,
        json!({ "phone_number": to[0] }),
    )
    .await
    .expect(201);
    let draft = create(&app, &app.test_key, campaign("Late STOP", plain(&to))).await;
    let id = id_of(&draft);
    assert_eq!(
        draft["skipped"],
        json!({ "opted_out": 0, "premium_rate": 0 })
    );
    app.test_inbound(&to[0], "STOP").await;
    control(&app, &app.test_key, &id, "launch")
        .await
        .expect(200);

    let done = wait_for_campaign_status(&app, &app.test_key, &id, "completed").await;
    assert_eq!(
        done["counts"],
        counts(&[("total", 2), ("delivered", 1), ("canceled", 1)])
    );
    assert_eq!(
        done["skipped"],
        json!({ "opted_out": 1, "premium_rate": 0 })
    );
    let list = recipients(&app, &app.test_key, &id).await;
    assert_eq!(statuses(&list), ["canceled", "delivered"]);
    assert_eq!(list[0]["skip_reason"], "opted_out");
    assert_eq!(list[0]["message_id"], Value::Null);
    let sent = outbound_messages(&app, &app.test_key).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["to_number"], to[1].as_str());
}

/// A recipient whose rendered text is over 10 segments fails alone; the others are sent.
async fn rendered_text_too_long_fails_that_recipient(backend: Backend) {
    let app = spawn_app(backend).await;
    let to = numbers(2);
    let created = create(
        &app,
        &app.test_key,
        json!({
            "name": "Long",
            "from_number": SENDER,
            "body": "a{{text}}",
            "recipients": [
                { "to": to[0], "vars": { "text": "a".repeat(1530) } },
                { "to": to[1], "vars": { "text": "a".repeat(1529) } },
            ],
            "launch_now": true,
        }),
    )
    .await;
    let id = id_of(&created);
    assert_eq!(created["counts"]["total"], 2);
    let done = wait_for_campaign_status(&app, &app.test_key, &id, "completed").await;
    assert_eq!(
        done["counts"],
        counts(&[("total", 2), ("delivered", 1), ("failed", 1)])
    );
    let list = recipients(&app, &app.test_key, &id).await;
    assert_eq!(statuses(&list), ["failed", "delivered"]);
    assert_eq!(list[0]["failure_reason"], "content_too_long");
    assert_eq!(list[0]["skip_reason"], Value::Null);
    assert_eq!(list[1]["failure_reason"], Value::Null);
    let message_id = list[1]["message_id"].as_str().unwrap();
    let message = app.message(&app.test_key, message_id).await;
    assert_eq!(message["segments"], 10);
}

/// What a request stored, read from the database itself: recipient rows, characters of
/// recipient texts and of campaign bodies, and the database's size in bytes.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Stored {
    recipients: i64,
    recipient_chars: i64,
    body_chars: i64,
    bytes: i64,
}

async fn stored(db: &sea_orm::DatabaseConnection) -> Stored {
    use sea_orm::ConnectionTrait;
    let backend = db.get_database_backend();
    let number = |sql: &str| {
        let statement = sea_orm::Statement::from_string(backend, sql.to_string());
        async move {
            let row = db.query_one_raw(statement).await.unwrap().unwrap();
            row.try_get::<i64>("", "n").unwrap()
        }
    };
    let bytes =
        match backend {
            sea_orm::DbBackend::Postgres => {
                number("SELECT pg_database_size(current_database()) AS n").await
            }
            _ => number(
                "SELECT page_count * page_size AS n FROM pragma_page_count(), pragma_page_size()",
            )
            .await,
        };
    Stored {
        recipients: number("SELECT count(*) AS n FROM campaign_recipients").await,
        recipient_chars: number(
            "SELECT COALESCE(SUM(LENGTH(content)), 0) AS n FROM campaign_recipients",
        )
        .await,
        body_chars: number("SELECT COALESCE(SUM(LENGTH(body)), 0) AS n FROM campaigns").await,
        bytes,
    }
}

/// The hardening issue's hostile campaigns (docs/api.md "Campaigns", limits): a body of a
/// thousand `{{a}}` with a 100,000-character var used to render 100 MB per recipient and store
/// it. Now such a request is refused and writes nothing, and the widest request allowed (a
/// 4,096-character body of 819 tokens, 1,530-character vars, contacts with 500-character custom
/// fields) stores one body and, per recipient, at most the 10 segments it can send: nothing for
/// a recipient refused as too long.
async fn hostile_templates_store_bounded_text(backend: Backend) {
    let app = spawn_app(backend).await;
    let db = sea_orm::Database::connect(&app.database_url).await.unwrap();
    let to = numbers(80);
    let contacts: Vec<Value> = to[20..]
        .iter()
        .map(|n| json!({ "phone_number": n, "tags": ["all"], "custom_fields": { "a": "a".repeat(500) } }))
        .collect();
    app.post(
        "/v1/contacts/import",
        &app.test_key,
        json!({ "contacts": contacts }),
    )
    .await
    .expect(200);
    let empty = stored(&db).await;
    assert_eq!(
        (empty.recipients, empty.recipient_chars, empty.body_chars),
        (0, 0, 0)
    );

    let hostile = |body: String, vars: Value| {
        json!({
            "name": "Hostile",
            "from_number": SENDER,
            "body": body,
            "recipients": [{ "to": to[0], "vars": vars }],
            "contact_tags": ["all"],
            "launch_now": true,
        })
    };
    for (body, vars, field) in [
        ("{{a}}".repeat(1000), json!({ "a": "a" }), "body"),
        (
            "{{a}}".repeat(819),
            json!({ "a": "a".repeat(100_000) }),
            "recipients[0].vars.a",
        ),
    ] {
        let reply = app
            .post("/v1/campaigns", &app.test_key, hostile(body, vars))
            .await
            .expect_error(422, "validation_failed");
        assert_field(&reply, field);
        assert_eq!(stored(&db).await, empty, "a refused request writes nothing");
    }
    assert!(campaigns(&app, &app.test_key).await.is_empty());

    // The widest request allowed: every var and custom field makes the text far too long,
    // except the first recipient's (820 characters).
    let explicit: Vec<Value> = to[..20]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let value = if i == 0 {
                "a".to_string()
            } else {
                "a".repeat(1530)
            };
            json!({ "to": n, "vars": { "a": value } })
        })
        .collect();
    let mut widest = hostile(format!("{}x", "{{a}}".repeat(819)), json!({}));
    widest["recipients"] = Value::Array(explicit);
    widest["launch_now"] = json!(false);
    let created = create(&app, &app.test_key, widest).await;
    assert_eq!(created["counts"]["total"], 80);
    assert_eq!(created["counts"]["pending"], 1);
    assert_eq!(created["counts"]["failed"], 79);
    let after = stored(&db).await;
    assert_eq!(after.recipients, 80);
    assert_eq!(
        after.recipient_chars, 820,
        "no text is stored for a refused recipient"
    );
    assert_eq!(after.body_chars, 4096);
    let growth = after.bytes - empty.bytes;
    assert!(growth <= 1 << 20, "the database grew by {growth} bytes");
    let list = recipients(&app, &app.test_key, &id_of(&created)).await;
    assert!(
        list[1..]
            .iter()
            .all(|r| r["status"] == "failed" && r["failure_reason"] == "content_too_long")
    );

    // A list row carries the (bounded) body once, nothing per recipient.
    let page = app
        .get("/v1/campaigns?limit=100", &app.test_key)
        .await
        .expect(200);
    let row_bytes = page.body.to_string().len();
    assert!(
        row_bytes < 8 * 1024,
        "a list of one campaign is {row_bytes} bytes"
    );
}

// ---------------------------------------------------------------------------------------------
// Contact tags.
// ---------------------------------------------------------------------------------------------

/// Tagged contacts (any of the tags, this mode only) follow the explicit list; a number is sent
/// once, and its explicit entry (the first one within the list) wins; contact fields fill the
/// tokens vars leave open.
async fn contact_tags_expand_to_tagged_contacts(backend: Backend) {
    let app = spawn_app(backend).await;
    let to = numbers(7);
    let (ann, ben, cid, dee, stranger, twice) = (&to[0], &to[1], &to[2], &to[3], &to[4], &to[5]);
    for (key, number, first_name, tags, plan) in [
        (&app.test_key, ann, "Ann", json!(["vip"]), "silver"),
        (&app.test_key, ben, "Ben", json!(["vip", "beta"]), "gold"),
        (&app.test_key, cid, "Cid", json!(["other"]), "none"),
        (&app.test_key, dee, "Dee", json!(["beta"]), "gold"),
        // A live contact with the tag belongs to the other mode.
        (&app.live_key, &to[6], "Liv", json!(["vip"]), "live"),
    ] {
        app.post(
            "/v1/contacts",
            key,
            json!({ "phone_number": number, "first_name": first_name, "tags": tags,
                    "custom_fields": { "plan": plan } }),
        )
        .await
        .expect(201);
    }
    let created = create(
        &app,
        &app.test_key,
        json!({
            "name": "Tags",
            "from_number": SENDER,
            "body": "Hello {{first_name}}, plan {{plan}}",
            "recipients": [
                { "to": ben, "vars": { "first_name": "Benjamin" } },
                { "to": ann },
                { "to": stranger },
                { "to": twice, "vars": { "first_name": "First" } },
                { "to": twice, "vars": { "first_name": "Second" } },
            ],
            "contact_tags": ["vip", "beta"],
            "launch_now": true,
        }),
    )
    .await;
    let id = id_of(&created);
    assert_eq!(created["counts"]["total"], 5);
    let done = wait_for_campaign_status(&app, &app.test_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 5), ("delivered", 5)]));

    let list = recipients(&app, &app.test_key, &id).await;
    assert_eq!(
        tos(&list),
        [ben, ann, stranger, twice, dee],
        "the explicit list first, then the tagged contacts not already in it"
    );
    let mut texts = Vec::new();
    for recipient in &list {
        let message_id = recipient["message_id"].as_str().unwrap();
        let message = app.message(&app.test_key, message_id).await;
        texts.push(message["content"].as_str().unwrap().to_string());
    }
    assert_eq!(
        texts,
        [
            "Hello Benjamin, plan gold",
            "Hello Ann, plan silver",
            "Hello , plan ",
            "Hello First, plan ",
            "Hello Dee, plan gold",
        ]
    );
    let sent = outbound_messages(&app, &app.test_key).await;
    assert_eq!(sent.len(), 5, "each number is sent once");
    assert!(sent.iter().all(|m| m["to_number"] != cid.as_str()));
}

// ---------------------------------------------------------------------------------------------
// State machine.
// ---------------------------------------------------------------------------------------------

/// The moves of docs/api.md, Campaigns, on a campaign scheduled an hour ahead (so nothing sends),
/// and the 409 `invalid_state` of every other move.
async fn scheduled_pause_resume_cancel(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = &app.test_key;
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let mut body = launched(campaign("Later", plain(&numbers(3))));
    body["scheduled_for"] = json!(later.to_rfc3339());
    let created = create(&app, key, body).await;
    let id = id_of(&created);
    assert_eq!(created["status"], "scheduled");
    let echoed = parse_time(&created["scheduled_for"]);
    assert!(
        (echoed.timestamp_millis() - later.timestamp_millis()).abs() <= 1,
        "scheduled_for kept: {echoed} vs {later}"
    );
    assert_eq!(created["counts"], counts(&[("total", 3), ("pending", 3)]));

    assert_invalid_state(control(&app, key, &id, "launch").await, "scheduled");
    assert_invalid_state(control(&app, key, &id, "resume").await, "scheduled");
    let paused = control(&app, key, &id, "pause").await.expect(200);
    assert_eq!(paused.data()["status"], "paused");
    assert_eq!(read(&app, key, &id).await["status"], "paused");
    assert_invalid_state(control(&app, key, &id, "pause").await, "paused");
    assert_invalid_state(control(&app, key, &id, "launch").await, "paused");
    let resumed = control(&app, key, &id, "resume").await.expect(200);
    assert_eq!(
        resumed.data()["status"],
        "scheduled",
        "scheduled_for is still ahead"
    );
    let canceled = control(&app, key, &id, "cancel").await.expect(200);
    assert_eq!(canceled.data()["status"], "canceled");
    assert_eq!(
        canceled.data()["counts"],
        counts(&[("total", 3), ("canceled", 3)])
    );
    for operation in ["resume", "pause", "launch", "cancel"] {
        assert_invalid_state(control(&app, key, &id, operation).await, "canceled");
    }
    let list = recipients(&app, key, &id).await;
    assert_eq!(statuses(&list), ["canceled"; 3]);
    assert!(list.iter().all(|r| r["message_id"].is_null()));
    assert_eq!(read(&app, key, &id).await["status"], "canceled");

    // A draft can be neither paused nor resumed, but it can be canceled.
    let draft = id_of(&create(&app, key, campaign("Draft", plain(&numbers(1)))).await);
    assert_invalid_state(control(&app, key, &draft, "pause").await, "draft");
    assert_invalid_state(control(&app, key, &draft, "resume").await, "draft");
    let canceled = control(&app, key, &draft, "cancel").await.expect(200);
    assert_eq!(canceled.data()["status"], "canceled");
    assert_eq!(
        canceled.data()["counts"],
        counts(&[("total", 1), ("canceled", 1)])
    );

    // Launching a draft whose scheduled_for is ahead schedules it.
    let mut body = campaign("Draft for later", plain(&numbers(1)));
    body["scheduled_for"] = json!(later.to_rfc3339());
    let draft = id_of(&create(&app, key, body).await);
    let launched = control(&app, key, &draft, "launch").await.expect(200);
    assert_eq!(launched.data()["status"], "scheduled");

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        outbound_messages(&app, key).await.is_empty(),
        "nothing scheduled, paused or canceled was sent"
    );
}

/// A campaign scheduled shortly ahead starts by itself at that time and completes.
async fn scheduled_campaign_starts_on_time(backend: Backend) {
    let app = spawn_app(backend).await;
    let at = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let mut body = launched(campaign("Soon", plain(&numbers(2))));
    body["scheduled_for"] = json!(at.to_rfc3339());
    let created = create(&app, &app.test_key, body).await;
    let id = id_of(&created);
    assert_eq!(created["status"], "scheduled");
    assert_eq!(created["started_at"], Value::Null);
    let done = wait_for_campaign_status(&app, &app.test_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 2), ("delivered", 2)]));
    let earliest = at - chrono::Duration::milliseconds(1);
    assert!(
        parse_time(&done["started_at"]) >= earliest,
        "started at scheduled_for: {done}"
    );
    for message in outbound_messages(&app, &app.test_key).await {
        assert!(parse_time(&message["sent_at"]) >= earliest, "{message}");
    }
}

// ---------------------------------------------------------------------------------------------
// Live mode with a phone.
// ---------------------------------------------------------------------------------------------

/// A live campaign waits for its phone (nothing fails meanwhile), then feeds it every recipient
/// in order as campaign messages, and completes once every message is delivered.
async fn live_campaign_feeds_the_phone_in_order(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let to = numbers(5);
    let recipients_in: Vec<Value> = to
        .iter()
        .enumerate()
        .map(|(i, n)| json!({ "to": n, "vars": { "n": i.to_string() } }))
        .collect();
    let mut body = launched(campaign("Live", json!(recipients_in)));
    body["body"] = json!("Number {{n}}");
    let created = create(&app, &app.live_key, body).await;
    let id = id_of(&created);
    assert_eq!(created["status"], "running");

    // No phone online: the campaign waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = read(&app, &app.live_key, &id).await;
    assert_eq!(waiting["status"], "running");
    assert_eq!(waiting["counts"], counts(&[("total", 5), ("pending", 5)]));

    let mut phone = app.connect_phone(&token).await;
    let sends = expect_sends(&mut phone, 5).await;
    let sent_to: Vec<&str> = sends.iter().map(|(_, to, _)| to.as_str()).collect();
    assert_eq!(sent_to, to, "recipient order");
    let contents: Vec<&str> = sends.iter().map(|(_, _, c)| c.as_str()).collect();
    assert_eq!(
        contents,
        ["Number 0", "Number 1", "Number 2", "Number 3", "Number 4"]
    );
    let ids: Vec<Uuid> = sends.iter().map(|(id, ..)| *id).collect();
    let list = wait_for_recipients(&app, &app.live_key, &id, |list| {
        list.iter().all(|r| r["message_id"].is_string())
    })
    .await;
    assert_eq!(statuses(&list), ["queued"; 5], "with the phone: queued");
    let listed: Vec<String> = list
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();
    let framed: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    assert_eq!(listed, framed);

    report_delivered(&mut phone, &ids).await;
    let done = wait_for_campaign_status(&app, &app.live_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 5), ("delivered", 5)]));
    assert!(done["finished_at"].is_string());
    let list = recipients(&app, &app.live_key, &id).await;
    assert_eq!(statuses(&list), ["delivered"; 5]);
    let message = app
        .get(&format!("/v1/messages/{}", ids[0]), &app.live_key)
        .await
        .expect(200);
    assert_eq!(message.data()["campaign_id"], id.as_str());
    assert_eq!(message.data()["device_id"], phone_id.as_str());
    assert_eq!(message.data()["test_mode"], false);
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "nothing sent twice"
    );
}

/// Pause withdraws the messages not yet with the phone (their records go, the recipients are
/// pending again) and stops the feeding even when the pace would allow more; the messages with
/// the phone finish; resume queues the rest anew.
async fn pause_withdraws_queued_messages_and_resume_sends_the_rest(backend: Backend) {
    let PacedCampaign {
        app,
        phone_id,
        mut phone,
        to,
        id,
        first,
        ..
    } = paced_campaign(backend, "Paused").await;
    assert_eq!([&first[0].1, &first[1].1], [&to[0], &to[1]]);
    // The pace holds the other three in the queue.
    let list = wait_for_recipients(&app, &app.live_key, &id, |list| {
        list.iter().all(|r| r["message_id"].is_string())
    })
    .await;
    let withdrawn: Vec<String> = list[2..]
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();

    let paused = control(&app, &app.live_key, &id, "pause").await.expect(200);
    assert_eq!(paused.data()["status"], "paused");
    let list = recipients(&app, &app.live_key, &id).await;
    assert_eq!(
        statuses(&list),
        ["queued", "queued", "pending", "pending", "pending"]
    );
    for message_id in &withdrawn {
        app.get(&format!("/v1/messages/{message_id}"), &app.live_key)
            .await
            .expect_error(404, "not_found");
    }
    let campaign = read(&app, &app.live_key, &id).await;
    assert_eq!(
        campaign["counts"],
        counts(&[("total", 5), ("queued", 2), ("pending", 3)])
    );
    app.set_pace(&phone_id, 100, 100).await;
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "a paused campaign feeds nothing"
    );

    // The two with the phone finish; the campaign stays paused.
    finish_while_paused(&app, &id, &mut phone, &first).await;

    let resumed = control(&app, &app.live_key, &id, "resume")
        .await
        .expect(200);
    assert_eq!(resumed.data()["status"], "running");
    let rest = expect_sends(&mut phone, 3).await;
    let rest_to: Vec<&str> = rest.iter().map(|(_, to, _)| to.as_str()).collect();
    assert_eq!(rest_to, &to[2..]);
    for (message_id, ..) in &rest {
        assert!(
            !withdrawn.contains(&message_id.to_string()),
            "queued anew with new ids"
        );
    }
    let ids: Vec<Uuid> = rest.iter().map(|(id, ..)| *id).collect();
    report_delivered(&mut phone, &ids).await;
    let done = wait_for_campaign_status(&app, &app.live_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 5), ("delivered", 5)]));
    assert_eq!(outbound_messages(&app, &app.live_key).await.len(), 5);
}

/// A message handed to a phone that went away before reporting is `queued` again, but it may
/// have been sent: pause leaves it (it goes out again, with its id, for the phone to dedupe)
/// and withdraws only the messages no phone ever had.
async fn pause_keeps_messages_a_phone_already_had(backend: Backend) {
    let PacedCampaign {
        app,
        phone_id,
        token,
        phone,
        id,
        first: handed,
        ..
    } = paced_campaign(backend, "Gone").await;
    wait_for_recipients(&app, &app.live_key, &id, |list| {
        list.iter().all(|r| r["message_id"].is_string())
    })
    .await;
    phone.close().await;
    app.wait_online(&phone_id, false).await;
    for (message_id, ..) in &handed {
        app.wait_for_status(&app.live_key, &message_id.to_string(), "queued")
            .await;
    }

    control(&app, &app.live_key, &id, "pause").await.expect(200);
    let list = recipients(&app, &app.live_key, &id).await;
    assert_eq!(
        statuses(&list),
        ["queued", "queued", "pending", "pending", "pending"]
    );
    for (message_id, ..) in &handed {
        let message = app.message(&app.live_key, &message_id.to_string()).await;
        assert_eq!(message["status"], "queued");
        assert_eq!(message["send_attempts"], 1);
    }

    app.set_pace(&phone_id, 100, 100).await;
    let mut phone = app.connect_phone(&token).await;
    let again = expect_sends(&mut phone, 2).await;
    let again_ids: HashSet<Uuid> = again.iter().map(|(id, ..)| *id).collect();
    let handed_ids: HashSet<Uuid> = handed.iter().map(|(id, ..)| *id).collect();
    assert_eq!(
        again_ids, handed_ids,
        "the same messages, for the phone to dedupe"
    );
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "a paused campaign feeds nothing more"
    );
    finish_while_paused(&app, &id, &mut phone, &again).await;
}

/// Cancel marks the pending recipients and the queued messages `canceled`; the messages
/// already with the phone finish; nothing more is fed.
async fn cancel_stops_a_running_live_campaign(backend: Backend) {
    let PacedCampaign {
        app,
        phone_id,
        mut phone,
        id,
        first,
        ..
    } = paced_campaign(backend, "Stop").await;
    let list = wait_for_recipients(&app, &app.live_key, &id, |list| {
        list.iter().all(|r| r["message_id"].is_string())
    })
    .await;
    let queued: Vec<String> = list[2..]
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();

    let canceled = control(&app, &app.live_key, &id, "cancel")
        .await
        .expect(200);
    assert_eq!(canceled.data()["status"], "canceled");
    for message_id in &queued {
        let message = app
            .wait_for_status(&app.live_key, message_id, "canceled")
            .await;
        assert!(
            message["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["type"] == "canceled"),
            "{message}"
        );
    }
    app.set_pace(&phone_id, 100, 100).await;
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "a canceled campaign feeds nothing"
    );
    let ids: Vec<Uuid> = first.iter().map(|(id, ..)| *id).collect();
    report_delivered(&mut phone, &ids).await;
    let list = wait_for_recipients(&app, &app.live_key, &id, |list| {
        statuses(list)[..2] == ["delivered", "delivered"]
    })
    .await;
    assert_eq!(statuses(&list)[2..], ["canceled"; 3]);
    let campaign = read(&app, &app.live_key, &id).await;
    assert_eq!(campaign["status"], "canceled", "not completed");
    assert_eq!(
        campaign["counts"],
        counts(&[("total", 5), ("delivered", 2), ("canceled", 3)])
    );
}

/// A restart mid-campaign loses nothing and repeats nothing: every recipient is sent exactly
/// once across both server lives, and the campaign completes.
async fn restart_carries_on_without_sending_twice(backend: Backend) {
    let app = spawn_paced(backend, 2, 2).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let mut phone = app.connect_phone(&token).await;
    let to = numbers(5);
    let id = id_of(
        &create(
            &app,
            &app.live_key,
            launched(campaign("Restart", plain(&to))),
        )
        .await,
    );
    let before = expect_sends(&mut phone, 2).await;
    let ids: Vec<Uuid> = before.iter().map(|(id, ..)| *id).collect();
    report_delivered(&mut phone, &ids).await;
    wait_for_campaign(&app, &app.live_key, &id, |c| c["counts"]["delivered"] == 2).await;

    drop(phone);
    let app = app.restart().await;
    let mut phone = app.connect_phone(&token).await;
    assert_eq!(read(&app, &app.live_key, &id).await["status"], "running");
    app.set_pace(&phone_id, 100, 100).await;
    let after = expect_sends(&mut phone, 3).await;
    let ids: Vec<Uuid> = after.iter().map(|(id, ..)| *id).collect();
    report_delivered(&mut phone, &ids).await;
    assert!(
        phone.next_frame_within(QUIET).await.is_none(),
        "no recipient is sent twice"
    );

    let all: Vec<&(Uuid, String, String)> = before.iter().chain(after.iter()).collect();
    let message_ids: HashSet<Uuid> = all.iter().map(|(id, ..)| *id).collect();
    let mut sent_to: Vec<&str> = all.iter().map(|(_, to, _)| to.as_str()).collect();
    sent_to.sort();
    assert_eq!(message_ids.len(), 5, "five distinct messages");
    assert_eq!(sent_to, to, "each recipient exactly once");

    let done = wait_for_campaign_status(&app, &app.live_key, &id, "completed").await;
    assert_eq!(done["counts"], counts(&[("total", 5), ("delivered", 5)]));
    let listed: HashSet<Uuid> = recipients(&app, &app.live_key, &id)
        .await
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(listed, message_ids);
    assert_eq!(outbound_messages(&app, &app.live_key).await.len(), 5);
}

// ---------------------------------------------------------------------------------------------
// Limits, scoping, paging.
// ---------------------------------------------------------------------------------------------

/// Launching counts every non-skipped recipient against the new-workspace limit at once; over
/// it, nothing changes. Queued campaign messages are not counted again. Test mode has no limit.
async fn new_workspace_limit_counts_the_whole_launch(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.limits.new_workspace_messages = 3).await;
    let (_, token) = app.pair_phone(SENDER).await;
    let to = numbers(4);

    let reply = app
        .post(
            "/v1/campaigns",
            &app.live_key,
            launched(campaign("Too big", plain(&to))),
        )
        .await
        .expect_error(429, "new_account_limit");
    assert_eq!(reply.data()["limit"], 3);
    assert!(reply.data()["window_ends_at"].is_string());
    assert!(
        campaigns(&app, &app.live_key).await.is_empty(),
        "nothing created"
    );

    let draft = id_of(&create(&app, &app.live_key, campaign("Draft", plain(&to))).await);
    control(&app, &app.live_key, &draft, "launch")
        .await
        .expect_error(429, "new_account_limit");
    let unchanged = read(&app, &app.live_key, &draft).await;
    assert_eq!(unchanged["status"], "draft");
    assert_eq!(unchanged["counts"], counts(&[("total", 4), ("pending", 4)]));

    // Three sendable recipients plus a skipped one fit exactly.
    let mut phone = app.connect_phone(&token).await;
    let fits = [to[0].as_str(), to[1].as_str(), PREMIUM, to[2].as_str()];
    let fits = create(
        &app,
        &app.live_key,
        launched(campaign("Fits", json!(fits.map(|n| json!({ "to": n }))))),
    )
    .await;
    assert_eq!(fits["status"], "running");
    assert_eq!(fits["counts"]["total"], 3);
    let sends = expect_sends(&mut phone, 3).await;
    assert_eq!(sends.len(), 3, "queued messages are not counted again");
    app.send(&app.live_key, send_body(SENDER, RECIPIENT, "one more"))
        .await
        .expect_error(429, "new_account_limit");
    control(&app, &app.live_key, &draft, "launch")
        .await
        .expect_error(429, "new_account_limit");

    let test = create(
        &app,
        &app.test_key,
        launched(campaign("Test mode", plain(&numbers(5)))),
    )
    .await;
    assert_ne!(test["status"], "draft", "test mode has no limit");
}

/// Unknown ids and the other mode's campaigns are 404 everywhere, and a refused operation
/// changes nothing.
async fn unknown_and_other_mode_campaigns_are_not_found(backend: Backend) {
    let app = spawn_app(backend).await;
    let id = id_of(&create(&app, &app.test_key, campaign("Mine", plain(&numbers(2)))).await);
    let unknown = Uuid::new_v4().to_string();
    for (key, target) in [
        (&app.test_key, unknown.as_str()),
        (&app.test_key, "not-a-uuid"),
        (&app.live_key, id.as_str()),
    ] {
        app.get(&format!("/v1/campaigns/{target}"), key)
            .await
            .expect_error(404, "not_found");
        app.get(&format!("/v1/campaigns/{target}/recipients"), key)
            .await
            .expect_error(404, "not_found");
        for operation in ["launch", "pause", "resume", "cancel"] {
            control(&app, key, target, operation)
                .await
                .expect_error(404, "not_found");
        }
    }
    assert!(campaigns(&app, &app.live_key).await.is_empty());
    let mine = read(&app, &app.test_key, &id).await;
    assert_eq!(mine["status"], "draft", "the live key changed nothing");
}

/// `GET /v1/campaigns` is paged newest first and filters by status; the recipients are paged in
/// recipient order.
async fn campaigns_and_recipients_are_paged(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = &app.test_key;
    let to = numbers(5);
    let mut created = Vec::new();
    for i in 0..3 {
        created.push(id_of(
            &create(&app, key, campaign(&format!("c{i}"), plain(&to))).await,
        ));
    }
    let running = create(
        &app,
        key,
        launched(campaign("c3", json!([{ "to": NEVER_DELIVERED }]))),
    )
    .await;
    created.push(id_of(&running));

    let mut seen = Vec::new();
    for page in app.pages(key, "/v1/campaigns?limit=1", "campaigns").await {
        assert_eq!(page.len(), 1, "{page:?}");
        seen.push(page[0]["name"].as_str().unwrap().to_string());
    }
    assert_eq!(seen, ["c3", "c2", "c1", "c0"], "newest first, each once");
    // A page carries each campaign's counts, the same as reading it alone (once the running
    // one is at rest: sent, never delivered).
    wait_for_campaign(&app, key, &created[3], |c| c["counts"]["sent"] == 1).await;
    let page = app.get("/v1/campaigns?limit=100", key).await.expect(200);
    let listed = page.data()["campaigns"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 4);
    for item in &listed {
        let alone = read(&app, key, item["id"].as_str().unwrap()).await;
        assert_eq!(item["counts"], alone["counts"], "{item}");
    }
    assert_eq!(listed[0]["counts"], counts(&[("total", 1), ("sent", 1)]));
    assert_eq!(listed[1]["counts"], counts(&[("total", 5), ("pending", 5)]));

    let drafts = app
        .all_pages(key, "/v1/campaigns?status=draft", "campaigns")
        .await;
    assert_eq!(drafts.len(), 3);
    assert!(drafts.iter().all(|c| c["status"] == "draft"));
    let running = app
        .all_pages(key, "/v1/campaigns?status=running", "campaigns")
        .await;
    assert_eq!(running.len(), 1);
    assert_eq!(running[0]["id"], created[3].as_str());
    let reply = app
        .get("/v1/campaigns?status=finished", key)
        .await
        .expect_error(422, "validation_failed");
    assert_field(&reply, "status");
    let reply = app
        .get("/v1/campaigns?cursor=garbage!", key)
        .await
        .expect_error(422, "validation_failed");
    assert_field(&reply, "cursor");
    for limit in ["0", "101"] {
        let reply = app
            .get(&format!("/v1/campaigns?limit={limit}"), key)
            .await
            .expect_error(422, "validation_failed");
        assert_field(&reply, "limit");
    }

    let id = &created[0];
    let pages: Vec<Vec<String>> = app
        .pages(
            key,
            &format!("/v1/campaigns/{id}/recipients?limit=2"),
            "recipients",
        )
        .await
        .iter()
        .map(|page| {
            page.iter()
                .map(|r| r["to"].as_str().unwrap().to_string())
                .collect()
        })
        .collect();
    assert_eq!(
        pages,
        [
            vec![to[0].clone(), to[1].clone()],
            vec![to[2].clone(), to[3].clone()],
            vec![to[4].clone()],
        ]
    );
    let reply = app
        .get(&format!("/v1/campaigns/{id}/recipients?limit=0"), key)
        .await
        .expect_error(422, "validation_failed");
    assert_field(&reply, "limit");
}

backend_tests!(
    test_mode_campaign_renders_sends_and_completes,
    draft_waits_for_launch,
    invalid_campaigns_are_refused_and_write_nothing,
    ten_thousand_recipients_at_most,
    premium_rate_and_opted_out_recipients_are_skipped,
    opt_out_after_creation_is_honoured_when_queued,
    rendered_text_too_long_fails_that_recipient,
    hostile_templates_store_bounded_text,
    contact_tags_expand_to_tagged_contacts,
    scheduled_pause_resume_cancel,
    scheduled_campaign_starts_on_time,
    live_campaign_feeds_the_phone_in_order,
    pause_withdraws_queued_messages_and_resume_sends_the_rest,
    pause_keeps_messages_a_phone_already_had,
    cancel_stops_a_running_live_campaign,
    restart_carries_on_without_sending_twice,
    new_workspace_limit_counts_the_whole_launch,
    unknown_and_other_mode_campaigns_are_not_found,
    campaigns_and_recipients_are_paged,
);
