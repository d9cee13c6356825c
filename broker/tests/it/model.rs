//! Model-based property test: random sequences of page admissions, identifications, releases,
//! manifests, calls (bound directly, or placed through either node), results, timeouts and
//! confirmations, spread over two nodes (pages move
//! between them; on Redis one may die), applied to a
//! broker and to a reference built from the pure rules of `toolmark_broker::model`; every
//! observable outcome (the current page, presence, each result's and confirmation's acceptance
//! or rejection reason, each timeout's winner) must be the same. A result or a confirmation
//! may lose its reply: the node submits it again (`submit_result_again`,
//! `submit_confirmed_again`), and the answer to that must be what `model::check_result_again`
//! and `model::check_confirm_again` say; a release may lose its reply too, and is asked again.
//! At the end of each sequence the tenant's event log holds exactly one event per change that
//! announces one (a manifest, a page gone, a timeout won, a confirmation accepted), lost
//! replies included. Runs on memory, Redis and Redis Cluster. Failing cases are kept in `proptest-regressions/`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use toolmark_broker::model::{self, CallFacts, ConfirmFacts, Found, Presence, Present};
use toolmark_broker::{CallState, ConvKey, PlaceError, Rejection, SharedBroker, SubmitError};
use toolmark_proto::Manifest;

use crate::support::{Backend, LIMITS, Nodes, call, conv, needs, ok, page, request, short};

const CLIENTS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    /// A socket opens on node `node` (0 or 1).
    Admit { node: usize },
    /// The `socket`-th open socket speaks for the first time as `client`.
    Identify { socket: usize, client: usize },
    /// The `socket`-th open socket closes; `lost`: the reply of its release is lost, and the
    /// node asks again.
    Release { socket: usize, lost: bool },
    /// An identified socket sends a manifest.
    Manifest { socket: usize },
    /// The agent calls the conversation.
    Call,
    /// The agent calls the conversation through node `node` in one step
    /// (`Broker::place_call`: each node keeps what it last read of the conversation).
    Place { node: usize },
    /// A result for the `call`-th call, from `client` (`other` = from another conversation);
    /// `lost`: its reply is lost, and the node submits it again.
    Result {
        call: usize,
        client: usize,
        confirm: bool,
        other: bool,
        lost: bool,
    },
    /// The `call`-th call's deadline passes.
    Timeout { call: usize },
    /// A `confirmed` for the `confirm`-th confirmation (`unknown` = a never seen id); `lost`:
    /// its reply is lost, and the node submits it again.
    Confirm {
        confirm: usize,
        client: usize,
        unknown: bool,
        lost: bool,
    },
    /// Node `node` dies (Redis only): its heartbeat stops, so its sockets stop counting.
    Kill { node: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2usize).prop_map(|node| Op::Admit { node }),
        3 => (0..8usize, 0..3usize).prop_map(|(socket, client)| Op::Identify { socket, client }),
        2 => (0..8usize, prop::bool::weighted(0.3)).prop_map(|(socket, lost)| Op::Release { socket, lost }),
        2 => (0..8usize).prop_map(|socket| Op::Manifest { socket }),
        2 => Just(Op::Call),
        3 => (0..2usize).prop_map(|node| Op::Place { node }),
        4 => (0..8usize, 0..3usize, any::<bool>(), prop::bool::weighted(0.1), prop::bool::weighted(0.3))
            .prop_map(|(call, client, confirm, other, lost)| Op::Result { call, client, confirm, other, lost }),
        1 => (0..8usize).prop_map(|call| Op::Timeout { call }),
        3 => (0..4usize, 0..3usize, prop::bool::weighted(0.1), prop::bool::weighted(0.3))
            .prop_map(|(confirm, client, unknown, lost)| Op::Confirm { confirm, client, unknown, lost }),
        1 => (0..2usize).prop_map(|node| Op::Kill { node }),
    ]
}

struct Socket {
    node: usize,
    client: Option<String>,
}

