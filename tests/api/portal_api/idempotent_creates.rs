//! Idempotent creates (docs/api.md, "Idempotent creates"): a create carrying a request_id
//! makes its resource once, however often or however fast it is repeated.

use super::*;

/// (path, body) of each create that takes a `request_id`.
fn creates() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/v1/campaigns",
            json!({ "name": "Reminders", "from_number": SENDER, "body": "Hi {{name}}",
                    "recipients": [{ "to": RECIPIENT, "vars": { "name": "Ann" } }],
                    "launch_now": true }),
        ),
        (
            "/v1/contacts",
            json!({ "phone_number": RECIPIENT, "first_name": "Ann" }),
        ),
        ("/v1/phones", json!({ "phone_number": SENDER })),
        (
            "/v1/webhooks",
            json!({ "url": "http://127.0.0.1:9/hook", "events": ["message.sent"] }),
        ),
        (
            "/v1/messages/bulk-send",
            json!({ "from_number": SENDER, "to_numbers": [RECIPIENT, "+14155550124"],
                    "content": "Closed tomorrow" }),
        ),
    ]
}

fn with_request_id(body: &Value, request_id: &str) -> Value {
    let mut body = body.clone();
    body["request_id"] = json!(request_id);
    body
}

/// Resources the create at `path` made so far: items of the first page of its list (a bulk
/// send's: its messages, two per bulk send).
async fn listed(app: &TestApp, path: &str, key: &str) -> usize {
    if path == BULK {
        let list = app.get("/v1/messages?limit=100", key).await.expect(200);
        let sent = list.data()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["content"] == "Closed tomorrow")
            .count();
        return sent / 2;
    }
    let list = app.get(path, key).await.expect(200);
    let name = path.trim_start_matches("/v1/");
    list.data()[name].as_array().unwrap().len()
}

const BULK: &str = "/v1/messages/bulk-send";

/// The status a successful create at `path` answers.
fn created_status(path: &str) -> u16 {
    if path == BULK { 202 } else { 201 }
}

/// The id a repeat names: the resource's (a bulk send's first message).
fn created_id(path: &str, data: &Value) -> Value {
    if path == BULK {
        data["message_ids"][0].clone()
    } else {
        data["id"].clone()
    }
}

async fn a_repeated_request_id_creates_once(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.webhooks.allow_insecure_targets = true).await;
    let key = app.test_key.clone();
    for (path, body) in creates() {
        let body = with_request_id(&body, "form-1");
        let first = app
            .post(path, &key, body.clone())
            .await
            .expect(created_status(path));
        let id = created_id(path, first.data());
        let repeat = app
            .post(path, &key, body.clone())
            .await
            .expect_error(409, "duplicate_request");
        assert_eq!(repeat.data()["id"], id, "{path}");
        assert_eq!(listed(&app, path, &key).await, 1, "{path}");
        // A key is per workspace and mode: the live side has its own.
        assert_ne!(
            app.post(path, &app.live_key, body).await.status,
            409,
            "{path}"
        );
        // Too long a key is refused before anything is written.
        let long = with_request_id(&creates_body(path), &"r".repeat(256));
        let reply = app
            .post(path, &key, long)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(reply.data()["field"], "request_id", "{path}");
    }
}

fn creates_body(path: &str) -> Value {
    creates()
        .into_iter()
        .find(|(p, _)| *p == path)
        .map(|(_, body)| body)
        .unwrap()
}

async fn a_double_click_creates_one_resource(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.webhooks.allow_insecure_targets = true).await;
    let key = app.test_key.clone();
    for (path, body) in creates() {
        let body = with_request_id(&body, "double-click");
        let (a, b) = futures_util::future::join(
            app.post(path, &key, body.clone()),
            app.post(path, &key, body.clone()),
        )
        .await;
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [created_status(path), 409],
            "{path}: {} / {}",
            a.body,
            b.body
        );
        let (created, repeat) = if a.status == 409 { (b, a) } else { (a, b) };
        assert_eq!(repeat.code(), "duplicate_request");
        assert_eq!(
            repeat.data()["id"],
            created_id(path, created.data()),
            "{path}"
        );
        assert_eq!(listed(&app, path, &key).await, 1, "{path}");
    }
}

async fn a_failed_create_leaves_its_request_id_free(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = app.test_key.clone();
    let bad = json!({ "name": "Reminders", "from_number": SENDER, "body": "",
                      "recipients": [{ "to": RECIPIENT }], "request_id": "retry-me" });
    app.post("/v1/campaigns", &key, bad)
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(listed(&app, "/v1/campaigns", &key).await, 0);
    let good = json!({ "name": "Reminders", "from_number": SENDER, "body": "See you",
                       "recipients": [{ "to": RECIPIENT }], "request_id": "retry-me" });
    let created = app
        .post("/v1/campaigns", &key, good.clone())
        .await
        .expect(201);
    let repeat = app
        .post("/v1/campaigns", &key, good)
        .await
        .expect_error(409, "duplicate_request");
    assert_eq!(repeat.data()["id"], created.data()["id"]);
    // The same key on another kind of create is another key.
    app.post(
        "/v1/contacts",
        &key,
        json!({ "phone_number": RECIPIENT, "request_id": "retry-me" }),
    )
    .await
    .expect(201);
}

backend_tests!(
    a_repeated_request_id_creates_once,
    a_double_click_creates_one_resource,
    a_failed_create_leaves_its_request_id_free,
);
