//! The rules every broker follows, each tried on memory, Redis and Redis Cluster.

use std::time::Duration;

use serde_json::json;
use toolmark_broker::{
    CallState, ConvKey, EventType, Kept, Outcome, PlaceError, Rejection, Retention, SubmitError,
    model,
};
use toolmark_proto::Manifest;

use crate::contract;
use crate::support::{
    Backend, LIMITS, Nodes, call, call_as, confirmed_ok, connected_page, conv, eventually, needs,
    ok, page, request, short, until_refused,
};

fn rejected(r: Rejection) -> Result<(), SubmitError> {
    Err(SubmitError::Rejected(r))
}

async fn results_are_checked_against_their_binding(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, sink) = nodes.node("n1").await;
    let c = conv();
    let (id, waiter) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    assert!(sink.frames().iter().any(|f| f.contains(&id)) || backend != Backend::Memory);
    let submit = |from, id: &str| {
        let b = b.clone();
        let id = id.to_owned();
        async move { b.submit_result(&from, &id, &ok()).await }
    };
    assert_eq!(
        submit(page(&c, "p1"), "nope").await,
        rejected(Rejection::UnknownId)
    );
    assert_eq!(
        submit(page(&c, "p2"), &id).await,
        rejected(Rejection::Mismatch)
    );
    let other = ConvKey::new("t", "u", "other");
    assert_eq!(
        submit(page(&other, "p1"), &id).await,
        rejected(Rejection::Mismatch)
    );
    let other_tenant = ConvKey::new("t2", "u", "c");
    assert_eq!(
        submit(page(&other_tenant, "p1"), &id).await,
        rejected(Rejection::Mismatch)
    );
    assert_eq!(submit(page(&c, "p1"), &id).await, Ok(()));
    assert_eq!(
        submit(page(&c, "p1"), &id).await,
        rejected(Rejection::Duplicate)
    );
    assert_eq!(waiter.await.unwrap(), Outcome::Result(ok()));
    let (late, _w) = call(&b, &c, "p1", Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        submit(page(&c, "p1"), &late).await,
        rejected(Rejection::Late)
    );
    let (timed, w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    assert!(b.time_out(&c, &timed).await.unwrap().is_some());
    assert_eq!(w.await.unwrap(), Outcome::Timeout);
    assert_eq!(
        submit(page(&c, "p1"), &timed).await,
        rejected(Rejection::Late)
    );
}
contract!(results_are_checked_against_their_binding);

/// Call ids of one conversation keep all 122 random bits of a version 4 UUID (seed Security
/// MUST 6: nothing in them names the conversation or where it is stored), and a call is still
/// found by its id alone on any node: read, watched, cancelled, and a result for it from
/// another conversation is a mismatch, not an unknown id.
async fn call_ids_are_all_random_and_still_find_their_call(backend: Backend) {
    use toolmark_broker::Watch;
    let mut nodes = Nodes::new(backend, short());
    let (n1, _) = Box::pin(nodes.node("n1")).await;
    let (n2, _) = Box::pin(nodes.node("n2")).await;
    let c = conv();
    // 400 ids: a bit constant across them is not random (chance 2^-399 each).
    let minted: Vec<String> = (0..400).map(|_| n1.mint_call_id(&c)).collect();
    assert_eq!(
        crate::support::varying_bits(&minted),
        122,
        "{:?}",
        &minted[..3]
    );
    let mut placed = Vec::new();
    for _ in 0..8 {
        placed.push(call(&n1, &c, "p1", Duration::from_secs(30)).await);
    }
    for (id, _) in &placed {
        let found = n2
            .call("t", id)
            .await
            .unwrap()
            .expect("found by its id alone");
        assert_eq!(found.binding.conv, c);
        assert!(
            n2.call("t2", id).await.unwrap().is_none(),
            "another tenant's"
        );
    }
    // Watched from another node, then answered.
    let (id, waiter) = placed.remove(0);
    let Watch::Pending(watching) = n2.watch("t", &id).await.unwrap() else {
        panic!("a pending call is watched");
    };
    let other = ConvKey::new("t", "u2", "elsewhere");
    assert_eq!(
        n2.submit_result(&page(&other, "p1"), &id, &ok()).await,
        rejected(Rejection::Mismatch),
        "a result from another conversation"
    );
    n2.submit_result(&page(&c, "p1"), &id, &ok()).await.unwrap();
    assert_eq!(waiter.await.unwrap(), Outcome::Result(ok()));
    let heard = tokio::time::timeout(Duration::from_secs(5), watching)
        .await
        .expect("the watcher hears the outcome")
        .unwrap();
    assert_eq!(heard, Outcome::Result(ok()));
    // Cancelled from the other node by id alone.
    let (id, waiter) = placed.remove(0);
    let cancelled = n2.cancel("t", &id).await.unwrap().expect("cancelled");
    assert_eq!(cancelled.binding.id, id);
    drop(waiter);
    assert!(
        n2.cancel("t", &toolmark_broker::partition::new_call_id())
            .await
            .unwrap()
            .is_none()
    );
}
contract!(call_ids_are_all_random_and_still_find_their_call);

/// A call's outcome reaches the nodes watching it (a repeat of an idempotent request, on any
/// node) with the placing node's, from the same notification: a result and a timeout alike; a
/// finished call is answered at once, an unknown or another tenant's call is unknown.
async fn a_watched_call_tells_every_watching_node_its_outcome(backend: Backend) {
    use toolmark_broker::Watch;
    let mut nodes = Nodes::new(backend, short());
    // Boxed: three connections' futures inline outgrow a test thread's stack in a debug build.
    let (n1, _) = Box::pin(nodes.node("n1")).await;
    let (n2, _) = Box::pin(nodes.node("n2")).await;
    let (n3, _) = Box::pin(nodes.node("n3")).await;
    let c = conv();
    let pending = |w: Watch| match w {
        Watch::Pending(rx) => rx,
        other => panic!("not pending: {other:?}"),
    };
    // Answered: the placing node and two watchers (one of them twice, one on the placing
    // node itself) all hear it.
    let (id, waiter) = call(&n1, &c, "p1", Duration::from_secs(30)).await;
    let on_two = pending(n2.watch("t", &id).await.unwrap());
    let on_two_again = pending(n2.watch("t", &id).await.unwrap());
    let on_three = pending(n3.watch("t", &id).await.unwrap());
    let on_one = pending(n1.watch("t", &id).await.unwrap());
    n3.submit_result(&page(&c, "p1"), &id, &ok()).await.unwrap();
    for rx in [waiter, on_two, on_two_again, on_three, on_one] {
        let o = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("the outcome arrives")
            .expect("the outcome arrives");
        assert_eq!(o, Outcome::Result(ok()));
    }
    // Ended: answered at once.
    match n2.watch("t", &id).await.unwrap() {
        Watch::Ended(o) => assert_eq!(o, Outcome::Result(ok())),
        other => panic!("{other:?}"),
    }
    // Timed out: the watcher hears the timeout.
    let (timed, waiter) = call(&n1, &c, "p1", Duration::from_secs(30)).await;
    let watching = pending(n2.watch("t", &timed).await.unwrap());
    assert!(n1.time_out(&c, &timed).await.unwrap().is_some());
    assert_eq!(waiter.await.unwrap(), Outcome::Timeout);
    let o = tokio::time::timeout(Duration::from_secs(5), watching)
        .await
        .expect("the timeout arrives")
        .unwrap();
    assert_eq!(o, Outcome::Timeout);
    // Unknown ids and another tenant's call.
    assert!(matches!(
        n2.watch("t", &toolmark_broker::partition::new_call_id())
            .await
            .unwrap(),
        Watch::Unknown
    ));
    let (theirs, _w) = call(&n1, &c, "p1", Duration::from_secs(30)).await;
    assert!(matches!(
        n2.watch("t2", &theirs).await.unwrap(),
        Watch::Unknown
    ));
}
contract!(a_watched_call_tells_every_watching_node_its_outcome);

