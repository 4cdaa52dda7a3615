//! Settings: defaults, the TOML file, and `SMSGW_<SECTION>__<KEY>` environment overrides.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::domain::quota::{CountQuota, Quota};

/// Everything the server can be configured with (docs/api.md, CLI; docs/smsgw.example.toml).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub server: ServerSettings,
    pub pace: PaceSettings,
    pub webhooks: WebhookSettings,
    pub retention: RetentionSettings,
    pub limits: LimitSettings,
    pub quotas: QuotaSettings,
    pub messages: MessageSettings,
    pub phones: PhoneSettings,
    pub test_mode: TestModeSettings,
    pub ai: AiSettings,
    pub log: LogSettings,
    pub secrets: SecretsSettings,
}

/// The secrets key that seals webhook signing keys at rest (docs/api.md, "Secrets at rest").
/// `key` wins over `key_file`; with neither, the key file beside the SQLite database (or
/// `smsgw.secrets.key` in the working directory on PostgreSQL), generated on first start.
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsSettings {
    /// Standard base64 of 32 bytes (`SMSGW_SECRETS__KEY`).
    #[serde(deserialize_with = "lenient_opt_string")]
    pub key: Option<String>,
    /// A file holding the key in that form; created with a new key when missing.
    #[serde(deserialize_with = "lenient_opt_string")]
    pub key_file: Option<String>,
}

impl std::fmt::Debug for SecretsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key itself is never printed.
        f.debug_struct("SecretsSettings")
            .field("key", &self.key.as_ref().map(|_| ".."))
            .field("key_file", &self.key_file)
            .finish()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    #[serde(deserialize_with = "lenient_string")]
    pub url: String,
    /// Connections in the pool (readers; writes go through the single group-commit writer).
    pub max_connections: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    #[serde(deserialize_with = "lenient_string")]
    pub bind: String,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub public_url: Option<String>,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// Longest time a request body may take to arrive, from when the handler starts reading
    /// it (docs/api.md "Errors"): a slower body is answered 408 and its connection closed.
    #[serde(deserialize_with = "duration")]
    pub body_timeout: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaceSettings {
    pub per_minute: u32,
    pub per_30_minutes: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSettings {
    #[serde(deserialize_with = "durations")]
    pub retry_schedule: Vec<Duration>,
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    pub allow_insecure_targets: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    #[serde(deserialize_with = "duration")]
    pub content_after: Duration,
    #[serde(deserialize_with = "duration")]
    pub record_after: Duration,
    /// How often the retention job runs.
    #[serde(deserialize_with = "duration")]
    pub interval: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    pub new_workspace_messages: u32,
    #[serde(deserialize_with = "duration")]
    pub new_workspace_window: Duration,
    /// Requests per second per API key (burst twice that); 0 turns throttling off.
    pub api_per_second: u32,
    /// Look-ups of API keys the database did not know, per second per client address (an IPv4
    /// address or an IPv6 /64; burst twice that); 0 turns the budget off.
    pub failed_auth_per_second: u32,
}

/// Per-workspace quotas (docs/api.md, "Quotas"). Counts are per workspace and mode: the live
/// and the test side of a workspace each have them. 0 turns a quota off.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaSettings {
    /// Paired phones.
    pub phones: u32,
    /// Webhook endpoints.
    pub webhook_endpoints: u32,
    /// Stored contacts.
    pub contacts: u32,
    /// Outbound messages `queued` (held for `scheduled_for` included), not yet handed to a phone.
    pub queued_messages: u32,
    /// Test-mode messages accepted per UTC day.
    pub test_messages_per_day: u32,
    /// Webhook delivery attempts started per workspace and mode within any
    /// `webhook_delivery_window`; the ones over it wait, none is dropped.
    pub webhook_deliveries: u32,
    #[serde(deserialize_with = "duration")]
    pub webhook_delivery_window: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MessageSettings {
    #[serde(deserialize_with = "duration")]
    pub ttl: Duration,
    pub max_send_attempts: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PhoneSettings {
    #[serde(deserialize_with = "duration")]
    pub heartbeat_timeout: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TestModeSettings {
    #[serde(deserialize_with = "duration")]
    pub deliver_after: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AiSettings {
    #[serde(deserialize_with = "lenient_string")]
    pub provider: String,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub base_url: Option<String>,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub model: Option<String>,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// "human" or "json".
    #[serde(deserialize_with = "lenient_string")]
    pub format: String,
    /// A tracing EnvFilter directive, e.g. "info" or "smsgw=debug".
    #[serde(deserialize_with = "lenient_string")]
    pub level: String,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url: "sqlite://smsgw.db?mode=rwc".into(),
            max_connections: 8,
        }
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            bind: "127.0.0.1:8080".into(),
            public_url: None,
            workers: 0,
            body_timeout: Duration::from_secs(30),
        }
    }
}

impl Default for PaceSettings {
    fn default() -> Self {
        PaceSettings {
            per_minute: 6,
            per_30_minutes: 25,
        }
    }
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            retry_schedule: [60, 300, 900, 3600, 21600]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            timeout: Duration::from_secs(10),
            allow_insecure_targets: false,
        }
    }
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            content_after: Duration::from_secs(30 * 60),
            record_after: Duration::from_secs(24 * 3600),
            interval: Duration::from_secs(30),
        }
    }
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            new_workspace_messages: 50,
            new_workspace_window: Duration::from_secs(24 * 3600),
            api_per_second: 200,
            failed_auth_per_second: 10,
        }
    }
}