/// The reference: plain data and the model's rules.
#[derive(Default)]
struct Reference {
    sockets: Vec<Socket>,
    current: Option<String>,
    seq: u64,
    manifests: HashMap<String, u64>,
    calls: Vec<(String, String, CallState)>,
    confirms: Vec<(String, String, bool)>,
    /// Calls answered `ok` (the outcome a page's `ok` result submitted again finds).
    oks: std::collections::HashSet<String>,
    /// The events the changes so far announce: (type, what it names) → how many.
    events: BTreeMap<(&'static str, String), usize>,
}

impl Reference {
    fn presence(&self) -> Presence {
        let mut identified = BTreeMap::new();
        let mut unidentified = 0;
        for s in &self.sockets {
            match &s.client {
                Some(c) => *identified.entry(c.clone()).or_insert(0) += 1,
                None => unidentified += 1,
            }
        }
        Presence {
            identified,
            unidentified,
        }
    }

    /// A change announced one more event.
    fn announce(&mut self, kind: &'static str, named: String) {
        *self.events.entry((kind, named)).or_default() += 1;
    }

    fn current_page(&self) -> Option<String> {
        model::current_page(self.current.as_deref(), &self.presence(), |c| {
            self.manifests.get(c).copied()
        })
        .map(str::to_owned)
    }
}

fn rejection(r: Result<(), SubmitError>) -> Result<(), Rejection> {
    r.map_err(|e| match e {
        SubmitError::Rejected(r) => r,
        SubmitError::Broker(b) => panic!("broker error: {b}"),
    })
}

/// One node under test: its broker, whether it can die (a Redis node), whether it is alive.
struct Node {
    broker: SharedBroker,
    mortal: bool,
    alive: bool,
}

async fn run(all: Vec<Node>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut case = Case {
        all,
        r: Reference::default(),
        c: conv(),
    };
    for op in ops {
        case.step(op).await?;
    }
    case.events().await
}

/// One case: the nodes, the reference model, the conversation.
struct Case {
    all: Vec<Node>,
    r: Reference,
    c: ConvKey,
}

impl Case {
    /// Indexes of the live nodes (sockets name their node in `all`).
    fn live(&self) -> Vec<usize> {
        (0..self.all.len()).filter(|i| self.all[*i].alive).collect()
    }

    /// The live nodes' brokers: requests go through them.
    fn nodes(&self) -> Vec<SharedBroker> {
        self.live()
            .iter()
            .map(|i| self.all[*i].broker.clone())
            .collect()
    }

