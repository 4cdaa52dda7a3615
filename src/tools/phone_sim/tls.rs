//! TLS of `smsgw phone-sim`: which server certificates a simulated phone trusts, and why it
//! refused one, in words.
//!
//! Besides the public roots and the CA certificates of `--ca-file`, a server certificate that
//! is byte for byte one of the `--ca-file` certificates is trusted (pinned) when it names the
//! host and is within its validity period, as curl does with `--cacert`. That is what makes
//! the self-signed certificate docs/android.md has people make work: OpenSSL 3 marks it as a
//! CA (`basicConstraints: CA:TRUE`), and webpki refuses a CA certificate as the server's own.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// The client TLS settings of a simulated phone: it trusts the public roots and `ca_certs`
/// (as CAs, and each as the exact server certificate), and offers `protocols` (ALPN).
pub fn client_config(
    ca_certs: &[CertificateDer<'static>],
    protocols: &[&[u8]],
) -> rustls::ClientConfig {
    let mut roots = actix_tls::connect::rustls_0_23::webpki_roots_cert_store();
    // Checked when --ca-file was read; one that is not a trust anchor is left out.
    roots.add_parsable_certificates(ca_certs.iter().cloned());
    let roots = Arc::new(roots);
    let builder = rustls::ClientConfig::builder();
    let mut config = match WebPkiServerVerifier::builder(roots.clone()).build() {
        Ok(webpki) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedOrWebPki {
                webpki,
                pinned: ca_certs.to_vec(),
            }))
            .with_no_client_auth(),
        // Refused only without any root, which the public roots rule out.
        Err(_) => builder.with_root_certificates(roots).with_no_client_auth(),
    };
    config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    config
}

