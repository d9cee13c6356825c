//! One trace per call, across the nodes it crosses (contract, fourth wave, "One trace per
//! call"; `docs/operations.md`, "Reading a call's trace").
//!
//! On the agent's node a call runs in an `execute_tool {tool}` span (child of the HTTP
//! request's span, which continues the agent's `traceparent`, or of the MCP request's span,
//! which continues its `_meta.traceparent`). Its context travels to the page's node inside the
//! message that carries the frame (no extra round trip), where [`PageTraces`] continues it:
//! `send_frame {tool}` as the frame goes to the page's socket, `page {tool}` for the time the
//! page took, `receive_answer {tool}` for the answer's check in the broker, and
//! `resolve_confirmation {tool}` (linked to the call's trace) for a deferred confirmation.
//! An outcome other than `ok` sets `error.type` and the error status.
//!
//! Without an exporter ([`on`] false) none of this runs: no span is made, no context is
//! carried, the page's node keeps nothing.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Link, Span as _, SpanContext, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use toolmark_broker::{ConvKey, Outcome};
use toolmark_proto::ToolResult;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Whether spans are exported (an OTLP endpoint is configured).
pub fn on() -> bool {
    toolmark_process::telemetry::tracing_on()
}

/// The W3C `traceparent` of `span`'s context, when tracing is on and it has one.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if !on() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| format_traceparent(&sc))
}

fn format_traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The remote context a W3C `traceparent` names (empty when it names none).
pub fn remote(traceparent: &str) -> Context {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier))
}

/// The span of an agent's call on its node, `execute_tool {tool}`, child of the current span
/// (the request's); a disabled span when tracing is off.
pub fn call_span(tool: &str, tenant: &str) -> tracing::Span {
    if !on() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {tool}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool,
        toolmark.tenant = %tenant,
        toolmark.call.id = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// The span of a hosted MCP request, `{mcp.method.name} {gen_ai.tool.name}` (or the method
/// alone), continuing the request's `_meta.traceparent` when it carries one (else a child of
/// the HTTP request's span); a disabled span when tracing is off.
pub fn mcp_span(
    method: &'static str,
    tool: Option<&str>,
    traceparent: Option<&str>,
    session: Option<&str>,
) -> tracing::Span {
    if !on() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        "mcp",
        otel.name = %match tool {
            Some(t) => format!("{method} {t}"),
            None => method.to_owned(),
        },
        otel.kind = "server",
        mcp.method.name = method,
        gen_ai.tool.name = tracing::field::Empty,
        gen_ai.operation.name = tracing::field::Empty,
        mcp.session.id = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(t) = tool {
        span.record("gen_ai.tool.name", t);
        span.record("gen_ai.operation.name", "execute_tool");
    }
    if let Some(s) = session {
        span.record("mcp.session.id", s);
    }
    if let Some(tp) = traceparent {
        let parent = remote(tp);
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }
    span
}

/// Marks `span` failed with `error_type` (an outcome's status, or a refusal's code).
pub fn mark_error(span: &tracing::Span, error_type: &str) {
    span.record("error.type", error_type);
    span.record("otel.status_code", "error");
}

/// What `error.type` an outcome sets: its status unless `ok`, `timeout` for a timeout.
pub fn outcome_error(outcome: &Outcome) -> Option<&'static str> {
    match outcome {
        Outcome::Result(ToolResult::Ok { .. }) => None,
        Outcome::Result(r) => Some(r.status()),
        Outcome::Timeout => Some("timeout"),
    }
}

/// Marks `span` with `outcome` when it is not `ok`.
pub fn mark_outcome(span: &tracing::Span, outcome: &Outcome) {
    if let Some(e) = outcome_error(outcome) {
        mark_error(span, e);
    }
}

/// The tracer of spans made without `tracing` (with a start time of their own, or in another
/// node's trace).
fn tracer() -> opentelemetry::global::BoxedTracer {
    opentelemetry::global::tracer_provider().tracer("toolmark-gateway")
}

/// How many traced frames a node remembers until their answer (the oldest go first).
const REMEMBERED: usize = 16_384;

/// How long a traced frame, or a confirmation, is remembered waiting for its answer.
const REMEMBERED_FOR: Duration = Duration::from_secs(15 * 60);

/// A traced call sent to a page of this node.
struct Sent {
    /// The agent's node's call span: the page's node's spans are its children.
    cx: SpanContext,
    tool: String,
    tenant: String,
    at: SystemTime,
}

/// The page's node's side of a traced call: the frames sent in a trace, by call id, until
/// their answer, and the calls whose confirmation is deferred, by confirmId.
#[derive(Default)]
pub struct PageTraces {
    sent: Mutex<HashMap<String, Sent>>,
    confirms: Mutex<HashMap<String, Sent>>,
}

impl std::fmt::Debug for PageTraces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTraces").finish_non_exhaustive()
    }
}

/// Keeps `entry` under `key`, first forgetting what waited too long, and the oldest when full.
fn remember(map: &Mutex<HashMap<String, Sent>>, key: String, entry: Sent) {
    let mut m = map.lock().unwrap_or_else(PoisonError::into_inner);
    if m.len() >= REMEMBERED {
        let now = SystemTime::now();
        m.retain(|_, s| now.duration_since(s.at).unwrap_or_default() < REMEMBERED_FOR);
        if m.len() >= REMEMBERED
            && let Some(oldest) = m.iter().min_by_key(|(_, s)| s.at).map(|(k, _)| k.clone())
        {
            m.remove(&oldest);
        }
    }
    m.insert(key, entry);
}

