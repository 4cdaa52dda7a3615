//! Webhook signatures: signing-key generation, the `X-Signature` / Standard Webhooks headers a
//! delivery carries, and the receiver-side verification used by tests and the load-test harness.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Prefix of every signing key; the rest is standard padded base64 of the secret bytes, which
/// is what Standard Webhooks receivers expect to decode.
pub const SIGNING_KEY_PREFIX: &str = "whsec_";

/// Largest accepted distance, in seconds, between a delivery's timestamp and the receiver's clock.
pub const TIMESTAMP_TOLERANCE_SECS: i64 = 300;

/// Number of random bytes behind a signing key: 256 bits matches the HMAC-SHA256 output size.
const SIGNING_KEY_BYTES: usize = 32;

/// Length of an HMAC-SHA256 tag in bytes.
const TAG_LEN: usize = 32;

/// Why a receiver refused a delivery.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// The signature is well formed but does not match the body.
    #[error("signature mismatch")]
    BadSignature,
    /// The timestamp is more than [`TIMESTAMP_TOLERANCE_SECS`] away from `now`.
    #[error("timestamp outside tolerance")]
    StaleTimestamp,
    /// The signature header (or the receiver's own key) cannot be decoded.
    #[error("malformed signature")]
    Malformed,
}

/// Every signature-related header value of one webhook delivery.
///
/// The `webhook-id` header is the caller's event id and is not repeated here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `X-Signature`: lowercase hex HMAC-SHA256 of the raw body, keyed with the whole key string.
    pub signature: String,
    /// `X-Timestamp` and `webhook-timestamp`: unix seconds.
    pub timestamp: i64,
    /// `webhook-signature`: `v1,<base64>`; empty when the key is not a `whsec_` key, in which
    /// case the caller omits the header rather than send one no receiver could verify.
    pub webhook_signature: String,
}

/// Generates a new signing key: `whsec_` + standard padded base64 of 32 random bytes.
pub fn generate_signing_key() -> String {
    // rand's thread RNG is a CSPRNG reseeded from the OS, suitable for secrets.
    let bytes: [u8; SIGNING_KEY_BYTES] = rand::random();
    format!("{SIGNING_KEY_PREFIX}{}", STANDARD.encode(bytes))
}

/// Computes the `X-Signature` value: lowercase hex HMAC-SHA256 of `body`, keyed with the UTF-8
/// bytes of the whole `signing_key` string, prefix included (that is what the user sees and
/// pastes into their receiver).
pub fn signature_hex(signing_key: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(signing_key.as_bytes(), &[body]))
}

