//! Logs and traces. Logs go through `tracing` to stderr: `RUST_LOG` filters (default `info`),
//! `TOOLMARK_LOG_FORMAT=json` prints one JSON object per line. When
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans are also exported over OTLP (HTTP/protobuf) and
//! W3C `traceparent` headers of agent requests become the parents of their spans.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Keeps the trace exporter alive; [`Telemetry::shutdown`] flushes it.
#[derive(Debug)]
pub struct Telemetry {
    service: &'static str,
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the exporter. Call outside the async runtime.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("{}: trace export shutdown: {e}", self.service);
        }
    }
}

/// Installs the global subscriber (and the OTLP exporter when configured). Call before the
/// async runtime starts: the exporter runs on its own thread.
pub fn init(service: &'static str) -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("TOOLMARK_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    // Colours only on a terminal: a pipe (a container's log, a file) gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let fmt = if json {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    let provider = std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").and_then(|_| {
        match opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
        {
            Ok(exporter) => {
                let resource = opentelemetry_sdk::Resource::builder()
                    .with_service_name(service)
                    .build();
                Some(
                    SdkTracerProvider::builder()
                        .with_batch_exporter(exporter)
                        .with_resource(resource)
                        .build(),
                )
            }
            Err(e) => {
                eprintln!("{service}: OTLP exporter not started: {e}");
                None
            }
        }
    });
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service)));
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init();
    Telemetry { service, provider }
}
