//! Starting a call or describe on the page: the deadline checked, the rate, the conversation
//! and the binding in the broker's order, the `Idempotency-Key` bound to the call it started or
//! given back when none started, and the call's [`Supervision`] handed to the door.

use std::sync::Arc;

use serde_json::Value;
use toolmark_broker::{
    CallKind, CallRequest, CallTarget, CallerRate, ConvKey, Deadline, PlaceError, Placed, ToolGate,
    now_ms,
};
use toolmark_config::pins::PinMode;
use tracing::Instrument as _;

use super::engine::CallEngine;
use super::error::CallError;
use super::idempotency::Claim;
use super::supervise::Supervision;
use crate::caller::Caller;
use crate::tenants::Tenant;
use crate::traces;

/// A request to start on the page.
pub(crate) struct Request {
    pub kind: CallKind,
    /// The tool's name, or its LLM name (`llmName`) with `by_llm_name`.
    pub tool: String,
    /// `tool` is an LLM name, resolved by the broker against the manifest of the page the
    /// call is bound to ([`toolmark_broker::CallRequest::llm_name`]): the hosted MCP
    /// endpoint's tool names.
    pub by_llm_name: bool,
    pub input: Value,
    pub rev: Option<u64>,
    pub timeout_ms: Option<u64>,
    /// The request's `Idempotency-Key`, when it claimed one ([`super::once`]).
    pub idempotency: Option<Claim>,
    /// Who asks: its policy decides whether the tool may be called.
    pub caller: Caller,
}

/// A call that was bound and sent.
pub(crate) struct Started {
    pub id: String,
    /// The tool's name (resolved from its LLM name when the call named it so).
    pub tool: String,
    pub client_id: String,
    pub untrusted: bool,
    pub outcome: Supervision,
}

impl CallEngine {
    /// Binds and sends a call or describe (the tenant's rate, the conversation, the deadline) and
    /// supervises it; the agent API and the hosted MCP endpoint both start calls here. A request
    /// that started no call gives its `Idempotency-Key` back, here and nowhere else.
    pub(crate) async fn start(
        &self,
        tenant: &Tenant,
        conv: ConvKey,
        mut req: Request,
        respond_async: bool,
    ) -> Result<Started, CallError> {
        let claim = req.idempotency.take();
        // Its own span only while spans are exported (`crate::traces`): the page's node continues
        // it from the context that travels with the frame.
        let span = traces::call_span(&req.tool, &tenant.id);
        let trace = traces::traceparent(&span);
        let placed = if span.is_disabled() {
            self.place(tenant, conv, req, respond_async, None).await
        } else {
            self.place(tenant, conv, req, respond_async, trace)
                .instrument(span.clone())
                .await
        };
        let (placed, deadline) = match placed {
            Ok(p) => p,
            Err(refused) => {
                traces::mark_error(&span, refused.code());
                if let Some(claim) = claim {
                    Box::pin(claim.release(&*self.parts().broker, &tenant.id)).await;
                }
                return Err(refused);
            }
        };
        let Placed { binding, waiter } = placed;
        // The key now names this call: a repeat answers from it from here on.
        let bound = match claim {
            // Boxed, as the release above: only a call with a key carries their work.
            Some(claim) => Some(Box::new(
                Box::pin(claim.bind(&*self.parts().broker, &binding)).await,
            )),
            None => None,
        };
        let (id, tool, client_id, untrusted) = (
            binding.id.clone(),
            binding.tool.clone(),
            binding.client_id.clone(),
            binding.untrusted,
        );
        let run = self.clone().supervise(binding, deadline, waiter, bound);
        let outcome = if span.is_disabled() {
            Supervision::new(run, self.parts().life.clone())
        } else {
            span.record("toolmark.call.id", id.as_str());
            let traced = {
                let span = span.clone();
                async move {
                    let outcome = run.await;
                    traces::mark_outcome(&span, &outcome);
                    outcome
                }
            };
            Supervision::new(traced.instrument(span), self.parts().life.clone())
        };
        Ok(Started {
            id,
            tool,
            client_id,
            untrusted,
            outcome,
        })
    }