async fn confirmations_are_bound_single_use_and_keep_their_tool(backend: Backend) {
    let retention = Retention {
        finished_calls: Duration::from_millis(300),
        ..short()
    };
    let mut nodes = Nodes::new(backend, retention);
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    // A deadline a busy machine's answer still meets; the call is forgotten 300 ms after it.
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(1)).await;
    b.submit_result(&page(&c, "p1"), &id, &needs("k1"))
        .await
        .unwrap();
    let confirm = |from, k: &str| {
        let b = b.clone();
        let k = k.to_owned();
        async move {
            b.submit_confirmed(&from, &k, &crate::support::confirmed_ok())
                .await
        }
    };
    assert_eq!(
        confirm(page(&c, "p1"), "k2").await,
        Err(SubmitError::Rejected(Rejection::UnknownConfirm))
    );
    assert_eq!(
        confirm(page(&c, "p2"), "k1").await,
        Err(SubmitError::Rejected(Rejection::Mismatch))
    );
    // The same id from another conversation is a mismatch on every broker.
    let other = ConvKey::new("t", "u", "other");
    assert_eq!(
        confirm(page(&other, "p1"), "k1").await,
        Err(SubmitError::Rejected(Rejection::Mismatch))
    );
    // Past the call's deadline and `finished_calls`, the call is kept while its confirmation
    // pends (it tells how the confirmation ends), and the confirmation still knows its tool.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    b.sweep_deadlines().await.unwrap();
    assert!(b.call("t", &id).await.unwrap().is_some());
    let bound = confirm(page(&c, "p1"), "k1").await.unwrap();
    assert_eq!(
        (bound.call_id.as_str(), bound.tool.as_str()),
        (id.as_str(), "todo.add")
    );
    assert!(bound.untrusted);
    assert_eq!(
        confirm(page(&c, "p1"), "k1").await,
        Err(SubmitError::Rejected(Rejection::Duplicate))
    );
}
contract!(confirmations_are_bound_single_use_and_keep_their_tool);

/// Runs the confirmation sweep until it has looked at the confirmation twice (the first look
/// that finds the page gone starts the grace; grace is zero here).
async fn sweep(b: &toolmark_broker::SharedBroker) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..2 {
        // The Redis sweep is leased (2 s) and looks again 5 s after a keep: wait it out.
        out.extend(
            b.expire_abandoned_confirmations(Duration::ZERO)
                .await
                .unwrap()
                .into_iter()
                .map(|c| c.confirm_id),
        );
    }
    out
}

async fn sweep_until_expired(b: &toolmark_broker::SharedBroker, k: &str) {
    eventually(Duration::from_secs(20), "the confirmation expires", || {
        let b = b.clone();
        let k = k.to_owned();
        async move { sweep(&b).await.contains(&k).then_some(()) }
    })
    .await;
}

