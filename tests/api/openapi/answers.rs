//! Real answers of the server, success and error, have the documented statuses, shapes and
//! error codes: one test per resource, each on a fresh app, every answer checked by
//! [`Documented`].

use super::*;

/// The app and its document: each request's answer is checked against the document (its
/// operation found by `template`, the path as documented) and returned. Requests with a body
/// go through `call` with their method.
struct Documented<'a> {
    app: &'a TestApp,
    doc: &'a Value,
}

impl<'a> Documented<'a> {
    fn new(app: &'a TestApp, doc: &'a Value) -> Self {
        Documented { app, doc }
    }

    async fn call(
        &self,
        method: &str,
        template: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let reply = self
            .app
            .request(&method.to_uppercase(), path, key, body)
            .await;
        conforms(self.doc, method, template, &reply);
        reply
    }

    async fn get(&self, template: &str, path: &str, key: Option<&str>) -> Reply {
        self.call("get", template, path, key, None).await
    }

    async fn delete(&self, template: &str, path: &str, key: Option<&str>) -> Reply {
        self.call("delete", template, path, key, None).await
    }
}

/// Messages: send, bulk send, batch status, read, list, cancel.
async fn messages_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let key = Some(app.test_key.as_str());
    let live = Some(app.live_key.as_str());
    let sent = api.call("post", "/v1/messages/send", "/v1/messages/send", key, Some(json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "hi", "request_id": "r-1" }))).await;
    assert_eq!(sent.status, 202);
    let id = sent.data()["id"].as_str().unwrap().to_string();
    let dup = api.call("post", "/v1/messages/send", "/v1/messages/send", key, Some(json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "hi", "request_id": "r-1" }))).await;
    assert_eq!(dup.code(), "duplicate_request");
    for (body, code) in [
        (
            json!({ "from_number": SENDER, "to_number": "12", "content": "x" }),
            "invalid_phone_number",
        ),
        (
            json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "x".repeat(2000) }),
            "content_too_long",
        ),
        (
            json!({ "from_number": SENDER, "to_number": RECIPIENT }),
            "validation_failed",
        ),
        (
            json!({ "from_number": 5, "to_number": RECIPIENT, "content": "x" }),
            "invalid_json",
        ),
        (
            json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "x" }),
            "no_device_available",
        ),
    ] {
        let k = if code == "no_device_available" {
            live
        } else {
            key
        };
        let reply = api
            .call(
                "post",
                "/v1/messages/send",
                "/v1/messages/send",
                k,
                Some(body),
            )
            .await;
        assert_eq!(reply.code(), code);
    }
    let unauth = api
        .call(
            "post",
            "/v1/messages/send",
            "/v1/messages/send",
            None,
            Some(json!({})),
        )
        .await;
    assert_eq!(unauth.code(), "missing_api_key");
    let bad_key = api
        .get("/v1/messages", "/v1/messages", Some("sk_test_nope"))
        .await;
    assert_eq!(bad_key.status, 401);

    let bulk = api.call("post", "/v1/messages/bulk-send", "/v1/messages/bulk-send", key, Some(json!({ "from_number": SENDER, "to_numbers": [RECIPIENT, "+14155550124"], "content": "bulk" }))).await;
    assert_eq!(bulk.status, 202);
    let batch = api
        .call(
            "post",
            "/v1/messages/batch-status",
            "/v1/messages/batch-status",
            key,
            Some(json!({ "message_ids": [id, "nope"] })),
        )
        .await;
    assert_eq!(batch.status, 200);
    app.wait_for_status(&app.test_key, &id, "delivered").await;
    let one = api
        .get("/v1/messages/{id}", &format!("/v1/messages/{id}"), key)
        .await;
    assert_eq!(one.status, 200);
    assert!(one.data()["events"].as_array().unwrap().len() >= 3);
    let listed = api.get("/v1/messages", "/v1/messages?limit=1", key).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.data()["has_more"], true);
    let bad_cursor = api.get("/v1/messages", "/v1/messages?cursor=zz", key).await;
    assert_eq!(bad_cursor.code(), "validation_failed");
    let not_cancelable = api
        .delete("/v1/messages/{id}", &format!("/v1/messages/{id}"), key)
        .await;
    assert_eq!(not_cancelable.code(), "invalid_state");
    let later = api.call("post", "/v1/messages/send", "/v1/messages/send", key, Some(json!({ "from_number": SENDER, "to_number": RECIPIENT, "content": "later", "scheduled_for": "2999-01-01T00:00:00Z" }))).await;
    let later_id = later.data()["id"].as_str().unwrap();
    let canceled = api
        .delete(
            "/v1/messages/{id}",
            &format!("/v1/messages/{later_id}"),
            key,
        )
        .await;
    assert_eq!(canceled.status, 200);
    let missing = api
        .get(
            "/v1/messages/{id}",
            &format!("/v1/messages/{}", Uuid::now_v7()),
            key,
        )
        .await;
    assert_eq!(missing.code(), "not_found");
}

