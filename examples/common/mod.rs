//! What the benchmarks share: the settings of a server on a fresh SQLite database in `dir`,
//! on a free local port, with no API throttling.

use std::path::Path;

use smsgw::config::Settings;

/// Settings for a benchmark server whose database lives in `dir`; logs at `log_level`.
pub fn bench_settings(dir: &Path, log_level: &str) -> Settings {
    let mut settings = Settings::default();
    settings.database.url = format!("sqlite://{}?mode=rwc", dir.join("bench.db").display());
    settings.server.bind = "127.0.0.1:0".into();
    settings.limits.api_per_second = 0;
    settings.log.level = log_level.into();
    settings
}
