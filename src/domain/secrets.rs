//! Secrets at rest: values the server must read back in clear (webhook signing keys, which key
//! an HMAC) are stored sealed with ChaCha20-Poly1305 under the server's secrets key
//! (docs/api.md, "Secrets at rest"). A sealed value is `v1:` + standard base64 of a random
//! 12-byte nonce followed by the ciphertext and its tag; the row's id is the associated data, so
//! a sealed value copied into another row does not open.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::Aead;
use chacha20poly1305::aead::Payload;
use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Nonce};

/// Prefix of a sealed value of format version 1. A stored value without it is clear text from
/// before encryption at rest (sealed at the next start).
pub const SEALED_PREFIX: &str = "v1:";
/// Bytes of a secrets key.
pub const KEY_BYTES: usize = 32;
/// Bytes of a nonce.
const NONCE_BYTES: usize = 12;

/// Why a secrets key or a sealed value was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretsError {
    /// The configured key is not standard base64 of 32 bytes.
    #[error("the secrets key must be standard base64 of 32 bytes")]
    BadKey,
    /// The value does not open under this key: another key sealed it, or it was altered.
    #[error("a stored secret does not decrypt with this secrets key (wrong key, or altered)")]
    WrongKey,
    /// The value is not in the sealed format.
    #[error("a stored secret is not in the sealed format")]
    Malformed,
}

/// The server's secrets key with its cipher, and a key derived from it for secrets that are
/// computed rather than stored ([`SecretBox::derive`]). Never printed (`Debug` shows nothing of
/// it).
#[derive(Clone)]
pub struct SecretBox {
    cipher: ChaCha20Poly1305,
    /// HMAC-SHA256 of [`DERIVATION_LABEL`] under the secrets key: never the cipher's key itself.
    derivation_key: [u8; KEY_BYTES],
}

/// What the derivation key is the HMAC of, under the secrets key.
const DERIVATION_LABEL: &[u8] = b"smsgw derived secrets v1";

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

impl SecretBox {
    /// A box from the key's text form (standard base64 of 32 bytes; surrounding whitespace,
    /// such as a key file's final newline, is ignored).
    pub fn from_base64(text: &str) -> Result<SecretBox, SecretsError> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| SecretsError::BadKey)?;
        if bytes.len() != KEY_BYTES {
            return Err(SecretsError::BadKey);
        }
        let cipher = ChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| SecretsError::BadKey)?;
        let derivation_key = hmac_sha256(&bytes, &[DERIVATION_LABEL]);
        Ok(SecretBox {
            cipher,
            derivation_key,
        })
    }

    /// A secret derived from `input` for `purpose`: hex HMAC-SHA256 under a key derived from the
    /// secrets key, over `purpose`, a zero byte and `input`. The same inputs give the same
    /// secret under the same secrets key; without that key (a copy of the database alone) it
    /// cannot be computed. A new secrets key changes every derived secret.
    pub fn derive(&self, purpose: &str, input: &[u8]) -> String {
        hex::encode(hmac_sha256(
            &self.derivation_key,
            &[purpose.as_bytes(), &[0], input],
        ))
    }

    /// A new random key in its text form (what a generated key file holds).
    pub fn generate_key() -> String {
        // rand's thread RNG is a CSPRNG reseeded from the OS, suitable for keys.
        let bytes: [u8; KEY_BYTES] = rand::random();
        STANDARD.encode(bytes)
    }

    /// Seals `plain` for the row `context` (its id): a fresh random nonce every time.
    pub fn seal(&self, plain: &str, context: &[u8]) -> Result<String, SecretsError> {
        let nonce_bytes: [u8; NONCE_BYTES] = rand::random();
        let nonce = Nonce::from(nonce_bytes);
        let payload = Payload {
            msg: plain.as_bytes(),
            aad: context,
        };
        // Encryption fails only for inputs of gigabytes; a signing key is ~50 bytes.
        let sealed = self
            .cipher
            .encrypt(&nonce, payload)
            .map_err(|_| SecretsError::Malformed)?;
        let mut out = Vec::with_capacity(NONCE_BYTES + sealed.len());
        out.extend_from_slice(&nonce_bytes);
        out.extend_from_slice(&sealed);
        Ok(format!("{SEALED_PREFIX}{}", STANDARD.encode(out)))
    }

    /// Opens a value [`SecretBox::seal`] made for the same `context`.
    pub fn open(&self, stored: &str, context: &[u8]) -> Result<String, SecretsError> {
        let encoded = stored
            .strip_prefix(SEALED_PREFIX)
            .ok_or(SecretsError::Malformed)?;
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|_| SecretsError::Malformed)?;
        if bytes.len() < NONCE_BYTES {
            return Err(SecretsError::Malformed);
        }
        let (nonce_bytes, sealed) = bytes.split_at(NONCE_BYTES);
        let nonce_array: [u8; NONCE_BYTES] = nonce_bytes
            .try_into()
            .map_err(|_| SecretsError::Malformed)?;
        let payload = Payload {
            msg: sealed,
            aad: context,
        };
        let plain = self
            .cipher
            .decrypt(&Nonce::from(nonce_array), payload)
            .map_err(|_| SecretsError::WrongKey)?;
        String::from_utf8(plain).map_err(|_| SecretsError::Malformed)
    }
}

