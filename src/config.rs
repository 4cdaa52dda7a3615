//! Settings: defaults, the TOML file, and `SMSGW_<SECTION>__<KEY>` environment overrides.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Everything the server can be configured with (contract §1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub server: ServerSettings,
    pub pace: PaceSettings,
    pub webhooks: WebhookSettings,
    pub retention: RetentionSettings,
    pub limits: LimitSettings,
    pub messages: MessageSettings,
    pub phones: PhoneSettings,
    pub test_mode: TestModeSettings,
    pub ai: AiSettings,
    pub log: LogSettings,
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
    /// Serve HTTPS (and WSS) on `bind` with this certificate; None serves plain HTTP.
    pub tls: Option<TlsSettings>,
}

/// `server.tls`: PEM files of the certificate chain and its private key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    pub cert_file: String,
    pub key_file: String,
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
            tls: None,
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
                // One more level for nested tables: SMSGW_SERVER__TLS__CERT_FILE.
                match key.split_once("__") {
                    Some((sub, leaf)) => {
                        let nested = table
                            .entry(sub.to_string())
                            .or_insert_with(|| serde_json::Value::Object(Default::default()));
                        if let Some(nested) = nested.as_object_mut() {
                            nested.insert(leaf.to_string(), env_value(value));
                        }
                    }
                    None => {
                        table.insert(key, env_value(value));
                    }
                }
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
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Settings::from_sources(None, &env(&[("SMSGW_MESSAGES__TTL", "soon")])).is_err());
        assert!(Settings::from_sources(None, &env(&[("SMSGW_PACE__PER_MINUTE", "0")])).is_err());
        assert!(Settings::from_sources(None, &env(&[("SMSGW_NOPE__X", "1")])).is_err());
    }
}
