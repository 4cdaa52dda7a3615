//! Creating and reading campaigns: what a request may hold and the limits on it, drafts
//! that wait for their launch, scoping by workspace and mode, paging.

use super::*;
use crate::helpers::typed;
use smsgw::api::campaigns::{CampaignOut, CampaignRecipientOut};

/// A draft queues nothing until launched; launching twice is refused with the current status.
/// A message sent but never delivered keeps the campaign `running` (docs/api.md, Campaigns).
async fn draft_waits_for_launch(backend: Backend) {
    let app = spawn_app(backend).await;
    let to = [RECIPIENT.to_string(), NEVER_DELIVERED.to_string()];
    let draft = create(&app, &app.test_key, campaign("Draft", plain(&to))).await;
    let id = id_of(&draft);
    assert_eq!(draft["status"], "draft", "launch_now defaults to false");
    assert_eq!(draft["counts"], counts(&[("total", 2), ("pending", 2)]));
    let draft_out: CampaignOut = typed(&draft);
    assert_eq!(draft_out.started_at, None);
    assert_eq!(draft_out.finished_at, None);
    let control_message = control_campaign_completes(&app).await;
    assert!(
        outbound_besides(&app, &app.test_key, &control_message)
            .await
            .is_empty(),
        "a draft queues nothing"
    );
    let list = recipients(&app, &app.test_key, &id).await;
    assert_eq!(statuses(&list), ["pending", "pending"]);
    for r in &list {
        assert_eq!(typed::<CampaignRecipientOut>(r).message_id, None, "{r}");
    }
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
    control_campaign_completes(&app).await;
    let campaign = read(&app, &app.test_key, &id).await;
    assert_eq!(
        campaign["status"], "running",
        "a sent message without a delivery report is not terminal"
    );
    assert_eq!(typed::<CampaignOut>(&campaign).finished_at, None);
}

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
    draft_waits_for_launch,
    invalid_campaigns_are_refused_and_write_nothing,
    ten_thousand_recipients_at_most,
    new_workspace_limit_counts_the_whole_launch,
    unknown_and_other_mode_campaigns_are_not_found,
    campaigns_and_recipients_are_paged,
);
