//! A started call supervised to its outcome: the page's answer or the deadline, whichever the
//! broker's atomic check-and-mark lets win; the outcome counted, and written to the call's
//! `Idempotency-Key`. [`Supervision`] runs inside the request that awaits it and goes on alone
//! when that request goes away.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use toolmark_broker::retry::LONGEST_PAUSE;
use toolmark_broker::{CallBinding, CallRecord, Deadline, Outcome, now_ms};

use super::engine::{CallEngine, Parts};
use super::finished::count_finished;
use super::idempotency::Bound;

/// A call's supervision ([`supervise`]), awaited for its outcome. It runs inside the task that
/// awaits it, so that the page's answer wakes the agent's request directly rather than through
/// a task of its own (one task hop, and its thread wake-up, less per call). Dropped before the
/// end (a `202`, an agent that went away, an MCP cancellation), it goes on in a task of its own,
/// so that the deadline, the events and the idempotency record are kept whatever the request
/// does.
pub(crate) struct Supervision {
    run: Option<std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>>>,
    life: toolmark_process::Lifecycle,
}

impl Supervision {
    /// The supervision `run`, handed to a task of `life` should it be dropped before its end.
    pub(super) fn new(
        run: impl Future<Output = Outcome> + Send + 'static,
        life: toolmark_process::Lifecycle,
    ) -> Self {
        Self {
            run: Some(Box::pin(run)),
            life,
        }
    }
}

impl Future for Supervision {
    type Output = Outcome;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Outcome> {
        // A future is not polled again after it is ready; its outcome was handed out once.
        let run = self
            .run
            .as_mut()
            .expect("a call's supervision polled after its outcome");
        let outcome = std::task::ready!(run.as_mut().poll(cx));
        self.run = None;
        std::task::Poll::Ready(outcome)
    }
}

impl Drop for Supervision {
    fn drop(&mut self) {
        if let Some(run) = self.run.take()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            self.life.spawn(async move {
                run.await;
            });
        }
    }
}

impl CallEngine {
    /// Waits for the call's outcome or its deadline, whichever comes first (the instant placed
    /// with the call: `toolmark_broker::deadline` says what happens then); the broker's atomic
    /// check-and-mark decides the winner and records its events (`call.timeout`, and `call.result`
    /// for async calls) with it.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn keeps its arguments twice"
    )]
    pub(super) fn supervise(
        self,
        binding: CallBinding,
        deadline: Deadline,
        mut waiter: oneshot::Receiver<Outcome>,
        bound: Option<Box<Bound>>,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        // An `async` block, not an `async fn`: an async fn's future keeps its arguments twice
        // (as passed, and moved into its body), and this one is boxed for every call
        // (`Supervision`); the idempotency binding, for a call with a key, is boxed too.
        async move {
            let started = Instant::now();
            let parts = self.parts();
            // What a call waits on is kept small (issue 58): the deadline's path, taken by few
            // calls, is boxed apart when it comes.
            let outcome = tokio::select! {
                o = &mut waiter => o.unwrap_or(Outcome::Timeout),
                () = tokio::time::sleep(deadline.remaining(now_ms())) => {
                    Box::pin(deadline_passed(parts, &binding, &mut waiter)).await
                }
            };
            let status = count_finished(parts, &binding, &outcome, started.elapsed());
            tracing::debug!(tenant = %binding.conv.tenant, call_id = %binding.id, client_id = %binding.client_id, outcome = status, "call finished");
            // A repeat of the request within 24 h answers with this outcome, even once the call
            // itself left the broker's retention.
            if let Some(bound) = bound {
                Box::pin(bound.finish(&*parts.broker, &binding.conv.tenant, &outcome)).await;
            }
            outcome
        }
    }
}

/// The deadline passed before the outcome came: the broker's atomic check-and-mark decides the
/// winner (the timeout, or a result that won a moment before it), and the waiter gets it.
async fn deadline_passed(
    parts: &Parts,
    binding: &CallBinding,
    waiter: &mut oneshot::Receiver<Outcome>,
) -> Outcome {
    let mut arrived = None;
    match parts.broker.time_out(&binding.conv, &binding.id).await {
        Ok(_) => {}
        Err(e) => {
            // Not answered until known: the timeout is asked again until the broker answers
            // (held, like a page's frame), while the outcome may still arrive. A second run of
            // a timeout already applied finds the call finished.
            tracing::warn!(call_id = %binding.id, error = %e, "timeout not recorded: asked again until the broker answers");
            tokio::select! {
                o = &mut *waiter => arrived = Some(o.unwrap_or(Outcome::Timeout)),
                () = time_out_again(parts, binding) => {}
            }
        }
    }
    // Should its message never come (a pub/sub message lost while the subscriber
    // reconnected), the stored outcome decides, not a guess.
    match arrived {
        Some(o) => o,
        None => match tokio::time::timeout(OUTCOME_WAIT, waiter).await {
            Ok(Ok(o)) => o,
            _ => stored_outcome(parts, binding).await,
        },
    }
}

