//! Ops endpoints: liveness, readiness and Prometheus metrics.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use crate::state::AppState;

/// `GET /healthz`: the process is alive.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: the broker is reachable and the node is not draining.
pub async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    if app.is_draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining");
    }
    match app.broker.ready().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "broker unreachable"),
    }
}

/// `GET /metrics`
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(),
    )
}
