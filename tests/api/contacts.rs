//! Contacts (docs/api.md, Contacts): CRUD, duplicate numbers, filters and cursor paging, bulk
//! import, and validation errors that change nothing.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::backend_tests;
use crate::helpers::assert_null;
use crate::helpers::{Backend, TestApp, spawn_app};

async fn all_contacts(app: &TestApp, key: &str, query: &str) -> Vec<Value> {
    app.all_pages(key, &format!("/v1/contacts?{query}"), "contacts")
        .await
}

async fn create(app: &TestApp, body: Value) -> Value {
    app.post("/v1/contacts", &app.test_key, body)
        .await
        .expect(201)
        .data()
        .clone()
}

async fn crud_and_duplicates(backend: Backend) {
    let app = spawn_app(backend).await;
    let contact = create(
        &app,
        json!({
            "phone_number": "+14155550101",
            "first_name": "Ada",
            "last_name": "Lovelace",
            "email": "ada@example.com",
            "custom_fields": { "plan": "gold" },
            "tags": ["vip", "beta", "vip"],
        }),
    )
    .await;
    let id = contact["id"].as_str().unwrap().to_string();
    assert_eq!(contact["phone_number"], "+14155550101");
    assert_eq!(contact["first_name"], "Ada");
    assert_eq!(contact["last_name"], "Lovelace");
    assert_eq!(contact["email"], "ada@example.com");
    assert_eq!(contact["custom_fields"], json!({ "plan": "gold" }));
    assert_eq!(contact["tags"], json!(["beta", "vip"]));
    assert_eq!(contact["opted_out"], false);
    assert_null(&contact, "opted_out_at");
    assert_eq!(contact["ai_replies"], true);
    assert!(contact["created_at"].as_str().unwrap().ends_with("+00:00"));

    // The same number again: 409 with the existing id.
    let dup = app
        .post(
            "/v1/contacts",
            &app.test_key,
            json!({ "phone_number": "+14155550101" }),
        )
        .await
        .expect_error(409, "already_exists");
    assert_eq!(dup.data()["id"], id.as_str());
    // The other mode is another namespace.
    app.post(
        "/v1/contacts",
        &app.live_key,
        json!({ "phone_number": "+14155550101" }),
    )
    .await
    .expect(201);
    app.get(&format!("/v1/contacts/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");

    let got = app
        .get(&format!("/v1/contacts/{id}"), &app.test_key)
        .await
        .expect(200);
    assert_eq!(got.data(), &contact);

    // PATCH: given fields change, null clears, tags are replaced, absent fields stay.
    let patched = app
        .patch(&format!("/v1/contacts/{id}"), &app.test_key, json!({ "first_name": "Augusta", "email": null, "tags": ["alumni"], "opted_out": true }))
        .await
        .expect(200);
    let p = patched.data();
    assert_eq!(p["first_name"], "Augusta");
    assert_eq!(p["last_name"], "Lovelace");
    assert_null(p, "email");
    assert_eq!(p["tags"], json!(["alumni"]));
    assert_eq!(p["custom_fields"], json!({ "plan": "gold" }));
    assert_eq!(p["opted_out"], true);
    assert!(p["opted_out_at"].is_string());
    let opted_in = app
        .patch(
            &format!("/v1/contacts/{id}"),
            &app.test_key,
            json!({ "opted_out": false, "ai_replies": false }),
        )
        .await
        .expect(200);
    assert_null(opted_in.data(), "opted_out_at");
    assert_eq!(opted_in.data()["ai_replies"], false);

    // Moving to a number another contact has: 409, nothing changes.
    let other = create(&app, json!({ "phone_number": "+14155550102" })).await;
    let clash = app
        .patch(
            &format!("/v1/contacts/{id}"),
            &app.test_key,
            json!({ "phone_number": "+14155550102", "first_name": "X" }),
        )
        .await
        .expect_error(409, "already_exists");
    assert_eq!(clash.data()["id"], other["id"]);
    let unchanged = app
        .get(&format!("/v1/contacts/{id}"), &app.test_key)
        .await
        .expect(200);
    assert_eq!(unchanged.data()["first_name"], "Augusta");
    assert_eq!(unchanged.data()["phone_number"], "+14155550101");

    app.delete(&format!("/v1/contacts/{id}"), &app.test_key)
        .await
        .expect(200);
    app.get(&format!("/v1/contacts/{id}"), &app.test_key)
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("/v1/contacts/{id}"), &app.test_key)
        .await
        .expect_error(404, "not_found");
    app.get("/v1/contacts/not-a-uuid", &app.test_key)
        .await
        .expect_error(404, "not_found");
    // Its tags went with it.
    assert!(
        all_contacts(&app, &app.test_key, "tag=alumni")
            .await
            .is_empty()
    );
    // The number is free again.
    create(&app, json!({ "phone_number": "+14155550101" })).await;
}