/// HMAC-SHA256 of the concatenated `parts` under `key`.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::{Hmac, KeyInit as _, Mac};
    // HMAC takes keys of any length: the error branch cannot happen.
    let Ok(mut mac) = Hmac::<sha2::Sha256>::new_from_slice(key) else {
        unreachable!("HMAC takes keys of any length")
    };
    for part in parts {
        mac.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(&mac.finalize().into_bytes());
    out
}

/// True when a stored value is sealed (else it is clear text from before encryption at rest).
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret_box() -> SecretBox {
        SecretBox::from_base64(&SecretBox::generate_key()).unwrap()
    }

    #[test]
    fn a_sealed_value_opens_with_its_key_and_context_only() {
        let key = secret_box();
        let sealed = key.seal("whsec_abc", b"row-1").unwrap();
        assert!(is_sealed(&sealed));
        assert!(!sealed.contains("whsec_abc"));
        assert_eq!(key.open(&sealed, b"row-1").unwrap(), "whsec_abc");
        assert_eq!(key.open(&sealed, b"row-2"), Err(SecretsError::WrongKey));
        assert_eq!(
            secret_box().open(&sealed, b"row-1"),
            Err(SecretsError::WrongKey)
        );
    }

    #[test]
    fn derived_secrets_depend_on_the_secrets_key_and_purpose() {
        let key = secret_box();
        let one = key.derive("purpose a", b"input");
        assert_eq!(one, key.derive("purpose a", b"input"));
        assert_eq!(one.len(), 64);
        assert_ne!(one, key.derive("purpose b", b"input"));
        assert_ne!(one, key.derive("purpose a", b"other"));
        assert_ne!(one, secret_box().derive("purpose a", b"input"));
    }

    #[test]
    fn every_seal_uses_a_fresh_nonce() {
        let key = secret_box();
        assert_ne!(key.seal("x", b"c").unwrap(), key.seal("x", b"c").unwrap());
    }

    #[test]
    fn bad_keys_and_values_are_refused() {
        assert_eq!(
            SecretBox::from_base64("c2hvcnQ=").unwrap_err(),
            SecretsError::BadKey
        );
        assert_eq!(
            SecretBox::from_base64("not base64!").unwrap_err(),
            SecretsError::BadKey
        );
        let key = secret_box();
        assert_eq!(key.open("whsec_clear", b"c"), Err(SecretsError::Malformed));
        assert_eq!(key.open("v1:AAAA", b"c"), Err(SecretsError::Malformed));
        assert!(!is_sealed("whsec_clear"));
    }
}
