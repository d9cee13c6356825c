//! A caller's policy as the broker applies it, on memory, Redis and Redis Cluster: a tool its
//! gate refuses is refused before anything is taken, bound or sent, against the manifest of
//! the page the call would go to; a caller's own rate is one bucket across nodes, within the
//! tenant's; and a call names its caller for as long as it is kept.

use std::time::Duration;

use serde_json::json;
use toolmark_broker::{
    CallerRate, CallerRef, ConvKey, Outcome, PlaceError, SharedBroker, ToolGate,
};
use toolmark_proto::{Manifest, ToolManifestSummary};

use crate::contract;
use crate::support::{Backend, LIMITS, Nodes, eventually, frame_name, ok, page, request, short};

/// A page `client` of `conv` on `b` whose manifest lists a read-only, a destructive and a
/// plain tool.
async fn page_with_hinted_tools(b: &SharedBroker, conv: &ConvKey, client: &str) {
    b.admit_page(conv, &LIMITS).await.unwrap();
    b.page_identified(conv, client).await.unwrap();
    let tool = |name: &str, hints: serde_json::Value| {
        ToolManifestSummary::from_value(json!({
            "name": name, "llmName": name.replace('.', "__"), "description": "d", "hints": hints,
        }))
        .unwrap()
    };
    let m = Manifest {
        client_id: client.into(),
        rev: 1,
        tools: vec![
            tool("todo.list", json!({"readOnly": true})),
            tool("todo.delete", json!({"destructive": true})),
            tool("todo.add", json!({})),
        ],
    };
    b.put_manifest(conv, &m, &frame_name()).await.unwrap();
}

/// A gate that lets through read-only tools only.
fn read_only() -> ToolGate {
    ToolGate::new(|_, facts| facts.read_only)
}

async fn a_refused_tool_takes_nothing_and_reaches_no_page(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, sink) = nodes.node("n1").await;
    // Tenant `g`: one call a second, a burst of two.
    let c = ConvKey::new("g", "u", "c");
    page_with_hinted_tools(&b, &c, "p1").await;
    for tool in ["todo.delete", "todo.add", "todo.missing"] {
        for _ in 0..3 {
            let mut req = request(&c, 1);
            req.tool = tool.into();
            req.gate = Some(read_only());
            let refused = b.place_call(req.clone()).await;
            assert!(
                matches!(refused, Err(PlaceError::NotAllowed)),
                "{tool}: {refused:?}"
            );
            assert!(
                b.call("g", &req.id).await.unwrap().is_none(),
                "nothing bound"
            );
        }
    }
    assert!(
        sink.frames().iter().all(|f| !f.contains("\"call\"")),
        "no page was sent a call: {:?}",
        sink.frames()
    );
    // Nine refusals took nothing of the tenant's burst of two.
    for _ in 0..2 {
        let mut req = request(&c, 1);
        req.tool = "todo.list".into();
        req.gate = Some(read_only());
        let placed = b.place_call(req).await.expect("a read-only tool is placed");
        assert_eq!(placed.binding.tool, "todo.list");
    }
    // The page's next manifest says todo.list destroys now: the same node, which last saw it
    // read-only, refuses it.
    let m = Manifest {
        client_id: "p1".into(),
        rev: 2,
        tools: vec![
            ToolManifestSummary::from_value(json!({
                "name": "todo.list", "llmName": "todo__list", "description": "d",
                "hints": {"destructive": true},
            }))
            .unwrap(),
        ],
    };
    b.put_manifest(&c, &m, &frame_name()).await.unwrap();
    let mut req = request(&c, 1000);
    req.tool = "todo.list".into();
    req.gate = Some(read_only());
    assert!(matches!(
        b.place_call(req).await,
        Err(PlaceError::NotAllowed)
    ));
}
contract!(a_refused_tool_takes_nothing_and_reaches_no_page);