async fn validation_errors_change_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let long = "x".repeat(121);
    for (body, status, code, field) in [
        (json!({}), 422, "validation_failed", "phone_number"),
        (
            json!({ "phone_number": "415-555-0101" }),
            422,
            "invalid_phone_number",
            "phone_number",
        ),
        (
            json!({ "phone_number": "+14155550101", "email": "not-an-email" }),
            422,
            "validation_failed",
            "email",
        ),
        (
            json!({ "phone_number": "+14155550101", "first_name": long }),
            422,
            "validation_failed",
            "first_name",
        ),
        (
            json!({ "phone_number": "+14155550101", "tags": ["ok", ""] }),
            422,
            "validation_failed",
            "tags[1]",
        ),
        (
            json!({ "phone_number": "+14155550101", "custom_fields": { "a": "y".repeat(501) } }),
            422,
            "validation_failed",
            "custom_fields.a",
        ),
        (
            json!({ "phone_number": "+14155550101", "custom_fields": { "a": 1 } }),
            400,
            "invalid_json",
            "custom_fields.a",
        ),
        (
            json!({ "phone_number": "+14155550101", "tags": "vip" }),
            400,
            "invalid_json",
            "tags",
        ),
    ] {
        let reply = app
            .post("/v1/contacts", &app.test_key, body.clone())
            .await
            .expect_error(status, code);
        assert_eq!(reply.data()["field"], field, "{body}");
    }
    assert!(all_contacts(&app, &app.test_key, "").await.is_empty());

    let c = create(
        &app,
        json!({ "phone_number": "+14155550101", "first_name": "Ada" }),
    )
    .await;
    let path = format!("/v1/contacts/{}", c["id"].as_str().unwrap());
    for (body, code, field) in [
        (
            json!({ "email": "nope", "first_name": "B" }),
            "validation_failed",
            "email",
        ),
        (
            json!({ "phone_number": "12" }),
            "invalid_phone_number",
            "phone_number",
        ),
        (
            json!({ "tags": [" padded"] }),
            "validation_failed",
            "tags[0]",
        ),
    ] {
        let reply = app
            .patch(&path, &app.test_key, body)
            .await
            .expect_error(422, code);
        assert_eq!(reply.data()["field"], field);
    }
    let still = app.get(&path, &app.test_key).await.expect(200);
    assert_eq!(still.data(), &c);

    for (query, field) in [
        ("opted_out=yes", "opted_out"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("cursor=bogus", "cursor"),
        ("tag=", "tag"),
    ] {
        let reply = app
            .get(&format!("/v1/contacts?{query}"), &app.test_key)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field, "{query}");
    }
    app.request("PUT", "/v1/contacts", Some(&app.test_key), None)
        .await
        .expect_error(405, "method_not_allowed");
    app.get("/v1/contacts", "sk_test_unknown")
        .await
        .expect_error(401, "invalid_api_key");
}

async fn list_filters_and_paging(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let tags = if i % 2 == 0 {
            json!(["even"])
        } else {
            json!(["odd", "x"])
        };
        let c = create(
            &app,
            json!({ "phone_number": format!("+1415555011{i}"), "tags": tags }),
        )
        .await;
        ids.push(c["id"].as_str().unwrap().to_string());
    }
    // Opt two out through the API.
    for id in &ids[..2] {
        app.patch(
            &format!("/v1/contacts/{id}"),
            &app.test_key,
            json!({ "opted_out": true }),
        )
        .await
        .expect(200);
    }
    // Pages of 3, newest first, no repeats, no gaps.
    let pages = app
        .pages(&app.test_key, "/v1/contacts?limit=3", "contacts")
        .await;
    let seen: Vec<String> = pages
        .concat()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(pages.len(), 3);
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(seen, expected);

    let even: HashSet<String> = all_contacts(&app, &app.test_key, "tag=even")
        .await
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(even, ids.iter().step_by(2).cloned().collect::<HashSet<_>>());
    assert_eq!(all_contacts(&app, &app.test_key, "tag=x").await.len(), 3);
    assert!(
        all_contacts(&app, &app.test_key, "tag=none")
            .await
            .is_empty()
    );
    let out = all_contacts(&app, &app.test_key, "opted_out=true").await;
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|c| c["opted_out"] == true));
    assert_eq!(
        all_contacts(&app, &app.test_key, "opted_out=false")
            .await
            .len(),
        5
    );
    // Filters combine.
    let both = all_contacts(&app, &app.test_key, "opted_out=true&tag=even").await;
    assert_eq!(both.len(), 1);
    assert_eq!(both[0]["id"], ids[0].as_str());
    // Paging within a filter.
    let first = app
        .get("/v1/contacts?tag=even&limit=2", &app.test_key)
        .await
        .expect(200);
    assert_eq!(first.data()["has_more"], true);
    let next = first.data()["next_cursor"].as_str().unwrap();
    let second = app
        .get(
            &format!("/v1/contacts?tag=even&limit=2&cursor={next}"),
            &app.test_key,
        )
        .await
        .expect(200);
    assert_eq!(second.data()["contacts"].as_array().unwrap().len(), 2);
    assert_eq!(second.data()["has_more"], false);
    // The live mode sees none.
    assert!(all_contacts(&app, &app.live_key, "").await.is_empty());
}

