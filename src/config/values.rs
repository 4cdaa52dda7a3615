//! How one configuration value is read: durations as humantime strings (`"30s"`, `"6h"`), and
//! strings that the environment may give as bare numbers or booleans.

use std::time::Duration;

use secrecy::SecretString;
use serde::{Deserialize, Deserializer};

use crate::domain::network::AddressRange;

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

pub(super) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

pub(super) fn durations<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Duration>, D::Error> {
    let texts = Vec::<String>::deserialize(deserializer)?;
    texts
        .iter()
        .map(|t| parse_duration(t).map_err(serde::de::Error::custom))
        .collect()
}

/// Accepts strings, and numbers or booleans written without quotes in the environment.
pub(super) fn lenient_string<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        serde_json::Value::Bool(b) => Ok(b.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "expected a string, got {other}"
        ))),
    }
}

pub(super) fn lenient_opt_string<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    lenient_string(deserializer).map(Some)
}

pub(super) fn lenient_opt_secret<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SecretString>, D::Error> {
    lenient_string(deserializer).map(|s| Some(SecretString::from(s)))
}

/// A list of addresses and CIDRs: a list of strings, or one string of them separated by commas
/// (as the environment gives `SMSGW_SERVER__TRUSTED_PROXIES=10.0.0.0/8,::1`). A bad entry is
/// an error naming it.
pub(super) fn address_ranges<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<AddressRange>, D::Error> {
    let texts: Vec<String> = match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::String(list) => list
            .split(',')
            .filter(|entry| !entry.trim().is_empty())
            .map(str::to_string)
            .collect(),
        serde_json::Value::Array(entries) => entries
            .into_iter()
            .map(|entry| match entry {
                serde_json::Value::String(text) => Ok(text),
                other => Err(serde::de::Error::custom(format!(
                    "expected an address or CIDR string, got {other}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(serde::de::Error::custom(format!(
                "expected a list of addresses and CIDRs, got {other}"
            )));
        }
    };
    texts
        .iter()
        .map(|text| text.parse().map_err(serde::de::Error::custom))
        .collect()
}