    async fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Kill { node } => self.kill(node).await,
            Op::Admit { node } => {
                let live = self.live();
                let node = live[node % live.len()];
                self.all[node]
                    .broker
                    .admit_page(&self.c, &LIMITS)
                    .await
                    .unwrap();
                self.r.sockets.push(Socket { node, client: None });
                Ok(())
            }
            Op::Identify { socket, client } => self.identify(socket, client).await,
            Op::Release { socket, lost } => self.release(socket, lost).await,
            Op::Manifest { socket } => self.manifest(socket).await,
            Op::Call => self.call().await,
            Op::Place { node } => self.place(node).await,
            Op::Result {
                call,
                client,
                confirm,
                other,
                lost,
            } => self.result(call, client, confirm, other, lost).await,
            Op::Timeout { call } => self.timeout(call).await,
            Op::Confirm {
                confirm,
                client,
                unknown,
                lost,
            } => self.confirm(confirm, client, unknown, lost).await,
        }
    }

    /// Stops a Redis node; waits until the survivor no longer counts its sockets (its
    /// heartbeats stop, then the survivor's next read of the live set drops it).
    async fn kill(&mut self, node: usize) -> Result<(), TestCaseError> {
        let node = node % self.all.len();
        if self.live().len() < 2 || !self.all[node].alive || !self.all[node].mortal {
            return Ok(());
        }
        self.all[node].broker.close().await;
        self.all[node].alive = false;
        self.r.sockets.retain(|s| s.node != node);
        let survivor = self.nodes()[0].clone();
        let want = self.r.presence();
        let c = self.c.clone();
        crate::support::eventually(
            Duration::from_secs(5),
            "the survivor stops counting the dead node's sockets",
            || {
                let (b, c, want) = (survivor.clone(), c.clone(), want.clone());
                async move {
                    let s = b.conversation(&c).await.ok()?;
                    let pages: BTreeMap<String, u32> = s
                        .pages
                        .iter()
                        .map(|p| (p.client_id.clone(), p.sockets))
                        .collect();
                    (s.sockets == want.sockets() && pages == want.identified).then_some(())
                }
            },
        )
        .await;
        Ok(())
    }

    async fn identify(&mut self, socket: usize, client: usize) -> Result<(), TestCaseError> {
        let Some(s) = self.r.sockets.get_mut(socket) else {
            return Ok(());
        };
        if s.client.is_some() {
            return Ok(());
        }
        let client = CLIENTS[client].to_owned();
        self.all[s.node]
            .broker
            .page_identified(&self.c, &client)
            .await
            .unwrap();
        s.client = Some(client);
        Ok(())
    }

    async fn release(&mut self, socket: usize, lost: bool) -> Result<(), TestCaseError> {
        if socket >= self.r.sockets.len() {
            return Ok(());
        }
        let s = self.r.sockets.remove(socket);
        let still = self.r.sockets.iter().any(|o| o.client == s.client);
        let mut release = toolmark_broker::Release::new(crate::support::frame_name(), true);
        let broker = &self.all[s.node].broker;
        let left = broker
            .release_page(&self.c, s.client.as_deref(), &release)
            .await
            .unwrap();
        let gone = s.client.is_some() && !still;
        prop_assert_eq!(left.page_gone, gone, "page_gone");
        if lost {
            release.again = true;
            let again = broker
                .release_page(&self.c, s.client.as_deref(), &release)
                .await
                .unwrap();
            prop_assert_eq!(again.page_gone, gone, "page_gone again");
        }
        if let (true, Some(client)) = (gone, s.client) {
            self.r.announce("page.disconnected", client);
        }
        Ok(())
    }

    /// The tenant's log holds exactly the events the changes announce, each once.
    async fn events(&self) -> Result<(), TestCaseError> {
        let log = self.nodes()[0].retained("t", "0-0").await.unwrap();
        let mut got: BTreeMap<(&'static str, String), usize> = BTreeMap::new();
        for e in log {
            let named = match e.kind.as_str() {
                "page.manifest" => e.data["rev"].to_string(),
                "page.disconnected" => e.data["clientId"].as_str().unwrap_or("").to_owned(),
                "confirmation.resolved" => e.data["confirmId"].as_str().unwrap_or("").to_owned(),
                _ => e.data["id"].as_str().unwrap_or("").to_owned(),
            };
            *got.entry((e.kind.as_str(), named)).or_default() += 1;
        }
        prop_assert_eq!(&got, &self.r.events, "events");
        Ok(())
    }

    async fn manifest(&mut self, socket: usize) -> Result<(), TestCaseError> {
        let Some(client) = self.r.sockets.get(socket).and_then(|s| s.client.clone()) else {
            return Ok(());
        };
        self.r.seq += 1;
        let m = Manifest {
            client_id: client.clone(),
            rev: self.r.seq,
            tools: vec![],
        };
        self.all[self.r.sockets[socket].node]
            .broker
            .put_manifest(&self.c, &m, &crate::support::frame_name())
            .await
            .unwrap();
        self.r.manifests.insert(client.clone(), self.r.seq);
        let rev = self.r.seq.to_string();
        self.r.announce("page.manifest", rev);
        self.r.current = Some(client);
        Ok(())
    }

    async fn call(&mut self) -> Result<(), TestCaseError> {
        let node = self.nodes()[0].clone();
        let state = node.conversation(&self.c).await.unwrap();
        let expected = self.r.current_page();
        prop_assert_eq!(&state.client_id, &expected, "current page");
        prop_assert_eq!(state.sockets, self.r.presence().sockets(), "sockets");
        let pages: BTreeMap<String, u32> = state
            .pages
            .iter()
            .map(|p| (p.client_id.clone(), p.sockets))
            .collect();
        prop_assert_eq!(pages, self.r.presence().identified, "pages");
        if !model::accepts_calls(expected.as_deref(), state.sockets, None) {
            return Ok(());
        }
        let client = expected.unwrap_or_default();
        let (id, _waiter) = call(&node, &self.c, &client, Duration::from_secs(120)).await;
        self.r.calls.push((id, client, CallState::Pending));
        Ok(())
    }

    async fn place(&mut self, node: usize) -> Result<(), TestCaseError> {
        let nodes = self.nodes();
        let node = nodes[node % nodes.len()].clone();
        let expected = self.r.current_page();
        let accepts = model::accepts_calls(expected.as_deref(), self.r.presence().sockets(), None);
        // The broker's own read for a placement (the memory broker's, in place under its lock)
        // finds what a read of the conversation does.
        let state = node.conversation(&self.c).await.unwrap();
        let read = request(&self.c, 100_000).target_in(state.call_view());
        let own = node.call_target(&mut request(&self.c, 100_000)).await;
        prop_assert_eq!(
            own.ok().flatten(),
            read.ok().flatten(),
            "the placement's read"
        );
        match node.place_call(request(&self.c, 100_000)).await {
            Ok(placed) => {
                prop_assert!(accepts, "placed with no page to take it");
                prop_assert_eq!(Some(&placed.binding.client_id), expected.as_ref(), "placed");
                self.r.calls.push((
                    placed.binding.id,
                    placed.binding.client_id,
                    CallState::Pending,
                ));
            }
            Err(PlaceError::NoPage) => prop_assert!(!accepts, "refused a call a page takes"),
            Err(e) => panic!("placing failed: {e}"),
        }
        Ok(())
    }

    async fn result(
        &mut self,
        call: usize,
        client: usize,
        confirm: bool,
        other: bool,
        lost: bool,
    ) -> Result<(), TestCaseError> {
        let Some((id, bound, state)) = self.r.calls.get(call).cloned() else {
            return Ok(());
        };
        let from = CLIENTS[client];
        let from_conv = if other {
            ConvKey::new("t", "u", "other")
        } else {
            self.c.clone()
        };
        let found = if other {
            Found::Elsewhere
        } else {
            Found::Here(CallFacts {
                client_id: &bound,
                state,
                deadline_ms: u64::MAX,
            })
        };
        let expected = model::check_result(found, from, 0);
        let confirm_id = uuid::Uuid::new_v4().to_string();
        let result = if confirm { needs(&confirm_id) } else { ok() };
        let nodes = self.nodes();
        let node = &nodes[client % nodes.len()];
        let got = rejection(
            node.submit_result(&page(&from_conv, from), &id, &result)
                .await,
        );
        prop_assert_eq!(got, expected, "result");
        if got.is_ok() {
            self.r.calls[call].2 = CallState::Answered;
            if confirm {
                self.r
                    .confirms
                    .push((confirm_id.clone(), from.to_owned(), false));
            }
        }
        if lost {
            // The node did not hear that reply: it submits the same result again.
            let state = self.r.calls[call].2;
            let found = if other {
                Found::Elsewhere
            } else {
                Found::Here(CallFacts {
                    client_id: &bound,
                    state,
                    deadline_ms: u64::MAX,
                })
            };
            // The first submission recorded this outcome (an `ok` from this page may also be
            // what an earlier result of the same page recorded).
            let same = state == CallState::Answered
                && (got.is_ok() || !confirm && self.r.oks.contains(&id));
            let expected = model::check_result_again(found, from, 0, same);
            let result = if confirm { needs(&confirm_id) } else { ok() };
            let again = rejection(
                node.submit_result_again(&page(&from_conv, from), &id, &result, 0)
                    .await,
            );
            prop_assert_eq!(again, expected, "result again");
        }
        if got.is_ok() && !confirm {
            self.r.oks.insert(id);
        }
        Ok(())
    }

    async fn timeout(&mut self, call: usize) -> Result<(), TestCaseError> {
        let Some((id, _, state)) = self.r.calls.get(call).cloned() else {
            return Ok(());
        };
        let nodes = self.nodes();
        let won = nodes[1 % nodes.len()]
            .time_out(&self.c, &id)
            .await
            .unwrap()
            .is_some();
        prop_assert_eq!(won, state == CallState::Pending, "timeout won");
        if won {
            self.r.calls[call].2 = CallState::TimedOut;
            self.r.announce("call.timeout", id);
        }
        Ok(())
    }

    async fn confirm(
        &mut self,
        confirm: usize,
        client: usize,
        unknown: bool,
        lost: bool,
    ) -> Result<(), TestCaseError> {
        let from = CLIENTS[client];
        let (id, expected) = if unknown {
            (
                uuid::Uuid::new_v4().to_string(),
                model::check_confirm(Found::Nowhere, from),
            )
        } else {
            let Some((id, bound, used)) = self.r.confirms.get(confirm).cloned() else {
                return Ok(());
            };
            let facts = ConfirmFacts {
                client_id: &bound,
                used,
            };
            (id, model::check_confirm(Found::Here(facts), from))
        };
        let got = rejection(
            self.nodes()[0]
                .submit_confirmed(&page(&self.c, from), &id, &crate::support::confirmed_ok())
                .await
                .map(|_| ()),
        );
        prop_assert_eq!(got, expected, "confirmed");
        if got.is_ok() {
            self.r.confirms[confirm].2 = true;
            self.r.announce("confirmation.resolved", id.clone());
        }
        if lost {
            // Submitted again: no confirmation expires here, so a used one was confirmed by
            // its page.
            let expected = if unknown {
                model::check_confirm_again(Found::Nowhere, from, false)
            } else {
                let (_, bound, used) = &self.r.confirms[confirm];
                let facts = ConfirmFacts {
                    client_id: bound,
                    used: *used,
                };
                model::check_confirm_again(Found::Here(facts), from, *used)
            };
            let again = rejection(
                self.nodes()[0]
                    .submit_confirmed_again(
                        &page(&self.c, from),
                        &id,
                        &crate::support::confirmed_ok(),
                    )
                    .await
                    .map(|_| ()),
            );
            prop_assert_eq!(again, expected, "confirmed again");
        }
        Ok(())
    }
}

