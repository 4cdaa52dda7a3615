//! A small validator of answers against the document's schemas (`$ref`, types, required and
//! unknown properties, formats), and the proof that it catches drift.

use super::*;

/// Asserts that `reply` is an answer the document allows for `method path`: a documented
/// status, a body of the documented schema (no undocumented field), and for errors one of the
/// listed error codes.
pub(super) fn conforms(doc: &Value, method: &str, template: &str, reply: &Reply) {
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

/// How `event` (`{event, data}`, `data` the raw text of the `data:` line) differs from what
/// the document allows on the `text/event-stream` answer of `method path`.
pub(super) fn event_errors(
    doc: &Value,
    method: &str,
    template: &str,
    event: &Value,
) -> Vec<String> {
    let schema = &doc["paths"][template][method]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"];
    assert!(
        schema.is_object(),
        "{method} {template} declares no event schema"
    );
    let mut errors = Vec::new();
    validate(doc, schema, event, "event", &mut errors);
    errors
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
/// date-time and uuid, exact `^x$` patterns, and JSON text (`contentMediaType`
/// `application/json` with a `contentSchema`, which it parses and validates).
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
        if schema["contentMediaType"] == "application/json"
            && let Some(content) = schema.get("contentSchema")
        {
            match serde_json::from_str::<Value>(text) {
                Ok(parsed) => {
                    validate_inner(doc, content, &parsed, &format!("{at}(json)"), errors, true)
                }
                Err(e) => errors.push(format!("{at}: not JSON text: {e}")),
            }
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
    let text = json!({ "type": "string", "contentMediaType": "application/json",
        "contentSchema": { "$ref": "#/components/schemas/Base" } });
    let check_text = |value: Value| {
        let mut errors = Vec::new();
        validate(&doc, &text, &value, "body", &mut errors);
        errors
    };
    assert!(check_text(json!(format!("{{\"id\":\"{id}\"}}"))).is_empty());
    assert!(
        !check_text(json!("{}")).is_empty(),
        "JSON text, missing field"
    );
    assert!(!check_text(json!("not json")).is_empty(), "not JSON text");
    assert!(!check_text(json!({ "id": id })).is_empty(), "not text");
}
