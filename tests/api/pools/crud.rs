//! Pools CRUD: a pool is created with its phones in order, listed, read, renamed, given other
//! lines and deleted; names are unique per workspace and mode; another scope's phone, a phone
//! listed twice or too many phones are refused by name and change nothing; a deleted phone
//! leaves its pools.

use super::*;

async fn a_pool_is_created_listed_changed_and_deleted(backend: Backend) {
    let app = spawn_app(backend).await;
    let (a, _) = app.pair_phone("+14155550101").await;
    let (b, _) = app.pair_phone("+14155550102").await;
    let (c, _) = app.pair_phone("+14155550103").await;
    let pool = create_pool(&app, "support", &[&b, &a]).await;
    assert_eq!(pool["name"], "support");
    assert_eq!(pool["phone_ids"], json!([b, a]), "in the order given");
    assert!(pool["created_at"].is_string());
    let id = pool["id"].as_str().unwrap().to_string();

    let read = app.get(&format!("/v1/pools/{id}"), &app.live_key).await;
    assert_eq!(read.expect(200).data(), &pool);

    // A phone may be in several pools.
    let other = create_pool(&app, "marketing", &[&a, &c]).await;
    let listed = app.all_pages(&app.live_key, "/v1/pools", "pools").await;
    assert_eq!(listed, vec![other.clone(), pool.clone()], "newest first");

    let changed = app
        .patch(
            &format!("/v1/pools/{id}"),
            &app.live_key,
            json!({ "name": "help desk", "phone_ids": [c] }),
        )
        .await
        .expect(200)
        .data()
        .clone();
    assert_eq!(changed["name"], "help desk");
    assert_eq!(changed["phone_ids"], json!([c]));
    let renamed_only = app
        .patch(
            &format!("/v1/pools/{id}"),
            &app.live_key,
            json!({ "name": "desk" }),
        )
        .await
        .expect(200)
        .data()
        .clone();
    assert_eq!(renamed_only["phone_ids"], json!([c]), "lines kept");

    // Test mode sees none of live mode's pools.
    let test_list = app.all_pages(&app.test_key, "/v1/pools", "pools").await;
    assert!(test_list.is_empty());
    app.get(&format!("/v1/pools/{id}"), &app.test_key)
        .await
        .expect_error(404, "not_found");

    // A deleted phone leaves its pools.
    app.delete(&format!("/v1/phones/{c}"), &app.live_key)
        .await
        .expect(200);
    let read = app.get(&format!("/v1/pools/{id}"), &app.live_key).await;
    assert_eq!(read.expect(200).data()["phone_ids"], json!([]));
    let other_id = other["id"].as_str().unwrap();
    let read = app
        .get(&format!("/v1/pools/{other_id}"), &app.live_key)
        .await;
    assert_eq!(read.expect(200).data()["phone_ids"], json!([a]));

    app.delete(&format!("/v1/pools/{id}"), &app.live_key)
        .await
        .expect(200);
    app.get(&format!("/v1/pools/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("/v1/pools/{id}"), &app.live_key)
        .await
        .expect_error(404, "not_found");
}

async fn pool_names_are_unique_per_workspace_and_mode(backend: Backend) {
    let app = spawn_app(backend).await;
    let (a, _) = app.pair_phone("+14155550101").await;
    let first = create_pool(&app, "support", &[&a]).await;
    let taken = app
        .post(
            "/v1/pools",
            &app.live_key,
            json!({ "name": "support", "phone_ids": [a] }),
        )
        .await
        .expect_error(409, "already_exists");
    assert_eq!(taken.data()["id"], first["id"]);
    let second = create_pool(&app, "sales", &[&a]).await;
    let second_id = second["id"].as_str().unwrap();
    let renamed = app
        .patch(
            &format!("/v1/pools/{second_id}"),
            &app.live_key,
            json!({ "name": "support" }),
        )
        .await
        .expect_error(409, "already_exists");
    assert_eq!(renamed.data()["id"], first["id"]);
    // Test mode has its own names (and its own phones).
    let (t, _) = pair_test_phone(&app, "+14155550109").await;
    app.post(
        "/v1/pools",
        &app.test_key,
        json!({ "name": "support", "phone_ids": [t] }),
    )
    .await
    .expect(201);
}

/// Pairs a phone with the test key: its id and token.
async fn pair_test_phone(app: &TestApp, number: &str) -> (String, String) {
    let data = app
        .post(
            "/v1/phones",
            &app.test_key,
            json!({ "phone_number": number }),
        )
        .await
        .expect(201)
        .data()
        .clone();
    (
        data["id"].as_str().unwrap().to_string(),
        data["device_token"].as_str().unwrap().to_string(),
    )
}

async fn bad_pools_are_refused_by_field_and_change_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let (a, _) = app.pair_phone("+14155550101").await;
    let (test_phone, _) = pair_test_phone(&app, "+14155550109").await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let too_many: Vec<String> = (0..101).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let cases = [
        (json!({ "phone_ids": [a] }), "name"),
        (json!({ "name": "", "phone_ids": [a] }), "name"),
        (json!({ "name": "x".repeat(121), "phone_ids": [a] }), "name"),
        (json!({ "name": unknown, "phone_ids": [a] }), "name"),
        (json!({ "name": "p" }), "phone_ids"),
        (json!({ "name": "p", "phone_ids": [] }), "phone_ids"),
        (json!({ "name": "p", "phone_ids": too_many }), "phone_ids"),
        (
            json!({ "name": "p", "phone_ids": [a, "nope"] }),
            "phone_ids[1]",
        ),
        (
            json!({ "name": "p", "phone_ids": [a, unknown] }),
            "phone_ids[1]",
        ),
        (json!({ "name": "p", "phone_ids": [a, a] }), "phone_ids[1]"),
        // Another mode's phone.
        (
            json!({ "name": "p", "phone_ids": [test_phone] }),
            "phone_ids[0]",
        ),
    ];
    for (body, field) in cases {
        let reply = app
            .post("/v1/pools", &app.live_key, body.clone())
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field, "{body}");
    }
    // Another workspace's phone is unknown here as well: checked above with a random id.
    assert!(
        app.all_pages(&app.live_key, "/v1/pools", "pools")
            .await
            .is_empty()
    );

    let pool = create_pool(&app, "p", &[&a]).await;
    let id = pool["id"].as_str().unwrap();
    let reply = app
        .patch(
            &format!("/v1/pools/{id}"),
            &app.live_key,
            json!({ "name": "q", "phone_ids": [test_phone] }),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(reply.data()["field"], "phone_ids[0]");
    let read = app.get(&format!("/v1/pools/{id}"), &app.live_key).await;
    assert_eq!(read.expect(200).data(), &pool, "unchanged");
}

backend_tests!(
    a_pool_is_created_listed_changed_and_deleted,
    pool_names_are_unique_per_workspace_and_mode,
    bad_pools_are_refused_by_field_and_change_nothing,
);