/// Sweeps for as long as a sweep would need to expire a gone page's confirmation, and checks
/// that nothing expired.
async fn sweep_keeps(b: &toolmark_broker::SharedBroker, backend: Backend) {
    let rounds = if backend == Backend::Memory { 3 } else { 16 };
    for _ in 0..rounds {
        assert!(
            sweep(b).await.is_empty(),
            "a possibly present page's confirmation expired"
        );
        if backend != Backend::Memory {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn a_silent_socket_keeps_confirmations_and_their_expiry_needs_the_page_gone(
    backend: Backend,
) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    b.admit_page(&c, &LIMITS).await.unwrap();
    b.page_identified(&c, "p1").await.unwrap();
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    b.submit_result(&page(&c, "p1"), &id, &needs("k1"))
        .await
        .unwrap();
    // A network blip: the page's socket goes, it comes back and is silent.
    assert!(
        b.release_page(&c, Some("p1"), &crate::support::release())
            .await
            .unwrap()
            .page_gone
    );
    b.admit_page(&c, &LIMITS).await.unwrap();
    sweep_keeps(&b, backend).await;
    // The user approves: the confirmed is accepted.
    b.page_identified(&c, "p1").await.unwrap();
    let confirmed = b
        .submit_confirmed(&page(&c, "p1"), "k1", &crate::support::confirmed_ok())
        .await;
    assert!(confirmed.is_ok(), "{confirmed:?}");

    // A page that is really gone: its confirmation expires, once.
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    b.submit_result(&page(&c, "p1"), &id, &needs("k2"))
        .await
        .unwrap();
    b.release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    b.release_page(&c, None, &crate::support::release())
        .await
        .unwrap();
    sweep_until_expired(&b, "k2").await;
    assert_eq!(
        b.submit_confirmed(&page(&c, "p1"), "k2", &crate::support::confirmed_ok())
            .await,
        Err(SubmitError::Rejected(Rejection::Duplicate))
    );
}
contract!(a_silent_socket_keeps_confirmations_and_their_expiry_needs_the_page_gone);

/// A call answered `needs_confirmation` carries how its confirmation ended (the page's final
/// outcome, or the expiry's refusal), written in the step that records `confirmation.resolved`;
/// it is kept as long as its confirmation can be, then `finished_calls` after it ended.
async fn a_call_carries_how_its_confirmation_ended_and_is_kept_past_it(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    b.admit_page(&c, &LIMITS).await.unwrap();
    b.page_identified(&c, "p1").await.unwrap();
    let (id, _w) = call(&b, &c, "p1", Duration::from_millis(400)).await;
    b.submit_result(&page(&c, "p1"), &id, &needs("k1"))
        .await
        .unwrap();
    // Past the call's deadline and `finished_calls`: still kept, its confirmation pending.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    b.sweep_deadlines().await.unwrap();
    let r = b
        .call("t", &id)
        .await
        .unwrap()
        .expect("kept while its confirmation pends");
    assert_eq!(r.outcome, Some(Outcome::Result(needs("k1"))));
    assert_eq!(r.resolution, None);
    let before = toolmark_broker::now_ms();
    b.submit_confirmed(&page(&c, "p1"), "k1", &confirmed_ok())
        .await
        .unwrap();
    let r = b.call("t", &id).await.unwrap().expect("kept once resolved");
    let res = r.resolution.expect("the confirmation's end is on its call");
    assert_eq!(res.outcome, confirmed_ok());
    assert!(
        res.at_ms + 1000 >= before && res.at_ms <= toolmark_broker::now_ms() + 1000,
        "{} vs {before}",
        res.at_ms
    );
    let log = b.retained("t", "0-0").await.unwrap();
    let resolved: Vec<_> = log
        .iter()
        .filter(|e| e.kind == EventType::ConfirmationResolved && e.data["callId"] == id.as_str())
        .collect();
    assert_eq!(resolved.len(), 1, "{log:?}");
    assert_eq!(resolved[0].data["outcome"], json!(confirmed_ok()));
    // `finished_calls` after it ended, the call is gone.
    eventually(
        Duration::from_secs(10),
        "the resolved call is forgotten",
        || {
            let b = b.clone();
            let id = id.clone();
            async move {
                b.sweep_deadlines().await.unwrap();
                b.call("t", &id).await.unwrap().is_none().then_some(())
            }
        },
    )
    .await;

    // Expired: the refusal is its final outcome.
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    b.submit_result(&page(&c, "p1"), &id, &needs("k2"))
        .await
        .unwrap();
    b.release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    b.release_page(&c, None, &crate::support::release())
        .await
        .unwrap();
    sweep_until_expired(&b, "k2").await;
    let r = b.call("t", &id).await.unwrap().expect("kept once expired");
    assert_eq!(
        r.resolution.map(|r| r.outcome),
        Some(toolmark_broker::expired_confirmation())
    );
}
contract!(a_call_carries_how_its_confirmation_ended_and_is_kept_past_it);

async fn an_echo_subscription_keeps_its_pages_confirmations_until_it_is_gone(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    // A Laravel Echo subscription never names a clientId; its page speaks through /inbound.
    b.admit_page(&c, &LIMITS).await.unwrap();
    let (id, _w) = call(&b, &c, "e1", Duration::from_secs(30)).await;
    b.submit_result(&page(&c, "e1"), &id, &needs("k1"))
        .await
        .unwrap();
    sweep_keeps(&b, backend).await;
    b.release_page(&c, None, &crate::support::release())
        .await
        .unwrap();
    sweep_until_expired(&b, "k1").await;
}
contract!(an_echo_subscription_keeps_its_pages_confirmations_until_it_is_gone);

fn manifest(client: &str, rev: u64) -> Manifest {
    Manifest {
        client_id: client.into(),
        rev,
        tools: vec![serde_json::from_value(json!({"name": "todo.add", "llmName": "todo_add", "description": "Add", "hints": {}})).unwrap()],
    }
}

async fn a_quiet_page_stays_reachable_past_every_ttl(backend: Backend) {
    let retention = short();
    let mut nodes = Nodes::new(backend, retention);
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    b.admit_page(&c, &LIMITS).await.unwrap();
    b.page_identified(&c, "p1").await.unwrap();
    b.put_manifest(&c, &manifest("p1", 3), &crate::support::frame_name())
        .await
        .unwrap();
    // Quiet for three times the conversation TTL: the node's heartbeat keeps the page alive.
    tokio::time::sleep(retention.conversations * 3).await;
    let _ = b.sweep_deadlines().await;
    let s = b.conversation(&c).await.unwrap();
    assert_eq!(s.client_id.as_deref(), Some("p1"));
    assert_eq!(s.rev, Some(3));
    assert_eq!(s.tools.len(), 1);
    assert_eq!(s.sockets, 1);
    assert!(model::accepts_calls(
        s.client_id.as_deref(),
        s.sockets,
        None
    ));
    // A page that reconnected and stayed silent keeps the conversation too.
    b.release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    b.admit_page(&c, &LIMITS).await.unwrap();
    tokio::time::sleep(retention.conversations * 3).await;
    let s = b.conversation(&c).await.unwrap();
    assert_eq!(
        s.client_id.as_deref(),
        Some("p1"),
        "the silent socket may be p1"
    );
    assert_eq!(s.tools.len(), 1);
}
contract!(a_quiet_page_stays_reachable_past_every_ttl);

async fn a_conversation_announces_a_name_once_for_its_whole_life(backend: Backend) {
    let retention = short();
    let mut nodes = Nodes::new(backend, retention);
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    let names = |list: &[&str]| list.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    // A conversation the broker does not hold keeps nothing: every name is new, and stays so.
    assert_eq!(
        b.announce_once(&c, &names(&["a"]), true, "f1")
            .await
            .unwrap(),
        [true]
    );
    assert_eq!(
        b.announce_once(&c, &names(&["a"]), true, "f1")
            .await
            .unwrap(),
        [true]
    );
    connected_page(&b, &c, "p1").await;
    assert_eq!(
        b.announce_once(&c, &names(&["a", "b"]), true, "f1")
            .await
            .unwrap(),
        [true, true]
    );
    assert_eq!(
        b.announce_once(&c, &names(&["a", "c"]), true, "f2")
            .await
            .unwrap(),
        [false, true]
    );
    // The announcement that marked a name, asking again (its reply was lost), is answered as
    // the first time; another is not, and cannot take the mark back.
    assert_eq!(
        b.announce_once(&c, &names(&["a", "c"]), true, "f2")
            .await
            .unwrap(),
        [false, true]
    );
    assert_eq!(
        b.announce_once(&c, &names(&["c"]), true, "f1")
            .await
            .unwrap(),
        [false]
    );
    assert_eq!(
        b.announce_once(&c, &names(&["c"]), false, "f1")
            .await
            .unwrap(),
        [false]
    );
    // An announcement that could not be emitted is taken back, and is new again.
    assert_eq!(
        b.announce_once(&c, &names(&["c"]), false, "f2")
            .await
            .unwrap(),
        [true]
    );
    assert_eq!(
        b.announce_once(&c, &names(&["c"]), false, "f2")
            .await
            .unwrap(),
        [false]
    );
    assert_eq!(
        b.announce_once(&c, &names(&["c"]), true, "f1")
            .await
            .unwrap(),
        [true]
    );
    // Quiet for three times the conversation's TTL, its page held: the marks live with it.
    tokio::time::sleep(retention.conversations * 3).await;
    let _ = b.sweep_deadlines().await;
    assert_eq!(
        b.announce_once(&c, &names(&["a", "b", "c"]), true, "f3")
            .await
            .unwrap(),
        [false, false, false]
    );
    // A conversation keeps a bounded number of marks: past them a name is new every time.
    let many: Vec<String> = (0..model::ANNOUNCED_PER_CONVERSATION)
        .map(|i| format!("n{i}"))
        .collect();
    let first = b.announce_once(&c, &many, true, "f2").await.unwrap();
    assert_eq!(
        first.iter().filter(|n| **n).count(),
        model::ANNOUNCED_PER_CONVERSATION,
    );
    let again = b.announce_once(&c, &many, true, "f3").await.unwrap();
    let kept = again.iter().filter(|n| !**n).count();
    assert_eq!(
        kept,
        model::ANNOUNCED_PER_CONVERSATION - 3,
        "the bound counts a, b, c"
    );
    assert_eq!(
        b.announce_once(&c, &names(&["a"]), true, "f4")
            .await
            .unwrap(),
        [false]
    );
    // The conversation ends (its page gone, a TTL later): its marks go with it.
    b.release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(15),
        "the conversation ended",
        || async {
            let _ = b.sweep_deadlines().await;
            let s = b.conversation(&c).await.unwrap();
            (s.client_id.is_none() && s.sockets == 0).then_some(())
        },
    )
    .await;
    connected_page(&b, &c, "p2").await;
    assert_eq!(
        b.announce_once(&c, &names(&["a", "b"]), true, "f1")
            .await
            .unwrap(),
        [true, true],
        "a new life of the conversation announces again"
    );
}
contract!(a_conversation_announces_a_name_once_for_its_whole_life);

async fn calls_go_to_the_latest_connected_page_and_a_silent_socket_keeps_the_current_one(
    backend: Backend,
) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    for id in ["a", "b"] {
        b.admit_page(&c, &LIMITS).await.unwrap();
        b.page_identified(&c, id).await.unwrap();
        b.put_manifest(&c, &manifest(id, 1), &crate::support::frame_name())
            .await
            .unwrap();
    }
    assert_eq!(
        b.conversation(&c).await.unwrap().client_id.as_deref(),
        Some("b")
    );
    b.release_page(&c, Some("b"), &crate::support::release())
        .await
        .unwrap();
    assert_eq!(
        b.conversation(&c).await.unwrap().client_id.as_deref(),
        Some("a")
    );
    b.admit_page(&c, &LIMITS).await.unwrap();
    assert_eq!(
        b.conversation(&c).await.unwrap().client_id.as_deref(),
        Some("b")
    );
}
contract!(calls_go_to_the_latest_connected_page_and_a_silent_socket_keeps_the_current_one);

