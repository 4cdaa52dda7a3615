//! Loading the settings: defaults, then the TOML file, then `SMSGW_<SECTION>__<KEY>`
//! environment overrides, key by key (docs/api.md, "CLI"), merged by figment; then the checks
//! that span keys. A refused key or value is named with the file or variable it came from.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::{Figment, Source};

use super::Settings;

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
pub(super) const ENV_PREFIX: &str = "SMSGW_";

/// Separates the section from the key in an environment variable's name.
pub(super) const ENV_SEPARATOR: &str = "__";

impl Settings {
    /// Loads defaults, then the TOML file (`explicit` must exist; else `smsgw.toml` if present),
    /// then the process environment, key by key. A relative path the file gives (TLS files,
    /// the secrets key file, the SQLite database) is read from the file's folder; one from the
    /// environment or a default, from the working directory.
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
        let sources = sources.merge(environment());
        let mut settings: Settings = sources.extract().map_err(ConfigError::from)?;
        settings.resolve_file_paths(&sources);
        settings.validate()?;
        Ok(settings)
    }

    /// Makes the relative paths a configuration file gave relative to that file's folder.
    fn resolve_file_paths(&mut self, sources: &Figment) {
        if let Some(tls) = &mut self.server.tls {
            resolve_path(sources, "server.tls.cert_file", &mut tls.cert_file);
            resolve_path(sources, "server.tls.key_file", &mut tls.key_file);
        }
        if let Some(key_file) = &mut self.secrets.key_file {
            resolve_path(sources, "secrets.key_file", key_file);
        }
        if let Some(folder) = file_folder(sources, "database.url")
            && let Some(resolved) = sqlite_url_from(&folder, &self.database.url)
        {
            self.database.url = resolved;
        }
    }

    /// The checks that span keys or need more than a type; every command runs them (again
    /// after a command-line flag changed a setting).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !is_host_and_port(&self.server.bind) {
            return Err(ConfigError::Invalid(format!(
                "server.bind: {:?} is not HOST:PORT (e.g. 127.0.0.1:8080, or 0.0.0.0:8080 to be reached from other machines)",
                self.server.bind
            )));
        }
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
        if self.phones.stall_after.is_zero() || self.phones.stall_failures == 0 {
            return Err(ConfigError::Invalid(
                "phones.stall_after and phones.stall_failures must be more than 0".into(),
            ));
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
}

/// The folder of the configuration file that set `key`; None when the environment or a
/// default did.
fn file_folder(sources: &Figment, key: &str) -> Option<PathBuf> {
    let metadata = sources.find_metadata(key)?;
    match metadata.source.as_ref()? {
        Source::File(file) => Some(file.parent().map(Path::to_path_buf).unwrap_or_default()),
        _ => None,
    }
}

/// Rewrites `path`, when a configuration file set `key` to a relative path, as the path from
/// the working directory to the same file.
fn resolve_path(sources: &Figment, key: &str, path: &mut String) {
    if let Some(folder) = file_folder(sources, key)
        && Path::new(path.as_str()).is_relative()
    {
        *path = folder.join(path.as_str()).display().to_string();
    }
}

/// `url` with its file read from `folder` when it is a SQLite URL of a relative file
/// (`sqlite://smsgw.db?mode=rwc`); None when nothing changes (PostgreSQL, an absolute path,
/// an in-memory database).
fn sqlite_url_from(folder: &Path, url: &str) -> Option<String> {
    let prefix = ["sqlite://", "sqlite:"]
        .into_iter()
        .find(|prefix| url.starts_with(prefix))?;
    let rest = &url[prefix.len()..];
    let (file, query) = match rest.split_once('?') {
        Some((file, query)) => (file, Some(query)),
        None => (rest, None),
    };
    if file.is_empty() || file.starts_with(":memory:") || Path::new(file).is_absolute() {
        return None;
    }
    let file = folder.join(file).display().to_string();
    Some(match query {
        Some(query) => format!("{prefix}{file}?{query}"),
        None => format!("{prefix}{file}"),
    })
}