/// The normal (webpki) verification, and when it refuses: the exact `--ca-file` certificate,
/// valid for the name and today. Handshake signatures are always checked by webpki's rules.
#[derive(Debug)]
struct PinnedOrWebPki {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => return Ok(verified),
            Err(refused) => refused,
        };
        if !self
            .pinned
            .iter()
            .any(|cert| cert.as_ref() == end_entity.as_ref())
        {
            return Err(refused);
        }
        // The very certificate --ca-file holds: its names and validity period are what is left
        // to check. A wrong name is said as such (not as the refusal that let it here).
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        match validity(end_entity) {
            Some((from, until)) if (from..=until).contains(&now.as_secs()) => {
                Ok(ServerCertVerified::assertion())
            }
            _ => Err(refused),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// One DER element at the start of `der`: its tag, its contents, and what follows it.
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (len, rest) = rest.split_at(octets);
        let len = len.iter().fold(0usize, |len, b| len << 8 | usize::from(*b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

/// The validity period (notBefore, notAfter) of a DER certificate, in seconds since the Unix
/// epoch (RFC 5280 §4.1.2.5); `None` when it cannot be read. webpki keeps its own to itself.
fn validity(cert: &[u8]) -> Option<(u64, u64)> {
    const VERSION: u8 = 0xa0;
    let (_, cert, _) = der_element(cert)?;
    let (_, tbs, _) = der_element(cert)?;
    let (tag, _, after_version) = der_element(tbs)?;
    let mut rest = if tag == VERSION { after_version } else { tbs };
    // serialNumber, signature, issuer
    for _ in 0..3 {
        rest = der_element(rest)?.2;
    }
    let (_, validity, _) = der_element(rest)?;
    let (from_tag, from, rest) = der_element(validity)?;
    let (until_tag, until, _) = der_element(rest)?;
    Some((der_time(from_tag, from)?, der_time(until_tag, until)?))
}

/// A UTCTime (YYMMDDHHMMSSZ, 1950–2049) or GeneralizedTime (YYYYMMDDHHMMSSZ), in seconds since
/// the Unix epoch.
fn der_time(tag: u8, value: &[u8]) -> Option<u64> {
    const UTC_TIME: u8 = 0x17;
    const GENERALIZED_TIME: u8 = 0x18;
    let text = std::str::from_utf8(value).ok()?;
    let full = match tag {
        UTC_TIME => {
            let century = if text.get(..2)?.parse::<u8>().ok()? < 50 {
                "20"
            } else {
                "19"
            };
            format!("{century}{text}")
        }
        GENERALIZED_TIME => text.to_string(),
        _ => return None,
    };
    let time = chrono::NaiveDateTime::parse_from_str(&full, "%Y%m%d%H%M%SZ").ok()?;
    u64::try_from(time.and_utc().timestamp()).ok()
}

/// A TLS failure in rustls's words, and for the usual refusals of a private server's
/// certificate, what to do about it.
pub fn failure(err: &rustls::Error) -> String {
    use rustls::Error::InvalidCertificate;
    match err {
        InvalidCertificate(CertificateError::UnknownIssuer) => {
            "TLS: invalid peer certificate: UnknownIssuer (no CA this phone trusts signed it: \
             give --ca-file that certificate or its CA)"
                .into()
        }
        InvalidCertificate(CertificateError::Other(other))
            if matches!(
                other.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::CaUsedAsEndEntity)
            ) =>
        {
            "TLS: invalid peer certificate: CaUsedAsEndEntity (it is a CA certificate: trusted as \
             the server's own only when --ca-file holds that very certificate)"
                .into()
        }
        other => format!("TLS: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A self-signed certificate for `names`, made as OpenSSL 3's `req -x509` makes one when
    /// `ca`.
    fn self_signed(names: &[&str], ca: bool, days: Option<(i32, i32)>) -> CertificateDer<'static> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        if ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        if let Some((from, until)) = days {
            params.not_before = rcgen::date_time_ymd(from, 1, 1);
            params.not_after = rcgen::date_time_ymd(until, 1, 1);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    /// What a phone with `pinned` in --ca-file makes of `presented` from `host` at `now`.
    fn verify(
        pinned: &CertificateDer<'static>,
        presented: &CertificateDer<'_>,
        host: &str,
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        crate::startup::install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates([pinned.clone()]);
        let verifier = PinnedOrWebPki {
            webpki: WebPkiServerVerifier::builder(Arc::new(roots))
                .build()
                .unwrap(),
            pinned: vec![pinned.clone()],
        };
        let name = ServerName::try_from(host).unwrap();
        verifier.verify_server_cert(presented, &[], &name, &[], now)
    }

    #[test]
    fn the_exact_ca_file_certificate_is_trusted_for_its_names_and_period() {
        let openssl_like = self_signed(&["127.0.0.1"], true, None);
        let now = UnixTime::now();
        assert!(verify(&openssl_like, &openssl_like, "127.0.0.1", now).is_ok());

        let other_name = verify(&openssl_like, &openssl_like, "localhost", now).unwrap_err();
        assert!(
            matches!(
                other_name,
                rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "a name it does not hold is said as such: {other_name}"
        );

        let other = self_signed(&["127.0.0.1"], true, None);
        let refused = verify(&openssl_like, &other, "127.0.0.1", now).unwrap_err();
        assert!(
            failure(&refused).ends_with(
                "CaUsedAsEndEntity (it is a CA certificate: trusted as the server's own only \
                 when --ca-file holds that very certificate)"
            ),
            "{}",
            failure(&refused)
        );

        let expired = self_signed(&["127.0.0.1"], true, Some((2000, 2001)));
        assert!(verify(&expired, &expired, "127.0.0.1", now).is_err());
        let in_2000 = UnixTime::since_unix_epoch(Duration::from_secs(962_409_600));
        assert!(verify(&expired, &expired, "127.0.0.1", in_2000).is_ok());
    }

    #[test]
    fn validity_is_read_from_either_time_form() {
        let cert = self_signed(&["127.0.0.1"], true, Some((1999, 2051)));
        let (from, until) = validity(&cert).unwrap();
        assert_eq!(from, 915_148_800, "1999-01-01 as a UTCTime");
        assert_eq!(until, 2_556_144_000, "2051-01-01 as a GeneralizedTime");
        assert_eq!(validity(&cert[..40]), None, "a cut certificate");
    }
}
