//! HTTPS (`server.tls`, docs/api.md "HTTPS"): the server's certificate and key, read from
//! their PEM files before anything else starts, so a bad file leaves no database behind.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsSettings;

/// Why `server.tls` is unusable; each message names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cert_file {file}: {error}")]
    CertFile {
        file: String,
        error: rustls::pki_types::pem::Error,
    },
    #[error("cert_file {0}: no certificate in it")]
    NoCertificate(String),
    #[error("key_file {file}: {error}")]
    KeyFile {
        file: String,
        error: rustls::pki_types::pem::Error,
    },
    #[error("certificate and key do not fit: {0}")]
    Mismatch(rustls::Error),
}

/// Reads `server.tls`'s PEM files into a rustls server configuration.
pub fn load(tls: &TlsSettings) -> Result<rustls::ServerConfig, TlsError> {
    let certs = CertificateDer::pem_file_iter(&tls.cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|error| TlsError::CertFile {
            file: tls.cert_file.clone(),
            error,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(tls.cert_file.clone()));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key_file).map_err(|error| TlsError::KeyFile {
        file: tls.key_file.clone(),
        error,
    })?;
    rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Mismatch)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A self-signed certificate and its key, written to `dir` as PEM files.
    fn write_pair(dir: &std::path::Path, name: &str) -> TlsSettings {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert_file = dir.join(format!("{name}.crt"));
        let key_file = dir.join(format!("{name}.key"));
        std::fs::write(&cert_file, certified.cert.pem()).unwrap();
        std::fs::write(&key_file, certified.signing_key.serialize_pem()).unwrap();
        TlsSettings {
            cert_file: cert_file.display().to_string(),
            key_file: key_file.display().to_string(),
        }
    }

    /// The process's provider, as `startup` installs it.
    fn install_ring() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }

    #[test]
    fn a_matching_certificate_and_key_load() {
        install_ring();
        let dir = tempfile::tempdir().unwrap();
        assert!(load(&write_pair(dir.path(), "a")).is_ok());
    }

    #[test]
    fn each_bad_file_is_named() {
        install_ring();
        let dir = tempfile::tempdir().unwrap();
        let good = write_pair(dir.path(), "a");
        let other = write_pair(dir.path(), "b");

        let missing = TlsSettings {
            cert_file: dir.path().join("none.crt").display().to_string(),
            ..good.clone()
        };
        let err = load(&missing).unwrap_err().to_string();
        assert!(
            err.starts_with("cert_file ") && err.contains("none.crt"),
            "{err}"
        );

        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "").unwrap();
        let no_cert = TlsSettings {
            cert_file: empty.display().to_string(),
            ..good.clone()
        };
        let err = load(&no_cert).unwrap_err().to_string();
        assert!(err.ends_with("empty.crt: no certificate in it"), "{err}");

        let wrong_key = TlsSettings {
            key_file: good.cert_file.clone(),
            ..good.clone()
        };
        let err = load(&wrong_key).unwrap_err().to_string();
        assert!(
            err.starts_with("key_file ") && err.contains("a.crt"),
            "{err}"
        );

        let mismatched = TlsSettings {
            key_file: other.key_file,
            ..good
        };
        let err = load(&mismatched).unwrap_err().to_string();
        assert!(err.starts_with("certificate and key do not fit"), "{err}");
    }
}
