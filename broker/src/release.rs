//! Which releases may serve one deployment together (`docs/releases.md`, "The compatibility
//! rule"): every node announces its release and the oldest it runs beside at each heartbeat,
//! and a node starting beside a live node it cannot work with (or that cannot work with it)
//! refuses to start, naming both releases, rather than serve wrongly.

/// This release: the workspace's version.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// The oldest release this one serves beside on one Redis, both ways: the previous release,
/// and the build of 928ba32 (0.3.0) that the fourth wave started from.
pub const RUNS_BESIDE: &str = "0.3.0";

/// What a live node that announces no release is taken for: releases up to 0.4.0 did not
/// announce one.
pub const UNANNOUNCED: &str = "0.4.0";

/// This node's announcement: `<release> <oldest it runs beside>`.
pub fn announcement() -> String {
    format!("{RELEASE} {RUNS_BESIDE}")
}

/// A live node as the broker knows it: its id and its announcement (`None`: a release that
/// announces none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The node's id.
    pub node: String,
    /// Its announcement ([`announcement`]), when it made one.
    pub announced: Option<String>,
}

/// Why this release may not start beside a live node: `None` when it may beside all of
/// `peers`. A node of a release older than [`RUNS_BESIDE`], or one whose own oldest is newer
/// than this release, is refused; an announcement that does not parse is taken for
/// [`UNANNOUNCED`].
pub fn refusal(peers: &[Peer]) -> Option<String> {
    refusal_of(RELEASE, RUNS_BESIDE, peers)
}

fn refusal_of(release: &str, runs_beside: &str, peers: &[Peer]) -> Option<String> {
    let ours = parse(release)?;
    let oldest = parse(runs_beside)?;
    for p in peers {
        // `(release, its number, oldest it serves beside, its number)` as announced.
        let announced = p.announced.as_deref().and_then(|a| {
            let (v, o) = a.split_once(' ')?;
            Some((v, parse(v)?, o, parse(o)?))
        });
        let (name, version) = match announced {
            Some((v, pv, _, _)) => (v.to_owned(), pv),
            None => (format!("at most {UNANNOUNCED}"), parse(UNANNOUNCED)?),
        };
        if version < oldest {
            return Some(format!(
                "this node runs release {release}, which serves beside releases from {runs_beside} on; node {} runs {name}: finish rolling to a release this one serves beside first (docs/releases.md)",
                p.node
            ));
        }
        if let Some((_, _, their_oldest, po)) = announced
            && ours < po
        {
            return Some(format!(
                "node {} runs release {name}, which serves beside releases from {their_oldest} on; this node runs {release}: roll back one release at a time (docs/releases.md)",
                p.node
            ));
        }
    }
    None
}

/// `MAJOR.MINOR.PATCH` (a pre-release or build suffix ignored) as a comparable triple.
fn parse(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(str::parse::<u64>);
    let t = (
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    );
    parts.next().is_none().then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(node: &str, announced: Option<&str>) -> Peer {
        Peer {
            node: node.into(),
            announced: announced.map(Into::into),
        }
    }

    #[test]
    fn a_node_starts_beside_the_releases_it_serves_with_and_refuses_the_others() {
        // Beside itself, the previous release, and one that announces nothing (0.4.0 or older).
        let fine = [
            peer("a", Some("0.5.0 0.3.0")),
            peer("b", Some("0.4.1 0.3.0")),
            peer("c", None),
        ];
        assert_eq!(refusal_of("0.5.0", "0.3.0", &fine), None);
        // A node of a release older than the oldest this one serves beside.
        let old = refusal_of("0.7.0", "0.6.0", &[peer("old-1", Some("0.5.0 0.3.0"))]).unwrap();
        assert!(
            old.contains("0.7.0") && old.contains("old-1 runs 0.5.0"),
            "{old}"
        );
        // One that announces nothing, when this release no longer serves beside 0.4.0.
        let silent = refusal_of("0.7.0", "0.5.0", &[peer("old-2", None)]).unwrap();
        assert!(silent.contains("at most 0.4.0"), "{silent}");
        // A newer node that no longer serves beside this release (a rollback too far).
        let newer = refusal_of("0.5.0", "0.3.0", &[peer("new-1", Some("0.9.0 0.8.0"))]).unwrap();
        assert!(
            newer.contains("new-1 runs release 0.9.0")
                && newer.contains("0.8.0")
                && newer.contains("0.5.0"),
            "{newer}"
        );
        // An announcement that does not parse is taken for one of a silent release.
        assert_eq!(
            refusal_of("0.5.0", "0.3.0", &[peer("odd", Some("garbage"))]),
            None
        );
        // Pre-release suffixes compare by their release.
        assert_eq!(
            refusal_of("0.5.0-rc.1", "0.3.0", &[peer("a", Some("0.4.0 0.3.0"))]),
            None
        );
    }
}