async fn import_upserts_by_number(backend: Backend) {
    let app = spawn_app(backend).await;
    let existing = create(
        &app,
        json!({ "phone_number": "+14155550101", "first_name": "Ada", "last_name": "L", "tags": ["old"] }),
    )
    .await;
    app.patch(
        &format!("/v1/contacts/{}", existing["id"].as_str().unwrap()),
        &app.test_key,
        json!({ "opted_out": true }),
    )
    .await
    .expect(200);
    let reply = app
        .post(
            "/v1/contacts/import",
            &app.test_key,
            json!({ "contacts": [
                { "phone_number": "+14155550101", "first_name": "Augusta", "tags": ["new"] },
                { "phone_number": "+14155550102", "email": "b@example.com", "custom_fields": { "k": "v" } },
                { "phone_number": "+14155550103", "tags": ["new", "x"] },
            ] }),
        )
        .await
        .expect(200);
    assert_eq!(reply.data(), &json!({ "created": 2, "updated": 1 }));
    let all = all_contacts(&app, &app.test_key, "").await;
    assert_eq!(all.len(), 3);
    let ada = all
        .iter()
        .find(|c| c["phone_number"] == "+14155550101")
        .unwrap();
    assert_eq!(ada["id"], existing["id"], "an update keeps the contact");
    assert_eq!(ada["first_name"], "Augusta");
    assert_eq!(ada["last_name"], "L", "a field left out keeps its value");
    assert_eq!(ada["tags"], json!(["new"]));
    assert_eq!(
        ada["opted_out"], true,
        "an import never opts anyone back in"
    );
    let b = all
        .iter()
        .find(|c| c["phone_number"] == "+14155550102")
        .unwrap();
    assert_eq!(b["email"], "b@example.com");
    assert_eq!(b["custom_fields"], json!({ "k": "v" }));
    assert_eq!(b["tags"], json!([]));
    assert_eq!(all_contacts(&app, &app.test_key, "tag=new").await.len(), 2);
    assert!(
        all_contacts(&app, &app.test_key, "tag=old")
            .await
            .is_empty()
    );

    // Atomic: one bad item rejects the whole import, naming it.
    let mut items: Vec<Value> = (0..20)
        .map(|i| json!({ "phone_number": format!("+1415555{:04}", 2000 + i), "first_name": "N" }))
        .collect();
    for (bad, status, code, field) in [
        (
            json!({ "phone_number": "+1415" }),
            422,
            "invalid_phone_number",
            "contacts[12].phone_number",
        ),
        (
            json!({ "phone_number": "+14155552012", "email": "@" }),
            422,
            "validation_failed",
            "contacts[12].email",
        ),
        (
            json!({ "phone_number": "+14155552003" }),
            422,
            "validation_failed",
            "contacts[12].phone_number",
        ),
        (
            json!({ "phone_number": "+14155552012", "tags": [1] }),
            400,
            "invalid_json",
            "contacts[12].tags[0]",
        ),
    ] {
        items[12] = bad;
        let reply = app
            .post(
                "/v1/contacts/import",
                &app.test_key,
                json!({ "contacts": items.clone() }),
            )
            .await
            .expect_error(status, code);
        assert_eq!(reply.data()["field"], field);
    }
    for body in [json!({}), json!({ "contacts": [] })] {
        let reply = app
            .post("/v1/contacts/import", &app.test_key, body)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], "contacts");
    }
    let too_many: Vec<Value> = (0..10_001)
        .map(|i| json!({ "phone_number": format!("+1202555{:04}", i % 10_000) }))
        .collect();
    let reply = app
        .post(
            "/v1/contacts/import",
            &app.test_key,
            json!({ "contacts": too_many }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "contacts");
    let after = all_contacts(&app, &app.test_key, "").await;
    assert_eq!(after, all, "failed imports wrote nothing");
}

/// A realistic 10,000-contact import fits the 2 MiB body limit and is upserted in one request.
async fn import_of_ten_thousand(backend: Backend) {
    let app = spawn_app(backend).await;
    let items: Vec<Value> = (0..10_000)
        .map(|i| {
            json!({
                "phone_number": format!("+1202555{i:04}"),
                "first_name": "Alexandra",
                "last_name": "Johnson",
                "email": format!("alexandra.johnson{i}@example.com"),
                "tags": ["customer", if i % 2 == 0 { "even" } else { "odd" }],
            })
        })
        .collect();
    let body = json!({ "contacts": items });
    assert!(serde_json::to_vec(&body).unwrap().len() < 2 * 1024 * 1024);
    let reply = app
        .post("/v1/contacts/import", &app.test_key, body.clone())
        .await
        .expect(200);
    assert_eq!(reply.data(), &json!({ "created": 10_000, "updated": 0 }));
    let reply = app
        .post("/v1/contacts/import", &app.test_key, body)
        .await
        .expect(200);
    assert_eq!(reply.data(), &json!({ "created": 0, "updated": 10_000 }));
    assert_eq!(
        all_contacts(&app, &app.test_key, "tag=even").await.len(),
        5_000
    );
}

backend_tests!(
    crud_and_duplicates,
    validation_errors_change_nothing,
    list_filters_and_paging,
    import_upserts_by_number,
    import_of_ten_thousand,
);