async fn events_are_bounded_in_count_and_in_bytes(backend: Backend) {
    let retention = Retention {
        events_per_tenant: 50,
        event_bytes_per_tenant: 20_000,
        ..short()
    };
    let mut nodes = Nodes::new(backend, retention);
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    let big = "x".repeat(2_000);
    for i in 0..40 {
        b.emit(
            "t",
            EventType::PageManifest,
            &c,
            json!({"i": i, "pad": big}),
        )
        .await
        .unwrap();
    }
    let feed = b.retained("t", "0-0").await.unwrap();
    let bytes: usize = feed.iter().map(|e| e.data.to_string().len()).sum();
    assert!(bytes <= 20_000, "{bytes} bytes of events retained");
    assert!(feed.len() >= 5, "only {} kept", feed.len());
    assert_eq!(feed.last().unwrap().data["i"], 39, "the newest is kept");
    for i in 0..100 {
        b.emit("t", EventType::CallTimeout, &c, json!({"i": i}))
            .await
            .unwrap();
    }
    let feed = b.retained("t", "0-0").await.unwrap();
    assert_eq!(feed.len(), 50);
    assert_eq!(feed.first().unwrap().data["i"], 50);
}
contract!(events_are_bounded_in_count_and_in_bytes);

/// A replay reads the log a page at a time: the feed brings the first page after the resume
/// point, each read after it the next, in order, none twice, until a short page.
async fn a_replay_reads_the_log_a_page_at_a_time(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    let total = toolmark_broker::EVENT_PAGE * 2 + 5;
    for i in 0..total {
        b.emit("t", EventType::CallTimeout, &c, json!({"i": i}))
            .await
            .unwrap();
    }
    let feed = b.events("t", Some("0-0")).await.unwrap();
    assert_eq!(feed.backlog.len(), toolmark_broker::EVENT_PAGE);
    let mut seen: Vec<u64> = feed
        .backlog
        .iter()
        .map(|e| e.parse().unwrap().data["i"].as_u64().unwrap())
        .collect();
    let mut last = feed.backlog.last().unwrap().id.clone();
    loop {
        let page = b
            .events_after("t", &last, toolmark_broker::EVENT_PAGE)
            .await
            .unwrap();
        assert!(page.len() <= toolmark_broker::EVENT_PAGE);
        seen.extend(
            page.iter()
                .map(|e| e.parse().unwrap().data["i"].as_u64().unwrap()),
        );
        match page.last() {
            Some(e) if page.len() == toolmark_broker::EVENT_PAGE => last = e.id.clone(),
            _ => break,
        }
    }
    assert_eq!(seen, (0..total as u64).collect::<Vec<_>>());
    // After the newest: nothing.
    let newest = b
        .retained("t", "0-0")
        .await
        .unwrap()
        .last()
        .unwrap()
        .id
        .clone();
    assert!(b.events_after("t", &newest, 8).await.unwrap().is_empty());
}
contract!(a_replay_reads_the_log_a_page_at_a_time);

async fn the_rate_is_a_burst_of_twice_the_rate(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let started = std::time::Instant::now();
    let mut taken = 0;
    while b.take_call("t", 10).await.is_ok() {
        taken += 1;
        assert!(taken <= 60, "the burst is bounded");
    }
    // 2 × 10, and what was refilled while taking (one more for the token being refilled).
    let refilled = (started.elapsed().as_secs_f64() * 10.0).floor() as u32;
    assert!(
        (20..=21 + refilled).contains(&taken),
        "burst of {taken}, {refilled} refilled meanwhile"
    );
}
contract!(the_rate_is_a_burst_of_twice_the_rate);