/// Phones: pair, read, list, patch the pace, rotate the token, delete.
async fn phones_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let live = Some(app.live_key.as_str());
    let paired = api
        .call(
            "post",
            "/v1/phones",
            "/v1/phones",
            live,
            Some(json!({ "phone_number": SENDER, "name": "desk" })),
        )
        .await;
    assert_eq!(paired.status, 201);
    let phone_id = paired.data()["id"].as_str().unwrap().to_string();
    let phone_path = format!("/v1/phones/{phone_id}");
    let bad_phone = api
        .call(
            "post",
            "/v1/phones",
            "/v1/phones",
            live,
            Some(json!({ "phone_number": "x" })),
        )
        .await;
    assert_eq!(bad_phone.code(), "invalid_phone_number");
    // With health and an open alert (docs/api.md, "Phone health"), as documented too.
    let token = paired.data()["device_token"].as_str().unwrap().to_string();
    let mut device = app.connect_phone(&token).await;
    device
        .send_text(
            r#"{"type":"status","battery_percent":10,"charging":false,"network":"wifi","sims":[{"slot":1,"carrier":"T"}]}"#,
        )
        .await;
    crate::helpers::eventually(
        "the low battery alert shows",
        std::time::Duration::from_secs(10),
        async || {
            app.get(&phone_path, &app.live_key).await.data()["alerts"][0]["kind"] == "low_battery"
        },
    )
    .await;
    assert_eq!(api.get("/v1/phones", "/v1/phones", live).await.status, 200);
    assert_eq!(
        api.get("/v1/phones/{id}", &phone_path, live).await.status,
        200
    );
    let patched = api
        .call(
            "patch",
            "/v1/phones/{id}",
            &phone_path,
            live,
            Some(json!({ "name": null, "pace": { "per_minute": 2, "per_30_minutes": 10 } })),
        )
        .await;
    assert_eq!(patched.data()["pace"]["per_minute"], 2);
    let bad_pace = api
        .call(
            "patch",
            "/v1/phones/{id}",
            &phone_path,
            live,
            Some(json!({ "pace": { "per_minute": 2 } })),
        )
        .await;
    assert_eq!(bad_pace.code(), "validation_failed");
    let rotated = api
        .call(
            "post",
            "/v1/phones/{id}/rotate-token",
            &format!("{phone_path}/rotate-token"),
            live,
            None,
        )
        .await;
    assert!(
        rotated.data()["device_token"]
            .as_str()
            .unwrap()
            .starts_with("dt_")
    );
    let no_token = api
        .get("/v1/phones/connect", "/v1/phones/connect", None)
        .await;
    assert_eq!(no_token.status, 401);
    assert_eq!(
        api.delete("/v1/phones/{id}", &phone_path, live)
            .await
            .status,
        200
    );
    let gone = api.delete("/v1/phones/{id}", &phone_path, live).await;
    assert_eq!(gone.code(), "not_found");
}

