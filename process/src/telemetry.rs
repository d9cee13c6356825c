//! Logs and traces. Logs go through `tracing` to stderr: `RUST_LOG` filters (default `info`),
//! `TOOLMARK_LOG_FORMAT=json` prints one JSON object per line. The MCP library's own lines
//! (`rmcp`: two at info for every stateless MCP request, with the client's capabilities in
//! them) are held at `warn` unless `RUST_LOG` names `rmcp`. A worker thread's lines leave in
//! batches ([`crate::log_writer`]). When
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans are also exported over OTLP and W3C `traceparent`
//! headers of agent requests become the parents of their spans. `OTEL_EXPORTER_OTLP_PROTOCOL`
//! picks the transport: `http/protobuf` (the default, port 4318) or `grpc` (port 4317).
//! `OTEL_TRACES_SAMPLER` (and `_ARG`) pick the head sampler, parent-based by default, as the
//! SDK reads them. Every span carries `service.instance.id`, the node's id, as a resource
//! attribute and as an attribute of its own (backends that show only span attributes).
//! Without an endpoint no span reaches an exporter, and [`tracing_on`] is false: the gateway
//! then makes no span and carries no trace context of its own on the call path.
//!
//! The SDK's batch processor exports from a thread of its own, outside any async runtime. The
//! HTTP transport brings its own (a blocking client); the gRPC transport needs a tokio reactor
//! for its HTTP/2 connection, so it gets a one-thread runtime of its own ([`OnRuntime`]), kept
//! apart from the node's runtime so that exporting never competes with serving and is still
//! there while the node's runtime drains.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::tonic_types::transport::ClientTlsConfig;
use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Keeps the trace exporter alive; [`Telemetry::shutdown`] flushes it.
#[derive(Debug)]
pub struct Telemetry {
    service: &'static str,
    provider: Option<SdkTracerProvider>,
    /// The gRPC transport's runtime: dropped after the provider has flushed.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Telemetry {
    /// Flushes and stops the exporter. Call outside the async runtime.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("{}: trace export shutdown: {e}", self.service);
        }
        drop(self.runtime);
    }
}

/// The environment variable that picks the OTLP transport.
pub const PROTOCOL_VAR: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";

/// The OTLP transport spans are exported over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf`: protobuf bodies POSTed to `<endpoint>/v1/traces` (the default).
    HttpProtobuf,
    /// `grpc`: the `TraceService/Export` call over HTTP/2.
    Grpc,
}

impl Protocol {
    /// The transport a value of [`PROTOCOL_VAR`] names; unset means `http/protobuf`, as the
    /// OpenTelemetry specification says. `http/json` is not spoken.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim) {
            None | Some("") | Some("http/protobuf") => Ok(Self::HttpProtobuf),
            Some("grpc") => Ok(Self::Grpc),
            Some(other) => Err(format!(
                "{PROTOCOL_VAR}: {other:?} is not a supported protocol (grpc or http/protobuf)"
            )),
        }
    }

    /// The transport the process environment names.
    pub fn from_env() -> Result<Self, String> {
        let value = std::env::var(PROTOCOL_VAR).ok();
        Self::parse(value.as_deref())
    }
}

/// The environment variables that pick the head sampler, as the OpenTelemetry SDK reads them.
pub const SAMPLER_VAR: &str = "OTEL_TRACES_SAMPLER";
/// The sampler's argument (a ratio for the `traceidratio` samplers).
pub const SAMPLER_ARG_VAR: &str = "OTEL_TRACES_SAMPLER_ARG";

/// Checks the sampler the environment names: the SDK falls back to `parentbased_always_on`
/// on a value it does not know, silently; the process refuses to start instead (exit 2),
/// naming the variable.
pub fn check_sampler(sampler: Option<&str>, arg: Option<&str>) -> Result<(), String> {
    let Some(sampler) = sampler.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    match sampler {
        "always_on" | "always_off" | "parentbased_always_on" | "parentbased_always_off" => Ok(()),
        "traceidratio" | "parentbased_traceidratio" => match arg.map(str::trim) {
            None | Some("") => Ok(()),
            Some(a) => match a.parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(()),
                _ => Err(format!(
                    "{SAMPLER_ARG_VAR}: {a:?} is not a ratio between 0 and 1"
                )),
            },
        },
        other => Err(format!(
            "{SAMPLER_VAR}: {other:?} is not a sampler (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)"
        )),
    }
}

