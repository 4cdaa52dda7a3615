//! The workspace (docs/api.md, "Workspace") and number look-up ("Number lookup"): read with
//! the key, updated, server defaults, numbers as people type them.

use super::*;
use crate::helpers::assert_null;
use smsgw::api::workspace::WorkspaceOut;

async fn workspace_is_read_with_the_key_and_updated(backend: Backend) {
    let app = spawn_app(backend).await;
    let live = app.get("/v1/workspace", &app.live_key).await.expect(200);
    let data = live.data();
    assert_eq!(data["id"], app.workspace_id.to_string());
    assert_eq!(data["name"], "default");
    assert_eq!(data["mode"], "live");
    assert_eq!(live.read::<WorkspaceOut>().default_country, None);
    assert_eq!(data["default_country_set"], false);
    assert!(data["created_at"].as_str().unwrap().ends_with("+00:00"));
    // No public_url: the address the request came in on.
    assert_eq!(
        data["pairing"]["device_api_url"],
        format!("{}/mobile/v1", app.address)
    );
    assert_eq!(
        data["pairing"]["websocket_url"],
        format!(
            "{}/v1/phones/connect",
            app.address.replacen("http", "ws", 1)
        )
    );
    let test = app.get("/v1/workspace", &app.test_key).await.expect(200);
    assert_eq!(test.data()["mode"], "test");
    assert_eq!(test.data()["id"], data["id"]);

    // A wrong key is refused up front, like everywhere.
    let wrong = format!("sk_live_{}", "A".repeat(40));
    app.get("/v1/workspace", &wrong)
        .await
        .expect_error(401, "invalid_api_key");
    app.request("GET", "/v1/workspace", None, None)
        .await
        .expect_error(401, "missing_api_key");

    let patch = |body: Value| app.patch("/v1/workspace", &app.live_key, body);
    let updated = patch(json!({ "name": "Smile Dental", "default_country": "GB" }))
        .await
        .expect(200);
    assert_eq!(updated.data()["name"], "Smile Dental");
    assert_eq!(updated.data()["default_country"], "GB");
    assert_eq!(updated.data()["default_country_set"], true);
    // Both modes see the workspace's settings.
    let seen = app.get("/v1/workspace", &app.test_key).await.expect(200);
    assert_eq!(seen.data()["name"], "Smile Dental");
    assert_eq!(seen.data()["default_country"], "GB");

    // Bad values are refused and change nothing.
    for (body, field) in [
        (json!({ "default_country": "gb" }), "default_country"),
        (json!({ "default_country": "ZZ" }), "default_country"),
        (json!({ "default_country": "GBR" }), "default_country"),
        (json!({ "name": "" }), "name"),
        (json!({ "name": "x".repeat(121) }), "name"),
    ] {
        let reply = patch(body).await.expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field);
    }
    patch(json!({ "default_country": 5 }))
        .await
        .expect_error(400, "invalid_json");
    let unchanged = app.get("/v1/workspace", &app.live_key).await.expect(200);
    assert_eq!(unchanged.data()["name"], "Smile Dental");
    assert_eq!(unchanged.data()["default_country"], "GB");

    // An absent field stays; null returns to the server default (unset here).
    let kept = patch(json!({ "name": "Smile" })).await.expect(200);
    assert_eq!(kept.data()["default_country"], "GB");
    let cleared = patch(json!({ "default_country": null })).await.expect(200);
    assert_eq!(cleared.read::<WorkspaceOut>().default_country, None);
    assert_eq!(cleared.data()["default_country_set"], false);
}

async fn server_defaults_apply_to_the_workspace(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.portal.default_country = Some("US".into());
        s.server.public_url = Some("https://sms.example.com/".into());
    })
    .await;
    let data = app.get("/v1/workspace", &app.live_key).await.expect(200);
    assert_eq!(data.data()["default_country"], "US");
    assert_eq!(data.data()["default_country_set"], false);
    assert_eq!(
        data.data()["pairing"],
        json!({
            "device_api_url": "https://sms.example.com/mobile/v1",
            "websocket_url": "wss://sms.example.com/v1/phones/connect",
        })
    );
    // The workspace's own country wins over the server's.
    app.patch(
        "/v1/workspace",
        &app.live_key,
        json!({ "default_country": "DE" }),
    )
    .await
    .expect(200);
    let lookup = app
        .get("/v1/numbers/lookup?number=030%20123456", &app.live_key)
        .await
        .expect(200);
    assert_eq!(lookup.data()["e164"], "+4930123456");
}

async fn lookup(app: &TestApp, query: &str) -> Value {
    app.get(&format!("/v1/numbers/lookup?{query}"), &app.live_key)
        .await
        .expect(200)
        .data()
        .clone()
}

