//! The OpenAPI document (`GET /openapi.json`) and the reference page (`GET /docs`): the document
//! and the routes cannot drift (every documented operation is served, every other method on its
//! path is 405, no `/v1` route is registered outside the route list), and real answers have the
//! documented statuses, shapes and error codes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use smsgw::error::ErrorCode;
use uuid::Uuid;

use crate::backend_tests;
use crate::helpers::{Backend, RECIPIENT, Reply, SENDER, TestApp, spawn_app, spawn_app_with};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

async fn fetch_document(app: &TestApp) -> Value {
    let reply = app.request("GET", "/openapi.json", None, None).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body
}

/// Every (method, path template) of the document.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method).is_some() {
                out.push((method.to_string(), path.clone()));
            }
        }
    }
    out
}

/// Replaces `{param}` segments with a fresh UUID.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|s| {
            if s.starts_with('{') {
                Uuid::now_v7().to_string()
            } else {
                s.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

async fn document_is_openapi_3_1_with_every_route(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "OpenAPI 3.1: {}",
        doc["openapi"]
    );
    let ops = operations(&doc);
    // The routes of docs/api.md that exist so far are all documented.
    for (method, path) in [
        ("post", "/v1/messages/send"),
        ("post", "/v1/messages/bulk-send"),
        ("post", "/v1/messages/batch-status"),
        ("get", "/v1/messages"),
        ("get", "/v1/messages/{id}"),
        ("delete", "/v1/messages/{id}"),
        ("get", "/v1/phones/connect"),
        ("post", "/v1/phones"),
        ("get", "/v1/phones"),
        ("get", "/v1/phones/{id}"),
        ("patch", "/v1/phones/{id}"),
        ("delete", "/v1/phones/{id}"),
        ("post", "/v1/phones/{id}/rotate-token"),
        ("get", "/v1/keys"),
        ("post", "/v1/keys"),
        ("delete", "/v1/keys/{id}"),
    ] {
        assert!(
            ops.contains(&(method.to_string(), path.to_string())),
            "{method} {path} is not in the document"
        );
    }
    let mut ids = BTreeSet::new();
    for (method, path) in &ops {
        assert!(path.starts_with("/v1/"), "{path} is not under /v1");
        let op = &doc["paths"][path][method];
        assert!(
            ids.insert(op["operationId"].as_str().unwrap().to_string()),
            "operationId of {method} {path} is not unique"
        );
        assert!(
            op["responses"]["500"]["x-error-codes"]
                .as_array()
                .is_some_and(|c| c.contains(&json!("internal_error"))),
            "{method} {path} documents the internal error"
        );
        if path != "/v1/phones/connect" {
            assert_eq!(
                op["security"],
                json!([{ "api_key": [] }]),
                "{method} {path}"
            );
            let codes = &op["responses"]["401"]["x-error-codes"];
            assert_eq!(
                codes,
                &json!(["missing_api_key", "invalid_api_key"]),
                "{method} {path}"
            );
            let limited = &op["responses"]["429"];
            assert!(
                limited["x-error-codes"]
                    .as_array()
                    .is_some_and(|c| c.contains(&json!("rate_limited"))),
                "{method} {path}"
            );
            assert_eq!(
                limited["headers"]["Retry-After"]["schema"]["type"], "integer",
                "{method} {path}"
            );
        }
        for (status, response) in op["responses"].as_object().unwrap() {
            let status: u16 = status.parse().unwrap();
            if status >= 400 {
                assert!(
                    response["x-error-codes"]
                        .as_array()
                        .is_some_and(|c| !c.is_empty()),
                    "{method} {path} {status} lists its error codes"
                );
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorEnvelope"
                );
            }
        }
    }
    // The schema's codes are exactly the enum's (which a unit test checks against docs/api.md).
    let codes = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .clone();
    let expected: Vec<Value> = ErrorCode::iter().map(|code| json!(code.as_str())).collect();
    assert_eq!(codes, expected);
}