impl QuotaSettings {
    /// The stored-count quota `quota` as configured (0: none).
    pub fn count(&self, quota: Quota) -> CountQuota {
        let limit = match quota {
            Quota::Phones => self.phones,
            Quota::WebhookEndpoints => self.webhook_endpoints,
            Quota::Contacts => self.contacts,
            Quota::QueuedMessages => self.queued_messages,
            Quota::TestMessagesPerDay => self.test_messages_per_day,
        };
        CountQuota { quota, limit }
    }
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            phones: 100,
            webhook_endpoints: 20,
            contacts: 100_000,
            queued_messages: 10_000,
            test_messages_per_day: 1_000,
            webhook_deliveries: 6_000,
            webhook_delivery_window: Duration::from_secs(60),
        }
    }
}

impl Default for MessageSettings {
    fn default() -> Self {
        MessageSettings {
            ttl: Duration::from_secs(24 * 3600),
            max_send_attempts: 3,
        }
    }
}

impl Default for PhoneSettings {
    fn default() -> Self {
        PhoneSettings {
            heartbeat_timeout: Duration::from_secs(30),
        }
    }
}

impl Default for TestModeSettings {
    fn default() -> Self {
        TestModeSettings {
            deliver_after: Duration::from_millis(200),
        }
    }
}

