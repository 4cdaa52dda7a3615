//! The read-only views the portal shows: conversations, a campaign preview, contact search and
//! import previews, daily counts and the overview.

use super::*;
use crate::helpers::typed;
use smsgw::api::campaign_preview::CampaignPreviewOut;
use smsgw::api::conversations::{ConversationOut, ConversationPageOut};

async fn conversations_group_messages_by_the_other_side(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    let other = "+14155550124";
    app.request(
        "PUT",
        "/v1/ai/settings",
        Some(&key),
        Some(json!({ "enabled": true, "mode": "draft",
                     "rules": [{ "keywords": ["hours"], "reply": "Open 9 to 5" }] })),
    )
    .await
    .expect(200);
    app.post(
        "/v1/contacts",
        &key,
        json!({ "phone_number": RECIPIENT, "first_name": "Ann", "last_name": "Lee" }),
    )
    .await
    .expect(201);
    app.send_test(RECIPIENT, "Your appointment is at 3")
        .await
        .expect(202);
    app.send_test(other, "Hello").await.expect(202);
    for content in ["Thanks!", "What are your hours?"] {
        app.test_inbound(RECIPIENT, content).await;
    }
    // The draft is made off the request path: wait for it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let list = loop {
        let list = app.get("/v1/conversations", &key).await.expect(200);
        if list.data()["conversations"][0]["pending_drafts"] == 1 {
            break list;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no draft: {}",
            list.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let items = list.data()["conversations"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{}", list.body);
    let ann = &items[0];
    assert_eq!(ann["number"], RECIPIENT);
    assert_eq!(ann["contact"]["name"], "Ann Lee");
    assert_eq!(ann["inbound_count"], 2);
    assert_eq!(ann["last_message"]["direction"], "inbound");
    assert_eq!(ann["last_message"]["body"], "What are your hours?");
    assert_eq!(ann["last_activity_at"], ann["last_message"]["created_at"]);
    assert_eq!(items[1]["number"], other);
    assert!(typed::<ConversationOut>(&items[1]).contact.is_none());
    assert_eq!(items[1]["inbound_count"], 0);
    assert_eq!(items[1]["pending_drafts"], 0);
    assert_eq!(list.data()["has_more"], false);

    // Search by name or by number; pages by cursor.
    let numbers = |reply: &crate::helpers::Reply| -> Vec<String> {
        reply.data()["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["number"].as_str().unwrap().to_string())
            .collect()
    };
    for (q, expected) in [
        ("ann", vec![RECIPIENT]),
        ("LEE", vec![RECIPIENT]),
        ("0124", vec![other]),
        ("(415) 555-0124", vec![other]),
        ("nobody", vec![]),
    ] {
        let found = app
            .get(&format!("/v1/conversations?q={}", urlencode(q)), &key)
            .await
            .expect(200);
        assert_eq!(numbers(&found), expected, "q={q}");
    }
    let first = app.get("/v1/conversations?limit=1", &key).await.expect(200);
    assert_eq!(numbers(&first), vec![RECIPIENT]);
    assert_eq!(first.data()["has_more"], true);
    let cursor = first.data()["next_cursor"].as_str().unwrap();
    let second = app
        .get(&format!("/v1/conversations?limit=1&cursor={cursor}"), &key)
        .await
        .expect(200);
    assert_eq!(numbers(&second), vec![other]);
    assert_eq!(second.data()["has_more"], false);
    assert_eq!(second.read::<ConversationPageOut>().next_cursor, None);

    // One conversation, oldest first, drafts beside the message they answer.
    let path = format!("/v1/conversations/{}", urlencode(RECIPIENT));
    let detail = app.get(&path, &key).await.expect(200);
    assert_eq!(detail.data()["number"], RECIPIENT);
    assert_eq!(detail.data()["contact"]["name"], "Ann Lee");
    let messages = detail.data()["messages"].as_array().unwrap();
    let texts: Vec<&str> = messages
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "Your appointment is at 3",
            "Thanks!",
            "What are your hours?"
        ]
    );
    assert!(
        messages[0].get("drafts").is_none(),
        "outbound messages carry no drafts"
    );
    assert_eq!(messages[1]["drafts"], json!([]));
    assert_eq!(messages[2]["drafts"][0]["status"], "pending");
    assert_eq!(messages[2]["drafts"][0]["body"], "Open 9 to 5");
    let newest = app.get(&format!("{path}?limit=2"), &key).await.expect(200);
    let texts: Vec<&str> = newest.data()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Thanks!", "What are your hours?"]);
    let older = newest.data()["next_cursor"].as_str().unwrap();
    let rest = app
        .get(&format!("{path}?limit=2&cursor={older}"), &key)
        .await
        .expect(200);
    assert_eq!(
        rest.data()["messages"][0]["content"],
        "Your appointment is at 3"
    );
    assert_eq!(rest.data()["has_more"], false);

    // Modes do not mix; bad input is refused.
    let live = app
        .get("/v1/conversations", &app.live_key)
        .await
        .expect(200);
    assert_eq!(live.data()["conversations"], json!([]));
    let empty = app.get(&path, &app.live_key).await.expect(200);
    assert_eq!(empty.data()["messages"], json!([]));
    for (query, field) in [
        ("cursor=nonsense", "cursor"),
        ("limit=0", "limit"),
        (&*format!("q={}", "a".repeat(65)), "q"),
    ] {
        let reply = app
            .get(&format!("/v1/conversations?{query}"), &key)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field);
    }
    app.get(&format!("{path}?limit=201"), &key)
        .await
        .expect_error(422, "validation_failed");
}