/// Drift, through HTTP: every documented operation is served (never the route-level 404 or a
/// 405), and every method the document does not list on a path is 405.
async fn documented_routes_are_served_and_nothing_else(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let ops = operations(&doc);
    let paths: BTreeSet<&String> = ops.iter().map(|(_, p)| p).collect();
    for path in paths {
        let url = concrete(path);
        for method in METHODS {
            let documented = ops.contains(&(method.to_string(), path.clone()));
            if documented && is_event_stream(&doc, method, path) {
                // The answer never ends: only its status and type are checked.
                let response = app
                    .client
                    .request(
                        awc::http::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                        format!("{}{url}", app.address),
                    )
                    .insert_header(("x-api-key", app.test_key.as_str()))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status().as_u16(), 200, "{method} {path}");
                assert_eq!(
                    response.headers().get("content-type").unwrap(),
                    "text/event-stream"
                );
                continue;
            }
            let body = (method != "get" && method != "delete").then(|| json!({}));
            let reply = app
                .request(
                    &method.to_uppercase(),
                    &url,
                    Some(&app.test_key),
                    body.clone(),
                )
                .await;
            if documented {
                assert_ne!(
                    reply.status, 405,
                    "{method} {path} is documented, not served"
                );
                assert_ne!(
                    reply.body["message"], "route not found",
                    "{method} {path} is documented, not served"
                );
                conforms(&doc, method, path, &reply);
            } else {
                assert_eq!(
                    reply.status, 405,
                    "{method} {path} is served but not documented: {:?}",
                    reply.body
                );
            }
        }
    }
}

/// Whether the operation's success answer is a server-sent event stream.
fn is_event_stream(doc: &Value, method: &str, template: &str) -> bool {
    doc["paths"][template][method]["responses"]["200"]["content"]
        .get("text/event-stream")
        .is_some()
}

/// Source scan: the route list (`api::documented_routes()`) is the only place `/v1` routes come from.
#[test]
fn no_v1_route_is_registered_outside_the_route_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect_rust_files(&root, &mut files);
    assert!(files.len() > 10, "the source tree was found");
    let route_list = root.join("api").join("routes.rs");
    let mut all_api_source = String::new();
    let mut annotated = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        if file.starts_with(root.join("api")) {
            all_api_source.push_str(&text);
        }
        // The route list itself, and the load-test harness's bare ceiling server (a separate
        // actix app measured beside ours, never mounted in smsgw's server).
        if *file == route_list || file.starts_with(root.join("loadtest")) {
            continue;
        }
        let name = file.display();
        // Whitespace removed, so a call split over lines by rustfmt is still seen.
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        for call in [
            "web::scope",
            "web::resource",
            "Scope::new",
            "Resource::new",
            ".route",
            "#[get",
            "#[post",
            "#[put",
            "#[patch",
            "#[delete",
            "#[route",
        ] {
            for path in [
                "(\"/v1",
                "(API_PREFIX",
                "(routes::API_PREFIX",
                "(crate::api::routes::API_PREFIX",
            ] {
                assert!(
                    !compact.contains(&format!("{call}{path}")),
                    "{name} registers a /v1 route outside the route list ({call}{path}…): add it \
                     to api::documented_routes(), see \"To add a route\" in docs/architecture.md"
                );
            }
        }
        // Every annotated handler is in the route list.
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("#[utoipa::path(") {
                let handler = lines[i..]
                    .iter()
                    .find_map(|l| {
                        let l = l.trim_start();
                        let rest = l
                            .strip_prefix("pub async fn ")
                            .or_else(|| l.strip_prefix("async fn "))?;
                        rest.split('(').next().map(str::to_string)
                    })
                    .unwrap_or_else(|| panic!("{name}:{}: no handler follows", i + 1));
                annotated.push((name.to_string(), handler));
            }
        }
    }
    assert!(
        annotated.len() >= 13,
        "annotated handlers found: {annotated:?}"
    );
    for (file, handler) in annotated {
        assert!(
            all_api_source.contains(&format!("__path_{handler}>")),
            "{file}: handler {handler} is annotated but not in any documented_routes() list"
        );
    }
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Asserts that `reply` is an answer the document allows for `method path`: a documented
/// status, a body of the documented schema (no undocumented field), and for errors one of the
/// listed error codes.
fn conforms(doc: &Value, method: &str, template: &str, reply: &Reply) {
    let op = &doc["paths"][template][method];
    assert!(op.is_object(), "{method} {template} is not documented");
    let response = &op["responses"][reply.status.to_string()];
    assert!(
        response.is_object(),
        "{method} {template} answered {} which is not documented: {}",
        reply.status,
        reply.body
    );
    if reply.status >= 400 {
        let codes = response["x-error-codes"].as_array().unwrap();
        assert!(
            codes.contains(&reply.body["error_code"]),
            "{method} {template} answered {} {} which is not among {codes:?}",
            reply.status,
            reply.body["error_code"]
        );
    }
    if let Some(schema) = response["content"]["application/json"].get("schema") {
        let mut errors = Vec::new();
        validate(doc, schema, &reply.body, "body", &mut errors);
        assert!(
            errors.is_empty(),
            "{method} {template} {}: the body does not match the document:\n{}\n{}",
            reply.status,
            errors.join("\n"),
            reply.body
        );
    }
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference.trim_start_matches("#/components/schemas/");
            let target = &doc["components"]["schemas"][name];
            assert!(target.is_object(), "dangling $ref {reference}");
            resolve(doc, target)
        }
        None => schema,
    }
}