/// Calls placed through two nodes as fast as they go, past the tenant's burst: never more are
/// placed than the bucket holds (its burst and what it refilled meanwhile), and no fewer than
/// its burst less what the nodes may still hold in their reserves (Redis Cluster: at most one
/// and a half batches of at most 10 ms of the rate each, `rate::Reserves`).
async fn calls_through_two_nodes_never_take_more_than_the_tenants_bucket(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    let c = conv();
    connected_page(&n1, &c, "p1").await;
    let per_second = 1000;
    let burst = toolmark_broker::model::burst(per_second);
    let cap = toolmark_broker::rate::reserve_cap(per_second);
    // Half the calls through each node.
    let spent = until_refused(40, move |i| {
        let (node, c) = (if i % 2 == 0 { n1.clone() } else { n2.clone() }, c.clone());
        async move {
            match node.place_call(request(&c, per_second)).await {
                Ok(_) => true,
                Err(PlaceError::Limited(_)) => false,
                Err(e) => panic!("a call failed: {e:?}"),
            }
        }
    })
    .await;
    let (placed, elapsed) = (spent.placed, spent.elapsed.as_secs_f64());
    let refilled = (elapsed * f64::from(per_second)).floor() as u32;
    assert!(
        placed <= burst + refilled + 1,
        "{placed} placed, the bucket held {burst} and refilled {refilled} in {elapsed:.3} s"
    );
    let held = 2 * (3 * cap / 2);
    assert!(
        placed >= burst - held,
        "{placed} placed of a burst of {burst}: more than two nodes' reserves lost"
    );
}
contract!(calls_through_two_nodes_never_take_more_than_the_tenants_bucket);

async fn a_placed_call_takes_the_rate_first_then_goes_to_the_current_page(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, sink) = nodes.node("n1").await;
    // Tenant `r` may place one call a second, a burst of two.
    let c = ConvKey::new("r", "u", "c");
    assert!(
        matches!(b.place_call(request(&c, 1)).await, Err(PlaceError::NoPage)),
        "no page: refused"
    );
    connected_page(&b, &c, "p1").await;
    let placed = b.place_call(request(&c, 1)).await.unwrap();
    assert_eq!(placed.binding.client_id, "p1");
    let id = placed.binding.id.clone();
    eventually(Duration::from_secs(5), "the page gets the call", || {
        let sink = sink.clone();
        let id = id.clone();
        async move {
            sink.frames()
                .iter()
                .any(|f| f.contains(&id) && f.contains("\"clientId\":\"p1\"") && f.contains("milk"))
                .then_some(())
        }
    })
    .await;
    // The refusal took the first call of the burst, this call the second: the next is limited,
    // and nothing of it is stored.
    let limited = request(&c, 1);
    let refused = b.place_call(limited.clone()).await;
    assert!(
        matches!(refused, Err(PlaceError::Limited(_))),
        "{refused:?}"
    );
    assert!(b.call("r", &limited.id).await.unwrap().is_none());
    // A newer page of the conversation sends its manifest: the next call goes to it, although
    // this node last saw the other page current.
    let c = conv();
    connected_page(&b, &c, "p1").await;
    b.place_call(request(&c, 1000)).await.unwrap();
    connected_page(&b, &c, "p2").await;
    let placed = b.place_call(request(&c, 1000)).await.unwrap();
    assert_eq!(placed.binding.client_id, "p2");
    b.submit_result(&page(&c, "p2"), &placed.binding.id, &ok())
        .await
        .unwrap();
    assert_eq!(placed.waiter.await.unwrap(), Outcome::Result(ok()));
    let record = b.call("t", &placed.binding.id).await.unwrap().unwrap();
    assert_eq!(
        (record.binding.tool.as_str(), record.outcome),
        ("todo.add", Some(Outcome::Result(ok())))
    );
    assert!(
        b.call("r", &placed.binding.id).await.unwrap().is_none(),
        "another tenant does not see the call"
    );
}
contract!(a_placed_call_takes_the_rate_first_then_goes_to_the_current_page);

/// A front door's record is shared by every node, kept while it is used within its time to
/// live (each read restarts it), gone once left idle past it or forgotten; records of different
/// kinds under one id are different records.
async fn sessions_are_shared_kept_while_used_and_gone_when_idle(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    let ttl = Duration::from_millis(1500);
    let s1 = Kept::McpSession("s1".into());
    let s2 = Kept::McpOwner("s2".into());
    n1.keep(&s1, "{\"a\":1}", ttl).await.unwrap();
    n1.keep(&s2, "two", ttl).await.unwrap();
    assert_eq!(
        n2.kept(&Kept::McpOwner("s1".into()), ttl).await.unwrap(),
        None
    );
    // Read on the other node within the time to live, three times: each read restarts it, so
    // the session outlives its first 1.5 s.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(750)).await;
        assert_eq!(
            n2.kept(&s1, ttl).await.unwrap().as_deref(),
            Some("{\"a\":1}")
        );
    }
    // s2 was never read: gone. s1, left idle past its time too.
    assert_eq!(n2.kept(&s2, ttl).await.unwrap(), None);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(n1.kept(&s1, ttl).await.unwrap(), None);
    // Forgotten on one node, gone on the other; forgetting it again finds nothing.
    let task = Kept::McpTask {
        tenant: "acme".into(),
        id: "s3".into(),
    };
    n1.keep(&task, "three", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(n2.forget(&task).await.unwrap());
    assert_eq!(n1.kept(&task, ttl).await.unwrap(), None);
    assert!(!n1.forget(&task).await.unwrap());
}
contract!(sessions_are_shared_kept_while_used_and_gone_when_idle);