impl Default for AiSettings {
    fn default() -> Self {
        AiSettings {
            provider: "rules".into(),
            base_url: None,
            model: None,
            api_key: None,
        }
    }
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: "human".into(),
            level: "info".into(),
        }
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not valid TOML: {source}")]
    Toml {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Environment variable prefix; `SMSGW_SERVER__BIND` sets `server.bind`.
const ENV_PREFIX: &str = "SMSGW_";

impl Settings {
    /// Loads defaults, then the TOML file (`explicit` must exist; else `smsgw.toml` if present),
    /// then the process environment, key by key.
    pub fn load(explicit: Option<&Path>) -> Result<Settings, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        let file = match explicit {
            Some(path) => Some(read_toml(path)?),
            None => {
                let default = Path::new("smsgw.toml");
                if default.exists() {
                    Some(read_toml(default)?)
                } else {
                    None
                }
            }
        };
        Settings::from_sources(file, &env)
    }

    /// Builds settings from an already parsed file and an environment map (used by tests too).
    pub fn from_sources(
        file: Option<serde_json::Value>,
        env: &HashMap<String, String>,
    ) -> Result<Settings, ConfigError> {
        let mut tree = file.unwrap_or_else(|| serde_json::Value::Object(Default::default()));
        for (name, value) in env {
            let Some(path) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let Some((section, key)) = path.split_once("__") else {
                continue;
            };
            let section = section.to_ascii_lowercase();
            let key = key.to_ascii_lowercase();
            let root = tree
                .as_object_mut()
                .ok_or_else(|| ConfigError::Invalid("the file must be a table".into()))?;
            let entry = root
                .entry(section)
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
            if let Some(table) = entry.as_object_mut() {
                table.insert(key, env_value(value));
            }
        }
        let settings: Settings =
            serde_json::from_value(tree).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        crate::domain::pace::Pace::new(self.pace.per_minute, self.pace.per_30_minutes)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if self.messages.max_send_attempts == 0 {
            return Err(ConfigError::Invalid(
                "messages.max_send_attempts must be at least 1".into(),
            ));
        }
        if self.quotas.webhook_deliveries > 0 && self.quotas.webhook_delivery_window.is_zero() {
            return Err(ConfigError::Invalid(
                "quotas.webhook_delivery_window must be longer than 0".into(),
            ));
        }
        if !(self.database.url.starts_with("sqlite:") || self.database.url.starts_with("postgres"))
        {
            return Err(ConfigError::Invalid(
                "database.url must start with sqlite:// or postgres://".into(),
            ));
        }
        Ok(())
    }

    /// The externally visible base URL (for pairing links), derived from the bind address.
    pub fn public_url(&self, bound: std::net::SocketAddr) -> String {
        match &self.server.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("http://{bound}"),
        }
    }
}

fn read_toml(path: &Path) -> Result<serde_json::Value, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let value: toml::Table = toml::from_str(&text).map_err(|source| ConfigError::Toml {
        path: path.display().to_string(),
        source: Box::new(source),
    })?;
    serde_json::to_value(value).map_err(|e| ConfigError::Invalid(e.to_string()))
}

/// Environment values are strings; JSON arrays, numbers and booleans are recognised so that
/// `SMSGW_WEBHOOKS__RETRY_SCHEDULE='["1s"]'` and `SMSGW_PACE__PER_MINUTE=60` work.
fn env_value(raw: &str) -> serde_json::Value {
    let trimmed = raw.trim();
    let looks_structured = trimmed.starts_with('[')
        || trimmed.starts_with('{')
        || trimmed == "true"
        || trimmed == "false"
        || trimmed.parse::<f64>().is_ok();
    if looks_structured && let Ok(value) = serde_json::from_str(trimmed) {
        return value;
    }
    serde_json::Value::String(raw.to_string())
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn durations<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Duration>, D::Error> {
    let texts = Vec::<String>::deserialize(deserializer)?;
    texts
        .iter()
        .map(|t| parse_duration(t).map_err(serde::de::Error::custom))
        .collect()
}

/// Accepts strings, and numbers or booleans written without quotes in the environment.
fn lenient_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        serde_json::Value::Bool(b) => Ok(b.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "expected a string, got {other}"
        ))),
    }
}

