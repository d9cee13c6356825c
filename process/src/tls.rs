//! TLS setup shared by the processes: one crypto provider (rustls' ring) for every TLS client and
//! server. The server's own certificate is loaded with the configuration
//! (`toolmark_config::certificate`).

/// Installs rustls' ring provider for the process (idempotent). Every TLS client and server
/// (Redis, webhooks, OTLP, HTTPS) uses it; call it before building any of them.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