/// Property names an object schema allows, through `allOf`.
fn known_properties(doc: &Value, schema: &Value, out: &mut BTreeSet<String>) {
    let schema = resolve(doc, schema);
    if let Some(props) = schema["properties"].as_object() {
        out.extend(props.keys().cloned());
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        known_properties(doc, part, out);
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => false,
    }
}

/// A small JSON Schema (2020-12 subset utoipa emits) validator: $ref, allOf, oneOf, anyOf,
/// type, enum, required, properties (closed: unknown fields are errors), items, formats
/// date-time and uuid, exact `^x$` patterns.
fn validate(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    validate_inner(doc, schema, value, at, errors, true);
}

fn validate_inner(
    doc: &Value,
    schema: &Value,
    value: &Value,
    at: &str,
    errors: &mut Vec<String>,
    closed: bool,
) {
    let schema = resolve(doc, schema);
    if let Some(parts) = schema["allOf"].as_array() {
        for part in parts {
            validate_inner(doc, part, value, at, errors, false);
        }
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema[key].as_array() {
            let matching = options
                .iter()
                .filter(|option| {
                    let mut e = Vec::new();
                    validate_inner(doc, option, value, at, &mut e, closed);
                    e.is_empty()
                })
                .count();
            if matching == 0 {
                errors.push(format!("{at}: matches none of {key} {options:?}"));
            }
            return;
        }
    }
    match &schema["type"] {
        Value::String(t) if !type_matches(t, value) => {
            errors.push(format!("{at}: expected {t}, got {value}"));
            return;
        }
        Value::Array(types)
            if !types
                .iter()
                .any(|t| t.as_str().is_some_and(|t| type_matches(t, value))) =>
        {
            errors.push(format!("{at}: expected one of {types:?}, got {value}"));
            return;
        }
        _ => {}
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let Some(text) = value.as_str() {
        match schema["format"].as_str() {
            Some("date-time") if chrono::DateTime::parse_from_rfc3339(text).is_err() => {
                errors.push(format!("{at}: {text} is not a date-time"));
            }
            Some("uuid") if Uuid::parse_str(text).is_err() => {
                errors.push(format!("{at}: {text} is not a uuid"));
            }
            _ => {}
        }
        if let Some(pattern) = schema["pattern"].as_str()
            && let Some(exact) = pattern.strip_prefix('^').and_then(|p| p.strip_suffix('$'))
            && text != exact
        {
            errors.push(format!("{at}: {text} does not match {pattern}"));
        }
    }
    if let Some(object) = value.as_object() {
        for name in schema["required"].as_array().into_iter().flatten() {
            let name = name.as_str().unwrap();
            if !object.contains_key(name) {
                errors.push(format!("{at}: required field {name} is missing"));
            }
        }
        if let Some(props) = schema["properties"].as_object() {
            for (name, sub) in props {
                if let Some(v) = object.get(name) {
                    validate_inner(doc, sub, v, &format!("{at}.{name}"), errors, true);
                }
            }
        }
        if closed && (schema.get("properties").is_some() || schema.get("allOf").is_some()) {
            let mut known = BTreeSet::new();
            known_properties(doc, schema, &mut known);
            for name in object.keys() {
                if !known.contains(name) {
                    errors.push(format!("{at}.{name}: not in the document"));
                }
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            validate_inner(doc, items, item, &format!("{at}[{i}]"), errors, true);
        }
    }
}

/// The validator itself rejects what it must (so a passing conformance test means something).
#[test]
fn the_validator_rejects_drift() {
    let doc = json!({ "components": { "schemas": {
        "Base": { "type": "object", "required": ["id"], "properties": {
            "id": { "type": "string", "format": "uuid" },
            "at": { "type": ["string", "null"], "format": "date-time" } } },
        "Wide": { "allOf": [ { "$ref": "#/components/schemas/Base" },
            { "type": "object", "properties": { "n": { "type": "integer" } } } ] }
    } } });
    let wide = json!({ "$ref": "#/components/schemas/Wide" });
    let id = Uuid::now_v7().to_string();
    let check = |value: Value| {
        let mut errors = Vec::new();
        validate(&doc, &wide, &value, "body", &mut errors);
        errors
    };
    assert!(check(json!({ "id": id, "at": null, "n": 1 })).is_empty());
    assert!(check(json!({ "id": id, "at": "2026-01-01T00:00:00.000+00:00" })).is_empty());
    assert!(
        !check(json!({ "id": id, "extra": 1 })).is_empty(),
        "unknown field"
    );
    assert!(
        !check(json!({ "n": 1 })).is_empty(),
        "missing required field"
    );
    assert!(
        !check(json!({ "id": id, "n": "1" })).is_empty(),
        "wrong type"
    );
    assert!(!check(json!({ "id": "x" })).is_empty(), "bad uuid");
    assert!(
        !check(json!({ "id": id, "at": "yesterday" })).is_empty(),
        "bad date-time"
    );
}

/// The app and its document: each request's answer is checked against the document (its
/// operation found by `template`, the path as documented) and returned. Requests with a body
/// go through `call` with their method.
struct Documented<'a> {
    app: &'a TestApp,
    doc: &'a Value,
}

impl Documented<'_> {
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

/// Real answers of the server, success and error, match the documented status, shape and
/// error codes.
async fn real_answers_match_the_document(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let api = Documented {
        app: &app,
        doc: &doc,
    };
    let key = Some(app.test_key.as_str());
    let live = Some(app.live_key.as_str());

    // Messages.
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

    // Phones.
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

    // Test inbound.
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

    // API keys.
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

    // Contacts.
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

    // AI drafts.
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

/// `GET /docs` is a complete page served by the binary: every operation and schema of the
/// document, internal links that resolve, nothing loaded from elsewhere.
async fn docs_page_is_self_contained(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = fetch_document(&app).await;
    let page = app.fetch("/docs", &[]).await;
    assert_eq!(page.status, 200);
    let content_type = page.header("content-type");
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let html = page.body;
    assert!(html.starts_with("<!doctype html>"));
    // Its icon is one the binary serves (no request for a missing /favicon.ico).
    assert!(
        html.contains(r#"<link rel="icon" href="/portal/favicon.svg""#),
        "no favicon link"
    );
    // Operations are filed under the tag their handler names, not all under one.
    let mut tags = BTreeSet::new();
    for (method, path) in operations(&doc) {
        let tag = doc["paths"][&path][&method]["tags"][0].as_str();
        let tag = tag.unwrap_or_else(|| panic!("{method} {path} has no tag"));
        tags.insert(tag.to_string());
    }
    for tag in [
        "messages",
        "phones",
        "contacts",
        "campaigns",
        "webhooks",
        "ai",
    ] {
        assert!(tags.contains(tag), "no operation tagged {tag}: {tags:?}");
        assert!(
            html.contains(&format!("<h2>{tag}</h2>")),
            "no /docs section {tag}"
        );
    }
    for (method, path) in operations(&doc) {
        let id = doc["paths"][&path][&method]["operationId"]
            .as_str()
            .unwrap();
        assert!(
            html.contains(&format!("id=\"op-{id}\"")),
            "{method} {path} has a section"
        );
        assert!(
            html.contains(&format!("<code>{path}</code>")),
            "{path} is shown"
        );
    }
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(
            html.contains(&format!("id=\"schema-{name}\"")),
            "schema {name}"
        );
    }
    // Every internal link has its target; nothing points outside the server.
    for piece in html.split("href=\"").skip(1) {
        let target = piece.split('"').next().unwrap();
        if let Some(anchor) = target.strip_prefix('#') {
            assert!(
                html.contains(&format!("id=\"{anchor}\"")),
                "dangling link #{anchor}"
            );
        } else {
            assert!(target.starts_with('/'), "external link {target}");
        }
    }
    for external in ["src=", "http://", "https://", "<script", "@import", "url("] {
        assert!(
            !html.contains(external),
            "the page loads nothing from elsewhere ({external})"
        );
    }
}

/// A rate-limited answer is the documented 429 with its Retry-After header.
async fn rate_limited_answer_is_documented(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.limits.api_per_second = 1).await;
    let doc = fetch_document(&app).await;
    let api = Documented {
        app: &app,
        doc: &doc,
    };
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
    docs_page_is_self_contained,
    document_is_openapi_3_1_with_every_route,
    documented_routes_are_served_and_nothing_else,
    real_answers_match_the_document,
);