async fn a_campaign_preview_shows_texts_and_blanks_and_writes_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    let (ann, bob, nameless) = ("+14155550201", "+14155550202", "+14155550203");
    for (number, first_name) in [(ann, Some("Ann")), (bob, Some("Bob")), (nameless, None)] {
        app.post(
            "/v1/contacts",
            &key,
            json!({ "phone_number": number, "first_name": first_name, "tags": ["patients"] }),
        )
        .await
        .expect(201);
    }
    let bob_id = app.get("/v1/contacts?limit=100", &key).await.data()["contacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["phone_number"] == bob)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.patch(
        &format!("/v1/contacts/{bob_id}"),
        &key,
        json!({ "opted_out": true }),
    )
    .await
    .expect(200);
    let body = json!({
        "name": "Reminders",
        "from_number": SENDER,
        "body": "Hi {{first_name}}, see you at {{time}}",
        "recipients": [
            { "to": RECIPIENT, "vars": { "first_name": "Zed", "time": "3pm" } },
            { "to": "+19005550123" },
        ],
        "contact_tags": ["patients"],
        "launch_now": true,
        "request_id": "preview-is-not-a-create",
    });
    let preview = app
        .post("/v1/campaigns/preview", &key, body.clone())
        .await
        .expect(200);
    let data = preview.data();
    assert_eq!(data["recipient_count"], 3, "{}", preview.body);
    assert_eq!(
        data["skipped"],
        json!({ "opted_out": 1, "premium_rate": 1 })
    );
    assert_eq!(data["unsendable"], 0);
    assert!(
        typed::<CampaignPreviewOut>(data).phone.is_none(),
        "test mode has no phone"
    );
    assert_eq!(data["max_segments"], 1);
    assert_eq!(
        data["samples"][0],
        json!({ "to": RECIPIENT, "text": "Hi Zed, see you at 3pm", "segments": 1, "encoding": "GSM-7" })
    );
    assert_eq!(data["samples"][1]["text"], "Hi Ann, see you at ");
    assert_eq!(data["samples"].as_array().unwrap().len(), 3);
    assert_eq!(
        data["missing_vars"],
        json!([
            { "to": ann, "names": ["time"] },
            { "to": nameless, "names": ["first_name", "time"] },
        ])
    );
    assert_eq!(data["missing_vars_count"], 2);

    // Nothing was written, and the request_id is still free for the real create.
    let listed = app.get("/v1/campaigns", &key).await.expect(200);
    assert_eq!(listed.data()["campaigns"], json!([]));
    app.post("/v1/campaigns", &key, body).await.expect(201);

    // The same validation and errors as creation.
    let bad = app
        .post(
            "/v1/campaigns/preview",
            &key,
            json!({ "name": "x", "from_number": SENDER, "body": "", "recipients": [{ "to": RECIPIENT }] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(bad.data()["field"], "body");
    let bad = app
        .post(
            "/v1/campaigns/preview",
            &key,
            json!({ "name": "x", "from_number": SENDER, "body": "hi", "recipients": [{ "to": "12" }] }),
        )
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(bad.data()["field"], "recipients[0].to");

    // Live: the phone that would send, online or not.
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let live_body = json!({ "name": "x", "from_number": SENDER, "body": "hi",
                            "recipients": [{ "to": RECIPIENT }] });
    let offline = app
        .post("/v1/campaigns/preview", &app.live_key, live_body.clone())
        .await
        .expect(200);
    assert_eq!(offline.data()["phone"]["id"], phone_id.as_str());
    assert_eq!(offline.data()["phone"]["phone_number"], SENDER);
    assert_eq!(offline.data()["phone"]["online"], false);
    let _phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    let online = app
        .post("/v1/campaigns/preview", &app.live_key, live_body)
        .await
        .expect(200);
    assert_eq!(online.data()["phone"]["online"], true);
}

async fn contacts_are_searched_and_imports_previewed(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    for (number, first, last, email) in [
        ("+14155550177", "Ann", "Lee", "ann@example.com"),
        ("+14155550178", "Annabel", "Smith", "bel@example.com"),
        ("+447911123456", "Bob", "Lee", "bob@example.org"),
    ] {
        app.post(
            "/v1/contacts",
            &key,
            json!({ "phone_number": number, "first_name": first, "last_name": last, "email": email }),
        )
        .await
        .expect(201);
    }
    let found = |q: &'static str| {
        let app = &app;
        let key = key.clone();
        async move {
            let reply = app
                .get(&format!("/v1/contacts?q={}", urlencode(q)), &key)
                .await
                .expect(200);
            let mut numbers: Vec<String> = reply.data()["contacts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["phone_number"].as_str().unwrap().to_string())
                .collect();
            numbers.sort();
            numbers
        }
    };
    assert_eq!(found("ann").await, ["+14155550177", "+14155550178"]);
    assert_eq!(found("ANN lee").await, ["+14155550177"]);
    assert_eq!(found("lee").await, ["+14155550177", "+447911123456"]);
    assert_eq!(found("7911").await, ["+447911123456"]);
    assert_eq!(found("example.org").await, ["+447911123456"]);
    assert_eq!(found("%").await, Vec::<String>::new());
    assert_eq!(found("zed").await, Vec::<String>::new());
    // Combined with the other filters, and paged.
    let page = app
        .get("/v1/contacts?q=lee&limit=1", &key)
        .await
        .expect(200);
    assert_eq!(page.data()["has_more"], true);
    app.get(&format!("/v1/contacts?q={}", "a".repeat(65)), &key)
        .await
        .expect_error(422, "validation_failed");

    // A dry-run import says what it would do and writes nothing.
    let import = json!({ "contacts": [
        { "phone_number": "+14155550177", "first_name": "Annie" },
        { "phone_number": "+14155550999", "first_name": "New" },
    ] });
    let plan = app
        .post("/v1/contacts/import?dry_run=true", &key, import.clone())
        .await
        .expect(200);
    assert_eq!(
        plan.data(),
        &json!({ "created": 1, "updated": 1, "items": [
            { "index": 0, "phone_number": "+14155550177", "action": "update" },
            { "index": 1, "phone_number": "+14155550999", "action": "create" },
        ] })
    );
    assert_eq!(found("annie").await, Vec::<String>::new());
    assert_eq!(found("0999").await, Vec::<String>::new());
    // The same errors as the import.
    let bad = app
        .post(
            "/v1/contacts/import?dry_run=true",
            &key,
            json!({ "contacts": [{ "phone_number": "12" }] }),
        )
        .await
        .expect_error(422, "invalid_phone_number");
    assert_eq!(bad.data()["field"], "contacts[0].phone_number");
    app.post("/v1/contacts/import?dry_run=maybe", &key, import.clone())
        .await
        .expect_error(422, "validation_failed");
    // The real import does what the plan said.
    let done = app
        .post("/v1/contacts/import", &key, import)
        .await
        .expect(200);
    assert_eq!(done.data(), &json!({ "created": 1, "updated": 1 }));
    assert_eq!(found("annie").await, ["+14155550177"]);
}

async fn a_dry_run_import_checks_the_quota(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.quotas.contacts = 1).await;
    let key = app.test_key.clone();
    let two = json!({ "contacts": [
        { "phone_number": "+14155550177" }, { "phone_number": "+14155550178" },
    ] });
    app.post("/v1/contacts/import?dry_run=true", &key, two)
        .await
        .expect_error(422, "quota_exceeded");
    let one = json!({ "contacts": [{ "phone_number": "+14155550177" }] });
    app.post("/v1/contacts/import?dry_run=true", &key, one)
        .await
        .expect(200);
}

/// Polls `path` until `check` holds on its data; panics after 10 s.
async fn wait_for_data(
    app: &TestApp,
    path: &str,
    key: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || {
            let reply = app.get(path, key).await.expect(200);
            if check(reply.data()) {
                return Ok(reply.data().clone());
            }
            Err(format!("{path} never as expected: {}", reply.body))
        },
    )
    .await
}

