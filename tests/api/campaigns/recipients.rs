//! What each recipient gets: the rendered text, skips (premium rate, opted out), texts too
//! long for a phone, hostile templates, contact tags.

use super::*;
use crate::helpers::typed;
use smsgw::api::campaigns::{CampaignOut, CampaignRecipientOut};
use smsgw::domain::campaign::RecipientStatus;

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
    assert_eq!(typed::<CampaignOut>(&created).scheduled_for, None);
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
        let typed_recipient: CampaignRecipientOut = typed(recipient);
        assert_eq!(typed_recipient.skip_reason, None);
        assert_eq!(typed_recipient.failure_reason, None);
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
    let typed_list: Vec<CampaignRecipientOut> = list.iter().map(typed).collect();
    let reasons: Vec<Option<&str>> = typed_list.iter().map(|r| r.skip_reason).collect();
    assert_eq!(
        reasons,
        [
            None,
            Some("premium_rate"),
            Some("opted_out"),
            None,
            Some("opted_out"),
        ]
    );
    for skipped in typed_list
        .iter()
        .filter(|r| r.status == RecipientStatus::Skipped)
    {
        assert_eq!(skipped.message_id, None, "{}", skipped.to);
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
    assert_eq!(typed::<CampaignRecipientOut>(&list[0]).message_id, None);
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
    assert_eq!(typed::<CampaignRecipientOut>(&list[0]).skip_reason, None);
    assert_eq!(typed::<CampaignRecipientOut>(&list[1]).failure_reason, None);
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

backend_tests!(
    test_mode_campaign_renders_sends_and_completes,
    premium_rate_and_opted_out_recipients_are_skipped,
    opt_out_after_creation_is_honoured_when_queued,
    rendered_text_too_long_fails_that_recipient,
    hostile_templates_store_bounded_text,
    contact_tags_expand_to_tagged_contacts,
);
