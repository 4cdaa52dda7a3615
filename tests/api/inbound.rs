//! Inbound SMS: a phone's `received` frames and `POST /v1/test/inbound`, listing and reading
//! inbound messages, and the opt-out keywords (docs/api.md, Inbound messages; Opt-out keywords).

use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::assert_null;
use crate::helpers::{Backend, SENDER, TestApp, spawn_app};

/// Someone texting the workspace's phone.
const CUSTOMER: &str = "+14155550177";

/// The contact with this number, if any (test mode).
async fn contact(app: &TestApp, number: &str) -> Option<Value> {
    let contacts = app.contacts(&app.test_key).await;
    contacts.into_iter().find(|c| c["phone_number"] == number)
}

async fn phone_inbound_is_stored_once_and_listed(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, mut phone) = app.online_phone(SENDER).await;
    // A national-format sender is shown in E.164, read in the region of the phone's number.
    phone.receive("in-1", "(415) 555-0177", "Hello there").await;
    // A repeat of the same ref is acked again and not stored twice.
    phone.receive("in-1", "(415) 555-0177", "Hello there").await;
    phone.receive("in-2", "VERIFY", "code 1234").await;

    let inbound = app.messages(&app.live_key, "direction=inbound").await;
    assert_eq!(inbound.len(), 2, "{inbound:?}");
    let first = inbound
        .iter()
        .find(|m| m["content"] == "Hello there")
        .unwrap();
    assert_eq!(first["direction"], "inbound");
    assert_eq!(first["status"], "delivered");
    assert_eq!(first["from_number"], CUSTOMER);
    assert_eq!(first["to_number"], SENDER);
    assert_eq!(first["device_id"], phone_id.as_str());
    assert_eq!(first["segments"], 1);
    assert_eq!(first["encoding"], "GSM-7");
    assert_eq!(first["test_mode"], false);
    assert!(first["delivered_at"].is_string());
    // An alphanumeric sender id is kept as the phone sent it.
    assert!(inbound.iter().any(|m| m["from_number"] == "VERIFY"));

    assert!(
        app.messages(&app.live_key, "direction=outbound")
            .await
            .is_empty()
    );
    assert_eq!(
        app.messages(
            &app.live_key,
            &format!("phone_number=%2B{}", &CUSTOMER[1..])
        )
        .await
        .len(),
        1
    );
    // The other mode sees none of it.
    assert!(app.messages(&app.test_key, "").await.is_empty());

    let id = first["id"].as_str().unwrap();
    let message = app.message(&app.live_key, id).await;
    assert_eq!(message["content"], "Hello there");
    let events = message["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "received");
    assert_eq!(events[0]["status"], "delivered");
    app.get(&format!("/v1/messages/{id}"), &app.test_key)
        .await
        .expect_error(404, "not_found");
}

async fn test_inbound_endpoint(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = json!({ "from_number": CUSTOMER, "to_number": SENDER, "content": "Hi 👋" });
    app.post("/v1/test/inbound", &app.live_key, body.clone())
        .await
        .expect_error(403, "test_mode_only");
    let message = app
        .post("/v1/test/inbound", &app.test_key, body)
        .await
        .expect(201)
        .data()
        .clone();
    assert_eq!(message["direction"], "inbound");
    assert_eq!(message["status"], "delivered");
    assert_eq!(message["from_number"], CUSTOMER);
    assert_eq!(message["to_number"], SENDER);
    assert_eq!(message["content"], "Hi 👋");
    assert_eq!(message["encoding"], "UCS-2");
    assert_null(&message, "device_id");
    assert_eq!(message["test_mode"], true);
    let id = message["id"].as_str().unwrap();
    let stored = app.message(&app.test_key, id).await;
    assert_eq!(stored["events"][0]["type"], "received");

    // Bad input gets the envelope and changes nothing.
    for (body, status, code, field) in [
        (
            json!({ "from_number": "0415", "to_number": SENDER, "content": "x" }),
            422,
            "invalid_phone_number",
            "from_number",
        ),
        (
            json!({ "from_number": CUSTOMER, "to_number": "nope", "content": "x" }),
            422,
            "invalid_phone_number",
            "to_number",
        ),
        (
            json!({ "from_number": CUSTOMER, "to_number": SENDER }),
            422,
            "validation_failed",
            "content",
        ),
        (
            json!({ "from_number": CUSTOMER, "to_number": SENDER, "content": "" }),
            422,
            "validation_failed",
            "content",
        ),
        (
            json!({ "from_number": CUSTOMER, "to_number": SENDER, "content": 5 }),
            400,
            "invalid_json",
            "content",
        ),
    ] {
        let reply = app
            .post("/v1/test/inbound", &app.test_key, body)
            .await
            .expect_error(status, code);
        assert_eq!(reply.data()["field"], field);
    }
    app.raw(
        "POST",
        "/v1/test/inbound",
        Some(&app.test_key),
        "application/json",
        b"{not json".to_vec(),
    )
    .await
    .expect_error(400, "invalid_json");
    assert_eq!(app.messages(&app.test_key, "").await.len(), 1);
    assert!(contact(&app, CUSTOMER).await.is_none());
}