/// Pools: create, list, read, change, delete, their refusals, and a send from a pool.
async fn pools_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let live = Some(app.live_key.as_str());
    let (phone_id, token) = app.pair_phone(SENDER).await;
    let _phone = app.connect_phone(&token).await;
    app.wait_online(&phone_id, true).await;
    let body = json!({ "name": "fleet", "phone_ids": [phone_id] });
    let created = api
        .call("post", "/v1/pools", "/v1/pools", live, Some(body.clone()))
        .await;
    assert_eq!(created.status, 201);
    let again = api
        .call("post", "/v1/pools", "/v1/pools", live, Some(body))
        .await;
    assert_eq!(again.code(), "already_exists");
    let bad = api
        .call(
            "post",
            "/v1/pools",
            "/v1/pools",
            live,
            Some(json!({ "name": "x", "phone_ids": ["nope"] })),
        )
        .await;
    assert_eq!(bad.code(), "validation_failed");
    let path = format!("/v1/pools/{}", created.data()["id"].as_str().unwrap());
    assert_eq!(api.get("/v1/pools", "/v1/pools", live).await.status, 200);
    assert_eq!(api.get("/v1/pools/{id}", &path, live).await.status, 200);
    let patched = api
        .call(
            "patch",
            "/v1/pools/{id}",
            &path,
            live,
            Some(json!({ "name": "desk" })),
        )
        .await;
    assert_eq!(patched.data()["name"], "desk");
    let sent = api
        .call(
            "post",
            "/v1/messages/send",
            "/v1/messages/send",
            live,
            Some(json!({ "from_pool": "desk", "to_number": RECIPIENT, "content": "hi" })),
        )
        .await;
    assert_eq!(sent.status, 202);
    assert_eq!(sent.data()["from_number"], SENDER);
    assert_eq!(api.delete("/v1/pools/{id}", &path, live).await.status, 200);
    assert_eq!(
        api.get("/v1/pools/{id}", &path, live).await.code(),
        "not_found"
    );
}

/// Test inbound: accepted in test mode, refused in live mode and for bad input.
async fn test_inbound_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let key = Some(app.test_key.as_str());
    let live = Some(app.live_key.as_str());
    let inbound_body = json!({ "from_number": RECIPIENT, "to_number": SENDER, "content": "hello" });
    let inbound = api
        .call(
            "post",
            "/v1/test/inbound",
            "/v1/test/inbound",
            key,
            Some(inbound_body.clone()),
        )
        .await;
    assert_eq!(inbound.status, 201);
    for (k, body, code) in [
        (live, inbound_body.clone(), "test_mode_only"),
        (
            key,
            json!({ "from_number": "12", "to_number": SENDER, "content": "x" }),
            "invalid_phone_number",
        ),
        (
            key,
            json!({ "from_number": RECIPIENT, "to_number": SENDER }),
            "validation_failed",
        ),
        (
            key,
            json!({ "from_number": RECIPIENT, "to_number": SENDER, "content": "x".repeat(2000) }),
            "content_too_long",
        ),
    ] {
        let reply = api
            .call(
                "post",
                "/v1/test/inbound",
                "/v1/test/inbound",
                k,
                Some(body),
            )
            .await;
        assert_eq!(reply.code(), code);
    }
}

