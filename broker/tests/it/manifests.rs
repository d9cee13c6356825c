//! What a conversation keeps of its gone page loads, on memory, Redis and Redis Cluster: a page
//! that reloads leaves its manifest behind for a reconnect only for the grace
//! (`Retention::gone_manifests`), and at most `GONE_MANIFESTS_KEPT` of them at once, so that a
//! page reloading fast cannot fill the broker; the current page's manifest stays.

use std::time::{Duration, Instant};

use toolmark_broker::{ConvKey, SharedBroker, model::GONE_MANIFESTS_KEPT};

use crate::contract;
use crate::support::{Backend, Nodes, connected_page, release, short};

/// The revision the conversation shows for page load `client` once it is back (identified
/// again without sending its manifest, as a reconnecting page does): `None` when its manifest
/// is gone.
async fn rev_when_back(b: &SharedBroker, c: &ConvKey, client: &str) -> Option<u64> {
    b.page_identified(c, client).await.unwrap();
    let state = b.conversation(c).await.unwrap();
    state
        .pages
        .iter()
        .find(|p| p.client_id == client)
        .unwrap_or_else(|| panic!("{client} is back: {state:?}"))
        .rev
}

async fn a_reloading_page_leaves_a_bounded_number_of_manifests_for_the_grace(backend: Backend) {
    let retention = short();
    let mut nodes = Nodes::new(backend, retention);
    let (b, _) = nodes.node("n1").await;
    let c = ConvKey::new("t", "u", "reloads");
    // Twelve page loads one after the other: each connects and sends its manifest, then the
    // one before it leaves.
    let reloads = GONE_MANIFESTS_KEPT + 4;
    let mut last_left = Instant::now();
    for i in 0..reloads {
        connected_page(&b, &c, &format!("p{i}")).await;
        if i > 0 {
            b.release_page(&c, Some(&format!("p{}", i - 1)), &release())
                .await
                .unwrap();
            last_left = Instant::now();
        }
    }
    let state = b.conversation(&c).await.unwrap();
    let current = format!("p{}", reloads - 1);
    assert_eq!(state.client_id.as_deref(), Some(current.as_str()));
    // Eleven gone: the latest eight to leave keep their manifests, the first three do not.
    assert_eq!(
        rev_when_back(&b, &c, "p0").await,
        None,
        "p0 kept its manifest"
    );
    assert_eq!(
        rev_when_back(&b, &c, "p2").await,
        None,
        "p2 kept its manifest"
    );
    assert_eq!(
        rev_when_back(&b, &c, &format!("p{}", reloads - 2)).await,
        Some(1),
        "the last page to leave keeps its manifest within the grace"
    );
    assert_eq!(
        rev_when_back(&b, &c, "p3").await,
        Some(1),
        "p3 is within the bound"
    );
    // Past the grace, a page still gone (p4 left before `last_left`) has no manifest left;
    // the current page keeps its own.
    let past = last_left + retention.gone_manifests + Duration::from_millis(300);
    tokio::time::sleep_until(past.into()).await;
    b.sweep_deadlines().await.unwrap();
    assert_eq!(
        rev_when_back(&b, &c, "p4").await,
        None,
        "p4's manifest outlived the grace"
    );
    let state = b.conversation(&c).await.unwrap();
    assert_eq!(state.client_id.as_deref(), Some(current.as_str()));
    assert_eq!(state.rev, Some(1), "the current page's manifest stays");
}
contract!(a_reloading_page_leaves_a_bounded_number_of_manifests_for_the_grace);

async fn a_current_page_that_left_keeps_its_manifest_until_another_takes_over(backend: Backend) {
    let retention = short();
    let mut nodes = Nodes::new(backend, retention);
    let (b, _) = nodes.node("n1").await;
    let c = ConvKey::new("t", "u", "taken-over");
    connected_page(&b, &c, "a").await;
    b.release_page(&c, Some("a"), &release()).await.unwrap();
    // Gone, but still current: past the grace it keeps its manifest for its reconnect.
    let past = Instant::now() + retention.gone_manifests + Duration::from_millis(300);
    tokio::time::sleep_until(past.into()).await;
    b.sweep_deadlines().await.unwrap();
    assert_eq!(b.conversation(&c).await.unwrap().rev, Some(1));
    // Another page takes over: now `a` has the grace, and no more.
    connected_page(&b, &c, "b").await;
    let past = Instant::now() + retention.gone_manifests + Duration::from_millis(300);
    tokio::time::sleep_until(past.into()).await;
    b.sweep_deadlines().await.unwrap();
    assert_eq!(rev_when_back(&b, &c, "a").await, None);
}
contract!(a_current_page_that_left_keeps_its_manifest_until_another_takes_over);