async fn keywords_opt_out_opt_in_and_stop_ai(backend: Backend) {
    let app = spawn_app(backend).await;
    // Every opt-out word, any case and surrounding space, creates an opted-out contact.
    for (i, word) in ["STOP", "unsubscribe", " Cancel ", "end\n", "QuIt"]
        .iter()
        .enumerate()
    {
        let number = format!("+1415555020{i}");
        app.test_inbound(&number, word).await;
        let c = contact(&app, &number)
            .await
            .unwrap_or_else(|| panic!("{word:?} creates a contact"));
        assert_eq!(c["opted_out"], true, "{word:?}");
        assert!(c["opted_out_at"].is_string(), "{word:?}");
        assert_eq!(c["ai_replies"], true, "{word:?}");
    }
    // START opts back in.
    app.test_inbound("+14155550200", "start").await;
    let c = contact(&app, "+14155550200").await.unwrap();
    assert_eq!(c["opted_out"], false);
    assert_null(&c, "opted_out_at");
    // STOP AI turns off AI replies only.
    app.test_inbound("+14155550201", "Stop AI").await;
    let c = contact(&app, "+14155550201").await.unwrap();
    assert_eq!(
        (c["opted_out"].clone(), c["ai_replies"].clone()),
        (json!(true), json!(false))
    );
    app.test_inbound(CUSTOMER, "STOP AI").await;
    let c = contact(&app, CUSTOMER).await.unwrap();
    assert_eq!(
        (c["opted_out"].clone(), c["ai_replies"].clone()),
        (json!(false), json!(false))
    );

    // Anything else is an ordinary message: no contact is created.
    for text in ["STOP please", "STOPAI", "stopp", "Please stop", "START now"] {
        app.test_inbound("+14155550299", text).await;
    }
    assert!(contact(&app, "+14155550299").await.is_none());

    // Every keyword message is still stored as an inbound message.
    let inbound = app.messages(&app.test_key, "direction=inbound").await;
    assert_eq!(inbound.len(), 5 + 1 + 2 + 5);
    assert!(inbound.iter().any(|m| m["content"] == "QuIt"));
    // The live mode is untouched.
    assert!(
        app.get("/v1/contacts", &app.live_key)
            .await
            .expect(200)
            .data()["contacts"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

async fn phone_keywords_update_an_existing_contact(backend: Backend) {
    let app = spawn_app(backend).await;
    let created = app
        .post(
            "/v1/contacts",
            &app.live_key,
            json!({ "phone_number": CUSTOMER, "first_name": "Ada", "tags": ["vip"] }),
        )
        .await
        .expect(201);
    let id = created.data()["id"].as_str().unwrap().to_string();
    let (_, mut phone) = app.online_phone(SENDER).await;
    phone.receive("k-1", CUSTOMER, "stop").await;
    let c = app
        .get(&format!("/v1/contacts/{id}"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(c.data()["opted_out"], true);
    assert_eq!(
        c.data()["first_name"],
        "Ada",
        "the contact keeps its fields"
    );
    assert_eq!(c.data()["tags"], json!(["vip"]));
    let stopped_at = c.data()["opted_out_at"].clone();
    assert!(stopped_at.is_string());
    // A second STOP keeps the time of the first; a repeat of the same ref changes nothing.
    phone.receive("k-2", CUSTOMER, "STOP").await;
    phone.receive("k-1", CUSTOMER, "stop").await;
    let c = app
        .get(&format!("/v1/contacts/{id}"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(c.data()["opted_out_at"], stopped_at);
    phone.receive("k-3", CUSTOMER, "START").await;
    let c = app
        .get(&format!("/v1/contacts/{id}"), &app.live_key)
        .await
        .expect(200);
    assert_eq!(c.data()["opted_out"], false);
    assert_eq!(
        app.messages(&app.live_key, "direction=inbound").await.len(),
        3
    );
}

backend_tests!(
    phone_inbound_is_stored_once_and_listed,
    test_inbound_endpoint,
    keywords_opt_out_opt_in_and_stop_ai,
    phone_keywords_update_an_existing_contact,
);