/// Bounded sessions are counted per tenant and per holder across the nodes: one over a bound
/// is refused and counts nothing, a session given back or left to lapse frees its place, and
/// a kept one does not lapse.
async fn sessions_are_counted_per_tenant_and_holder_on_every_node(backend: Backend) {
    use toolmark_broker::{PlaceBound, Places};
    let mut nodes = Nodes::new(backend, short());
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    let at = |holder| Places {
        tenant: "acme#1",
        holder,
        per_tenant: 3,
        per_holder: 2,
    };
    let long = Duration::from_secs(60);
    assert_eq!(n1.take_place(&at("u1"), "s1", long).await.unwrap(), Ok(()));
    assert_eq!(n2.take_place(&at("u1"), "s2", long).await.unwrap(), Ok(()));
    assert_eq!(
        n1.take_place(&at("u1"), "s3", long).await.unwrap(),
        Err(PlaceBound::Holder)
    );
    // A session counted already is kept, not counted twice.
    assert_eq!(n2.take_place(&at("u1"), "s1", long).await.unwrap(), Ok(()));
    assert_eq!(n2.take_place(&at("u2"), "s3", long).await.unwrap(), Ok(()));
    assert_eq!(
        n1.take_place(&at("u3"), "s4", long).await.unwrap(),
        Err(PlaceBound::Tenant)
    );
    // The refused s4 counted nothing: giving s3 back makes room for exactly one.
    n1.give_place(&at("u2"), "s3").await.unwrap();
    assert_eq!(n2.take_place(&at("u3"), "s4", long).await.unwrap(), Ok(()));
    assert_eq!(
        n2.take_place(&at("u3"), "s5", long).await.unwrap(),
        Err(PlaceBound::Tenant)
    );
    // Another tenant's sets (or the same id's next incarnation) are apart.
    let other = Places {
        tenant: "acme#2",
        ..at("u1")
    };
    assert_eq!(n1.take_place(&other, "s1", long).await.unwrap(), Ok(()));

    // Lapsing: t1 kept within its time, t2 not; t2's place frees after its time, t1's does not.
    let lapse = Places {
        tenant: "lapse",
        holder: "u1",
        per_tenant: 10,
        per_holder: 2,
    };
    let ttl = Duration::from_millis(1500);
    let taken = tokio::time::Instant::now();
    assert_eq!(n1.take_place(&lapse, "t1", ttl).await.unwrap(), Ok(()));
    assert_eq!(n1.take_place(&lapse, "t2", ttl).await.unwrap(), Ok(()));
    let deadline = taken + Duration::from_secs(20);
    let mut last_keep = tokio::time::Instant::now();
    loop {
        if last_keep.elapsed() > Duration::from_millis(400) {
            n2.keep_place(&lapse, "t1", ttl).await.unwrap();
            last_keep = tokio::time::Instant::now();
        }
        if n2.take_place(&lapse, "t3", ttl).await.unwrap() == Ok(()) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "t2 never lapses");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        taken.elapsed() >= ttl,
        "a place freed before its time to live"
    );
    // t1 was kept: still counted, so u1's two places are t1 and t3.
    assert_eq!(
        n1.take_place(&lapse, "t4", ttl).await.unwrap(),
        Err(PlaceBound::Holder)
    );
    // Keeping a place no longer counted does not bring it back.
    n1.keep_place(&lapse, "t2", ttl).await.unwrap();
    n1.give_place(&lapse, "t3").await.unwrap();
    assert_eq!(n1.take_place(&lapse, "t4", ttl).await.unwrap(), Ok(()));
}
contract!(sessions_are_counted_per_tenant_and_holder_on_every_node);

/// An idempotency key is claimed once per tenant on every node, keeps its time to live from the
/// claim through updates, and is free again once it expired or was released.
async fn idempotency_keys_are_claimed_once_and_expire_from_their_claim(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    let ttl = Duration::from_secs(3);
    let claimed = tokio::time::Instant::now();
    assert_eq!(
        n1.claim_idempotency("t", "k", "first", ttl).await.unwrap(),
        None
    );
    assert_eq!(
        n2.claim_idempotency("t", "k", "second", ttl)
            .await
            .unwrap()
            .as_deref(),
        Some("first")
    );
    // Another tenant's key of the same name is its own.
    assert_eq!(
        n2.claim_idempotency("r", "k", "theirs", ttl).await.unwrap(),
        None
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    n2.update_idempotency("t", "k", "started").await.unwrap();
    assert_eq!(
        n1.idempotency("t", "k").await.unwrap().as_deref(),
        Some("started")
    );
    // The update kept the claim's time to live: gone 3 s after the claim (it would live to 4 s
    // had the update restarted it).
    tokio::time::sleep_until(claimed + ttl + Duration::from_millis(500)).await;
    assert_eq!(n1.idempotency("t", "k").await.unwrap(), None);
    // An update of an expired key writes nothing; the key is free to claim.
    n1.update_idempotency("t", "k", "late").await.unwrap();
    assert_eq!(n2.idempotency("t", "k").await.unwrap(), None);
    assert_eq!(
        n2.claim_idempotency("t", "k", "again", ttl).await.unwrap(),
        None
    );
    n1.release_idempotency("t", "k").await.unwrap();
    assert_eq!(
        n2.claim_idempotency("t", "k", "after", ttl).await.unwrap(),
        None
    );
}
contract!(idempotency_keys_are_claimed_once_and_expire_from_their_claim);

/// A socket without a conversation (a Pusher connection before it subscribes) counts against
/// the tenant's connections on every node, with the page sockets, until it is released.
async fn sockets_without_a_conversation_share_the_tenants_connection_limit(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    let limits = toolmark_broker::AdmitLimits {
        max_connections: 2,
        max_pages_per_conversation: 50,
    };
    n1.admit_socket("t", 2).await.unwrap();
    let c = ConvKey::new("t", "u1", "c1");
    n2.admit_page(&c, &limits).await.unwrap();
    // Once n2 counts n1 among the live nodes, the two sockets fill the limit.
    eventually(Duration::from_secs(10), "n2 counts n1's socket", || async {
        match n2.admit_socket("t", 2).await {
            Err(toolmark_broker::AdmitError::TenantConnections) => Some(()),
            Ok(()) => {
                n2.release_socket("t").await.unwrap();
                None
            }
            Err(e) => panic!("{e}"),
        }
    })
    .await;
    // And a page socket anywhere is refused too.
    let other = ConvKey::new("t", "u2", "c2");
    eventually(Duration::from_secs(10), "n1 counts n2's page", || async {
        match n1.admit_page(&other, &limits).await {
            Err(toolmark_broker::AdmitError::TenantConnections) => Some(()),
            Ok(()) => {
                n1.release_page(&other, None, &crate::support::release())
                    .await
                    .unwrap();
                None
            }
            Err(e) => panic!("{e}"),
        }
    })
    .await;
    // Another tenant has its own count.
    n1.admit_socket("r", 2).await.unwrap();
    n1.release_socket("t").await.unwrap();
    n2.admit_socket("t", 2).await.unwrap();
    // What every node reads as the tenant's connections is the same count, whichever node
    // holds them.
    for n in [&n1, &n2] {
        eventually(
            Duration::from_secs(10),
            "both nodes read 2 of t",
            || async { (n.tenant_connections("t").await.unwrap() == 2).then_some(()) },
        )
        .await;
        assert_eq!(n.tenant_connections("r").await.unwrap(), 1);
        assert_eq!(n.tenant_connections("none").await.unwrap(), 0);
    }
    n2.release_socket("t").await.unwrap();
    eventually(Duration::from_secs(10), "a release is read", || async {
        (n1.tenant_connections("t").await.unwrap() == 1).then_some(())
    })
    .await;
}
contract!(sockets_without_a_conversation_share_the_tenants_connection_limit);

/// A node that did not hear whether its submission was applied submits it again: applied once,
/// never taken for the page's duplicate, judged as when the node received it; an emission
/// submitted again under its name is recorded once.
async fn a_frame_submitted_again_is_applied_once_and_its_event_recorded_once(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    let from = page(&c, "p1");
    // A result applied, then submitted again: the same outcome is no duplicate; another is.
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    b.submit_result(&from, &id, &needs("k1")).await.unwrap();
    assert_eq!(
        b.submit_result_again(&from, &id, &needs("k1"), toolmark_broker::now_ms())
            .await,
        Ok(())
    );
    assert_eq!(
        b.submit_result_again(&from, &id, &ok(), toolmark_broker::now_ms())
            .await,
        rejected(Rejection::Duplicate)
    );
    assert_eq!(
        b.submit_result_again(
            &page(&c, "p2"),
            &id,
            &needs("k1"),
            toolmark_broker::now_ms()
        )
        .await,
        rejected(Rejection::Mismatch)
    );
    // Received before the deadline, submitted after it: judged when it was received.
    let (late, _w) = call(&b, &c, "p1", Duration::from_millis(200)).await;
    let received = toolmark_broker::now_ms();
    eventually(Duration::from_secs(10), "the deadline passes", || async {
        (toolmark_broker::now_ms() > received + 400).then_some(())
    })
    .await;
    assert_eq!(
        b.submit_result(&from, &late, &ok()).await,
        rejected(Rejection::Late)
    );
    assert_eq!(
        b.submit_result_again(&from, &late, &ok(), received).await,
        Ok(())
    );
    let record = b.call("t", &late).await.unwrap().unwrap();
    assert_eq!(record.outcome, Some(Outcome::Result(ok())));
    // A confirmation: again, after it was applied, it answers its binding; a plain second
    // submission is the page's duplicate.
    let bound = b
        .submit_confirmed(&from, "k1", &crate::support::confirmed_ok())
        .await
        .unwrap();
    let again = b
        .submit_confirmed_again(&from, "k1", &crate::support::confirmed_ok())
        .await
        .unwrap();
    assert_eq!(again, bound);
    assert_eq!(
        b.submit_confirmed(&from, "k1", &crate::support::confirmed_ok())
            .await,
        Err(SubmitError::Rejected(Rejection::Duplicate))
    );
    assert_eq!(
        b.submit_confirmed_again(&page(&c, "p2"), "k1", &crate::support::confirmed_ok())
            .await,
        Err(SubmitError::Rejected(Rejection::Mismatch))
    );
    // An event under a name is recorded once; another name is another event.
    let emit = |once: &'static str| {
        let (b, c) = (b.clone(), c.clone());
        async move {
            b.emit_once("t", EventType::PageManifest, &c, json!({"rev": 1}), once)
                .await
                .unwrap()
        }
    };
    let feed = b.retained("t", "0-0").await.unwrap();
    let before = feed.len();
    assert!(emit("frame-1").await.is_some());
    assert!(emit("frame-1").await.is_none(), "recorded twice");
    assert!(emit("frame-2").await.is_some());
    let feed = b.retained("t", "0-0").await.unwrap();
    assert_eq!(feed.len(), before + 2);
}
contract!(a_frame_submitted_again_is_applied_once_and_its_event_recorded_once);

