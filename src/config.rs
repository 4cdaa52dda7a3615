//! Settings: defaults, the TOML file, and `SMSGW_<SECTION>__<KEY>` environment overrides
//! (docs/api.md, "CLI"), merged by figment.
//!
//! Each default is written once: a section's `Default` (or, for the pace, `Pace::DEFAULT`), which
//! `#[serde(default)]` fills in for every key neither the file nor the environment sets.

use std::path::Path;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use secrecy::SecretString;
use serde::{Deserialize, Deserializer};

use crate::domain::pace::Pace;
use crate::domain::quota::{CountQuota, Quota};

/// Everything the server can be configured with (docs/api.md, CLI; docs/smsgw.example.toml).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub server: ServerSettings,
    /// The default per-phone pace; a phone's own pace set through the API wins.
    pub pace: Pace,
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
    pub portal: PortalSettings,
    pub cluster: ClusterSettings,
}

/// What the portal (and the API's number lookup) reads numbers with (docs/api.md, "Workspace").
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PortalSettings {
    /// ISO 3166-1 alpha-2 code (`US`) national numbers are read in when a workspace sets none;
    /// unset: numbers must carry their country code. Checked at start.
    #[serde(deserialize_with = "lenient_opt_string")]
    pub default_country: Option<String>,
}

/// Several nodes on one PostgreSQL database (docs/architecture.md, "Cluster"). Ignored on
/// SQLite, which runs a single node.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// How often the node renews its leases and stamps its row.
    #[serde(deserialize_with = "duration")]
    pub heartbeat: Duration,
    /// How long a lease lasts without renewal; another node takes it over after that.
    #[serde(deserialize_with = "duration")]
    pub lease_ttl: Duration,
    /// The address other nodes and operators know this node by (default: the bound address).
    #[serde(deserialize_with = "lenient_opt_string")]
    pub advertise_address: Option<String>,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            heartbeat: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(5),
            advertise_address: None,
        }
    }
}

/// The secrets key that seals webhook signing keys at rest (docs/api.md, "Secrets at rest").
/// `key` wins over `key_file`; with neither, the key file beside the SQLite database (or
/// `smsgw.secrets.key` in the working directory on PostgreSQL), generated on first start.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsSettings {
    /// Standard base64 of 32 bytes (`SMSGW_SECRETS__KEY`); `Debug` prints it redacted.
    #[serde(deserialize_with = "lenient_opt_secret")]
    pub key: Option<SecretString>,
    /// A file holding the key in that form; created with a new key when missing.
    #[serde(deserialize_with = "lenient_opt_string")]
    pub key_file: Option<String>,
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
    /// The provider's API key; `Debug` prints it redacted.
    #[serde(deserialize_with = "lenient_opt_secret")]
    pub api_key: Option<SecretString>,
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
            tls: None,
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
    /// A key or value is refused; the message names the key and where its value came from.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The file read when `--config` is not given, if it exists in the working directory.
pub const DEFAULT_FILE: &str = "smsgw.toml";

/// Environment variable prefix; `SMSGW_SERVER__BIND` sets `server.bind`.
const ENV_PREFIX: &str = "SMSGW_";

/// Separates the section from the key in an environment variable's name.
const ENV_SEPARATOR: &str = "__";

