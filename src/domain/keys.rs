//! Secrets handed to clients: API keys (`sk_live_…`, `sk_test_…`) and device tokens (`dt_…`).
//!
//! Only SHA-256 hashes are stored; lookups hash the presented value first, so the timing of a
//! hash-indexed lookup reveals nothing about the secret itself.

use rand::Rng;
use rand::distr::Alphanumeric;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::status::Mode;

/// Random base62 characters after the prefix (≈ 238 bits).
const SECRET_CHARS: usize = 40;

fn random_base62(len: usize) -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// The prefix of an API key of the given mode.
pub fn api_key_prefix(mode: Mode) -> &'static str {
    match mode {
        Mode::Live => "sk_live_",
        Mode::Test => "sk_test_",
    }
}

/// A new API key of the given mode.
pub fn generate_api_key(mode: Mode) -> String {
    format!("{}{}", api_key_prefix(mode), random_base62(SECRET_CHARS))
}

/// A new device token for pairing a phone.
pub fn generate_device_token() -> String {
    format!("dt_{}", random_base62(SECRET_CHARS))
}

/// The mode an API key claims by its prefix, when it is well formed (prefix + ≥ 32 base62).
pub fn api_key_mode(key: &str) -> Option<Mode> {
    let (mode, rest) = if let Some(rest) = key.strip_prefix("sk_live_") {
        (Mode::Live, rest)
    } else if let Some(rest) = key.strip_prefix("sk_test_") {
        (Mode::Test, rest)
    } else {
        return None;
    };
    (rest.len() >= 32 && rest.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(mode)
}

/// Lowercase hex SHA-256 of a secret: what the database stores.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Constant-time equality of two stored hashes.
pub fn hashes_equal(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// The non-secret start of a key, safe to show in listings and logs.
pub fn display_prefix(secret: &str) -> String {
    secret.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_well_formed_and_distinct() {
        let live = generate_api_key(Mode::Live);
        let test = generate_api_key(Mode::Test);
        assert_eq!(api_key_mode(&live), Some(Mode::Live));
        assert_eq!(api_key_mode(&test), Some(Mode::Test));
        assert_ne!(live, generate_api_key(Mode::Live));
        assert!(generate_device_token().starts_with("dt_"));
    }

    #[test]
    fn malformed_keys_have_no_mode() {
        assert_eq!(api_key_mode("sk_live_short"), None);
        assert_eq!(
            api_key_mode("pk_live_0123456789012345678901234567890123"),
            None
        );
        assert_eq!(
            api_key_mode("sk_live_012345678901234567890123456789-+"),
            None
        );
    }

    #[test]
    fn hashing_is_stable_and_compared_exactly() {
        let h = hash_secret("sk_test_x");
        assert_eq!(h, hash_secret("sk_test_x"));
        assert_eq!(h.len(), 64);
        assert!(hashes_equal(&h, &h));
        assert!(!hashes_equal(&h, &hash_secret("sk_test_y")));
    }
}
