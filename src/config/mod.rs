//! Settings: every key the server reads, its type and its one default (a section's `Default`,
//! or for the pace `Pace::DEFAULT`, which `#[serde(default)]` fills in for every key neither
//! the file nor the environment sets). Loading them (defaults, the TOML file, then
//! `SMSGW_<SECTION>__<KEY>` environment overrides, merged by figment; docs/api.md, "CLI") is
//! `load`; how a single value is read (durations, strings typed without quotes) is `values`.

mod known;
mod load;
mod values;

use secrecy::SecretString;
use serde::Deserialize;
use std::time::Duration;

pub use known::{known_keys, unknown_variable_warnings};
pub use load::{ConfigError, DEFAULT_FILE};
use values::{
    address_ranges, byte_size, duration, durations, lenient_opt_secret, lenient_opt_string,
    lenient_string,
};

use crate::domain::network::AddressRange;
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
    pub pools: PoolSettings,
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
    /// Longest wait for a connection of the pool (or a new one) before a request answers 503
    /// `database_unavailable` (docs/api.md, "Errors"): bounds what an outage costs a request.
    #[serde(deserialize_with = "duration")]
    pub acquire_timeout: Duration,
    /// SQLite only: the most the database file may grow to, in bytes (`"2GB"`, `"500MiB"` or
    /// a number); writes past it answer 503 `storage_full` and change nothing. None: the disk
    /// is the limit (docs/deploy.md, "Bad days").
    #[serde(deserialize_with = "byte_size")]
    pub max_size: Option<u64>,
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
    /// Peers (addresses or CIDRs) whose forwarded headers are believed: the client address
    /// (`X-Forwarded-For`, `Forwarded: for=`) and the scheme and host URLs are built with
    /// (docs/api.md, "Behind a proxy"). Empty: none, every peer is the client.
    #[serde(deserialize_with = "address_ranges")]
    pub trusted_proxies: Vec<AddressRange>,
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
    /// Stored campaigns, whatever their status.
    pub campaigns: u32,
    /// Recipients over all stored campaigns (skipped ones included).
    pub campaign_recipients: u32,
    /// Active (unrevoked) API keys.
    pub api_keys: u32,
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
    /// An online line whose handed-over messages got no report for this long is stalled
    /// (docs/api.md, "Phone health").
    #[serde(deserialize_with = "duration")]
    pub stall_after: Duration,
    /// A line whose last this many attempts in a row failed is stalled (a blocked SIM).
    pub stall_failures: u32,
    /// A phone offline this long fires `phone.offline` (once per outage).
    #[serde(deserialize_with = "duration")]
    pub offline_alert_after: Duration,
}

/// Sender pools (docs/api.md, "Pools").
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolSettings {
    /// A pooled message waiting on a line offline for longer than this moves to another line
    /// of its pool.
    #[serde(deserialize_with = "duration")]
    pub failover_after: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TestModeSettings {
    #[serde(deserialize_with = "duration")]
    pub deliver_after: Duration,
}

/// Where AI drafts come from (docs/api.md, "AI replies").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AiProvider {
    /// The workspace's keyword rules.
    #[default]
    Rules,
    /// An OpenAI-compatible chat completions server.
    Openai,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AiSettings {
    pub provider: AiProvider,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub base_url: Option<String>,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub model: Option<String>,
    /// The provider's API key; `Debug` prints it redacted.
    #[serde(deserialize_with = "lenient_opt_secret")]
    pub api_key: Option<SecretString>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Text for a terminal.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A tracing EnvFilter directive, e.g. "info" or "smsgw=debug".
    #[serde(deserialize_with = "lenient_string")]
    pub level: String,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url: "sqlite://smsgw.db?mode=rwc".into(),
            max_connections: 8,
            acquire_timeout: Duration::from_secs(5),
            max_size: None,
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
            trusted_proxies: Vec::new(),
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
            Quota::Campaigns => self.campaigns,
            Quota::CampaignRecipients => self.campaign_recipients,
            Quota::ApiKeys => self.api_keys,
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
            campaigns: 100,
            campaign_recipients: 100_000,
            api_keys: 20,
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
            stall_after: Duration::from_secs(10 * 60),
            stall_failures: 5,
            offline_alert_after: Duration::from_secs(2 * 60),
        }
    }
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            failover_after: Duration::from_secs(60),
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

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: LogFormat::default(),
            level: "info".into(),
        }
    }
}

impl Settings {
    /// The externally visible base URL (for pairing links), derived from the bind address.
    pub fn public_url(&self, bound: std::net::SocketAddr) -> String {
        match &self.server.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("http://{bound}"),
        }
    }
}