/// Webhooks: create, read, patch, rotate the key, deliveries, delete.
async fn webhooks_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let key = Some(app.test_key.as_str());
    // Webhooks: a disabled endpoint on a public name from the test resolver, so nothing is
    // ever sent to it.
    app.resolver
        .set("hooks.example", vec!["93.184.216.34".parse().unwrap()]);
    let hook = api.call("post", "/v1/webhooks", "/v1/webhooks", key, Some(json!({ "url": "https://hooks.example/in", "events": ["message.failed"], "enabled": false }))).await;
    assert_eq!(hook.status, 201);
    let hook_id = hook.data()["id"].as_str().unwrap().to_string();
    let hook_path = format!("/v1/webhooks/{hook_id}");
    for (body, code) in [
        (
            json!({ "url": "https://127.0.0.1/in", "events": ["message.sent"] }),
            "validation_failed",
        ),
        (
            json!({ "url": "https://hooks.example/in", "events": ["message.sent"], "phone_numbers": ["1"] }),
            "invalid_phone_number",
        ),
    ] {
        let reply = api
            .call("post", "/v1/webhooks", "/v1/webhooks", key, Some(body))
            .await;
        assert_eq!(reply.code(), code);
    }
    api.get("/v1/webhooks", "/v1/webhooks", key)
        .await
        .expect(200);
    api.get("/v1/webhooks/{id}", &hook_path, key)
        .await
        .expect(200);
    api.call(
        "patch",
        "/v1/webhooks/{id}",
        &hook_path,
        key,
        Some(json!({ "phone_numbers": [SENDER] })),
    )
    .await
    .expect(200);
    api.call(
        "post",
        "/v1/webhooks/{id}/rotate-key",
        &format!("{hook_path}/rotate-key"),
        key,
        None,
    )
    .await
    .expect(200);
    api.get(
        "/v1/webhooks/{id}/deliveries",
        &format!("{hook_path}/deliveries"),
        key,
    )
    .await
    .expect(200);
    let missing = api
        .call(
            "post",
            "/v1/webhooks/{id}/deliveries/{delivery_id}/retry",
            &format!("{hook_path}/deliveries/{}/retry", uuid::Uuid::new_v4()),
            key,
            None,
        )
        .await;
    assert_eq!(missing.code(), "not_found");
    api.delete("/v1/webhooks/{id}", &hook_path, key)
        .await
        .expect(200);
}

/// API keys: list, create, revoke.
async fn api_keys_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let key = Some(app.test_key.as_str());
    api.get("/v1/keys", "/v1/keys", key).await.expect(200);
    let created = api
        .call("post", "/v1/keys", "/v1/keys", key, None)
        .await
        .expect(201);
    let key_path = format!("/v1/keys/{}", created.data()["id"].as_str().unwrap());
    api.delete("/v1/keys/{id}", &key_path, key)
        .await
        .expect(200);
    let missing_key = format!("/v1/keys/{}", Uuid::now_v7());
    let missing = api.delete("/v1/keys/{id}", &missing_key, key).await;
    assert_eq!(missing.code(), "not_found");
}

/// Contacts: create, read, patch, list, import, delete.
async fn contacts_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let key = Some(app.test_key.as_str());
    let contact = api.call("post", "/v1/contacts", "/v1/contacts", key, Some(json!({ "phone_number": RECIPIENT, "first_name": "Ada", "custom_fields": { "a": "b" }, "tags": ["t"] }))).await;
    assert_eq!(contact.status, 201);
    let contact_path = format!("/v1/contacts/{}", contact.data()["id"].as_str().unwrap());
    for (body, code) in [
        (json!({ "phone_number": RECIPIENT }), "already_exists"),
        (json!({ "phone_number": "12" }), "invalid_phone_number"),
        (
            json!({ "phone_number": SENDER, "email": "x" }),
            "validation_failed",
        ),
    ] {
        let reply = api
            .call("post", "/v1/contacts", "/v1/contacts", key, Some(body))
            .await;
        assert_eq!(reply.code(), code);
    }
    assert_eq!(
        api.get("/v1/contacts/{id}", &contact_path, key)
            .await
            .status,
        200
    );
    assert_eq!(
        api.call(
            "patch",
            "/v1/contacts/{id}",
            &contact_path,
            key,
            Some(json!({ "last_name": "L", "email": null, "opted_out": true }))
        )
        .await
        .status,
        200
    );
    let bad = api
        .call(
            "patch",
            "/v1/contacts/{id}",
            &contact_path,
            key,
            Some(json!({ "phone_number": "12" })),
        )
        .await;
    assert_eq!(bad.code(), "invalid_phone_number");
    assert_eq!(
        api.get("/v1/contacts", "/v1/contacts?tag=t&opted_out=true", key)
            .await
            .status,
        200
    );
    let bad = api
        .get("/v1/contacts", "/v1/contacts?opted_out=maybe", key)
        .await;
    assert_eq!(bad.code(), "validation_failed");
    let imported = api.call("post", "/v1/contacts/import", "/v1/contacts/import", key, Some(json!({ "contacts": [{ "phone_number": RECIPIENT }, { "phone_number": SENDER, "tags": ["u"] }] }))).await;
    assert_eq!(imported.data(), &json!({ "created": 1, "updated": 1 }));
    let bad = api
        .call(
            "post",
            "/v1/contacts/import",
            "/v1/contacts/import",
            key,
            Some(json!({ "contacts": [{ "phone_number": "+1" }] })),
        )
        .await;
    assert_eq!(bad.code(), "invalid_phone_number");
    assert_eq!(
        api.delete("/v1/contacts/{id}", &contact_path, key)
            .await
            .status,
        200
    );
    let gone = api.get("/v1/contacts/{id}", &contact_path, key).await;
    assert_eq!(gone.code(), "not_found");
}

