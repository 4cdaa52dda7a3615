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

/// A size in bytes: a number, or a string with a unit (`"500MB"`, `"2 GiB"`, `"64kB"`; decimal
/// units are powers of 1000, binary ones of 1024). Absent or `null`: none.
pub(super) fn byte_size<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!("invalid size {n}: a whole number of bytes"))
        }),
        Some(serde_json::Value::String(text)) => parse_byte_size(&text)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Some(other) => Err(serde::de::Error::custom(format!(
            "expected a size such as \"2GB\", got {other}"
        ))),
    }
}

fn parse_byte_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let number: u64 = digits.parse().map_err(|_| {
        format!("invalid size {text:?}: expected a number with a unit, e.g. \"2GB\"")
    })?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "invalid size {text:?}: unknown unit {other:?} (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ));
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("invalid size {text:?}: too large"))
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

#[cfg(test)]
mod tests {
    use super::parse_byte_size;

    #[test]
    fn sizes_read_decimal_and_binary_units_and_refuse_the_rest() {
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_byte_size(" 500 MiB "), Ok(500 << 20));
        assert_eq!(parse_byte_size("64kB"), Ok(64_000));
        assert!(
            parse_byte_size("2 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(
            parse_byte_size("GB")
                .unwrap_err()
                .contains("expected a number")
        );
        assert!(
            parse_byte_size("99999999999TB")
                .unwrap_err()
                .contains("too large")
        );
    }
}