/// Every change an agent must hear of records its events with it, once however many times it
/// is submitted: a manifest, a confirmation, a timeout, an async call's result, a page leaving.
async fn every_change_records_its_events_once(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    let start = b.events("t", None).await.unwrap();
    drop(start);
    connected_page(&b, &c, "p1").await;
    let m = Manifest {
        client_id: "p1".into(),
        rev: 2,
        tools: vec![],
    };
    b.put_manifest(&c, &m, "manifest-2").await.unwrap();
    b.put_manifest(&c, &m, "manifest-2").await.unwrap();
    let from = page(&c, "p1");
    let (confirmed, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    b.submit_result(&from, &confirmed, &needs("k1"))
        .await
        .unwrap();
    b.submit_confirmed(&from, "k1", &confirmed_ok())
        .await
        .unwrap();
    b.submit_confirmed_again(&from, "k1", &confirmed_ok())
        .await
        .unwrap();
    let (timed_out, _w) = call_as(&b, &c, "p1", Duration::from_secs(30), true).await;
    assert!(b.time_out(&c, &timed_out).await.unwrap().is_some());
    assert!(b.time_out(&c, &timed_out).await.unwrap().is_none());
    let (answered, _w) = call_as(&b, &c, "p1", Duration::from_secs(30), true).await;
    b.submit_result(&from, &answered, &ok()).await.unwrap();
    let (sync, _w) = call(&b, &c, "p1", Duration::from_secs(30)).await;
    b.submit_result(&from, &sync, &ok()).await.unwrap();
    assert!(
        b.release_page(
            &c,
            Some("p1"),
            &toolmark_broker::Release::new("left-1", true)
        )
        .await
        .unwrap()
        .page_gone
    );
    let events = b.retained("t", "0-0").await.unwrap();
    let kinds: Vec<(&str, String)> = events
        .iter()
        .map(|e| {
            let id = e.data.get("id").or_else(|| e.data.get("callId"));
            let id = id.and_then(|v| v.as_str()).unwrap_or_default().to_owned();
            (e.kind.as_str(), id)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("page.manifest", String::new()),
            ("page.manifest", String::new()),
            ("confirmation.resolved", confirmed.clone()),
            ("call.timeout", timed_out.clone()),
            ("call.result", timed_out.clone()),
            ("call.result", answered.clone()),
            ("page.disconnected", String::new()),
        ],
        "{events:#?}"
    );
    let resolved = &events[2].data;
    assert_eq!(resolved["tool"], "todo.add");
    assert_eq!(resolved["outcome"]["data"], "done");
    assert_eq!(events[5].data["outcome"]["status"], "ok");
    assert_eq!(events[6].data["clientId"], "p1");
    // Nothing is left for the sweep to emit again.
    b.sweep_deadlines().await.unwrap();
    assert_eq!(b.retained("t", "0-0").await.unwrap().len(), 7);
}
contract!(every_change_records_its_events_once);

/// The deadline sweep times out each call whose deadline (and the sweep's grace) passed, once,
/// and no call due later: a conversation's first call, a call due before the others of its
/// conversation, and a call after the sweep found the conversation with none left (on Redis,
/// each changes where the partition's conversations by deadline hold the conversation).
async fn the_sweep_times_out_each_call_past_its_deadline_once(backend: Backend) {
    let mut nodes = Nodes::new(backend, sweepable());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    connected_page(&b, &c, "p1").await;
    let (first, _w1) = call(&b, &c, "p1", Duration::from_millis(200)).await;
    swept(&b, &c, first).await;
    // The conversation has no call left; the next is due first again.
    let (kept, _w2) = call(&b, &c, "p1", Duration::from_secs(60)).await;
    let (sooner, _w3) = call(&b, &c, "p1", Duration::from_millis(200)).await;
    swept(&b, &c, sooner).await;
    let r = b
        .call("t", &kept)
        .await
        .unwrap()
        .expect("the call due later");
    assert_eq!(r.state, CallState::Pending);
    b.submit_result(&page(&c, "p1"), &kept, &ok())
        .await
        .unwrap();
    let (last, _w4) = call(&b, &c, "p1", Duration::from_millis(200)).await;
    swept(&b, &c, last).await;
}
contract!(the_sweep_times_out_each_call_past_its_deadline_once);

/// A call whose conversation ended before its deadline (its pages gone, the conversation's
/// retention passed) is still timed out by the sweep once its deadline passed: what keeps it
/// for the sweep outlives the conversation (on Redis, its calls by deadline have no expiry).
async fn a_call_outliving_its_conversation_is_still_swept(backend: Backend) {
    let retention = sweepable();
    let mut nodes = Nodes::new(backend, retention);
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    connected_page(&b, &c, "p1").await;
    let (id, _w) = call(&b, &c, "p1", Duration::from_secs(5)).await;
    // Its one socket goes.
    b.release_page(&c, Some("p1"), &crate::support::release())
        .await
        .unwrap();
    // The conversation's retention (1.5 s) passes, twice over, before the call's deadline (5 s).
    tokio::time::sleep(retention.conversations * 2).await;
    assert_eq!(b.conversation(&c).await.unwrap().sockets, 0);
    swept(&b, &c, id).await;
}
contract!(a_call_outliving_its_conversation_is_still_swept);

/// [`short`] retention, but for a finished call kept longer than the sweep's grace (as always
/// but in these tests), so that the sweep finds a call past its deadline.
fn sweepable() -> Retention {
    Retention {
        finished_calls: Duration::from_secs(30),
        ..short()
    }
}

/// Sweeps until the sweep times out call `id` of `c` (and nothing else), then checks that it
/// is timed out once.
async fn swept(b: &toolmark_broker::SharedBroker, c: &ConvKey, id: String) {
    eventually(
        Duration::from_secs(10),
        "the sweep times the call out",
        || {
            let b = b.clone();
            let id = id.clone();
            async move {
                let ids: Vec<String> = b
                    .sweep_deadlines()
                    .await
                    .ok()?
                    .into_iter()
                    .map(|r| r.binding.id)
                    .collect();
                assert!(ids.iter().all(|i| *i == id), "{ids:?} swept, not {id}");
                (ids == [id]).then_some(())
            }
        },
    )
    .await;
    assert!(b.sweep_deadlines().await.unwrap().is_empty(), "swept once");
    let r = b.call("t", &id).await.unwrap().expect("the call");
    assert_eq!(r.state, CallState::TimedOut);
    assert_eq!(
        b.submit_result(&page(c, "p1"), &id, &ok()).await,
        rejected(Rejection::Late)
    );
}

/// A page socket's release asked again under its name (the node did not hear whether the first
/// was applied) is applied once, answers the same, and announces its page's leaving once.
async fn a_release_asked_again_is_applied_once(backend: Backend) {
    use toolmark_broker::Release;
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = conv();
    connected_page(&b, &c, "p1").await;
    b.admit_page(&c, &LIMITS).await.unwrap();
    b.page_identified(&c, "p1").await.unwrap();
    let again = |r: &Release| Release {
        again: true,
        ..r.clone()
    };
    let first = Release::new("release-1", true);
    assert!(
        !b.release_page(&c, Some("p1"), &first)
            .await
            .unwrap()
            .page_gone
    );
    assert!(
        !b.release_page(&c, Some("p1"), &again(&first))
            .await
            .unwrap()
            .page_gone
    );
    assert_eq!(
        b.conversation(&c).await.unwrap().sockets,
        1,
        "released twice"
    );
    let last = Release::new("release-2", true);
    assert!(
        b.release_page(&c, Some("p1"), &last)
            .await
            .unwrap()
            .page_gone
    );
    assert!(
        b.release_page(&c, Some("p1"), &again(&last))
            .await
            .unwrap()
            .page_gone
    );
    let left = b.retained("t", "0-0").await.unwrap();
    let left: Vec<_> = left
        .iter()
        .filter(|e| e.kind == EventType::PageDisconnected)
        .collect();
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0].data["clientId"], "p1");
}
contract!(a_release_asked_again_is_applied_once);