impl Settings {
    /// Loads defaults, then the TOML file (`explicit` must exist; else `smsgw.toml` if present),
    /// then the process environment, key by key.
    pub fn load(explicit: Option<&Path>) -> Result<Settings, ConfigError> {
        let file = match explicit {
            Some(path) => {
                std::fs::metadata(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                Some(path)
            }
            None => Some(Path::new(DEFAULT_FILE)).filter(|path| path.exists()),
        };
        let mut sources = Figment::new();
        if let Some(path) = file {
            sources = sources.merge(Toml::file_exact(path));
        }
        let settings: Settings = sources
            .merge(environment())
            .extract()
            .map_err(ConfigError::from)?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
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
        if let Some(code) = &self.portal.default_country
            && crate::domain::number_lookup::Country::parse(code).is_err()
        {
            return Err(ConfigError::Invalid(format!(
                "portal.default_country: {code:?} is {}",
                crate::domain::number_lookup::UnknownCountry
            )));
        }
        if self.cluster.heartbeat.is_zero()
            || self.cluster.lease_ttl < self.cluster.heartbeat.saturating_mul(2)
        {
            return Err(ConfigError::Invalid(
                "cluster.lease_ttl must be at least twice cluster.heartbeat (and the heartbeat longer than 0)".into(),
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

/// `SMSGW_<SECTION>__<KEY>` variables as `section.key` (lower case); the prefix is matched
/// case-sensitively, and a variable without the separator (`SMSGW_TEST_DATABASE_URL`) is not
/// configuration. Values are parsed by figment: `[...]` is a list (`["1s","2s"]`), numbers and
/// `true`/`false` are typed, anything else is a string.
fn environment() -> Env {
    Env::raw().filter_map(|name| {
        let path = name.as_str().strip_prefix(ENV_PREFIX)?;
        let (section, key) = path.split_once(ENV_SEPARATOR)?;
        // One more level for nested tables: SMSGW_SERVER__TLS__CERT_FILE is server.tls.cert_file.
        Some(format!("{section}.{}", key.replace(ENV_SEPARATOR, ".")).into())
    })
}

impl From<figment::Error> for ConfigError {
    /// Every error figment found, each naming its key and the file or variable it came from.
    fn from(errors: figment::Error) -> ConfigError {
        let described: Vec<String> = errors.into_iter().map(describe).collect();
        ConfigError::Invalid(described.join("; "))
    }
}

/// `section.key: what is wrong (in FILE | in SMSGW_SECTION__KEY)`.
fn describe(error: figment::Error) -> String {
    let key = error.path.join(".");
    // Only the file has a source; a value from the environment has metadata without one.
    let origin = match error.metadata.as_ref().map(|md| md.source.as_ref()) {
        Some(Some(source)) => format!(" (in {source})"),
        Some(None) if error.path.len() == 2 => format!(
            " (in {ENV_PREFIX}{}{ENV_SEPARATOR}{})",
            error.path[0].to_ascii_uppercase(),
            error.path[1].to_ascii_uppercase()
        ),
        Some(None) => " (in the environment)".to_string(),
        None => String::new(),
    };
    if key.is_empty() {
        format!("{}{origin}", error.kind)
    } else {
        format!("{key}: {}{origin}", error.kind)
    }
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

fn lenient_opt_secret<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SecretString>, D::Error> {
    lenient_string(deserializer).map(|s| Some(SecretString::from(s)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use figment::Jail;
    use secrecy::ExposeSecret;

    /// Runs `check` in a figment jail: a fresh working directory (so no `smsgw.toml` unless the
    /// test writes one) and environment variables that are restored afterwards, one test at a
    /// time. The jail starts from the process environment (clearing it would take PATH and
    /// TMPDIR from tests running beside it), so run these without `SMSGW_<SECTION>__<KEY>`
    /// variables of your own.
    #[allow(clippy::result_large_err)] // figment's Jail closure returns figment::Error
    fn jailed(check: impl FnOnce(&mut Jail)) {
        Jail::expect_with(|jail| {
            check(jail);
            Ok(())
        });
    }

    /// `Settings::load` in a jail, its error as text.
    fn load_err(explicit: Option<&Path>) -> String {
        Settings::load(explicit).unwrap_err().to_string()
    }

    #[test]
    fn defaults_match_the_contract() {
        jailed(|_| {
            let s = Settings::load(None).unwrap();
            assert_eq!(s.database.url, "sqlite://smsgw.db?mode=rwc");
            assert_eq!(s.server.bind, "127.0.0.1:8080");
            assert_eq!((s.pace.per_minute, s.pace.per_30_minutes), (6, 25));
            assert_eq!(s.pace, Pace::DEFAULT);
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
            assert_eq!(format!("{s:?}"), format!("{:?}", Settings::default()));
        });
    }

    #[test]
    fn environment_overrides_the_file_key_by_key() {
        jailed(|jail| {
            jail.create_file(
                DEFAULT_FILE,
                "[pace]\nper_minute = 2\nper_30_minutes = 10\n[server]\nworkers = 3\n",
            )
            .unwrap();
            jail.set_env("SMSGW_PACE__PER_MINUTE", "3");
            jail.set_env("SMSGW_SERVER__BIND", "127.0.0.1:0");
            jail.set_env("SMSGW_AI__API_KEY", "12345");
            jail.set_env("SMSGW_QUOTAS__PHONES", "7");
            jail.set_env("SMSGW_QUOTAS__WEBHOOK_DELIVERY_WINDOW", "10s");
            let s = Settings::load(None).unwrap();
            assert_eq!(s.pace.per_minute, 3, "the environment wins");
            assert_eq!(s.pace.per_30_minutes, 10, "the file's other key stays");
            assert_eq!(s.server.workers, 3);
            assert_eq!(s.server.bind, "127.0.0.1:0");
            assert_eq!(
                s.ai.api_key.as_ref().map(|k| k.expose_secret()),
                Some("12345"),
                "digits are a string where a string is expected"
            );
            assert_eq!(s.quotas.phones, 7);
            assert_eq!(s.quotas.webhook_delivery_window, Duration::from_secs(10));
        });
    }

    #[test]
    fn an_explicit_file_wins_over_smsgw_toml_and_must_exist() {
        jailed(|jail| {
            jail.create_file(DEFAULT_FILE, "[log]\nlevel = \"debug\"\n")
                .unwrap();
            jail.create_file("other.toml", "[log]\nformat = \"json\"\n")
                .unwrap();
            let s = Settings::load(Some(Path::new("other.toml"))).unwrap();
            assert_eq!(
                (s.log.format.as_str(), s.log.level.as_str()),
                ("json", "info")
            );
            let s = Settings::load(None).unwrap();
            assert_eq!(
                (s.log.format.as_str(), s.log.level.as_str()),
                ("human", "debug")
            );
            let err = load_err(Some(Path::new("missing.toml")));
            assert!(err.contains("missing.toml"), "{err}");
        });
    }

    #[test]
    fn a_list_in_the_environment_is_a_json_array_of_durations() {
        jailed(|jail| {
            jail.create_file(DEFAULT_FILE, "[webhooks]\nretry_schedule = [\"1h\"]\n")
                .unwrap();
            jail.set_env("SMSGW_WEBHOOKS__RETRY_SCHEDULE", r#"["1s","2s","3s"]"#);
            let s = Settings::load(None).unwrap();
            assert_eq!(
                s.webhooks.retry_schedule,
                [1, 2, 3].map(Duration::from_secs).to_vec()
            );
        });
    }

    #[test]
    fn durations_are_humantime_strings_in_the_file_and_the_environment() {
        jailed(|jail| {
            jail.create_file(
                DEFAULT_FILE,
                "[retention]\ncontent_after = \"5m\"\nrecord_after = \"1h 30m\"\n",
            )
            .unwrap();
            jail.set_env("SMSGW_RETENTION__INTERVAL", "90s");
            jail.set_env("SMSGW_TEST_MODE__DELIVER_AFTER", "50ms");
            let s = Settings::load(None).unwrap();
            assert_eq!(s.retention.content_after, Duration::from_secs(300));
            assert_eq!(s.retention.record_after, Duration::from_secs(5400));
            assert_eq!(s.retention.interval, Duration::from_secs(90));
            assert_eq!(s.test_mode.deliver_after, Duration::from_millis(50));
        });
    }

    #[test]
    fn the_pace_may_be_set_one_key_at_a_time() {
        jailed(|jail| {
            jail.set_env("SMSGW_PACE__PER_30_MINUTES", "40");
            let s = Settings::load(None).unwrap();
            assert_eq!(s.pace, Pace::new(Pace::DEFAULT.per_minute, 40).unwrap());
        });
    }

    #[test]
    fn environment_variables_outside_the_section_key_form_are_ignored() {
        jailed(|jail| {
            jail.set_env("SMSGW_TEST_DATABASE_URL", "postgres://nowhere/x");
            jail.set_env("OTHER_SERVER__BIND", "0.0.0.0:1");
            jail.set_env("smsgw_server__bind", "0.0.0.0:2");
            let s = Settings::load(None).unwrap();
            assert_eq!(s.server.bind, "127.0.0.1:8080");
        });
    }

    #[test]
    fn unknown_sections_and_keys_are_refused_by_name() {
        jailed(|jail| {
            jail.set_env("SMSGW_NOPE__X", "1");
            let err = load_err(None);
            assert!(err.contains("nope"), "{err}");
        });
        jailed(|jail| {
            jail.set_env("SMSGW_SERVER__BINDD", "127.0.0.1:0");
            let err = load_err(None);
            assert!(err.contains("bindd"), "{err}");
        });
        jailed(|jail| {
            jail.create_file(DEFAULT_FILE, "[pace]\nper_hour = 3\n")
                .unwrap();
            let err = load_err(None);
            assert!(err.contains("per_hour"), "{err}");
        });
        jailed(|jail| {
            jail.create_file(DEFAULT_FILE, "[nope]\nx = 1\n").unwrap();
            let err = load_err(None);
            assert!(err.contains("nope"), "{err}");
        });
    }

    #[test]
    fn the_portal_default_country_is_checked_at_start() {
        jailed(|jail| {
            jail.set_env("SMSGW_PORTAL__DEFAULT_COUNTRY", "USA");
            let err = load_err(None);
            assert!(err.contains("portal.default_country"), "{err}");
        });
        jailed(|jail| {
            jail.set_env("SMSGW_PORTAL__DEFAULT_COUNTRY", "GB");
            let settings = Settings::load(None).unwrap();
            assert_eq!(settings.portal.default_country.as_deref(), Some("GB"));
        });
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        jailed(|jail| {
            jail.set_env("SMSGW_MESSAGES__TTL", "soon");
            let err = load_err(None);
            assert!(err.contains("messages.ttl"), "{err}");
            assert!(err.contains("SMSGW_MESSAGES__TTL"), "{err}");
        });
        jailed(|jail| {
            jail.set_env("SMSGW_PACE__PER_MINUTE", "0");
            let err = load_err(None);
            assert!(err.contains("pace.per_minute"), "{err}");
        });
        jailed(|jail| {
            jail.create_file(DEFAULT_FILE, "[limits]\napi_per_second = \"fast\"\n")
                .unwrap();
            let err = load_err(None);
            assert!(err.contains("limits.api_per_second"), "{err}");
            assert!(err.contains(DEFAULT_FILE), "{err}");
        });
        jailed(|jail| {
            jail.create_file(DEFAULT_FILE, "[limits\n").unwrap();
            let err = load_err(None);
            assert!(err.contains(DEFAULT_FILE), "{err}");
        });
        jailed(|jail| {
            jail.set_env("SMSGW_MESSAGES__MAX_SEND_ATTEMPTS", "0");
            let err = load_err(None);
            assert!(err.contains("messages.max_send_attempts"), "{err}");
        });
    }

    #[test]
    fn secrets_do_not_print() {
        jailed(|jail| {
            jail.set_env("SMSGW_AI__API_KEY", "sk-very-secret-ai-key");
            jail.set_env(
                "SMSGW_SECRETS__KEY",
                "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTMyYg==",
            );
            let settings = Settings::load(None).unwrap();
            for printed in [format!("{settings:?}"), format!("{settings:#?}")] {
                assert!(!printed.contains("sk-very-secret-ai-key"), "{printed}");
                assert!(!printed.contains("c2VjcmV0"), "{printed}");
                assert!(printed.contains("REDACTED"), "{printed}");
            }
            let key = settings.secrets.key.as_ref().map(|k| k.expose_secret());
            assert_eq!(key, Some("c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTMyYg=="));
        });
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
        let mut loaded = None;
        jailed(|_| {
            loaded = Some(Settings::load(Some(&path)).unwrap());
        });
        let loaded = loaded.unwrap();
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
}
