//! Answers checked against the document's schemas with the `jsonschema` crate (JSON Schema
//! 2020-12, every `$ref` resolved inside the served document), and the proof that the check
//! catches drift.
//!
//! The document's object schemas are open, as JSON Schema's are by default; a test wants
//! every field of an answer documented, so [`closed`] closes them (`unevaluatedProperties:
//! false`) before validating. Event data is JSON text (`contentMediaType` with a
//! `contentSchema`, which JSON Schema only annotates): [`event_errors`] parses it first and
//! [`closed`] puts the `contentSchema` in place of the text's schema.

use jsonschema::{Draft, Resource};

use super::*;

/// The URI the (closed) document is registered under; `$ref`s inside it resolve against it.
const DOCUMENT_URI: &str = "urn:smsgw:openapi";

/// Asserts that `reply` is an answer the document allows for `method path`: a documented
/// status, a body of the documented schema (no undocumented field), and for errors one of the
/// listed error codes.
pub(super) fn conforms(doc: &Value, method: &str, template: &str, reply: &Reply) {
    let op = &doc["paths"][template][method];
    assert!(op.is_object(), "{method} {template} is not documented");
    let status = reply.status.to_string();
    let response = &op["responses"][&status];
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
    if response["content"]["application/json"]
        .get("schema")
        .is_some()
    {
        let pointer = [
            "paths",
            template,
            method,
            "responses",
            &status,
            "content",
            "application/json",
            "schema",
        ];
        let errors = errors_at(doc, &pointer, &reply.body);
        assert!(
            errors.is_empty(),
            "{method} {template} {}: the body does not match the document:\n{}\n{}",
            reply.status,
            errors.join("\n"),
            reply.body
        );
    }
}

/// How `event` (`{event, data}`, `data` the raw text of the `data:` line) differs from what
/// the document allows on the `text/event-stream` answer of `method path`.
pub(super) fn event_errors(
    doc: &Value,
    method: &str,
    template: &str,
    event: &Value,
) -> Vec<String> {
    let pointer = [
        "paths",
        template,
        method,
        "responses",
        "200",
        "content",
        "text/event-stream",
        "schema",
    ];
    assert!(
        doc.pointer(&json_pointer(&pointer)).is_some(),
        "{method} {template} declares no event schema"
    );
    let mut parsed = event.clone();
    match event.get("data") {
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(data) => parsed["data"] = data,
            Err(e) => return vec![format!("event.data: not JSON text: {e}")],
        },
        Some(other) => return vec![format!("event.data: not text: {other}")],
        None => {}
    }
    errors_at(doc, &pointer, &parsed)
}

/// Asserts that `event` is one the document allows (see [`event_errors`]).
pub(super) fn conforms_event(doc: &Value, method: &str, template: &str, event: &Value) {
    let errors = event_errors(doc, method, template, event);
    assert!(
        errors.is_empty(),
        "{method} {template}: the event does not match the document:\n{}\n{event}",
        errors.join("\n")
    );
}

