//! Registration binds the app to its phone; every route refuses a wrong token.

use super::*;

async fn registration_binds_the_app_to_its_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    for base in ["/mobile/v1", BASE] {
        let phone = AppClient::new(&app, base, &token);
        let registered = phone.register().await;
        assert_eq!(registered.status, 201, "{registered:?}");
        assert_eq!(registered.content_type, "application/json");
        assert_eq!(registered.body["id"], phone_id.as_str());
        assert_eq!(registered.body["login"], app.workspace_id.to_string());
        let handed = registered.body["token"].as_str().unwrap().to_string();
        // The token handed out is the one every later call carries.
        let later = AppClient::new(&app, base, &handed);
        let patched = later
            .call(
                "PATCH",
                "/device",
                Some(json!({ "id": phone_id, "pushToken": null, "simCards": [] })),
            )
            .await;
        assert_eq!(patched.status, 204, "{patched:?}");
        let device = later.call("GET", "/device", None).await;
        assert_eq!(device.status, 200, "{device:?}");
        assert_eq!(device.body["device"]["id"], phone_id.as_str());
        for at in ["createdAt", "updatedAt"] {
            let at = device.body["device"][at].as_str().unwrap();
            assert!(has_millis(at), "{at}");
        }
        let settings = later.call("GET", "/settings", None).await;
        assert_eq!(settings.status, 200);
        assert_eq!(settings.content_type, "application/json");
        assert!(settings.body.is_object(), "{settings:?}");
        assert!(settings.body.get("gateway").is_none(), "{settings:?}");
        let hooks = later.call("GET", "/webhooks", None).await;
        assert_eq!(hooks.status, 200);
        assert!(hooks.body.is_array(), "{hooks:?}");
        let messages = later.fetch("fifo").await;
        assert!(messages.is_empty());
    }
    // Registering again is idempotent: no second phone.
    let phones = app.get("/v1/phones", &app.live_key).await.expect(200);
    assert_eq!(phones.data()["phones"].as_array().unwrap().len(), 1);
    // Another phone's id is refused, and changes nothing.
    let phone = AppClient::new(&app, BASE, &token);
    let other = phone
        .call(
            "PATCH",
            "/device",
            Some(json!({ "id": uuid::Uuid::now_v7() })),
        )
        .await;
    assert_eq!(other.status, 403, "{other:?}");
    assert!(other.body["message"].is_string());
}

async fn a_wrong_token_is_401_at_every_route(backend: Backend) {
    let app = spawn_app(backend).await;
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let routes = [
        ("POST", "/device", Some(json!({ "name": "x" }))),
        ("PATCH", "/device", Some(json!({ "id": phone_id }))),
        ("GET", "/device", None),
        ("GET", "/events", None),
        ("GET", "/message?order=fifo", None),
        ("PATCH", "/message", Some(json!([]))),
        ("GET", "/settings", None),
        ("GET", "/webhooks", None),
    ];
    for bad in ["dt_not_a_token", "sk_live_nope", ""] {
        let phone = AppClient::new(&app, BASE, bad);
        for (method, path, body) in &routes {
            let answer = phone.call(method, path, body.clone()).await;
            assert_eq!(
                answer.status, 401,
                "{method} {path} with {bad:?}: {answer:?}"
            );
            assert_eq!(answer.content_type, "application/json");
            assert!(answer.body["message"].is_string(), "{answer:?}");
        }
    }
    // A rotated token is refused at once; the new one registers the same phone.
    let rotated = app
        .post(
            &format!("/v1/phones/{phone_id}/rotate-token"),
            &app.live_key,
            json!({}),
        )
        .await
        .expect(200);
    let new_token = rotated.data()["device_token"].as_str().unwrap().to_string();
    let old = AppClient::new(&app, BASE, &token).register().await;
    assert_eq!(old.status, 401, "{old:?}");
    let new = AppClient::new(&app, BASE, &new_token).register().await;
    assert_eq!(new.status, 201);
    assert_eq!(new.body["id"], phone_id.as_str());
}

backend_tests!(
    registration_binds_the_app_to_its_phone,
    a_wrong_token_is_401_at_every_route,
);