/// Campaigns: create, pause, resume, launch, cancel, list, recipients, delete.
async fn campaigns_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let key = Some(app.test_key.as_str());
    let live = Some(app.live_key.as_str());
    // Campaigns: a future start keeps the scheduled one from sending during the checks.
    let created = api.call("post", "/v1/campaigns", "/v1/campaigns", key, Some(json!({ "name": "doc", "from_number": SENDER, "body": "Hi {{name}}",
            "recipients": [{ "to": RECIPIENT, "vars": { "name": "Ann" } }, { "to": "+19005550100" }],
            "scheduled_for": "2999-01-01T00:00:00Z", "launch_now": true }))).await;
    assert_eq!(created.status, 201);
    assert_eq!(created.data()["status"], "scheduled");
    let campaign = created.data()["id"].as_str().unwrap().to_string();
    let path = format!("/v1/campaigns/{campaign}");
    for (action, status) in [
        ("pause", 200),
        ("resume", 200),
        ("launch", 409),
        ("cancel", 200),
    ] {
        let template = format!("/v1/campaigns/{{id}}/{action}");
        let reply = api
            .call("post", &template, &format!("{path}/{action}"), key, None)
            .await;
        assert_eq!(reply.status, status, "{action}");
    }
    let draft = api.call("post", "/v1/campaigns", "/v1/campaigns", key, Some(json!({ "name": "draft", "from_number": SENDER, "body": "x", "recipients": [{ "to": RECIPIENT }] }))).await;
    assert_eq!(draft.data()["status"], "draft");
    let invalid = api.call("post", "/v1/campaigns", "/v1/campaigns", key, Some(json!({ "name": "bad", "from_number": SENDER, "body": "x", "recipients": [{ "to": "12" }] }))).await;
    assert_eq!(invalid.code(), "invalid_phone_number");
    let unpaired = api.call("post", "/v1/campaigns", "/v1/campaigns", live, Some(json!({ "name": "live", "from_number": "+14155550999", "body": "x", "recipients": [{ "to": RECIPIENT }] }))).await;
    assert_eq!(unpaired.code(), "validation_failed");
    let one = api.get("/v1/campaigns/{id}", &path, key).await;
    assert_eq!(one.data()["status"], "canceled");
    let listed = api.get("/v1/campaigns", "/v1/campaigns?limit=1", key).await;
    assert_eq!(listed.data()["has_more"], true);
    let bad_status = api
        .get("/v1/campaigns", "/v1/campaigns?status=done", key)
        .await;
    assert_eq!(bad_status.code(), "validation_failed");
    let recipients = api
        .get(
            "/v1/campaigns/{id}/recipients",
            &format!("{path}/recipients"),
            key,
        )
        .await;
    assert_eq!(recipients.data()["recipients"][1]["status"], "skipped");
    let missing = api
        .get(
            "/v1/campaigns/{id}",
            &format!("/v1/campaigns/{}", Uuid::now_v7()),
            key,
        )
        .await;
    assert_eq!(missing.code(), "not_found");
    let later = api.call("post", "/v1/campaigns", "/v1/campaigns", key, Some(json!({ "name": "later", "from_number": SENDER, "body": "x", "recipients": [{ "to": RECIPIENT }],
            "scheduled_for": "2999-01-01T00:00:00Z", "launch_now": true }))).await;
    let later = format!("/v1/campaigns/{}", later.data()["id"].as_str().unwrap());
    let scheduled = api.delete("/v1/campaigns/{id}", &later, key).await;
    assert_eq!(scheduled.code(), "invalid_state");
    let removed = api.delete("/v1/campaigns/{id}", &path, key).await;
    assert_eq!(removed.status, 200);
}

