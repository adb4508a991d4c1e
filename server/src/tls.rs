//! HTTPS with rustls (docs/security.md, "HTTPS"): a replica serves it
//! itself when given a certificate and key (`BATON_TLS_CERT`,
//! `BATON_TLS_KEY`), and agents and the CLI may trust a private
//! certificate authority beside the system's (`--ca-cert`). Both sides use
//! rustls with the ring provider, so no OpenSSL is linked.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// The acceptor for a replica's connections, from a PEM certificate
/// chain (leaf first) and its PEM private key. Each mistake names the
/// file and what is wrong with it, before anything else starts.
pub fn acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| {
            anyhow::anyhow!(
                "BATON_TLS_CERT `{}`: cannot read a PEM certificate: {e}",
                cert.display()
            )
        })?;
    anyhow::ensure!(
        !chain.is_empty(),
        "BATON_TLS_CERT `{}` holds no certificate (expected PEM blocks \
         `-----BEGIN CERTIFICATE-----`)",
        cert.display()
    );
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        anyhow::anyhow!(
            "BATON_TLS_KEY `{}`: cannot read a PEM private key: {e}",
            key.display()
        )
    })?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .context("the TLS provider offers no protocol version")?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .with_context(|| {
                format!(
                    "BATON_TLS_KEY `{}` does not fit the certificate in BATON_TLS_CERT `{}`, or \
             is of a kind rustls does not use",
                    key.display(),
                    cert.display()
                )
            })?;
    // The server speaks HTTP/1.1 only (http_server.rs).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The certificates of a PEM file an HTTP client trusts beside the
/// system's roots (`--ca-cert`).
pub fn extra_roots(path: &Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    let pem = std::fs::read(path)
        .with_context(|| format!("--ca-cert `{}` cannot be read", path.display()))?;
    let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        anyhow::anyhow!(
            "--ca-cert `{}` is not a PEM certificate bundle: {e}",
            path.display()
        )
    })?;
    anyhow::ensure!(
        !roots.is_empty(),
        "--ca-cert `{}` holds no certificate (expected PEM blocks \
         `-----BEGIN CERTIFICATE-----`)",
        path.display()
    );
    Ok(roots)
}

/// `builder` trusting `roots` too.
pub fn trusting(
    builder: reqwest::ClientBuilder,
    roots: &[reqwest::Certificate],
) -> reqwest::ClientBuilder {
    roots
        .iter()
        .cloned()
        .fold(builder, reqwest::ClientBuilder::add_root_certificate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mistakes_name_the_file_and_the_fault() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = acceptor(&missing, &missing).err().unwrap().to_string();
        assert!(
            e.contains("BATON_TLS_CERT") && e.contains("missing.pem"),
            "{e}"
        );
        let e = acceptor(&empty, &empty).err().unwrap().to_string();
        assert!(e.contains("holds no certificate"), "{e}");
        let e = extra_roots(&empty).unwrap_err().to_string();
        assert!(e.contains("--ca-cert") && e.contains("empty.pem"), "{e}");
        let e = extra_roots(&missing).unwrap_err().to_string();
        assert!(e.contains("cannot be read"), "{e}");
    }
}
