//! The link to the paired page: which socket holds the pairing, the page load (clientId) whose
//! tools are served, the calls in flight, the messages waiting for a page that is reconnecting,
//! and the MCP tool list announced to the client. One `std::sync::Mutex` guards it; no section
//! awaits while holding it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rmcp::model::Tool;
use serde_json::Value;
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolmark_mcp_tools::outcome::{CallEnd, RELOADED, TAKEN_OVER};
use toolmark_proto::ids::new_call_id;
use toolmark_proto::{
    AgentMessage, Call, Cancel, Describe, PageMessage, ToolManifest, ToolManifestSummary,
    ToolResult,
};

use crate::close::SUPERSEDED;
use crate::listing::{MAX_TOOLS, PageTool, page_listing, unpaired};
use crate::outbox::Outbox;

/// A page that comes back within this long with the same tools causes no list change.
pub const RELOAD_GRACE: Duration = Duration::from_millis(2000);
/// How long the CLI waits for each `describe` answer while learning a manifest's schemas.
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a manifest's listing waits for its `describe` answers (shared with the hosted
/// endpoint). Tools still unanswered then are listed with the fallback schema, and relisted
/// when their answer comes (within [`DESCRIBE_TIMEOUT`]).
pub use toolmark_mcp_tools::LISTING_WAIT;
/// Messages kept for a page that is reconnecting (oldest dropped first).
const MAX_WAITING: usize = 1024;
/// How a socket got the pairing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// With a fresh code: another page takes over.
    Pair,
    /// With the session token: the same page reconnecting, or reloaded in the same tab.
    Resume,
}

/// Why a tool call could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No listed page tool has this name.
    #[error("unknown tool {0}")]
    UnknownTool(String),
}

#[derive(Debug)]
struct Socket {
    generation: u64,
    outbox: Outbox,
    /// The clientId of this socket's first protocol frame; frames of any other are dropped.
    bound: Option<String>,
}

#[derive(Debug)]
struct PageTools {
    client_id: String,
    rev: u64,
    tools: Vec<PageTool>,
    /// Tools listed before their `describe` answered: their schema is not known yet, so a
    /// later manifest describes them again rather than reuse the fallback.
    describing: HashSet<String>,
}

#[derive(Debug)]
struct Pending {
    client_id: String,
    tx: oneshot::Sender<CallEnd>,
}

#[derive(Debug)]
struct State {
    socket: Option<Socket>,
    next_generation: u64,
    /// The page load served: set by the first frame of a socket.
    page: Option<String>,
    /// The described tools of `page`.
    tools: Option<PageTools>,
    /// Counts manifests; a describe job installs its tools only if no newer manifest came.
    manifest_seq: u64,
    disconnected_at: Option<Instant>,
    calls: HashMap<String, Pending>,
    /// Messages for a page that has no socket right now: (clientId, message).
    waiting: VecDeque<(String, AgentMessage)>,
    announced: Arc<Vec<Tool>>,
}

/// The shared link; cheap to clone.
#[derive(Debug, Clone)]
pub struct Link {
    state: Arc<Mutex<State>>,
    listing: watch::Sender<Arc<Vec<Tool>>>,
    /// Woken whenever a page's tools are installed (calls waiting for them retry).
    ready: Arc<Notify>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

/// Whether a tool name can be served now.
enum Lookup {
    /// The call was sent (or queued): its id, clientId and untrusted flag.
    Started(String, String, bool, oneshot::Receiver<CallEnd>),
    /// A page is paired (or reloading) but its tools are not known yet.
    NotYet,
    /// No such tool.
    Unknown,
}

impl Link {
    /// An unpaired link. Its jobs (describes, grace timers) are tracked by `tasks`.
    pub fn new(tasks: TaskTracker, shutdown: CancellationToken) -> Self {
        let announced = Arc::new(unpaired());
        let (listing, _) = watch::channel(announced.clone());
        Link {
            state: Arc::new(Mutex::new(State {
                socket: None,
                next_generation: 1,
                page: None,
                tools: None,
                manifest_seq: 0,
                disconnected_at: None,
                calls: HashMap::new(),
                waiting: VecDeque::new(),
                announced,
            })),
            listing,
            ready: Arc::new(Notify::new()),
            tasks,
            shutdown,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tool list announced to the MCP client; changes when a `list_changed` is due.
    pub fn listing(&self) -> watch::Receiver<Arc<Vec<Tool>>> {
        self.listing.subscribe()
    }

    /// A socket completed pairing: it supersedes any earlier socket (4409) and gets the link.
    /// Returns its generation, which the socket's later calls name.
    pub fn attach(&self, outbox: Outbox, how: Attach) -> u64 {
        let mut state = self.lock();
        if let Some(mut old) = state.socket.take() {
            old.outbox.close(SUPERSEDED);
        }
        if how == Attach::Pair {
            fail_all(&mut state, TAKEN_OVER);
            state.waiting.clear();
            state.page = None;
            state.tools = None;
        }
        let generation = state.next_generation;
        state.next_generation += 1;
        state.socket = Some(Socket {
            generation,
            outbox,
            bound: None,
        });
        state.disconnected_at = None;
        // A resumed socket is presumed to be the same page: what waited for it goes now (a
        // reloaded page ignores messages addressed to its predecessor).
        if let Some(page) = state.page.clone() {
            flush_waiting(&mut state, &page);
        }
        self.relist(&mut state);
        generation
    }

    /// A socket ended. Its page's tools stay listed for [`RELOAD_GRACE`].
    pub fn detach(&self, generation: u64) {
        let mut state = self.lock();
        if state.socket.as_ref().map(|s| s.generation) != Some(generation) {
            return;
        }
        state.socket = None;
        state.disconnected_at = Some(Instant::now());
        self.relist(&mut state);
        drop(state);
        let link = self.clone();
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(RELOAD_GRACE) => {
                    let mut state = link.lock();
                    link.relist(&mut state);
                }
            }
        });
    }

