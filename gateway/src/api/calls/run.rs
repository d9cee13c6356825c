//! Starting a call or describe on the page (the rate, the conversation, the binding, the
//! deadline) and supervising it to its outcome.

use toolmark_broker::retry::LONGEST_PAUSE;

use super::*;

/// A request to start on the page.
pub(crate) struct Request {
    pub kind: CallKind,
    pub tool: String,
    pub input: Value,
    pub rev: Option<u64>,
    pub timeout_ms: Option<u64>,
    /// The request's `Idempotency-Key` and fingerprint, when it claimed one.
    pub idempotency: Option<(String, String)>,
}

/// A call that was bound and sent.
pub(crate) struct Started {
    pub id: String,
    pub client_id: String,
    pub untrusted: bool,
    pub outcome: Supervision,
}

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

/// Binds and sends a call or describe (the tenant's rate, the conversation, the deadline) and
/// supervises it; the agent API and the hosted MCP endpoint both start calls here.
pub(crate) async fn start(
    app: &AppState,
    tenant: &Tenant,
    conv: ConvKey,
    req: Request,
    respond_async: bool,
) -> Result<Started, Problem> {
    if app.is_draining() {
        return Err(Problem::unavailable(Duration::from_secs(1)));
    }
    let limits = &tenant.limits;
    let timeout_ms = req.timeout_ms.unwrap_or(limits.default_call_timeout_ms);
    if timeout_ms == 0 || timeout_ms > limits.max_call_timeout_ms {
        if let Some((key, _)) = &req.idempotency {
            idempotency::release(app, &tenant.id, key).await;
        }
        return Err(Problem::invalid(
            "/timeoutMs",
            format!("timeoutMs is between 1 and {}", limits.max_call_timeout_ms),
        ));
    }
    // The rate, the conversation read and the bind, in the broker's order (one Redis round
    // trip when the conversation's current page is the one this node last saw).
    let deadline_ms = now_ms() + timeout_ms;
    let placed = app
        .broker
        .place_call(CallRequest {
            id: partition::new_call_id(&conv),
            conv,
            kind: req.kind,
            tool: req.tool,
            input: req.input,
            rev: req.rev,
            deadline_ms,
            respond_async,
            calls_per_second: limits.calls_per_second,
        })
        .await;
    let Placed { binding, waiter } = match placed {
        Ok(p) => p,
        Err(e) => {
            if let Some((key, _)) = &req.idempotency {
                idempotency::release(app, &tenant.id, key).await;
            }
            return Err(e.into());
        }
    };
    // The key now names this call: a repeat answers from it from here on.
    let remembered = match req.idempotency {
        Some((key, f)) => {
            let record = idempotency::Record {
                f,
                id: Some(binding.id.clone()),
                client: Some(binding.client_id.clone()),
                untrusted: binding.untrusted,
                deadline_ms: Some(deadline_ms),
                outcome: None,
            };
            idempotency::started(app, &tenant.id, &key, &record).await;
            Some((key, record))
        }
        None => None,
    };
    let (id, client_id, untrusted) = (
        binding.id.clone(),
        binding.client_id.clone(),
        binding.untrusted,
    );
    let run = supervise(
        app.clone(),
        binding,
        Duration::from_millis(timeout_ms),
        waiter,
        remembered,
    );
    Ok(Started {
        id,
        client_id,
        untrusted,
        outcome: Supervision {
            run: Some(Box::pin(run)),
            life: app.life.clone(),
        },
    })
}

/// Waits for the call's outcome or its deadline, whichever comes first; the broker's atomic
/// check-and-mark decides the winner and records its events (`call.timeout`, and `call.result`
/// for async calls) with it.
pub(super) async fn supervise(
    app: AppState,
    binding: CallBinding,
    timeout: Duration,
    mut waiter: oneshot::Receiver<Outcome>,
    remembered: Option<(String, idempotency::Record)>,
) -> Outcome {
    let started = Instant::now();
    let outcome = tokio::select! {
        o = &mut waiter => o.unwrap_or(Outcome::Timeout),
        () = tokio::time::sleep(timeout) => {
            let mut arrived = None;
            match app.broker.time_out(&binding.conv, &binding.id).await {
                Ok(_) => {}
                Err(e) => {
                    // Not answered until known: the timeout is asked again until the broker
                    // answers (held, like a page's frame), while the outcome may still arrive.
                    // A second run of a timeout already applied finds the call finished.
                    tracing::warn!(call_id = %binding.id, error = %e, "timeout not recorded: asked again until the broker answers");
                    tokio::select! {
                        o = &mut waiter => arrived = Some(o.unwrap_or(Outcome::Timeout)),
                        () = time_out_again(&app, &binding) => {}
                    }
                }
            }
            // The timeout won, or the result won a moment before it: the waiter gets the
            // winner. Should its message never come (a pub/sub message lost while the
            // subscriber reconnected), the stored outcome decides, not a guess.
            match arrived {
                Some(o) => o,
                None => match tokio::time::timeout(OUTCOME_WAIT, waiter).await {
                    Ok(Ok(o)) => o,
                    _ => stored_outcome(&app, &binding).await,
                },
            }
        }
    };
    let kind = match binding.kind {
        CallKind::Call => "call",
        CallKind::Describe => "describe",
    };
    let status = match &outcome {
        Outcome::Result(r) => r.status(),
        Outcome::Timeout => "timeout",
    };
    app.metrics
        .call_finished(kind, status, started.elapsed().as_secs_f64());
    tracing::debug!(tenant = %binding.conv.tenant, call_id = %binding.id, client_id = %binding.client_id, outcome = status, "call finished");
    // A repeat of the request within 24 h answers with this outcome, even once the call itself
    // left the broker's retention.
    if let Some((key, mut record)) = remembered {
        record.outcome = Some(outcome.clone());
        idempotency::started(&app, &binding.conv.tenant, &key, &record).await;
    }
    outcome
}

/// How long past the deadline the supervisor waits for the outcome message before it reads
/// the stored outcome instead.
const OUTCOME_WAIT: Duration = Duration::from_secs(2);

/// The call's outcome as the broker stored it (a timeout when it has none, or is unreachable).
async fn stored_outcome(app: &AppState, binding: &CallBinding) -> Outcome {
    match app.broker.call(&binding.conv.tenant, &binding.id).await {
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
async fn time_out_again(app: &AppState, binding: &CallBinding) {
    let mut held = app.hold.frame(0);
    let conv = &binding.conv;
    let read = held
        .until_known(&app.metrics, conv, "call.timeout", |_| {
            app.broker.call(&conv.tenant, &binding.id)
        })
        .await;
    if read.is_none() {
        return;
    }
    tokio::time::sleep(LONGEST_PAUSE + Duration::from_millis(500)).await;
    held.until_known(&app.metrics, conv, "call.timeout", |_| {
        app.broker.time_out(conv, &binding.id)
    })
    .await;
}