/// AI: settings, drafts, sending and discarding a draft.
async fn ai_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let key = Some(app.test_key.as_str());
    let settings = api.call("put", "/v1/ai/settings", "/v1/ai/settings", key, Some(json!({ "enabled": true, "mode": "draft", "rules": [{ "keywords": ["hours"], "reply": "9 to 5" }] }))).await;
    assert_eq!(settings.status, 200);
    let bad = api
        .call(
            "put",
            "/v1/ai/settings",
            "/v1/ai/settings",
            key,
            Some(json!({ "enabled": true, "mode": "sometimes" })),
        )
        .await;
    assert_eq!(bad.code(), "validation_failed");
    let read = api.get("/v1/ai/settings", "/v1/ai/settings", key).await;
    assert_eq!(read.data()["mode"], "draft");
    let asked = app.test_inbound("+14155550177", "Your hours?").await;
    let mut draft = Value::Null;
    for _ in 0..100 {
        let page = api
            .get("/v1/ai/drafts", "/v1/ai/drafts?status=pending", key)
            .await;
        if let Some(found) = page.data()["drafts"].as_array().and_then(|d| d.first()) {
            draft = found.clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(draft["message_id"], asked["id"]);
    let draft_path = format!("/v1/ai/drafts/{}", draft["id"].as_str().unwrap());
    let one = api.get("/v1/ai/drafts/{id}", &draft_path, key).await;
    assert_eq!(one.data()["status"], "pending");
    let sent = api
        .call(
            "post",
            "/v1/ai/drafts/{id}/send",
            &format!("{draft_path}/send"),
            key,
            Some(json!({ "content": "Open 9 to 5" })),
        )
        .await;
    assert_eq!(sent.status, 202);
    let again = api
        .call(
            "post",
            "/v1/ai/drafts/{id}/discard",
            &format!("{draft_path}/discard"),
            key,
            None,
        )
        .await;
    assert_eq!(again.code(), "invalid_state");
}

/// The portal's routes: workspace, number lookup, idempotent creates.
async fn portal_answer_as_documented(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let key = Some(app.test_key.as_str());
    // The portal's routes (docs/api.md, "Workspace", "Number lookup", "Idempotent creates").
    let workspace = api.get("/v1/workspace", "/v1/workspace", key).await;
    assert_eq!(workspace.status, 200);
    let renamed = api
        .call(
            "patch",
            "/v1/workspace",
            "/v1/workspace",
            key,
            Some(json!({ "name": "Clinic", "default_country": "US" })),
        )
        .await;
    assert_eq!(renamed.status, 200);
    let refused = api
        .call(
            "patch",
            "/v1/workspace",
            "/v1/workspace",
            key,
            Some(json!({ "default_country": "XX" })),
        )
        .await;
    assert_eq!(refused.code(), "validation_failed");
    for query in ["number=4155550177", "number=hello"] {
        let found = api
            .get(
                "/v1/numbers/lookup",
                &format!("/v1/numbers/lookup?{query}"),
                key,
            )
            .await;
        assert_eq!(found.status, 200);
    }
    let contact = json!({ "phone_number": "+14155550999", "request_id": "doc-1" });
    let created = api
        .call(
            "post",
            "/v1/contacts",
            "/v1/contacts",
            key,
            Some(contact.clone()),
        )
        .await;
    assert_eq!(created.status, 201);
    let repeated = api
        .call("post", "/v1/contacts", "/v1/contacts", key, Some(contact))
        .await;
    assert_eq!(repeated.code(), "duplicate_request");
}

/// Phone stats: a phone's figures with a delivery and a failure (every field filled), an empty
/// day, a refused `days` and an unknown phone.
async fn phone_stats_answer_as_documented(backend: Backend) {
    use smsgw::domain::protocol::PhoneFrame;
    let app = spawn_app_with(backend, |s| s.messages.max_send_attempts = 1).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let live = Some(app.live_key.as_str());
    let (phone_id, mut phone) = app.online_phone(SENDER).await;
    let path = format!("/v1/phones/{phone_id}/stats");
    let template = "/v1/phones/{id}/stats";
    for failure in [None, Some("RESULT_ERROR_NO_SERVICE")] {
        let id: Uuid = app.send_live("counted").await.parse().unwrap();
        assert_eq!(phone.expect_send().await.0, id);
        let frame = match failure {
            None => PhoneFrame::Delivered {
                message_id: id,
                reference: Some(format!("d-{id}")),
            },
            Some(error) => PhoneFrame::Failed {
                message_id: id,
                error: error.into(),
                reference: Some(format!("f-{id}")),
            },
        };
        phone.report_acked(frame).await;
    }
    crate::helpers::eventually(
        "both counted",
        std::time::Duration::from_secs(10),
        async || app.get(&path, &app.live_key).await.data()["totals"]["failed"] == 1,
    )
    .await;
    let figures = api.get(template, &path, live).await;
    assert_eq!(figures.status, 200);
    let totals = &figures.data()["totals"];
    assert_eq!(totals["delivered"], 1);
    assert!(totals["median_seconds_to_deliver"].is_number(), "{totals}");
    assert_eq!(totals["failed_by_reason"][0]["count"], 1);
    let refused = api.get(template, &format!("{path}?days=91"), live).await;
    assert_eq!(refused.code(), "validation_failed");
    let unknown = api
        .get(
            template,
            &format!("/v1/phones/{}/stats", Uuid::new_v4()),
            live,
        )
        .await;
    assert_eq!(unknown.code(), "not_found");
}

/// A rate-limited answer is the documented 429 with its Retry-After header.
async fn rate_limited_answer_is_documented(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.limits.api_per_second = 1).await;
    let doc = fetch_document(&app).await;
    let api = Documented::new(&app, &doc);
    let mut limited = None;
    for _ in 0..10 {
        let reply = api
            .get("/v1/phones", "/v1/phones", Some(&app.live_key))
            .await;
        if reply.status == 429 {
            limited = Some(reply);
            break;
        }
    }
    let reply = limited.expect("the per-key rate applies");
    assert_eq!(reply.code(), "rate_limited");
    let wait: u64 = reply.headers["retry-after"].parse().unwrap();
    assert!(wait >= 1);
}

backend_tests!(
    rate_limited_answer_is_documented,
    messages_answer_as_documented,
    phones_answer_as_documented,
    pools_answer_as_documented,
    test_inbound_answer_as_documented,
    webhooks_answer_as_documented,
    api_keys_answer_as_documented,
    contacts_answer_as_documented,
    campaigns_answer_as_documented,
    ai_answer_as_documented,
    portal_answer_as_documented,
    phone_stats_answer_as_documented,
);