/// `HOST:PORT` with a port number (the host may be a name, an IPv4 address or a bracketed
/// IPv6 address); name resolution is left to the bind.
fn is_host_and_port(bind: &str) -> bool {
    bind.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::LogFormat;
    use crate::domain::pace::Pace;
    use figment::Jail;
    use secrecy::ExposeSecret;
    use std::time::Duration;

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
            assert_eq!(
                (s.quotas.campaigns, s.quotas.campaign_recipients),
                (100, 100_000)
            );
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
                (s.log.format, s.log.level.as_str()),
                (LogFormat::Json, "info")
            );
            let s = Settings::load(None).unwrap();
            assert_eq!(
                (s.log.format, s.log.level.as_str()),
                (LogFormat::Human, "debug")
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
    fn the_pace_takes_a_daily_cap_and_jitter() {
        jailed(|jail| {
            let s = Settings::load(None).unwrap();
            assert_eq!((s.pace.per_day, s.pace.jitter_seconds), (None, 0));
            jail.create_file(DEFAULT_FILE, "[pace]\nper_day = 500\njitter_seconds = 20\n")
                .unwrap();
            let s = Settings::load(None).unwrap();
            assert_eq!((s.pace.per_day, s.pace.jitter_seconds), (Some(500), 20));
            assert_eq!(s.pace.per_minute, Pace::DEFAULT.per_minute);
        });
        jailed(|jail| {
            jail.set_env("SMSGW_PACE__PER_DAY", "0");
            let err = load_err(None);
            assert!(err.contains("pace.per_day"), "{err}");
        });
        jailed(|jail| {
            jail.set_env("SMSGW_PACE__JITTER_SECONDS", "3601");
            let err = load_err(None);
            assert!(err.contains("pace.jitter_seconds"), "{err}");
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
    fn relative_paths_in_a_file_are_read_from_its_folder() {
        jailed(|jail| {
            std::fs::create_dir("conf").unwrap();
            jail.create_file(
                "conf/smsgw.toml",
                "[database]\nurl = \"sqlite://data/smsgw.db?mode=rwc\"\n\
                 [server.tls]\ncert_file = \"cert.pem\"\nkey_file = \"/etc/smsgw/key.pem\"\n\
                 [secrets]\nkey_file = \"secrets.key\"\n",
            )
            .unwrap();
            let s = Settings::load(Some(Path::new("conf/smsgw.toml"))).unwrap();
            assert_eq!(s.database.url, "sqlite://conf/data/smsgw.db?mode=rwc");
            let tls = s.server.tls.unwrap();
            assert_eq!(tls.cert_file, "conf/cert.pem");
            assert_eq!(tls.key_file, "/etc/smsgw/key.pem", "absolute paths stay");
            assert_eq!(s.secrets.key_file.as_deref(), Some("conf/secrets.key"));

            // The environment and the defaults keep the working directory.
            jail.set_env("SMSGW_SECRETS__KEY_FILE", "mine.key");
            jail.set_env("SMSGW_DATABASE__URL", "sqlite:here.db");
            let s = Settings::load(Some(Path::new("conf/smsgw.toml"))).unwrap();
            assert_eq!(s.secrets.key_file.as_deref(), Some("mine.key"));
            assert_eq!(s.database.url, "sqlite:here.db");
        });
        jailed(|jail| {
            std::fs::create_dir("conf").unwrap();
            jail.create_file("conf/smsgw.toml", "[server]\nworkers = 1\n")
                .unwrap();
            let s = Settings::load(Some(Path::new("conf/smsgw.toml"))).unwrap();
            assert_eq!(s.database.url, "sqlite://smsgw.db?mode=rwc");
        });
    }

    #[test]
    fn the_bind_address_must_be_host_and_port() {
        for bad in [
            "18080",
            ":8080",
            "127.0.0.1:",
            "127.0.0.1:99999",
            "localhost",
        ] {
            jailed(|jail| {
                jail.set_env("SMSGW_SERVER__BIND", bad);
                let err = load_err(None);
                assert!(
                    err.contains("server.bind") && err.contains("HOST:PORT"),
                    "{err}"
                );
            });
        }
        for good in ["0.0.0.0:8080", "localhost:0", "[::1]:8080"] {
            jailed(|jail| {
                jail.set_env("SMSGW_SERVER__BIND", good);
                assert_eq!(Settings::load(None).unwrap().server.bind, good);
            });
        }
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
    fn trusted_proxies_are_addresses_and_cidrs_or_refused() {
        jailed(|jail| {
            jail.set_env("SMSGW_SERVER__TRUSTED_PROXIES", "10.0.0.0/8, ::1");
            let proxies = Settings::load(None).unwrap().server.trusted_proxies;
            let shown: Vec<String> = proxies.iter().map(ToString::to_string).collect();
            assert_eq!(shown, ["10.0.0.0/8", "::1/128"]);
        });
        jailed(|jail| {
            jail.create_file(
                DEFAULT_FILE,
                "[server]\ntrusted_proxies = [\"127.0.0.1\", \"fd00::/8\"]\n",
            )
            .unwrap();
            assert_eq!(
                Settings::load(None).unwrap().server.trusted_proxies.len(),
                2
            );
        });
        jailed(|jail| {
            jail.create_file(
                DEFAULT_FILE,
                "[server]\ntrusted_proxies = [\"127.0.0.1\", \"proxy.local\"]\n",
            )
            .unwrap();
            let err = load_err(None);
            assert!(err.contains("server.trusted_proxies"), "{err}");
            assert!(
                err.contains("\"proxy.local\" is not an IP address"),
                "{err}"
            );
        });
        jailed(|jail| {
            jail.set_env("SMSGW_SERVER__TRUSTED_PROXIES", "10.0.0.1/8");
            let err = load_err(None);
            assert!(err.contains("SMSGW_SERVER__TRUSTED_PROXIES"), "{err}");
            assert!(err.contains("10.0.0.1/8"), "{err}");
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
        let mut loaded = loaded.unwrap();
        let defaults = Settings::default();
        // The file's relative database path is read from the file's folder.
        let folder = path.parent().unwrap().display().to_string();
        assert_eq!(
            loaded.database.url,
            format!("sqlite://{folder}/smsgw.db?mode=rwc")
        );
        loaded.database.url = defaults.database.url.clone();
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