fn lenient_opt_string<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    lenient_string(deserializer).map(Some)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_match_the_contract() {
        let s = Settings::from_sources(None, &HashMap::new()).unwrap();
        assert_eq!(s.database.url, "sqlite://smsgw.db?mode=rwc");
        assert_eq!(s.server.bind, "127.0.0.1:8080");
        assert_eq!((s.pace.per_minute, s.pace.per_30_minutes), (6, 25));
        assert_eq!(s.webhooks.retry_schedule.len(), 5);
        assert_eq!(s.webhooks.retry_schedule[4], Duration::from_secs(6 * 3600));
        assert_eq!(s.limits.api_per_second, 200);
        assert_eq!(s.messages.max_send_attempts, 3);
        assert_eq!(s.test_mode.deliver_after, Duration::from_millis(200));
        assert_eq!((s.quotas.phones, s.quotas.webhook_endpoints), (100, 20));
        assert_eq!(
            (s.quotas.contacts, s.quotas.queued_messages),
            (100_000, 10_000)
        );
        assert_eq!(s.quotas.test_messages_per_day, 1_000);
        assert_eq!(s.quotas.webhook_deliveries, 6_000);
        assert_eq!(s.quotas.webhook_delivery_window, Duration::from_secs(60));
    }

    #[test]
    fn environment_overrides_the_file_key_by_key() {
        let file: serde_json::Value = serde_json::to_value(
            toml::from_str::<toml::Table>("[pace]\nper_minute = 2\nper_30_minutes = 10\n").unwrap(),
        )
        .unwrap();
        let s = Settings::from_sources(
            Some(file),
            &env(&[
                ("SMSGW_PACE__PER_MINUTE", "3"),
                ("SMSGW_WEBHOOKS__RETRY_SCHEDULE", r#"["1s","2s","3s"]"#),
                ("SMSGW_SERVER__BIND", "127.0.0.1:0"),
                ("SMSGW_AI__API_KEY", "12345"),
                ("SMSGW_QUOTAS__PHONES", "7"),
                ("SMSGW_QUOTAS__WEBHOOK_DELIVERY_WINDOW", "10s"),
            ]),
        )
        .unwrap();
        assert_eq!(s.pace.per_minute, 3);
        assert_eq!(s.pace.per_30_minutes, 10);
        assert_eq!(
            s.webhooks.retry_schedule,
            vec![
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(3)
            ]
        );
        assert_eq!(s.server.bind, "127.0.0.1:0");
        assert_eq!(s.ai.api_key.as_deref(), Some("12345"));
        assert_eq!(s.quotas.phones, 7);
        assert_eq!(s.quotas.webhook_delivery_window, Duration::from_secs(10));
    }

    /// The `(section, key)` pairs of `settings`, read from its pretty `Debug` form: a section
    /// is a field of `Settings` (indented 4), a key a field of a section (indented 8).
    fn keys_of(settings: &Settings) -> std::collections::BTreeSet<(String, String)> {
        let mut keys = std::collections::BTreeSet::new();
        let mut section = String::new();
        for line in format!("{settings:#?}").lines() {
            let indent = line.len() - line.trim_start().len();
            let Some((name, _)) = line.trim_start().split_once(": ") else {
                continue;
            };
            match indent {
                4 => section = name.to_string(),
                8 => {
                    keys.insert((section.clone(), name.to_string()));
                }
                _ => {}
            }
        }
        keys
    }

    /// docs/smsgw.example.toml lists every key, set ones and commented-out unset ones (`# key =
    /// …`), and loading it yields exactly the defaults: a key added without its line, or a
    /// default changed in one place only, fails here.
    #[test]
    fn the_example_config_is_every_key_at_its_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/smsgw.example.toml");
        let loaded =
            Settings::from_sources(Some(read_toml(&path).unwrap()), &HashMap::new()).unwrap();
        let defaults = Settings::default();
        assert_eq!(format!("{loaded:#?}"), format!("{defaults:#?}"));

        let text = std::fs::read_to_string(&path).unwrap();
        let mut listed = std::collections::BTreeSet::new();
        let mut section = String::new();
        for line in text.lines() {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_string();
            } else if let Some((key, _)) = line.trim_start_matches("# ").split_once(" = ")
                && !section.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                listed.insert((section.clone(), key.to_string()));
            }
        }
        let accepted = keys_of(&defaults);
        let missing: Vec<_> = accepted.difference(&listed).collect();
        let unknown: Vec<_> = listed.difference(&accepted).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "docs/smsgw.example.toml lacks {missing:?} and lists keys the config refuses: {unknown:?}"
        );
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Settings::from_sources(None, &env(&[("SMSGW_MESSAGES__TTL", "soon")])).is_err());
        assert!(Settings::from_sources(None, &env(&[("SMSGW_PACE__PER_MINUTE", "0")])).is_err());
        assert!(Settings::from_sources(None, &env(&[("SMSGW_NOPE__X", "1")])).is_err());
    }
}