async fn daily_counts_and_the_overview_add_up(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.webhooks.allow_insecure_targets = true).await;
    let key = app.test_key.clone();
    for (url, enabled) in [
        ("http://127.0.0.1:9/refused", true),
        ("http://127.0.0.1:9/off", false),
    ] {
        app.post(
            "/v1/webhooks",
            &key,
            json!({ "url": url, "events": ["message.sent"], "enabled": enabled }),
        )
        .await
        .expect(201);
    }
    app.send_test(RECIPIENT, "one").await.expect(202);
    app.send_test("+14155550124", "two").await.expect(202);
    // Test mode's number that fails every attempt.
    app.send_test("+15005550001", "three").await.expect(202);
    app.test_inbound(RECIPIENT, "hello").await;

    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let stats = wait_for_data(&app, "/v1/stats/daily", &key, |d| {
        let last = &d["days"][6];
        last["delivered"] == 2 && last["failed"] == 1 && last["received"] == 1
    })
    .await;
    let days = stats["days"].as_array().unwrap();
    assert_eq!(days.len(), 7);
    assert_eq!(days[6]["date"], today.as_str());
    assert_eq!(days[6]["sent"], 2);
    let dates: Vec<&str> = days.iter().map(|d| d["date"].as_str().unwrap()).collect();
    let mut sorted = dates.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, dates, "oldest first, each day once");
    for day in &days[..6] {
        assert_eq!(
            (
                &day["sent"],
                &day["delivered"],
                &day["failed"],
                &day["received"]
            ),
            (&json!(0), &json!(0), &json!(0), &json!(0))
        );
    }
    let one = app.get("/v1/stats/daily?days=1", &key).await.expect(200);
    assert_eq!(one.data()["days"].as_array().unwrap().len(), 1);
    assert_eq!(
        app.get("/v1/stats/daily?days=90", &key)
            .await
            .expect(200)
            .data()["days"]
            .as_array()
            .unwrap()
            .len(),
        90
    );
    for days in ["0", "91", "week"] {
        let reply = app
            .get(&format!("/v1/stats/daily?days={days}"), &key)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], "days");
    }
    // The live side counted nothing.
    let live = app.get("/v1/stats/daily", &app.live_key).await.expect(200);
    assert_eq!(live.data()["days"][6]["sent"], 0);

    // The overview: today's counts, and the endpoint that refuses plus the disabled one.
    let overview = wait_for_data(&app, "/v1/overview", &key, |d| {
        d["webhook_endpoints_failing"] == 2
    })
    .await;
    assert_eq!(
        overview["today"],
        json!({ "sent": 2, "delivered": 2, "failed": 1, "received": 1 })
    );
    assert_eq!(overview["phones"], json!({ "total": 0, "online": 0 }));
    assert_eq!(overview["campaigns_running"], 0);

    // Live: a phone paired and offline, a campaign running (waiting for it), then online.
    let (phone_id, token) = app.pair_phone(SENDER).await;
    app.post(
        "/v1/campaigns",
        &app.live_key,
        json!({ "name": "Reminders", "from_number": SENDER, "body": "See you",
                "recipients": [{ "to": RECIPIENT }], "launch_now": true }),
    )
    .await
    .expect(201);
    let live = app.get("/v1/overview", &app.live_key).await.expect(200);
    assert_eq!(live.data()["phones"], json!({ "total": 1, "online": 0 }));
    assert_eq!(live.data()["campaigns_running"], 1);
    assert_eq!(live.data()["webhook_endpoints_failing"], 0);
    let _phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    let live = app.get("/v1/overview", &app.live_key).await.expect(200);
    assert_eq!(live.data()["phones"], json!({ "total": 1, "online": 1 }));
}

/// Percent-encodes a query or path value.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

backend_tests!(
    daily_counts_and_the_overview_add_up,
    contacts_are_searched_and_imports_previewed,
    a_dry_run_import_checks_the_quota,
    a_campaign_preview_shows_texts_and_blanks_and_writes_nothing,
    conversations_group_messages_by_the_other_side,
);
