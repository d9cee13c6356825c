//! The stop signals of a process: SIGTERM (Kubernetes, systemd) and SIGINT (a terminal's Ctrl-C).

/// Resolves at the first SIGTERM or SIGINT.
pub async fn terminated() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = term => {}
    }
}
