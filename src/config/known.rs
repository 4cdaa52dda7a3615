//! The key paths the settings accept (`server.bind`, `server.tls.cert_file`), read from the
//! settings' own serde field lists, and the warning for an `SMSGW_…` variable that sets none
//! of them (docs/api.md, "CLI").

use figment::Figment;
use figment::error::Kind;
use figment::providers::{Format, Toml};

use super::Settings;
use super::load::{ENV_PREFIX, ENV_SEPARATOR};

/// A key no setting has: asking the settings to read it makes serde name the keys they accept.
/// It sorts before every real key, so it is the first key serde meets in its table.
const PROBE: &str = "__probe";

/// Variables of smsgw's own tooling that share the prefix but are not settings.
const NOT_SETTINGS: &[&str] = &["SMSGW_TEST_DATABASE_URL"];

/// Tables nest at most this deep (`server.tls.cert_file` is 3).
const MAX_DEPTH: usize = 4;

/// Every key path the settings accept, tables included (`server`, `server.tls`), sorted.
pub fn known_keys() -> Vec<String> {
    let mut keys = Vec::new();
    collect_keys(&[], &mut keys);
    keys.sort();
    keys
}

/// Adds the keys of the table at `table` (the root when empty) and of the tables below it.
fn collect_keys(table: &[String], keys: &mut Vec<String>) {
    if table.len() >= MAX_DEPTH {
        return;
    }
    let Some(fields) = fields_of(table) else {
        return;
    };
    for field in fields {
        let mut path = table.to_vec();
        path.push((*field).to_string());
        keys.push(path.join("."));
        collect_keys(&path, keys);
    }
}

/// The field names of the table at `table`, or None when that key is not a table.
fn fields_of(table: &[String]) -> Option<&'static [&'static str]> {
    let toml = if table.is_empty() {
        format!("{PROBE} = 0\n")
    } else {
        format!("[{}]\n{PROBE} = 0\n", table.join("."))
    };
    let errors = Figment::from(Toml::string(&toml))
        .extract::<Settings>()
        .err()?;
    errors.into_iter().find_map(|error| {
        // figment's path may or may not end with the refused key itself.
        let path = match error.path.split_last() {
            Some((last, rest)) if last == PROBE => rest,
            _ => error.path.as_slice(),
        };
        match error.kind {
            Kind::UnknownField(field, expected) if field == PROBE && path == table => {
                Some(expected)
            }
            _ => None,
        }
    })
}

/// The environment variable that sets `key` (`server.tls.cert_file` → `SMSGW_SERVER__TLS__CERT_FILE`).
fn variable_of(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        key.split('.')
            .collect::<Vec<_>>()
            .join(ENV_SEPARATOR)
            .to_ascii_uppercase()
    )
}

/// One warning per `SMSGW_…` variable of the process environment that sets no setting (a
/// variable without the `__` separator is not read at all: `SMSGW_SERVER_BIND`), naming the
/// nearest variable that does.
pub fn unknown_variable_warnings() -> Vec<String> {
    let names = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| name.starts_with(ENV_PREFIX));
    warnings_for(names)
}

/// [`unknown_variable_warnings`] for the variables `names`.
fn warnings_for(names: impl Iterator<Item = String>) -> Vec<String> {
    let names: Vec<String> = names
        .filter(|name| !NOT_SETTINGS.contains(&name.as_str()))
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    let variables: Vec<String> = known_keys().iter().map(|key| variable_of(key)).collect();
    let mut names: Vec<String> = names
        .into_iter()
        .filter(|name| !variables.contains(&name.to_ascii_uppercase()))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let upper = name.to_ascii_uppercase();
            let nearest = variables
                .iter()
                .min_by_key(|variable| strsim::levenshtein(&upper, variable));
            match nearest {
                Some(nearest) => {
                    format!("warning: {name} matches no setting; did you mean {nearest}?")
                }
                None => format!("warning: {name} matches no setting"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_are_the_settings_fields_nested_tables_included() {
        let keys = known_keys();
        for key in [
            "server",
            "server.bind",
            "server.tls",
            "server.tls.cert_file",
            "server.tls.key_file",
            "pace.per_minute",
            "secrets.key_file",
            "database.url",
            "cluster.lease_ttl",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
        }
        assert!(!keys.iter().any(|k| k.starts_with("server.bind.")));
    }

    #[test]
    fn a_variable_that_sets_nothing_names_the_nearest_one() {
        let warnings = warnings_for(
            [
                "SMSGW_SERVER_BIND",
                "SMSGW_SERVER__BIND",
                "SMSGW_server__workers",
                "SMSGW_TEST_DATABASE_URL",
                "SMSGW_SERVER__TLS__CERT_FILE",
                "SMSGW_DATABASE_URL",
            ]
            .map(String::from)
            .into_iter(),
        );
        assert_eq!(
            warnings,
            [
                "warning: SMSGW_DATABASE_URL matches no setting; did you mean SMSGW_DATABASE__URL?",
                "warning: SMSGW_SERVER_BIND matches no setting; did you mean SMSGW_SERVER__BIND?",
            ]
        );
    }
}
