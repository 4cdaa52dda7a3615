//! Self-signed certificates for the HTTPS tests (`server.tls`, docs/api.md "HTTPS"): the PEM
//! texts, the files a server is given, and an API client that trusts the certificate.

use std::sync::Arc;
use std::time::Duration;

use awc::{Client, Connector};
use rustls::pki_types::CertificateDer;
use smsgw::config::TlsSettings;

/// A self-signed certificate for 127.0.0.1 (and `localhost`) with its key.
pub struct SelfSigned {
    pub cert_pem: String,
    pub key_pem: String,
    der: CertificateDer<'static>,
}

impl SelfSigned {
    /// A leaf certificate, as a CA would issue for a server.
    pub fn leaf() -> SelfSigned {
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap();
        SelfSigned::of(&made.cert, &made.signing_key)
    }

    /// A certificate as docs/android.md's `openssl req -x509` line makes it: OpenSSL 3 marks
    /// it as a CA (`basicConstraints: critical, CA:TRUE`), which webpki alone refuses as a
    /// server's own.
    pub fn openssl_like() -> SelfSigned {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        SelfSigned::of(&cert, &key)
    }

    fn of(cert: &rcgen::Certificate, key: &rcgen::KeyPair) -> SelfSigned {
        SelfSigned {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// `cert.pem` and `key.pem` in a new temporary directory: the directory (removed when
    /// dropped), the server's `server.tls`, and the certificate file's path (`--ca-file`).
    pub fn files(&self) -> (tempfile::TempDir, TlsSettings, String) {
        let dir = tempfile::tempdir().unwrap();
        let cert_file = dir.path().join("cert.pem");
        let key_file = dir.path().join("key.pem");
        std::fs::write(&cert_file, &self.cert_pem).unwrap();
        std::fs::write(&key_file, &self.key_pem).unwrap();
        let tls = TlsSettings {
            cert_file: cert_file.display().to_string(),
            key_file: key_file.display().to_string(),
        };
        (dir, tls, cert_file.display().to_string())
    }

    /// An API client that trusts this certificate, as the phone simulator's `--ca-file` does
    /// (also when it is CA-like), offering `protocols` by ALPN (none: HTTP/1.1).
    pub fn client(&self, protocols: &[&[u8]]) -> Client {
        smsgw::startup::install_crypto_provider();
        let config =
            smsgw::tools::phone_sim::tls::client_config(std::slice::from_ref(&self.der), protocols);
        Client::builder()
            .connector(Connector::new().rustls_0_23(Arc::new(config)))
            .timeout(Duration::from_secs(30))
            .finish()
    }
}