    /// A valid protocol frame from socket `generation`.
    pub fn on_frame(&self, generation: u64, message: PageMessage) {
        let mut state = self.lock();
        let Some(socket) = state.socket.as_mut().filter(|s| s.generation == generation) else {
            tracing::debug!("frame from a superseded socket dropped");
            return;
        };
        let client_id = message.client_id().to_owned();
        match &socket.bound {
            Some(bound) if *bound != client_id => {
                tracing::debug!(client_id, "frame for another clientId dropped");
                return;
            }
            Some(_) => {}
            None => {
                socket.bound = Some(client_id.clone());
                if state.page.as_deref() != Some(client_id.as_str()) {
                    self.new_page_load(&mut state, &client_id);
                }
            }
        }
        match message {
            PageMessage::Manifest(m) => {
                state.manifest_seq += 1;
                let seq = state.manifest_seq;
                let known = known_schemas(&state, &client_id);
                drop(state);
                self.spawn_describes(seq, client_id, m.rev, m.tools, known);
            }
            PageMessage::Result(r) => match state.calls.remove(&r.id) {
                Some(p) if p.client_id == client_id => {
                    let _ = p.tx.send(CallEnd::Answered(r.result));
                }
                Some(p) => {
                    tracing::debug!(id = r.id, "result from another page dropped");
                    state.calls.insert(r.id, p);
                }
                None => tracing::debug!(id = r.id, "unknown or late result dropped"),
            },
            PageMessage::Changed(_) | PageMessage::Confirmed(_) => {
                tracing::debug!("changed/confirmed ignored: calls by mcp confirm inline");
            }
        }
    }

    /// The socket's first frame names a page load other than the one served: the page reloaded.
    fn new_page_load(&self, state: &mut State, client_id: &str) {
        if state.page.is_some() {
            fail_all(state, RELOADED);
            state.waiting.clear();
        }
        state.page = Some(client_id.to_owned());
        if state
            .tools
            .as_ref()
            .is_some_and(|t| t.client_id != client_id)
        {
            state.tools = None;
        }
    }