// The catalog's contract (writes, notices, the audit log, a restore after a loss) runs on
// every store, the broker's among them, in `toolmark-store`'s suite (store/tests/catalog.rs).

/// The tool definitions a tenant's pages presented: each with its first and last time, every
/// node's writes in one list, and past the bound the definitions presented longest ago go.
async fn the_tool_definitions_seen_are_kept_within_their_bound(backend: Backend) {
    use toolmark_broker::seen::SEEN_KEPT;
    let mut nodes = Nodes::new(backend, short());
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    let def = |i: usize| (format!("tool.t{i}"), format!("sha256:{i:064x}"));
    assert_eq!(n1.saw_tools("shop", &[def(0), def(1)]).await.unwrap(), 0);
    std::thread::sleep(std::time::Duration::from_millis(5));
    n2.saw_tools("shop", &[def(1), def(2)]).await.unwrap();
    let seen = n1.tools_seen("shop").await.unwrap();
    let names: Vec<&str> = seen.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["tool.t0", "tool.t1", "tool.t2"]);
    assert!(
        seen[1].last_ms > seen[1].first_ms,
        "presented again later: {:?}",
        seen[1]
    );
    assert_eq!(seen[0].first_ms, seen[0].last_ms);
    assert!(n2.tools_seen("other").await.unwrap().is_empty());
    // Past the bound, the ones presented longest ago (t0 first) go.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let many: Vec<(String, String)> = (3..SEEN_KEPT + 2).map(def).collect();
    let dropped = n1.saw_tools("shop", &many).await.unwrap();
    assert_eq!(dropped, 2);
    let seen = n2.tools_seen("shop").await.unwrap();
    assert_eq!(seen.len(), SEEN_KEPT);
    assert!(!seen.iter().any(|s| s.name == "tool.t0"), "the oldest went");
    assert!(
        seen.iter().any(|s| s.name == "tool.t2"),
        "the one presented later stayed"
    );
}
contract!(the_tool_definitions_seen_are_kept_within_their_bound);