async fn numbers_are_looked_up_as_people_type_them(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.portal.default_country = Some("US".into())).await;
    assert_eq!(
        lookup(&app, "number=(415)%20555-0177").await,
        json!({
            "input": "(415) 555-0177",
            "valid": true,
            "e164": "+14155550177",
            "country": "US",
            "type": "fixed_line_or_mobile",
            "premium_rate": false,
            "reason": null,
        })
    );
    let premium = lookup(&app, "number=%2B19005550123").await;
    assert_eq!(premium["valid"], true);
    assert_eq!(premium["type"], "premium_rate");
    assert_eq!(premium["premium_rate"], true);
    let uk = lookup(&app, "number=07400%20123456&country=GB").await;
    assert_eq!(uk["e164"], "+447400123456");
    assert_eq!(uk["country"], "GB");
    assert_eq!(uk["type"], "mobile");

    // Text that is no number is an answer in plain words, not an error.
    for query in ["number=hello", "number=12", "number=%2B999"] {
        let answer = lookup(&app, query).await;
        assert_eq!(answer["valid"], false, "{query}: {answer}");
        assert_null(&answer, "e164");
        assert_null(&answer, "type");
        assert!(!answer["reason"].as_str().unwrap().is_empty(), "{query}");
    }
    assert_eq!(
        lookup(&app, "number=hello").await["reason"],
        "this doesn't look like a phone number"
    );

    // Bounded input, a known country, a number to look up.
    for (query, field) in [
        (format!("number={}", "1".repeat(65)), "number"),
        ("country=US".to_string(), "number"),
        ("number=4155550177&country=usa".to_string(), "country"),
        ("number=4155550177&country=ZZ".to_string(), "country"),
    ] {
        let reply = app
            .get(&format!("/v1/numbers/lookup?{query}"), &app.live_key)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], field, "{query}");
    }
    let longest = lookup(&app, &format!("number={}", "1".repeat(64))).await;
    assert_eq!(longest["valid"], false);
}

async fn national_numbers_need_a_country(backend: Backend) {
    let app = spawn_app(backend).await;
    let answer = lookup(&app, "number=4155550177").await;
    assert_eq!(answer["valid"], false);
    assert!(answer["reason"].as_str().unwrap().contains("country"));
    let with = lookup(&app, "number=4155550177&country=US").await;
    assert_eq!(with["e164"], "+14155550177");
}

/// The pairing URLs of `GET /v1/workspace` and the device API's inbound URL as a client with
/// forwarded headers gets them: unchanged from an untrusted peer, the forwarded scheme and host
/// from a peer in `server.trusted_proxies`.
async fn forwarded_headers_count_only_from_trusted_proxies(backend: Backend) {
    let spoofed = [
        ("x-forwarded-host", "attacker.example"),
        ("x-forwarded-proto", "https"),
        ("forwarded", "host=evil.example;proto=https"),
    ];
    let urls = |app: &TestApp, token: String| {
        let (client, address, key) = (
            app.client.clone(),
            app.address.clone(),
            app.live_key.clone(),
        );
        async move {
            let mut request = client
                .get(format!("{address}/v1/workspace"))
                .insert_header(("x-api-key", key));
            let mut hooks = client
                .get(format!("{address}/mobile/v1/webhooks"))
                .bearer_auth(token);
            for header in spoofed {
                request = request.insert_header(header);
                hooks = hooks.insert_header(header);
            }
            let workspace: Value = request.send().await.unwrap().json().await.unwrap();
            let hooks: Value = hooks.send().await.unwrap().json().await.unwrap();
            (
                workspace["data"]["pairing"]["device_api_url"].clone(),
                workspace["data"]["pairing"]["websocket_url"].clone(),
                hooks[0]["url"].as_str().unwrap().to_string(),
            )
        }
    };

    let app = spawn_app(backend).await;
    let (_, token) = app.pair_phone(SENDER).await;
    let (device_api, websocket, inbound) = urls(&app, token).await;
    assert_eq!(device_api, format!("{}/mobile/v1", app.address));
    assert_eq!(
        websocket,
        format!(
            "{}/v1/phones/connect",
            app.address.replacen("http", "ws", 1)
        )
    );
    assert!(
        inbound.starts_with(&format!("{}/mobile/v1/inbound/", app.address)),
        "{inbound}"
    );

    let trusting = spawn_app_with(backend, |s| {
        s.server.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
    })
    .await;
    let (_, token) = trusting.pair_phone(SENDER).await;
    let (device_api, websocket, inbound) = urls(&trusting, token).await;
    // The X-Forwarded-* headers (what the nearest proxy set) win over Forwarded.
    assert_eq!(device_api, "https://attacker.example/mobile/v1");
    assert_eq!(websocket, "wss://attacker.example/v1/phones/connect");
    assert!(
        inbound.starts_with("https://attacker.example/mobile/v1/inbound/"),
        "{inbound}"
    );
}

backend_tests!(
    forwarded_headers_count_only_from_trusted_proxies,
    workspace_is_read_with_the_key_and_updated,
    server_defaults_apply_to_the_workspace,
    numbers_are_looked_up_as_people_type_them,
    national_numbers_need_a_country,
);