    /// Learns the schemas of a manifest's tools and installs them: at once when every describe
    /// answers within [`LISTING_WAIT`], else then with the unanswered ones on the fallback
    /// schema, each updated as its answer comes.
    fn spawn_describes(
        &self,
        seq: u64,
        client_id: String,
        rev: u64,
        summaries: Vec<ToolManifestSummary>,
        known: HashMap<String, (ToolManifestSummary, Option<Value>)>,
    ) {
        let link = self.clone();
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            // Only the first MAX_TOOLS by llmName can be listed: describe those, all at once.
            let mut summaries = summaries;
            summaries.sort_by(|a, b| a.llm_name.cmp(&b.llm_name));
            summaries.truncate(MAX_TOOLS);
            let mut tools = Vec::with_capacity(summaries.len());
            let mut describing = HashSet::new();
            let mut learning = FuturesUnordered::new();
            for (index, summary) in summaries.into_iter().enumerate() {
                let cached = known
                    .get(&summary.name)
                    .filter(|(s, _)| *s == summary)
                    .map(|(_, schema)| schema.clone());
                let input_schema = match cached {
                    Some(schema) => schema,
                    None => {
                        describing.insert(summary.name.clone());
                        let (link, client_id, name) = (&link, &client_id, summary.name.clone());
                        learning
                            .push(async move { (index, link.describe(client_id, &name).await) });
                        None
                    }
                };
                tools.push(PageTool {
                    summary,
                    input_schema,
                });
            }
            let listing_wait = tokio::time::sleep(LISTING_WAIT);
            tokio::pin!(listing_wait);
            while !describing.is_empty() {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = &mut listing_wait => break,
                    Some((index, schema)) = learning.next() => {
                        describing.remove(&tools[index].summary.name);
                        tools[index].input_schema = schema;
                    }
                }
            }
            link.install(
                seq,
                PageTools {
                    client_id: client_id.clone(),
                    rev,
                    tools,
                    describing,
                },
            );
            // Answers after the listing's wait update it; each describe ends by its timeout.
            loop {
                let (index, schema) = tokio::select! {
                    () = shutdown.cancelled() => return,
                    learned = learning.next() => match learned {
                        Some(learned) => learned,
                        None => return,
                    },
                };
                link.learned(seq, &client_id, index, schema);
            }
        });
    }

    /// Installs a manifest's tools, unless a newer manifest or page load came meanwhile.
    fn install(&self, seq: u64, tools: PageTools) {
        let mut state = self.lock();
        if state.manifest_seq == seq && state.page.as_deref() == Some(tools.client_id.as_str()) {
            state.tools = Some(tools);
            self.relist(&mut state);
            self.ready.notify_waiters();
        }
    }

    /// A describe answered after its manifest's tools were installed: the tool at `index` gets
    /// its schema, unless a newer manifest or page load came meanwhile.
    fn learned(&self, seq: u64, client_id: &str, index: usize, schema: Option<Value>) {
        let mut state = self.lock();
        if state.manifest_seq != seq || state.page.as_deref() != Some(client_id) {
            return;
        }
        let Some(tools) = state.tools.as_mut().filter(|t| t.client_id == client_id) else {
            return;
        };
        let Some(tool) = tools.tools.get_mut(index) else {
            return;
        };
        tools.describing.remove(&tool.summary.name);
        tool.input_schema = schema;
        self.relist(&mut state);
    }

    /// Asks the page for a tool's full entry; its input schema, or `None` when it would not say.
    async fn describe(&self, client_id: &str, tool: &str) -> Option<Value> {
        let id = new_call_id();
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.lock();
            state.calls.insert(
                id.clone(),
                Pending {
                    client_id: client_id.to_owned(),
                    tx,
                },
            );
            let message = AgentMessage::Describe(Describe {
                client_id: client_id.to_owned(),
                id: id.clone(),
                tool: tool.to_owned(),
            });
            deliver(&mut state, client_id, message);
        }
        let answer = tokio::time::timeout(DESCRIBE_TIMEOUT, rx).await;
        self.lock().calls.remove(&id);
        match answer {
            Ok(Ok(CallEnd::Answered(ToolResult::Ok { data: Some(data) }))) => {
                ToolManifest::from_value(data).ok().map(|m| m.input_schema)
            }
            _ => None,
        }
    }

    /// Calls a listed page tool by its MCP name; returns how the call ended and whether the tool
    /// is untrusted. Ends at the deadline or when `cancelled` fires, sending the page a `cancel`.
    pub async fn call(
        &self,
        llm_name: &str,
        input: Value,
        deadline: Duration,
        cancelled: CancellationToken,
    ) -> Result<(CallEnd, bool), CallError> {
        // Right after a pairing or reload the page's tools are still being learned: wait for
        // them (bounded) rather than refuse a name the client was just shown.
        let learning_deadline = Instant::now() + DESCRIBE_TIMEOUT;
        let (id, client_id, untrusted, mut rx) = loop {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            match self.start_call(llm_name, &input) {
                Lookup::Started(id, client_id, untrusted, rx) => {
                    break (id, client_id, untrusted, rx);
                }
                Lookup::Unknown => return Err(CallError::UnknownTool(llm_name.to_owned())),
                Lookup::NotYet if Instant::now() < learning_deadline => {
                    tokio::select! {
                        () = &mut ready => {}
                        () = tokio::time::sleep_until(learning_deadline) => {}
                        () = cancelled.cancelled() => {
                            return Ok((CallEnd::DeadlinePassed, false));
                        }
                    }
                }
                Lookup::NotYet => return Err(CallError::UnknownTool(llm_name.to_owned())),
            }
        };
        let stopped_early = tokio::select! {
            end = &mut rx => return Ok((end.unwrap_or(CallEnd::Lost(RELOADED)), untrusted)),
            () = tokio::time::sleep(deadline) => CallEnd::DeadlinePassed,
            () = cancelled.cancelled() => CallEnd::DeadlinePassed,
        };
        let mut state = self.lock();
        if state.calls.remove(&id).is_some() {
            let cancel = AgentMessage::Cancel(Cancel {
                client_id: client_id.clone(),
                id,
            });
            deliver(&mut state, &client_id, cancel);
            return Ok((stopped_early, untrusted));
        }
        drop(state);
        // The call ended in the same instant (answered or lost): report that.
        Ok((rx.try_recv().unwrap_or(stopped_early), untrusted))
    }

    /// Sends a call for `llm_name` to the page serving it (or queues it while it reconnects).
    fn start_call(&self, llm_name: &str, input: &Value) -> Lookup {
        let mut state = self.lock();
        let Some(tools) = &state.tools else {
            let within_grace = state
                .disconnected_at
                .is_some_and(|at| at.elapsed() < RELOAD_GRACE);
            return if state.socket.is_some() || within_grace {
                Lookup::NotYet
            } else {
                Lookup::Unknown
            };
        };
        let Some(tool) = tools.tools.iter().find(|t| t.summary.llm_name == llm_name) else {
            return Lookup::Unknown;
        };
        let id = new_call_id();
        let (tx, rx) = oneshot::channel();
        let client_id = tools.client_id.clone();
        let untrusted = tool.summary.hints.is_untrusted();
        let message = AgentMessage::Call(Call {
            client_id: client_id.clone(),
            id: id.clone(),
            rev: Some(tools.rev),
            tool: tool.summary.name.clone(),
            input: input.clone(),
        });
        state.calls.insert(
            id.clone(),
            Pending {
                client_id: client_id.clone(),
                tx,
            },
        );
        deliver(&mut state, &client_id, message);
        Lookup::Started(id, client_id, untrusted, rx)
    }

    /// Recomputes the listing and announces it when it changed (caller holds the lock).
    fn relist(&self, state: &mut State) {
        let within_grace = state
            .disconnected_at
            .is_some_and(|at| at.elapsed() < RELOAD_GRACE);
        let desired = match (&state.socket, &state.tools) {
            (Some(socket), Some(tools))
                if socket.bound.as_ref().is_none_or(|b| *b == tools.client_id) =>
            {
                Some(page_listing(&tools.tools))
            }
            // Paired, the page's tools not known yet: keep what the client sees.
            (Some(_), _) => None,
            (None, Some(_)) if within_grace => None,
            (None, _) => Some(unpaired()),
        };
        if let Some(desired) = desired
            && *state.announced != desired
        {
            state.announced = Arc::new(desired);
            self.listing.send_replace(state.announced.clone());
        }
    }

    /// Closes the paired socket with `code` (shutdown).
    pub fn close(&self, code: u16) {
        if let Some(socket) = self.lock().socket.as_mut() {
            socket.outbox.close(code);
        }
    }
}