/// [`check_sampler`] of the process environment.
pub fn check_sampler_env() -> Result<(), String> {
    let sampler = std::env::var("OTEL_TRACES_SAMPLER").ok();
    let arg = std::env::var("OTEL_TRACES_SAMPLER_ARG").ok();
    check_sampler(sampler.as_deref(), arg.as_deref())
}

/// The log filter of `RUST_LOG`'s value (`info` when unset or unreadable), with `rmcp=warn`
/// added unless the value names `rmcp`: the MCP library logs each stateless request it serves
/// (a session's start and end) at info, which would double the lines of an MCP call.
pub fn filter(rust_log: Option<&str>) -> EnvFilter {
    let base = rust_log.and_then(|v| EnvFilter::try_new(v).ok());
    let names_rmcp = base.is_some() && rust_log.is_some_and(|v| v.contains("rmcp"));
    let base = base.unwrap_or_else(|| EnvFilter::new("info"));
    if names_rmcp {
        base
    } else {
        base.add_directive("rmcp=warn".parse().expect("a valid directive"))
    }
}

/// Whether spans are exported (an OTLP endpoint is configured and its exporter started).
static TRACING_ON: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: without it, the call path makes no span and carries no trace
/// context (no cost beyond a load of this flag).
pub fn tracing_on() -> bool {
    TRACING_ON.load(Ordering::Relaxed)
}

/// Installs the global subscriber (and the OTLP exporter when configured). Call before the
/// async runtime starts: the exporter runs on its own thread.
pub fn init(service: &'static str) -> Telemetry {
    init_as(service, None)
}

/// [`init`] for the process whose instance (node) id is `instance`: every span names it as
/// `service.instance.id`.
pub fn init_as(service: &'static str, instance: Option<&str>) -> Telemetry {
    let filter = filter(std::env::var(EnvFilter::DEFAULT_ENV).ok().as_deref());
    let json = std::env::var("TOOLMARK_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    // Colours only on a terminal: a pipe (a container's log, a file) gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(crate::log_writer::Stderr)
        .with_ansi(ansi);
    let fmt = if json {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    let (provider, runtime) = match std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT") {
        None => (None, None),
        Some(_) => match exporter(service, instance) {
            Ok((provider, runtime)) => {
                TRACING_ON.store(true, Ordering::Relaxed);
                (Some(provider), runtime)
            }
            Err(e) => {
                eprintln!("{service}: OTLP exporter not started: {e}");
                (None, None)
            }
        },
    };
    let otel = provider.as_ref().map(|p| {
        // Spans made without `tracing` (the page's node's, with start times of their own)
        // go through the same provider.
        opentelemetry::global::set_tracer_provider(p.clone());
        tracing_opentelemetry::layer().with_tracer(p.tracer(service))
    });
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    crate::log_writer::flush_before_panics();
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init();
    Telemetry {
        service,
        provider,
        runtime,
    }
}

/// The tracer provider for the configured transport, and the runtime the gRPC one runs on.
fn exporter(
    service: &'static str,
    instance: Option<&str>,
) -> Result<(SdkTracerProvider, Option<tokio::runtime::Runtime>), String> {
    let mut resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service)
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    let mut provider = SdkTracerProvider::builder();
    if let Some(id) = instance {
        resource = resource.with_attribute(KeyValue::new("service.instance.id", id.to_owned()));
        // Registered before the exporter's processor: the attribute is on the span it ends.
        provider = provider.with_span_processor(InstanceAttribute(KeyValue::new(
            "service.instance.id",
            id.to_owned(),
        )));
    }
    let provider = provider.with_resource(resource.build());
    match Protocol::from_env()? {
        Protocol::HttpProtobuf => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()
                .map_err(|e| e.to_string())?;
            Ok((provider.with_batch_exporter(exporter).build(), None))
        }
        Protocol::Grpc => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("otlp-grpc")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the export runtime: {e}"))?;
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc);
            // tonic trusts no root unless told: an https endpoint is verified against the
            // system's roots (or `SSL_CERT_FILE`), as the HTTP transport's client does.
            if std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
                .is_ok_and(|e| e.trim().to_ascii_lowercase().starts_with("https://"))
            {
                builder = builder.with_tls_config(ClientTlsConfig::new().with_native_roots());
            }
            // The channel is made, and connects, on the export runtime.
            let exporter = {
                let _on = runtime.enter();
                builder.build().map_err(|e| e.to_string())?
            };
            let exporter = OnRuntime {
                inner: Arc::new(exporter),
                runtime: runtime.handle().clone(),
            };
            Ok((
                provider.with_batch_exporter(exporter).build(),
                Some(runtime),
            ))
        }
    }
}