fn take(map: &Mutex<HashMap<String, Sent>>, key: &str) -> Option<Sent> {
    map.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(key)
}

/// The call id and tool of a call frame (`{"type":"call"|"describe", "id", "tool"…}`).
#[derive(serde::Deserialize)]
struct FrameHead {
    id: String,
    #[serde(default)]
    tool: Option<String>,
    #[serde(rename = "type")]
    kind: String,
}

impl PageTraces {
    /// A frame of a traced call reached this node for a page of `conv`: `send_frame {tool}`,
    /// child of the agent's node's call span, and the call remembered for its answer.
    pub fn frame_sent(&self, conv: &ConvKey, frame: &str, traceparent: &str) {
        if !on() {
            return;
        }
        let Ok(head) = serde_json::from_str::<FrameHead>(frame) else {
            return;
        };
        if head.kind != "call" && head.kind != "describe" {
            // A cancel: nothing waits for its answer.
            return;
        }
        let parent = remote(traceparent);
        if !parent.span().span_context().is_valid() {
            return;
        }
        let tool = head.tool.unwrap_or_else(|| head.kind.clone());
        let mut span = tracer()
            .span_builder(format!("send_frame {tool}"))
            .with_attributes(attributes(&tool, &conv.tenant, &head.id))
            .start_with_context(&tracer(), &parent);
        span.end();
        let cx = parent.span().span_context().clone();
        remember(
            &self.sent,
            head.id,
            Sent {
                cx,
                tool,
                tenant: conv.tenant.clone(),
                at: SystemTime::now(),
            },
        );
    }

    /// The page answered call `id`: `page {tool}` for the time it took since the frame was
    /// sent, and `receive_answer {tool}` started for its check, to end with [`Answer::done`].
    /// None when the call was not traced here.
    pub fn answered(&self, id: &str, result: &ToolResult) -> Option<Answer> {
        if !on() {
            return None;
        }
        let sent = take(&self.sent, id)?;
        let parent = Context::new().with_remote_span_context(sent.cx.clone());
        let now = SystemTime::now();
        let mut page = tracer()
            .span_builder(format!("page {}", sent.tool))
            .with_start_time(sent.at)
            .with_attributes(attributes(&sent.tool, &sent.tenant, id))
            .start_with_context(&tracer(), &parent);
        mark(&mut page, outcome_error(&Outcome::Result(result.clone())));
        page.end_with_timestamp(now);
        let span = tracer()
            .span_builder(format!("receive_answer {}", sent.tool))
            .with_start_time(now)
            .with_attributes(attributes(&sent.tool, &sent.tenant, id))
            .start_with_context(&tracer(), &parent);
        if let Some(confirm_id) = result.confirm_id() {
            remember(
                &self.confirms,
                confirm_id.to_owned(),
                Sent {
                    at: SystemTime::now(),
                    ..sent
                },
            );
        }
        let error = outcome_error(&Outcome::Result(result.clone()));
        Some(Answer { span, error })
    }

    /// The page resolved the deferred confirmation `confirm_id`: `resolve_confirmation {tool}`,
    /// a trace of its own linked to the call's (the human may answer minutes later).
    pub fn confirmed(&self, confirm_id: &str, result: &ToolResult) -> Option<Answer> {
        if !on() {
            return None;
        }
        let sent = take(&self.confirms, confirm_id)?;
        let span = tracer()
            .span_builder(format!("resolve_confirmation {}", sent.tool))
            .with_attributes(attributes(&sent.tool, &sent.tenant, ""))
            .with_links(vec![Link::with_context(sent.cx)])
            .start_with_context(&tracer(), &Context::new());
        let error = outcome_error(&Outcome::Result(result.clone()));
        Some(Answer { span, error })
    }
}

/// A span of the page's node open while the broker checks an answer.
pub struct Answer {
    span: opentelemetry::global::BoxedSpan,
    error: Option<&'static str>,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer").finish_non_exhaustive()
    }
}

impl Answer {
    /// The check ended: a refusal (`rejected`, its reason) or the answer's own outcome marks it.
    pub fn done(mut self, rejected: Option<&str>) {
        match rejected {
            Some(why) => {
                self.span
                    .set_attribute(KeyValue::new("error.type", why.to_owned()));
                self.span.set_status(Status::error(why.to_owned()));
            }
            None => mark(&mut self.span, self.error),
        }
        self.span.end();
    }
}

fn mark(span: &mut opentelemetry::global::BoxedSpan, error: Option<&'static str>) {
    if let Some(e) = error {
        span.set_attribute(KeyValue::new("error.type", e));
        span.set_status(Status::error(e));
    }
}

fn attributes(tool: &str, tenant: &str, id: &str) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", tool.to_owned()),
        KeyValue::new("toolmark.tenant", tenant.to_owned()),
    ];
    if !id.is_empty() {
        a.push(KeyValue::new("toolmark.call.id", id.to_owned()));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_but_ok_is_an_error_named_by_its_status() {
        let ok = Outcome::Result(ToolResult::Ok { data: None });
        assert_eq!(outcome_error(&ok), None);
        assert_eq!(outcome_error(&Outcome::Timeout), Some("timeout"));
        let failed = Outcome::Result(ToolResult::Error {
            message: "Tool failed".into(),
        });
        assert_eq!(outcome_error(&failed), Some("error"));
    }

    #[test]
    fn a_traceparent_round_trips_through_the_remote_context() {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = remote(tp);
        assert_eq!(format_traceparent(cx.span().span_context()), tp);
        assert!(!remote("nonsense").span().span_context().is_valid());
    }
}
