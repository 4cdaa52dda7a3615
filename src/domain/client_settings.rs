//! The settings document of the SMSGate-compatible client API (docs/compat.md, Settings):
//! snake_case sections with known fields, each of a known type and range, so what is stored is
//! bounded; `PUT` replaces it, `PATCH` merges into it. The two secrets
//! (`webhooks.signing_key`, `encryption.passphrase`) are taken out of the document: they are
//! stored sealed and never shown.

use serde_json::{Map, Value};

/// Longest text value (a signing key, a passphrase), in characters.
pub const MAX_TEXT_CHARS: usize = 256;

/// The type and range of one field.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Int {
        min: i64,
        max: i64,
    },
    Bool,
    OneOf(&'static [&'static str]),
    /// A secret text, 1..=[`MAX_TEXT_CHARS`] characters.
    Secret,
}

/// Every settable field: (section, field, kind). The app's own settings, minus `gateway`'s
/// server address and token, which a server never hands out (docs/compat.md, Settings).
const FIELDS: &[(&str, &str, Kind)] = &[
    ("encryption", "passphrase", Kind::Secret),
    (
        "gateway",
        "notification_channel",
        Kind::OneOf(&["AUTO", "SSE_ONLY"]),
    ),
    ("logs", "lifetime_days", Kind::Int { min: 1, max: 3650 }),
    (
        "messages",
        "limit_period",
        Kind::OneOf(&["Disabled", "PerMinute", "PerHour", "PerDay"]),
    ),
    (
        "messages",
        "limit_value",
        Kind::Int {
            min: 0,
            max: 1_000_000,
        },
    ),
    (
        "messages",
        "log_lifetime_days",
        Kind::Int { min: 1, max: 3650 },
    ),
    (
        "messages",
        "processing_order",
        Kind::OneOf(&["LIFO", "FIFO"]),
    ),
    (
        "messages",
        "send_interval_max",
        Kind::Int {
            min: 0,
            max: 86_400,
        },
    ),
    (
        "messages",
        "send_interval_min",
        Kind::Int {
            min: 0,
            max: 86_400,
        },
    ),
    (
        "messages",
        "sim_selection_mode",
        Kind::OneOf(&["OSDefault", "RoundRobin", "Random"]),
    ),
    (
        "ping",
        "interval_seconds",
        Kind::Int {
            min: 0,
            max: 86_400,
        },
    ),
    ("webhooks", "internet_required", Kind::Bool),
    ("webhooks", "retry_count", Kind::Int { min: 0, max: 100 }),
    ("webhooks", "signing_key", Kind::Secret),
];

/// The secret fields, kept out of the document.
pub const SIGNING_KEY: (&str, &str) = ("webhooks", "signing_key");
pub const PASSPHRASE: (&str, &str) = ("encryption", "passphrase");

/// A refused settings body; the text names the field (400 `{message}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// What a secret field asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SecretChange {
    /// Left out: stays as it is.
    #[default]
    Keep,
    /// `null`: removed (a signing key is generated again when next needed).
    Remove,
    Set(String),
}

/// A parsed settings body: every given field checked, `null` meaning "remove".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettingsBody {
    /// (section, field) → new value, None to remove; secrets excluded.
    fields: Vec<(&'static str, &'static str, Option<Value>)>,
    pub signing_key: SecretChange,
    pub passphrase: SecretChange,
}

impl SettingsBody {
    /// Checks a `PUT`/`PATCH` body: an object of known sections, each an object (or `null`) of
    /// known fields of the right type and range (or `null`).
    pub fn parse(body: &Value) -> Result<SettingsBody, SettingsError> {
        let Value::Object(sections) = body else {
            return Err(SettingsError(
                "the settings must be a JSON object of sections".into(),
            ));
        };
        let mut out = SettingsBody::default();
        for (section, fields) in sections {
            let Some(&(section_name, _, _)) = FIELDS.iter().find(|(s, _, _)| s == section) else {
                return Err(SettingsError(format!(
                    "unknown settings section {section:?}; known sections: {}",
                    section_names().join(", ")
                )));
            };
            let fields = match fields {
                Value::Object(fields) => fields.clone(),
                // A whole section set to null removes each of its fields.
                Value::Null => FIELDS
                    .iter()
                    .filter(|(s, _, _)| *s == section_name)
                    .map(|(_, f, _)| ((*f).to_string(), Value::Null))
                    .collect(),
                _ => {
                    return Err(SettingsError(format!(
                        "{section} must be an object of settings"
                    )));
                }
            };
            for (field, value) in fields {
                let Some(&(s, f, kind)) = FIELDS
                    .iter()
                    .find(|(s, f, _)| *s == section_name && *f == field)
                else {
                    let known: Vec<&str> = FIELDS
                        .iter()
                        .filter(|(s, _, _)| *s == section_name)
                        .map(|(_, f, _)| *f)
                        .collect();
                    return Err(SettingsError(format!(
                        "unknown setting {section}.{field}; {section} has {}",
                        known.join(", ")
                    )));
                };
                let checked = check(s, f, kind, value)?;
                match ((s, f), checked) {
                    (SIGNING_KEY, v) => out.signing_key = secret_change(v),
                    (PASSPHRASE, v) => out.passphrase = secret_change(v),
                    (_, v) => out.fields.push((s, f, v)),
                }
            }
        }
        Ok(out)
    }