fn check(backend: Backend, cases: u32) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        source_file: Some(file!()),
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..60), |ops| {
        rt.block_on(async {
            // TTLs longer than a case: expiry is the contract suite's (a dead node's pages'
            // state ends one conversation TTL after its last refresh).
            let retention = toolmark_broker::Retention {
                conversations: Duration::from_secs(60),
                ..short()
            };
            let mut nodes = Nodes::new(backend, retention);
            // A node is dead after five missed beats: 1 s, which a busy machine's stall of a
            // live node's heartbeat does not reach (a kill is seen 1 s later).
            let hb = Duration::from_millis(200);
            let (n1, _) = nodes.node_with("n1", hb).await;
            let (n2, _) = nodes.node_with("n2", hb).await;
            if backend != Backend::Memory {
                // Both nodes count each other as live before the sequence starts: each sees a
                // socket the other admits on a probe conversation.
                for (a, b) in [(&n1, &n2), (&n2, &n1)] {
                    let probe = ConvKey::new("t", "u", "probe");
                    b.admit_page(&probe, &LIMITS).await.unwrap();
                    crate::support::eventually(
                        Duration::from_secs(5),
                        "the nodes see each other",
                        || async {
                            (a.conversation(&probe).await.ok()?.sockets == 1).then_some(())
                        },
                    )
                    .await;
                    b.release_page(&probe, None, &crate::support::release())
                        .await
                        .unwrap();
                }
            }
            let killable = backend != Backend::Memory;
            let all = vec![
                Node {
                    broker: n1,
                    mortal: killable,
                    alive: true,
                },
                Node {
                    broker: n2,
                    mortal: killable,
                    alive: true,
                },
            ];
            run(all, ops).await
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn memory_follows_the_model() {
    check(Backend::Memory, 256);
}

#[test]
fn redis_follows_the_model() {
    check(Backend::Redis, 48);
}

#[test]
fn redis_cluster_follows_the_model() {
    check(Backend::Cluster, 24);
}