async fn a_callers_rate_is_one_bucket_across_nodes_within_the_tenants(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (n1, _) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    let c = ConvKey::new("k", "u", "c");
    page_with_hinted_tools(&n1, &c, "p1").await;
    let as_key = |key: &str| {
        let mut req = request(&c, 1000);
        req.caller_rate = Some(CallerRate {
            bucket: key.into(),
            per_second: 1,
        });
        req
    };
    // Key `a` may place one call a second, a burst of two, whichever node it calls: of eight
    // calls through both nodes, no more pass than the two and what refilled meanwhile.
    let started = std::time::Instant::now();
    let mut placed = 0;
    for node in [&n1, &n2, &n1, &n2, &n1, &n2, &n1, &n2] {
        match node.place_call(as_key("k:a")).await {
            Ok(_) => placed += 1,
            Err(PlaceError::Limited(r)) => {
                assert!(r.retry_after <= Duration::from_secs(1), "{r:?}");
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let refilled = started.elapsed().as_secs();
    assert!(
        (2..=3 + refilled).contains(&placed),
        "{placed} placed; the key's bucket held 2 and refilled {refilled}"
    );
    // Another key of the same tenant has its own bucket, and the tenant's is far from spent.
    n2.place_call(as_key("k:b")).await.unwrap();
    n1.place_call(request(&c, 1000)).await.unwrap();
}
contract!(a_callers_rate_is_one_bucket_across_nodes_within_the_tenants);

async fn a_call_names_its_caller_while_pending_and_once_finished(backend: Backend) {
    let mut nodes = Nodes::new(backend, short());
    let (b, _) = nodes.node("n1").await;
    let c = ConvKey::new("n", "u", "c");
    page_with_hinted_tools(&b, &c, "p1").await;
    for caller in [
        CallerRef::ApiKey { id: "key-1".into() },
        CallerRef::McpToken {
            id: "jti-1".into(),
            api_key_id: "key-1".into(),
        },
        CallerRef::OAuth {
            sub: "alice".into(),
            client_id: Some("claude".into()),
        },
    ] {
        let mut req = request(&c, 1000);
        req.caller = Some(caller.clone());
        req.respond_async = true;
        let placed = b.place_call(req).await.unwrap();
        let id = placed.binding.id.clone();
        let pending = b.call("n", &id).await.unwrap().unwrap();
        assert_eq!(pending.binding.caller.as_ref(), Some(&caller));
        assert!(pending.binding.respond_async);
        b.submit_result(&page(&c, "p1"), &id, &ok()).await.unwrap();
        assert_eq!(placed.waiter.await.unwrap(), Outcome::Result(ok()));
        let done = b.call("n", &id).await.unwrap().unwrap();
        assert_eq!(done.binding.caller, Some(caller));
        assert!(
            done.binding.respond_async,
            "the caller leaves the flags as they were"
        );
    }
}
contract!(a_call_names_its_caller_while_pending_and_once_finished);

/// A request of `tool` named by `llm` (the hosted MCP endpoint's tool names), with the
/// tenant's rate `per_second`.
fn by_llm_name(c: &ConvKey, llm: &str, per_second: u32) -> toolmark_broker::CallRequest {
    let mut req = request(c, per_second);
    req.tool = llm.into();
    req.llm_name = Some(llm.into());
    req
}

async fn a_tool_named_by_its_llm_name_is_named_by_the_manifest_of_the_page_it_is_bound_to(
    backend: Backend,
) {
    let mut nodes = Nodes::new(backend, short());
    let (n1, sink) = nodes.node("n1").await;
    let (n2, _) = nodes.node("n2").await;
    // Tenant `l`: one call a second, a burst of two.
    let c = ConvKey::new("l", "u", "c");
    page_with_hinted_tools(&n1, &c, "p1").await;
    // A name the manifest does not list takes nothing and reaches no page.
    for _ in 0..3 {
        let req = by_llm_name(&c, "todo__missing", 1);
        let refused = n2.place_call(req.clone()).await;
        assert!(
            matches!(refused, Err(PlaceError::UnknownTool)),
            "{refused:?}"
        );
        assert!(n2.call("l", &req.id).await.unwrap().is_none());
    }
    // The burst of two is whole: the manifest's names are bound and sent.
    let placed = n2
        .place_call(by_llm_name(&c, "todo__add", 1))
        .await
        .expect("a listed tool is placed");
    assert_eq!(placed.binding.tool, "todo.add");
    let id = placed.binding.id.clone();
    let sent = eventually(Duration::from_secs(10), "the call frame", || {
        let found = sink.frames().into_iter().find(|f| f.contains(&id));
        async move { found }
    })
    .await;
    assert!(sent.contains(r#""tool":"todo.add""#), "{sent}");
    // The policy is asked of the tool's name, not of the LLM name.
    let mut req = by_llm_name(&c, "todo__list", 1);
    req.gate = Some(ToolGate::new(|tool, facts| {
        assert_eq!(tool, "todo.list", "the gate hears the manifest's name");
        facts.read_only
    }));
    let placed = n2
        .place_call(req)
        .await
        .expect("read-only, and the burst's second");
    assert_eq!(placed.binding.tool, "todo.list");
    let mut req = by_llm_name(&c, "todo__delete", 1000);
    req.gate = Some(read_only());
    assert!(matches!(
        n2.place_call(req).await,
        Err(PlaceError::NotAllowed)
    ));
    // In another tenant's conversation, node 2 reads the page's manifest; the page reloads on
    // node 1 with other tools; node 2 names a new tool from the new manifest and refuses one
    // that is gone.
    let c = ConvKey::new("m", "u", "c");
    page_with_hinted_tools(&n1, &c, "p1").await;
    n2.place_call(by_llm_name(&c, "todo__add", 1000))
        .await
        .expect("node 2 reads the first manifest");
    let m = Manifest {
        client_id: "p2".into(),
        rev: 1,
        tools: vec![
            ToolManifestSummary::from_value(json!({
                "name": "todo.archive", "llmName": "archive_todo", "description": "d", "hints": {},
            }))
            .unwrap(),
        ],
    };
    n1.page_identified(&c, "p2").await.unwrap();
    n1.put_manifest(&c, &m, &frame_name()).await.unwrap();
    let placed = n2
        .place_call(by_llm_name(&c, "archive_todo", 1000))
        .await
        .expect("a tool of the new manifest");
    assert_eq!(placed.binding.tool, "todo.archive");
    assert_eq!(placed.binding.client_id, "p2");
    assert!(matches!(
        n2.place_call(by_llm_name(&c, "todo__add", 1000)).await,
        Err(PlaceError::UnknownTool)
    ));
    // No page: nothing to name it against; the placement says so.
    let none = ConvKey::new("m", "u", "empty");
    assert!(matches!(
        n2.place_call(by_llm_name(&none, "todo__add", 1000)).await,
        Err(PlaceError::NoPage)
    ));
}
contract!(a_tool_named_by_its_llm_name_is_named_by_the_manifest_of_the_page_it_is_bound_to);