    /// Applies the body to `document` (a `PATCH`): given fields replace, `null` removes, a
    /// section left empty disappears.
    pub fn merge_into(&self, document: &mut Map<String, Value>) {
        for (section, field, value) in &self.fields {
            match value {
                Some(value) => {
                    let entry = document
                        .entry((*section).to_string())
                        .or_insert_with(|| Value::Object(Map::new()));
                    if !entry.is_object() {
                        *entry = Value::Object(Map::new());
                    }
                    if let Value::Object(fields) = entry {
                        fields.insert((*field).to_string(), value.clone());
                    }
                }
                None => {
                    if let Some(Value::Object(fields)) = document.get_mut(*section) {
                        fields.remove(*field);
                    }
                }
            }
        }
        document.retain(|_, v| !matches!(v, Value::Object(fields) if fields.is_empty()));
    }

    /// The document this body describes on its own (a `PUT`).
    pub fn document(&self) -> Map<String, Value> {
        let mut document = Map::new();
        self.merge_into(&mut document);
        document
    }
}

fn secret_change(value: Option<Value>) -> SecretChange {
    match value {
        Some(Value::String(text)) => SecretChange::Set(text),
        _ => SecretChange::Remove,
    }
}

fn section_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = FIELDS.iter().map(|(s, _, _)| *s).collect();
    names.dedup();
    names
}

fn check(
    section: &str,
    field: &str,
    kind: Kind,
    value: Value,
) -> Result<Option<Value>, SettingsError> {
    if value.is_null() {
        return Ok(None);
    }
    let name = format!("{section}.{field}");
    let ok = match (kind, &value) {
        (Kind::Int { min, max }, Value::Number(n)) => {
            n.as_i64().is_some_and(|n| (min..=max).contains(&n))
        }
        (Kind::Bool, Value::Bool(_)) => true,
        (Kind::OneOf(names), Value::String(s)) => names.contains(&s.as_str()),
        (Kind::Secret, Value::String(s)) => {
            let chars = s.chars().count();
            (1..=MAX_TEXT_CHARS).contains(&chars) && !s.chars().any(char::is_control)
        }
        _ => false,
    };
    if ok {
        return Ok(Some(value));
    }
    let expected = match kind {
        Kind::Int { min, max } => format!("an integer from {min} to {max}"),
        Kind::Bool => "true or false".to_string(),
        Kind::OneOf(names) => format!("one of {}", names.join(", ")),
        Kind::Secret => {
            format!("a string of 1 to {MAX_TEXT_CHARS} characters without control characters")
        }
    };
    Err(SettingsError(format!("{name} must be {expected}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_body_is_checked_field_by_field() {
        let body = SettingsBody::parse(&json!({
            "messages": {"limit_period": "PerDay", "limit_value": 100},
            "webhooks": {"signing_key": "s3cret", "retry_count": 3},
        }))
        .unwrap();
        assert_eq!(body.signing_key, SecretChange::Set("s3cret".into()));
        assert_eq!(body.passphrase, SecretChange::Keep);
        assert_eq!(
            Value::Object(body.document()),
            json!({"messages": {"limit_period": "PerDay", "limit_value": 100},
                   "webhooks": {"retry_count": 3}})
        );
        for (bad, says) in [
            (json!([]), "JSON object"),
            (json!({"gateway": {"cloud_url": "x"}}), "gateway.cloud_url"),
            (json!({"nope": {}}), "unknown settings section"),
            (json!({"messages": 3}), "messages must be an object"),
            (
                json!({"messages": {"limit_value": -1}}),
                "messages.limit_value",
            ),
            (
                json!({"messages": {"limit_value": 1.5}}),
                "messages.limit_value",
            ),
            (
                json!({"messages": {"limit_period": "Weekly"}}),
                "one of Disabled",
            ),
            (
                json!({"webhooks": {"internet_required": "yes"}}),
                "true or false",
            ),
            (
                json!({"webhooks": {"signing_key": ""}}),
                "webhooks.signing_key",
            ),
            (
                json!({"webhooks": {"signing_key": "x".repeat(MAX_TEXT_CHARS + 1)}}),
                "1 to 256",
            ),
        ] {
            let err = SettingsBody::parse(&bad).unwrap_err();
            assert!(err.0.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn patch_merges_and_null_removes() {
        let mut document = SettingsBody::parse(&json!({
            "messages": {"limit_period": "PerDay", "limit_value": 100},
            "logs": {"lifetime_days": 30},
        }))
        .unwrap()
        .document();
        let patch = SettingsBody::parse(&json!({
            "messages": {"limit_value": 5, "limit_period": null},
            "logs": null,
            "webhooks": {"signing_key": null},
        }))
        .unwrap();
        assert_eq!(patch.signing_key, SecretChange::Remove);
        patch.merge_into(&mut document);
        assert_eq!(
            Value::Object(document),
            json!({"messages": {"limit_value": 5}})
        );
    }
}