/// Puts `service.instance.id` on every span as it starts.
#[derive(Debug)]
struct InstanceAttribute(KeyValue);

impl SpanProcessor for InstanceAttribute {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {
        use opentelemetry::trace::Span as _;
        span.set_attribute(self.0.clone());
    }

    fn on_end(&self, _: SpanData) {}

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// A span exporter whose exports run on a tokio runtime, whatever thread asks for them.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: Arc<E>,
    runtime: tokio::runtime::Handle,
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let inner = self.inner.clone();
        let task = self.runtime.spawn(async move { inner.export(batch).await });
        async move {
            task.await
                .unwrap_or_else(|e| Err(OTelSdkError::InternalFailure(e.to_string())))
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _on = self.runtime.enter();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _on = self.runtime.enter();
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        // Called while the provider is built, before any export holds a clone.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// A span of its own trace for work done later on behalf of a traced call (the webhook of its
/// outcome, a sweep's timeout of it), linked to the call's span: an operator following the
/// call's trace finds it, and the call's trace does not stay open for it. Ends when dropped.
pub struct LinkedSpan(opentelemetry::global::BoxedSpan);

impl std::fmt::Debug for LinkedSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkedSpan").finish_non_exhaustive()
    }
}

impl LinkedSpan {
    /// `name`, linked to the span the W3C `traceparent` names (a client span when `client`,
    /// for a request this process makes); `None` when tracing is off, or when `traceparent`
    /// names no span or one its trace did not sample (head sampling holds for what follows).
    pub fn start(
        name: String,
        client: bool,
        traceparent: &str,
        attributes: Vec<(&'static str, String)>,
    ) -> Option<LinkedSpan> {
        use opentelemetry::trace::{
            Link, SpanKind, TraceContextExt as _, Tracer as _, TracerProvider as _,
        };
        if !tracing_on() {
            return None;
        }
        let carrier =
            std::collections::HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
        let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
        let linked = cx.span().span_context().clone();
        if !linked.is_valid() || !linked.is_sampled() {
            return None;
        }
        let tracer = opentelemetry::global::tracer_provider().tracer("toolmark");
        let span = tracer
            .span_builder(name)
            .with_kind(if client {
                SpanKind::Client
            } else {
                SpanKind::Internal
            })
            .with_attributes(
                attributes
                    .into_iter()
                    .map(|(k, v)| KeyValue::new(k, v))
                    .collect::<Vec<_>>(),
            )
            .with_links(vec![Link::with_context(linked)])
            .start_with_context(&tracer, &opentelemetry::Context::new());
        Some(LinkedSpan(span))
    }

    /// This span's W3C `traceparent`, for the request it makes.
    pub fn traceparent(&self) -> String {
        use opentelemetry::trace::Span as _;
        let sc = self.0.span_context();
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    }

    /// Sets the attribute `key`.
    pub fn set(&mut self, key: &'static str, value: String) {
        use opentelemetry::trace::Span as _;
        self.0.set_attribute(KeyValue::new(key, value));
    }

    /// Marks it failed: `error.type` and the error status.
    pub fn fail(&mut self, error_type: &str) {
        use opentelemetry::trace::Span as _;
        self.0
            .set_attribute(KeyValue::new("error.type", error_type.to_owned()));
        self.0
            .set_status(opentelemetry::trace::Status::error(error_type.to_owned()));
    }
}

impl Drop for LinkedSpan {
    fn drop(&mut self) {
        use opentelemetry::trace::Span as _;
        self.0.end();
    }
}

#[cfg(test)]
mod tests {
    use super::check_sampler;

    #[test]
    fn a_sampler_the_sdk_would_ignore_is_refused_naming_its_variable() {
        assert_eq!(check_sampler(None, None), Ok(()));
        assert_eq!(
            check_sampler(Some("parentbased_traceidratio"), Some("0.01")),
            Ok(())
        );
        assert_eq!(check_sampler(Some("always_off"), None), Ok(()));
        let e = check_sampler(Some("sometimes"), None).unwrap_err();
        assert!(e.starts_with("OTEL_TRACES_SAMPLER:"), "{e}");
        let e = check_sampler(Some("traceidratio"), Some("2")).unwrap_err();
        assert!(e.starts_with("OTEL_TRACES_SAMPLER_ARG:"), "{e}");
    }
}