/// How long past the deadline the supervisor waits for the outcome message before it reads
/// the stored outcome instead.
const OUTCOME_WAIT: Duration = Duration::from_secs(2);

/// The call's outcome as the broker stored it (a timeout when it has none, or is unreachable).
async fn stored_outcome(parts: &Parts, binding: &CallBinding) -> Outcome {
    match parts.broker.call(&binding.conv.tenant, &binding.id).await {
        Ok(Some(CallRecord {
            outcome: Some(o), ..
        })) => {
            tracing::warn!(call_id = %binding.id, "outcome message never arrived: answered from the stored outcome");
            o
        }
        _ => Outcome::Timeout,
    }
}

/// The timeout of a call asked again once the broker answers (held, like a page's frame):
/// first a read until it answers, then a moment for the result a page sent before the
/// deadline to land (its node holds it and asks again at most [`LONGEST_PAUSE`] apart; the
/// page's answer then wins, as it would have without the outage), then the timeout.
async fn time_out_again(parts: &Parts, binding: &CallBinding) {
    let mut held = parts.hold.frame(0);
    let conv = &binding.conv;
    let read = held
        .until_known(&parts.metrics, conv, "call.timeout", |_| {
            parts.broker.call(&conv.tenant, &binding.id)
        })
        .await;
    if read.is_none() {
        return;
    }
    tokio::time::sleep(LONGEST_PAUSE + Duration::from_millis(500)).await;
    held.until_known(&parts.metrics, conv, "call.timeout", |_| {
        parts.broker.time_out(conv, &binding.id)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use toolmark_broker::memory::MemoryBroker;
    use toolmark_broker::prelude::*;
    use toolmark_broker::{CallKind, PageIdentity};
    use toolmark_proto::ToolResult;
    use toolmark_proto::{AgentMessage, Describe, ids};

    use toolmark_broker::{ConvKey, now_ms};

    use super::*;

    #[tokio::test]
    async fn a_call_whose_outcome_message_is_lost_is_answered_from_the_stored_outcome() {
        let registry = Arc::new(crate::registry::Registry::default());
        let broker = Arc::new(MemoryBroker::new("n1", registry.clone()));
        let engine = CallEngine::new(
            broker.clone(),
            crate::tenants::Tenants::new(Vec::new()),
            Arc::new(crate::hold::Hold::new(
                toolmark_config::HoldSettings::default(),
                Default::default(),
            )),
            Arc::new(crate::metrics::Metrics::new()),
            Arc::default(),
            toolmark_process::Lifecycle::new(),
        );
        drop(registry);
        let conv = ConvKey::new("t", "u", "c");
        let binding = CallBinding {
            id: ids::new_call_id(),
            conv: conv.clone(),
            client_id: "p1".into(),
            tool: "todo.add".into(),
            kind: CallKind::Call,
            // Time enough for the answer below on a busy machine; the supervisor waits it out.
            deadline_ms: now_ms() + 1000,
            node: "n1".into(),
            untrusted: false,
            respond_async: false,
            caller: None,
        };
        let frame = AgentMessage::Describe(Describe {
            client_id: "p1".into(),
            id: binding.id.clone(),
            tool: "todo.add".into(),
        });
        // The broker's own outcome message is the one that gets lost: the supervisor waits on
        // a channel nobody ever sends on.
        drop(broker.send_call(binding.clone(), frame).await.unwrap());
        let (_never_sent, lost) = oneshot::channel();
        let outcome = tokio::spawn(engine.supervise(
            binding.clone(),
            Deadline::at(binding.deadline_ms),
            lost,
            None,
        ));
        let from = PageIdentity {
            conv,
            client_id: "p1".into(),
        };
        broker
            .submit_result(&from, &binding.id, &ToolResult::Ok { data: None })
            .await
            .unwrap();
        assert_eq!(
            outcome.await.unwrap(),
            Outcome::Result(ToolResult::Ok { data: None }),
            "the page answered: the agent must not be told `timeout`"
        );
    }
}
