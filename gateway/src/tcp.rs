//! The plain TCP listener as the node serves it, and the socket option every accepted
//! connection gets, plain or TLS (`crate::tls`).

use axum::serve::ListenerExt;
use tokio::net::TcpListener;

/// Turns Nagle's algorithm off on an accepted connection. Frames and answers are written
/// whole, so Nagle could only hold back a second small write (a Pusher handshake's
/// `connection_established` right after the 101) until the peer's ACK.
pub fn no_delay(tcp: &mut tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

/// The plain listener as the node serves it: [`no_delay`] on every connection.
pub fn accepting(
    listener: TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    listener.tap_io(no_delay)
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    use super::*;

    #[tokio::test]
    async fn every_accepted_connection_has_nagle_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut served = accepting(listener);
        for _ in 0..2 {
            let client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (io, peer) = served.accept().await;
            assert_eq!(peer, client.local_addr().unwrap());
            assert!(io.nodelay().unwrap(), "TCP_NODELAY on the accepted socket");
        }
    }
}