    /// The deadline checked, then the caller's tool policy, its own rate, the tenant's rate, the
    /// conversation read and the bind in the broker's order (one Redis round trip when the
    /// conversation's current page is the one this node last saw, and the caller's policy sets no
    /// rate). The policy goes to the broker with the call ([`CallRequest::gate`]), asked against
    /// the manifest of the page the call would be bound to, before anything is taken.
    async fn place(
        &self,
        tenant: &Tenant,
        conv: ConvKey,
        req: Request,
        respond_async: bool,
        trace: Option<String>,
    ) -> Result<(Placed, Deadline), CallError> {
        let parts = self.parts();
        if parts.life.is_stopping() {
            return Err(CallError::Draining);
        }
        let limits = &tenant.limits;
        let timeout_ms = req.timeout_ms.unwrap_or(limits.default_call_timeout_ms);
        if timeout_ms == 0 || timeout_ms > limits.max_call_timeout_ms {
            return Err(CallError::Timeout {
                max: limits.max_call_timeout_ms,
            });
        }
        let deadline = Deadline::after(now_ms(), timeout_ms);
        let gate = gate(&req.caller, tenant);
        let caller_rate = req.caller.calls_per_second().map(|per_second| CallerRate {
            bucket: req.caller.rate_bucket(),
            per_second,
        });
        let tool = req.tool.clone();
        let placed = parts
            .broker
            .place_call(CallRequest {
                id: parts.broker.mint_call_id(&conv),
                conv,
                kind: req.kind,
                llm_name: req.by_llm_name.then(|| req.tool.clone()),
                tool: req.tool,
                input: req.input,
                rev: req.rev,
                deadline_ms: deadline.ms(),
                respond_async,
                calls_per_second: limits.calls_per_second,
                caller: Some(req.caller.reference()),
                gate,
                caller_rate,
                trace,
            })
            .await
            .map_err(|e| self.counted(CallError::placing(e, &tool)))?;
        Ok((placed, deadline))
    }

    /// A refusal of the tool itself (not allowed, not pinned) counted in
    /// `toolmark_calls_refused_total{reason}`.
    fn counted(&self, e: CallError) -> CallError {
        if matches!(
            e,
            CallError::NotAllowed { .. } | CallError::NotPinned { .. }
        ) {
            self.parts().metrics.call_refused(e.code());
        }
        e
    }

    /// The tenant's pins and the caller's policy applied to `tool` of the conversation `conv` (a
    /// call's resource, its cancel, an idempotent repeat, an MCP task): against the page's current
    /// manifest, as a call is placed; 403 `tool_not_pinned` or `tool_not_allowed`. No broker read
    /// when neither narrows tools.
    pub(crate) async fn authorize_tool(
        &self,
        caller: &Caller,
        conv: &ConvKey,
        tool: &str,
    ) -> Result<(), CallError> {
        let Some(tenant) = self.parts().tenants.get(&conv.tenant) else {
            return Err(CallError::UnknownTenant);
        };
        let Some(gate) = gate(caller, &tenant) else {
            return Ok(());
        };
        let s = self.parts().broker.conversation(conv).await?;
        match gate.check(tool, CallTarget::current(s.call_view()).as_ref()) {
            Ok(()) => Ok(()),
            Err(PlaceError::NotPinned) => Err(self.counted(CallError::NotPinned {
                tool: tool.to_owned(),
            })),
            Err(_) => Err(self.counted(CallError::NotAllowed {
                tool: tool.to_owned(),
            })),
        }
    }
}

/// What the broker asks of a call's tool against the page's current manifest: the tenant's
/// pins when it enforces them, the caller's policy when it narrows tools; none (no read of
/// the manifest first) when neither does.
fn gate(caller: &Caller, tenant: &Tenant) -> Option<ToolGate> {
    let pins = (tenant.pins.mode == PinMode::Enforce).then(|| Arc::clone(&tenant.pins));
    if !caller.limits_tools() && pins.is_none() {
        return None;
    }
    let gate = if caller.limits_tools() {
        let caller = caller.clone();
        ToolGate::new(move |tool, facts| caller.allows(tool, facts))
    } else {
        ToolGate::default()
    };
    Some(match pins {
        Some(pins) => gate.with_pins(move |tool, digest| pins.admits(tool, digest)),
        None => gate,
    })
}
