//! TLS setup shared by the processes: one crypto provider (rustls' ring) for every TLS client and
//! server, and the server acceptor of `server.tls_cert` + `server.tls_key`, loaded once.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::ConfigError;

/// Installs rustls' ring provider for the process (idempotent). Every TLS client and server
/// (Redis, webhooks, OTLP, HTTPS) uses it; call it before building any of them.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Loads a certificate chain and its private key into an acceptor (HTTP/1.1, which WebSocket
/// upgrades use). Errors name `server.tls_cert` or `server.tls_key`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, ConfigError> {
    install_crypto();
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
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| ConfigError::new("server.tls_key", e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
