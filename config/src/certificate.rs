//! The server's certificate: `server.tls_cert` + `server.tls_key` read and loaded into an
//! acceptor while the settings are parsed, so a bad file is a configuration error (exit 2
//! naming the key), never a failure after start.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::ConfigError;

/// Loads a certificate chain and its private key into an acceptor (ALPN `h2`, then
/// `http/1.1`), on rustls' ring provider (the one every process installs). Errors name
/// `server.tls_cert` or `server.tls_key`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, ConfigError> {
    let cert_error = |e: &dyn std::fmt::Display| ConfigError::new("server.tls_cert", e.to_string());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_error(&e))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_error(&e))?;
    if chain.is_empty() {
        return Err(cert_error(&"no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| ConfigError::new("server.tls_key", e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ConfigError::new("server.tls_key", e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|e| ConfigError::new("server.tls_key", e.to_string()))?;
    // HTTP/2 first for agent backends multiplexing their calls; browsers open WebSockets
    // over HTTP/1.1 or, where they speak it, over HTTP/2 (RFC 8441): both are served.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
