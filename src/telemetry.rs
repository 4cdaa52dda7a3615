//! Logging: human-readable by default, JSON with `log.format = "json"`; `RUST_LOG` overrides
//! `log.level`. Secrets and message content are never logged at info level.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls (tests start many apps) are no-ops.
pub fn init(format: &str, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