/// Computes the Standard Webhooks `webhook-signature` value `v1,<base64>` over
/// `"{event_id}.{timestamp}.{body}"`, keyed with the base64-decoded part of the key after
/// `whsec_`. Returns `None` if the key is not `whsec_` followed by valid standard base64.
pub fn standard_webhooks_signature(
    signing_key: &str,
    event_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Option<String> {
    let secret = decode_standard_key(signing_key)?;
    let tag = standard_tag(&secret, event_id, timestamp, body);
    Some(format!("v1,{}", STANDARD.encode(tag)))
}

/// Computes all signature headers of one delivery.
pub fn sign(signing_key: &str, event_id: &str, timestamp: i64, body: &[u8]) -> SignedHeaders {
    SignedHeaders {
        signature: signature_hex(signing_key, body),
        timestamp,
        webhook_signature: standard_webhooks_signature(signing_key, event_id, timestamp, body)
            .unwrap_or_default(),
    }
}

/// Receiver side of `X-Signature`: checks the hex signature (either case) in constant time and
/// that `timestamp` is within [`TIMESTAMP_TOLERANCE_SECS`] of `now`.
pub fn verify(
    signing_key: &str,
    body: &[u8],
    signature_hex: &str,
    timestamp: i64,
    now: i64,
) -> Result<(), VerifyError> {
    let given = hex::decode(signature_hex).map_err(|_| VerifyError::Malformed)?;
    if given.len() != TAG_LEN {
        return Err(VerifyError::Malformed);
    }
    check_timestamp(timestamp, now)?;
    let expected = hmac_sha256(signing_key.as_bytes(), &[body]);
    if bool::from(expected.as_slice().ct_eq(given.as_slice())) {
        Ok(())
    } else {
        Err(VerifyError::BadSignature)
    }
}

/// Receiver side of Standard Webhooks: `header` may hold several space-separated signatures
/// (key rotation); the delivery is accepted if any `v1,` entry matches. Entries of other
/// versions are ignored; `Malformed` if no `v1,` entry decodes or the key is not a `whsec_` key.
pub fn verify_standard(
    signing_key: &str,
    event_id: &str,
    timestamp: i64,
    body: &[u8],
    header: &str,
    now: i64,
) -> Result<(), VerifyError> {
    let secret = decode_standard_key(signing_key).ok_or(VerifyError::Malformed)?;
    let candidates: Vec<Vec<u8>> = header
        .split_ascii_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .collect();
    if candidates.is_empty() {
        return Err(VerifyError::Malformed);
    }
    check_timestamp(timestamp, now)?;
    let expected = standard_tag(&secret, event_id, timestamp, body);
    // Compare against every candidate without short-circuiting so timing does not reveal
    // which entry matched.
    let matched = candidates.iter().fold(subtle::Choice::from(0), |acc, c| {
        acc | expected.as_slice().ct_eq(c.as_slice())
    });
    if bool::from(matched) {
        Ok(())
    } else {
        Err(VerifyError::BadSignature)
    }
}

/// Strips `whsec_` and base64-decodes the rest, as Standard Webhooks defines the secret.
fn decode_standard_key(signing_key: &str) -> Option<Vec<u8>> {
    let encoded = signing_key.strip_prefix(SIGNING_KEY_PREFIX)?;
    STANDARD.decode(encoded).ok()
}

/// The Standard Webhooks tag over `"{id}.{timestamp}.{body}"`; the body is fed as raw bytes so
/// non-UTF-8 payloads are signed exactly as sent.
fn standard_tag(secret: &[u8], event_id: &str, timestamp: i64, body: &[u8]) -> [u8; TAG_LEN] {
    let ts = timestamp.to_string();
    hmac_sha256(
        secret,
        &[event_id.as_bytes(), b".", ts.as_bytes(), b".", body],
    )
}

/// Rejects timestamps farther than the tolerance from `now`; `abs_diff` cannot overflow even
/// for hostile values such as `i64::MIN`.
fn check_timestamp(timestamp: i64, now: i64) -> Result<(), VerifyError> {
    if now.abs_diff(timestamp) > TIMESTAMP_TOLERANCE_SECS.unsigned_abs() {
        Err(VerifyError::StaleTimestamp)
    } else {
        Ok(())
    }
}

/// The `X-Signature` of an SMSGate-format delivery, as the SMSGate app signs (docs/compat.md,
/// Webhooks): lowercase hex HMAC-SHA256 keyed with the UTF-8 bytes of `signing_key`, over the
/// body followed by the decimal `X-Timestamp` (unix seconds).
pub fn smsgate_signature(signing_key: &str, body: &[u8], timestamp: i64) -> String {
    let timestamp = timestamp.to_string();
    hex::encode(hmac_sha256(
        signing_key.as_bytes(),
        &[body, timestamp.as_bytes()],
    ))
}

/// HMAC-SHA256 of the concatenation of `parts`, keyed with raw `key` bytes.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
    // HMAC accepts keys of any length (longer ones are hashed first); the Result only exists
    // because `KeyInit` is shared with fixed-key MACs.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        unreachable!("HMAC accepts keys of any length")
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use sha2::Digest;

    /// Textbook HMAC (RFC 2104) on top of plain SHA-256, independent of the `hmac` crate.
    fn reference_hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
        let mut k = [0u8; 64];
        if key.len() > 64 {
            k[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            k[..key.len()].copy_from_slice(key);
        }
        let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
        let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
        let inner = Sha256::new()
            .chain_update(&ipad)
            .chain_update(msg)
            .finalize();
        Sha256::new()
            .chain_update(&opad)
            .chain_update(inner)
            .finalize()
            .into()
    }

    #[test]
    fn smsgate_signature_signs_body_then_timestamp() {
        // Computed with Python's hmac module over the bytes `{"a":1}1700000000`.
        assert_eq!(
            smsgate_signature("key", b"{\"a\":1}", 1_700_000_000),
            "5cff791334e7fd8344cc05c2398964f60329f4edd6ab1087ed1ba6c34eefeeca"
        );
        assert_eq!(
            smsgate_signature("key", b"{\"a\":1}", 1_700_000_000),
            hex::encode(reference_hmac(b"key", b"{\"a\":1}1700000000"))
        );
    }

    #[test]
    fn rfc4231_case_2() {
        let expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let body = b"what do ya want for nothing?";
        assert_eq!(hex::encode(hmac_sha256(b"Jefe", &[body])), expected);
        assert_eq!(hex::encode(reference_hmac(b"Jefe", body)), expected);
        // The X-Signature key is the raw UTF-8 of the key string, so a plain key gives the RFC tag.
        assert_eq!(signature_hex("Jefe", body), expected);
    }

    #[test]
    fn signature_hex_keys_with_whole_string_including_prefix() {
        let key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"event":"sms.delivered"}"#;
        let expected = hex::encode(reference_hmac(key.as_bytes(), body));
        assert_eq!(signature_hex(key, body), expected);
        assert!(
            signature_hex(key, body)
                .chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        );
    }

    #[test]
    fn standard_webhooks_published_vector() {
        let sig = standard_webhooks_signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            sig.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn standard_webhooks_matches_reference() {
        let key = generate_signing_key();
        let secret = STANDARD.decode(&key[SIGNING_KEY_PREFIX.len()..]).unwrap();
        let body = b"\xff\x00 not utf-8";
        let mut msg = b"evt_1.42.".to_vec();
        msg.extend_from_slice(body);
        let expected = format!("v1,{}", STANDARD.encode(reference_hmac(&secret, &msg)));
        assert_eq!(
            standard_webhooks_signature(&key, "evt_1", 42, body).unwrap(),
            expected
        );
    }

    #[test]
    fn standard_webhooks_rejects_bad_keys() {
        assert_eq!(standard_webhooks_signature("Jefe", "id", 1, b""), None);
        assert_eq!(standard_webhooks_signature("whsec_!!!", "id", 1, b""), None);
        assert_eq!(standard_webhooks_signature("whsec_abc", "id", 1, b""), None);
        let headers = sign("Jefe", "id", 1, b"x");
        assert_eq!(headers.webhook_signature, "");
        assert_eq!(headers.signature, signature_hex("Jefe", b"x"));
    }

    #[test]
    fn generated_keys_are_standard_webhooks_secrets() {
        let a = generate_signing_key();
        let b = generate_signing_key();
        assert_ne!(a, b);
        assert!(a.starts_with(SIGNING_KEY_PREFIX));
        let secret = STANDARD.decode(&a[SIGNING_KEY_PREFIX.len()..]).unwrap();
        assert_eq!(secret.len(), 32);
        assert_eq!(a.len(), SIGNING_KEY_PREFIX.len() + 44);
    }

    #[test]
    fn sign_fills_every_header() {
        let key = generate_signing_key();
        let h = sign(&key, "evt_9", 1_700_000_000, b"{}");
        assert_eq!(h.timestamp, 1_700_000_000);
        assert_eq!(h.signature, signature_hex(&key, b"{}"));
        assert_eq!(
            Some(h.webhook_signature.clone()),
            standard_webhooks_signature(&key, "evt_9", 1_700_000_000, b"{}")
        );
        assert_eq!(
            verify(&key, b"{}", &h.signature, h.timestamp, h.timestamp),
            Ok(())
        );
        assert_eq!(
            verify_standard(
                &key,
                "evt_9",
                h.timestamp,
                b"{}",
                &h.webhook_signature,
                h.timestamp
            ),
            Ok(())
        );
    }

    #[test]
    fn verify_timestamp_tolerance() {
        let key = generate_signing_key();
        let body = b"payload";
        let sig = signature_hex(&key, body);
        let ts = 1_700_000_000;
        assert_eq!(verify(&key, body, &sig, ts, ts + 300), Ok(()));
        assert_eq!(verify(&key, body, &sig, ts, ts - 300), Ok(()));
        assert_eq!(
            verify(&key, body, &sig, ts, ts + 301),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            verify(&key, body, &sig, ts, ts - 301),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            verify(&key, body, &sig, i64::MIN, i64::MAX),
            Err(VerifyError::StaleTimestamp)
        );
    }

    #[test]
    fn verify_rejects_tampering() {
        let key = generate_signing_key();
        let body = b"payload".to_vec();
        let sig = signature_hex(&key, &body);
        let mut flipped = body.clone();
        flipped[0] ^= 0x01;
        assert_eq!(
            verify(&key, &flipped, &sig, 0, 0),
            Err(VerifyError::BadSignature)
        );
        let mut bad = hex::decode(&sig).unwrap();
        bad[31] ^= 0x80;
        assert_eq!(
            verify(&key, &body, &hex::encode(bad), 0, 0),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify("whsec_other", &body, &sig, 0, 0),
            Err(VerifyError::BadSignature)
        );
        // Case of the hex digits is not significant to a lenient receiver.
        assert_eq!(verify(&key, &body, &sig.to_uppercase(), 0, 0), Ok(()));
    }

    #[test]
    fn verify_rejects_malformed() {
        let key = generate_signing_key();
        assert_eq!(verify(&key, b"", "zz", 0, 0), Err(VerifyError::Malformed));
        assert_eq!(verify(&key, b"", "abcd", 0, 0), Err(VerifyError::Malformed));
        assert_eq!(verify(&key, b"", "", 0, 0), Err(VerifyError::Malformed));
    }

    #[test]
    fn verify_standard_multiple_entries_and_errors() {
        let key = generate_signing_key();
        let other = generate_signing_key();
        let body = b"{\"a\":1}";
        let good = standard_webhooks_signature(&key, "id", 10, body).unwrap();
        let wrong = standard_webhooks_signature(&other, "id", 10, body).unwrap();

        let rotated = format!("{wrong} v1a,c29tZXRoaW5n {good}");
        assert_eq!(verify_standard(&key, "id", 10, body, &rotated, 10), Ok(()));
        assert_eq!(
            verify_standard(&key, "id", 10, body, &wrong, 10),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify_standard(&key, "other-id", 10, body, &good, 10),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify_standard(&key, "id", 10, b"{\"a\":2}", &good, 10),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify_standard(&key, "id", 10, body, &good, 311),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(verify_standard(&key, "id", 10, body, &good, 310), Ok(()));
        assert_eq!(
            verify_standard(&key, "id", 10, body, "v2,abc", 10),
            Err(VerifyError::Malformed)
        );
        assert_eq!(
            verify_standard(&key, "id", 10, body, "v1,***", 10),
            Err(VerifyError::Malformed)
        );
        assert_eq!(
            verify_standard("Jefe", "id", 10, body, &good, 10),
            Err(VerifyError::Malformed)
        );
    }
}