/// How `value` differs from the schema at `pointer` (JSON Pointer segments) in the closed
/// `doc`: one line per error, with where in `value` it is.
fn errors_at(doc: &Value, pointer: &[&str], value: &Value) -> Vec<String> {
    // A fragment is a URI part: `{` and `}` of path templates are percent-encoded.
    let fragment = json_pointer(pointer)
        .replace('{', "%7B")
        .replace('}', "%7D");
    let validator = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .should_validate_formats(true)
        .with_resource(DOCUMENT_URI, Resource::from_contents(closed(doc)))
        .build(&json!({ "$ref": format!("{DOCUMENT_URI}#{fragment}") }))
        .unwrap_or_else(|e| panic!("the schema at {pointer:?} does not compile: {e}"));
    validator
        .iter_errors(value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// `segments` as a JSON Pointer (RFC 6901: `~` and `/` escaped).
fn json_pointer(segments: &[&str]) -> String {
    segments
        .iter()
        .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// The document with its schemas closed: every object schema with `properties` or `allOf`
/// (and no `additionalProperties` of its own) refuses a field it does not declare, and JSON
/// text with a `contentSchema` is validated as the parsed value.
fn closed(doc: &Value) -> Value {
    let components = doc["components"]["schemas"].clone();
    let mut doc = doc.clone();
    if let Some(schemas) = doc["components"]["schemas"].as_object_mut() {
        for schema in schemas.values_mut() {
            close(schema, &components, false);
        }
    }
    if let Some(paths) = doc["paths"].as_object_mut() {
        for item in paths.values_mut() {
            for method in METHODS {
                let responses = item[method]["responses"].as_object_mut();
                for response in responses.into_iter().flat_map(|r| r.values_mut()) {
                    let content = response["content"].as_object_mut();
                    for media in content.into_iter().flat_map(|c| c.values_mut()) {
                        if let Some(schema) = media.get_mut("schema") {
                            close(schema, &components, false);
                        }
                    }
                }
            }
        }
    }
    doc
}

/// Closes `schema` and the schemas inside it (see [`closed`]). An `allOf` part stays `open`:
/// the whole closes, after all parts have declared their fields; a part that is a `$ref` is
/// inlined, so the shared component keeps being closed where it is used on its own.
fn close(schema: &mut Value, components: &Value, open: bool) {
    if schema["contentMediaType"] == "application/json"
        && let Some(content) = schema.get("contentSchema")
    {
        *schema = content.clone();
    }
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(parts) = object.get_mut("allOf").and_then(Value::as_array_mut) {
        for part in parts {
            if let Some(name) = part["$ref"]
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                *part = components[name].clone();
            }
            close(part, components, true);
        }
    }
    for key in ["oneOf", "anyOf"] {
        for option in object
            .get_mut(key)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            close(option, components, open);
        }
    }
    if let Some(properties) = object.get_mut("properties").and_then(Value::as_object_mut) {
        for property in properties.values_mut() {
            close(property, components, false);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(inner) = object.get_mut(key) {
            close(inner, components, false);
        }
    }
    let declares = object.contains_key("properties") || object.contains_key("allOf");
    if !open && declares && !object.contains_key("additionalProperties") {
        object.insert("unevaluatedProperties".into(), Value::Bool(false));
    }
}

/// The check itself refuses what it must, so a passing conformance test means something:
/// a wrong answer fed to it fails.
#[test]
fn the_validator_rejects_drift() {
    let doc = json!({
        "paths": { "/things/{id}": { "get": { "responses": { "200": { "content": {
            "application/json": { "schema": { "$ref": "#/components/schemas/Wide" } } } } } } } },
        "components": { "schemas": {
            "Base": { "type": "object", "required": ["id"], "properties": {
                "id": { "type": "string", "format": "uuid" },
                "at": { "type": ["string", "null"], "format": "date-time" },
                "inner": { "type": "object", "properties": { "x": { "type": "integer" } } } } },
            "Wide": { "allOf": [ { "$ref": "#/components/schemas/Base" },
                { "type": "object", "properties": { "n": { "type": "integer" } } } ] }
        } }
    });
    let id = Uuid::now_v7().to_string();
    let check = |value: Value| {
        errors_at(
            &doc,
            &[
                "paths",
                "/things/{id}",
                "get",
                "responses",
                "200",
                "content",
                "application/json",
                "schema",
            ],
            &value,
        )
    };
    assert_eq!(
        check(json!({ "id": id, "at": null, "n": 1 })),
        Vec::<String>::new()
    );
    assert_eq!(
        check(json!({ "id": id, "at": "2026-01-01T00:00:00.000+00:00", "inner": { "x": 1 } })),
        Vec::<String>::new()
    );
    for (wrong, why) in [
        (json!({ "id": id, "extra": 1 }), "unknown field"),
        (
            json!({ "id": id, "inner": { "y": 1 } }),
            "unknown nested field",
        ),
        (json!({ "n": 1 }), "missing required field"),
        (json!({ "id": id, "n": "1" }), "wrong type"),
        (json!({ "id": "x" }), "bad uuid"),
        (json!({ "id": id, "at": "yesterday" }), "bad date-time"),
    ] {
        assert!(!check(wrong.clone()).is_empty(), "{why}: {wrong} passed");
    }
    // The shared component stays closed where it is used on its own.
    let base = json!({ "$ref": "#/components/schemas/Base" });
    let mut doc = doc.clone();
    doc["paths"]["/things/{id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] =
        base;
    let errors = errors_at(
        &doc,
        &[
            "paths",
            "/things/{id}",
            "get",
            "responses",
            "200",
            "content",
            "application/json",
            "schema",
        ],
        &json!({ "id": id, "n": 1 }),
    );
    assert!(
        !errors.is_empty(),
        "a field of the wider schema passed the base"
    );
}

/// A wrong answer fails the check on the real document: a real message as the server
/// answers it passes, and the same answer with an unknown status, an unknown (e.g. renamed)
/// field or a missing field does not.
#[test]
fn a_wrong_answer_fails_the_check() {
    crate::helpers::run(async {
        let app = spawn_app(Backend::Sqlite).await;
        let doc = fetch_document(&app).await;
        let sent = app.send_test(RECIPIENT, "checked").await;
        let id = sent.data()["id"].as_str().unwrap();
        let template = "/v1/messages/{id}";
        let answer = app.get(&format!("/v1/messages/{id}"), &app.test_key).await;
        conforms(&doc, "get", template, &answer);
        let pointer = [
            "paths",
            template,
            "get",
            "responses",
            "200",
            "content",
            "application/json",
            "schema",
        ];
        let right = answer.body;
        let mut wrong = Vec::new();
        let mut unknown_status = right.clone();
        unknown_status["data"]["status"] = json!("teleported");
        wrong.push(("unknown status", unknown_status));
        let mut renamed = right.clone();
        let to = renamed["data"]["to_number"].take();
        renamed["data"].as_object_mut().unwrap().remove("to_number");
        renamed["data"]["to"] = to;
        wrong.push(("renamed field", renamed));
        let mut bad_event = right.clone();
        bad_event["data"]["events"][0]["at"] = json!("yesterday");
        wrong.push(("bad date-time in an item", bad_event));
        let mut not_envelope = right.clone();
        not_envelope["status"] = json!("ok");
        wrong.push(("not the envelope", not_envelope));
        for (why, body) in wrong {
            assert!(
                !errors_at(&doc, &pointer, &body).is_empty(),
                "{why} passed: {body}"
            );
        }
    })
}
