//! Ops endpoints: liveness, readiness and Prometheus metrics (the jobs' too, when this node
//! runs them), and the span of each HTTP request.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use std::sync::{Arc, OnceLock};

use crate::caller::Caller;
use crate::state::AppState;

/// `GET /healthz`: the process is alive.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: the broker is reachable, the node holds the admin store's records (read at
/// least once since it started: a node that has them serves on while the store is down), and
/// the node is not draining.
pub async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    if app.is_draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining");
    }
    if app.tenants.records_age() == Some(None) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "admin store never reached since start",
        );
    }
    match app.broker.ready().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "broker unreachable"),
    }
}

/// `GET /metrics`
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    app.metrics.sync_events(app.broker.emitted());
    if let Some(age) = app.tenants.records_age() {
        app.metrics.admin_store.set_age(age);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(app.job_metrics.as_deref()),
    )
}

/// The tenant a request path names, when its route template has a `{tenant}` segment.
fn tenant_of<'a>(route: &str, path: &'a str) -> Option<&'a str> {
    let at = route.split('/').position(|s| s == "{tenant}")?;
    path.split('/').nth(at).filter(|t| !t.is_empty())
}

/// The credential a request was authenticated with, as its access line names it: set by the
/// door that authenticates it (an agent API key, an MCP or OAuth token), read once the answer
/// is out. Never a secret.
#[derive(Debug, Clone, Default)]
pub struct Credential(Arc<OnceLock<String>>);

impl Credential {
    /// Notes `caller` as the credential of the request whose extensions are `ext`.
    pub fn note(ext: &axum::http::Extensions, caller: &Caller) {
        if let Some(slot) = ext.get::<Credential>() {
            let _ = slot.0.set(caller.log_id());
        }
    }
}

/// The layer that counts every answered request in `toolmark_http_requests_total` and its duration (to the
/// response head) in `toolmark_http_request_duration_seconds`, by route template, and writes
/// its access log line (target `toolmark_gateway::access`, level info: the route, the method,
/// the status, the duration, the tenant and the credential's id (`apiKey:<id>`,
/// `mcpToken:<id>`, `oauth:<sub>`); `RUST_LOG=info,toolmark_gateway::access=off`
/// turns the lines off).
///
/// A tower layer with a future of its own, not `axum::middleware::from_fn`: that boxes the
/// middleware's future (over 1 KiB with the request in it) and the inner service's, two large
/// allocations per request on the agent's hot path (`docs/architecture.md`, "What a call
/// costs").
#[derive(Clone)]
pub struct CountRequests(pub AppState);

impl<S> tower_layer::Layer<S> for CountRequests {
    type Service = CountRequest<S>;

    fn layer(&self, inner: S) -> CountRequest<S> {
        CountRequest {
            app: self.0.clone(),
            inner,
        }
    }
}

/// [`CountRequests`] around a service.
#[derive(Clone)]
pub struct CountRequest<S> {
    app: AppState,
    inner: S,
}

/// What [`CountRequest`] keeps of a request until its answer is out.
struct Seen {
    app: AppState,
    started: std::time::Instant,
    route: &'static str,
    method: axum::http::Method,
    credential: Credential,
    // Reference-counted: the path is read for the tenant only once the answer is out.
    uri: axum::http::Uri,
}

impl<S> tower_service::Service<axum::extract::Request> for CountRequest<S>
where
    S: tower_service::Service<
            axum::extract::Request,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        >,
{
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = Counted<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: axum::extract::Request) -> Self::Future {
        let started = std::time::Instant::now();
        let route = req
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .map_or("unmatched", |p| crate::metrics::intern(p.as_str()));
        let credential = Credential::default();
        req.extensions_mut().insert(credential.clone());
        let seen = Seen {
            app: self.app.clone(),
            started,
            route,
            method: req.method().clone(),
            credential,
            uri: req.uri().clone(),
        };
        Counted {
            inner: self.inner.call(req),
            seen: Some(seen),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`CountRequest`]: the inner service's, then the count and the line.
    pub struct Counted<F> {
        #[pin]
        inner: F,
        seen: Option<Seen>,
    }
}

impl<F> std::future::Future for Counted<F>
where
    F: std::future::Future<Output = Result<axum::response::Response, std::convert::Infallible>>,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        let Ok(res) = std::task::ready!(this.inner.poll(cx));
        if let Some(seen) = this.seen.take() {
            seen.answered(&res);
        }
        std::task::Poll::Ready(Ok(res))
    }
}

impl Seen {
    /// Counts the answered request and writes its access line.
    fn answered(self, res: &axum::response::Response) {
        let Seen {
            app,
            started,
            route,
            method,
            credential,
            uri,
        } = self;
        let seconds = started.elapsed().as_secs_f64();
        let status = res.status().as_u16();
        app.metrics.http_request(route, &method, status, seconds);
        let tenant = tenant_of(route, uri.path());
        // Counted for tenants that exist only: a made-up id in a path grows no map.
        if let Some(code) = res.extensions().get::<crate::http::problem::ProblemCode>()
            && crate::traces::on()
        {
            // The request's span (this layer runs inside it) says why it was refused.
            crate::traces::mark_error(&tracing::Span::current(), code.0);
        }
        if let (Some(code), Some(t)) = (
            res.extensions().get::<crate::http::problem::ProblemCode>(),
            tenant,
        ) && let Some(known) = app.tenants.get(t)
        {
            app.traffic.refused(t, known.incarnation, code.0);
        }
        tracing::info!(
            target: "toolmark_gateway::access",
            route,
            method = %method,
            status,
            duration_ms = seconds * 1000.0,
            tenant = tenant.unwrap_or(""),
            credential = credential.0.get().map_or("", String::as_str),
            "request"
        );
    }
}

/// The span of one HTTP request, child of the caller's `traceparent` when it sent one.
/// Made only while spans are exported (`crate::traces`): otherwise a debug span, which costs
/// nothing unless debug logs are on (the access log line says the same per request).
pub fn request_span<B>(req: &axum::http::Request<B>) -> tracing::Span {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if !crate::traces::on() {
        return tracing::debug_span!(
            "request",
            method = %req.method(),
            path = %req.uri().path(),
        );
    }
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let parent = opentelemetry::global::get_text_map_propagator(|p| {
        p.extract(&opentelemetry_http::HeaderExtractor(req.headers()))
    });
    let _ = span.set_parent(parent);
    span
}

#[cfg(test)]
mod tests {
    use super::tenant_of;

    #[test]
    fn the_tenant_is_the_path_segment_its_template_names() {
        assert_eq!(
            tenant_of(
                "/v1/tenants/{tenant}/calls/{id}",
                "/v1/tenants/acme/calls/c1"
            ),
            Some("acme")
        );
        assert_eq!(tenant_of("/healthz", "/healthz"), None);
        assert_eq!(tenant_of("/v1/tenants/{tenant}/page", "/v1/tenants/"), None);
    }
}