/// Sends `message` to the socket when it serves `client_id`, else keeps it for when the page
/// comes back.
fn deliver(state: &mut State, client_id: &str, message: AgentMessage) {
    if let Some(socket) = &state.socket
        && socket.bound.as_deref().is_none_or(|b| b == client_id)
        && state.page.as_deref().is_none_or(|p| p == client_id)
    {
        if socket.outbox.send(message.to_json()) {
            return;
        }
        tracing::warn!("page socket queue full; message kept for later");
    }
    if state.waiting.len() == MAX_WAITING {
        state.waiting.pop_front();
    }
    state.waiting.push_back((client_id.to_owned(), message));
}

fn flush_waiting(state: &mut State, page: &str) {
    let waiting = std::mem::take(&mut state.waiting);
    for (client_id, message) in waiting {
        if client_id == page {
            deliver(state, &client_id, message);
        }
    }
}

fn fail_all(state: &mut State, message: &'static str) {
    for (_, pending) in state.calls.drain() {
        let _ = pending.tx.send(CallEnd::Lost(message));
    }
}

/// Schemas already learned for `client_id`, by tool name, to skip describing unchanged tools.
fn known_schemas(
    state: &State,
    client_id: &str,
) -> HashMap<String, (ToolManifestSummary, Option<Value>)> {
    state
        .tools
        .iter()
        .filter(|t| t.client_id == client_id)
        .flat_map(|t| {
            t.tools
                .iter()
                .filter(|tool| !t.describing.contains(&tool.summary.name))
        })
        .map(|t| {
            (
                t.summary.name.clone(),
                (t.summary.clone(), t.input_schema.clone()),
            )
        })
        .collect()
}
