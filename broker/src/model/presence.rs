//! Presence and routing: which sockets of a conversation may be which page load
//! ([`Present`]), the page new calls go to ([`current_page`]) and whether one takes them
//! ([`accepts_calls`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::RECONNECT_GRACE;

/// The open sockets of one conversation on live nodes, as a broker keeps them: the rules of
/// routing ([`current_page`]) and of confirmation expiry ([`super::sweep_confirm`]) read them through
/// this, so a broker asks them of its own records without copying them ([`Presence`] is the
/// plain form).
pub trait Present {
    /// Sockets whose first frame named their clientId, with their count, per clientId.
    fn identified(&self) -> impl Iterator<Item = (&str, u32)>;

    /// Sockets that have not spoken yet (a reconnected page is silent until it has something to
    /// say) and Laravel Echo subscriptions (which never name a clientId).
    fn unidentified(&self) -> u32;

    /// Every open socket.
    fn sockets(&self) -> u32 {
        self.identified().map(|(_, n)| n).sum::<u32>() + self.unidentified()
    }

    /// Whether page load `client_id` may be behind one of the open sockets: one of them named
    /// it, or one has not named anything yet. The same rule serves routing and confirmation
    /// expiry.
    fn possibly(&self, client_id: &str) -> bool {
        self.unidentified() > 0 || self.identified().any(|(id, n)| id == client_id && n > 0)
    }
}

/// The open sockets of one conversation on live nodes, as plain data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Presence {
    /// Sockets whose first frame named their clientId, per clientId.
    pub identified: BTreeMap<String, u32>,
    /// Sockets that have not spoken yet and Laravel Echo subscriptions.
    pub unidentified: u32,
}

impl Present for Presence {
    fn identified(&self) -> impl Iterator<Item = (&str, u32)> {
        self.identified.iter().map(|(id, n)| (id.as_str(), *n))
    }

    fn unidentified(&self) -> u32 {
        self.unidentified
    }
}

/// D23: the page new calls go to. It is the page that sent the latest manifest (`current`)
/// while it may still be connected ([`Present::possibly`]); when it is certainly gone, the
/// connected page whose manifest arrived last (`manifest_seq` gives that order); when none has
/// one, still `current` (the agent learns from `pages` that nobody is there).
pub fn current_page<'a>(
    current: Option<&'a str>,
    presence: &'a impl Present,
    manifest_seq: impl Fn(&str) -> Option<u64>,
) -> Option<&'a str> {
    let current = current?;
    if presence.possibly(current) {
        return Some(current);
    }
    presence
        .identified()
        .filter(|(_, n)| *n > 0)
        .filter_map(|(id, _)| manifest_seq(id).map(|seq| (seq, id)))
        .max()
        .map_or(Some(current), |(_, id)| Some(id))
}

/// Whether an agent call to a conversation is accepted, given what [`current_page`] chose,
/// the open sockets and how long ago a draining node closed its pages.
pub fn accepts_calls(
    current: Option<&str>,
    sockets: u32,
    reconnecting_for: Option<Duration>,
) -> bool {
    current.is_some() && (sockets > 0 || reconnecting_for.is_some_and(|d| d < RECONNECT_GRACE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presence(identified: &[(&str, u32)], unidentified: u32) -> Presence {
        Presence {
            identified: identified
                .iter()
                .map(|(c, n)| ((*c).to_owned(), *n))
                .collect(),
            unidentified,
        }
    }

    #[test]
    fn the_current_page_stays_while_it_may_be_present() {
        let seq = |c: &str| match c {
            "a" => Some(1),
            "b" => Some(2),
            _ => None,
        };
        // b sent the latest manifest and is connected.
        let p = presence(&[("a", 1), ("b", 1)], 0);
        assert_eq!(current_page(Some("b"), &p, seq), Some("b"));
        // b left: a, the latest connected page with a manifest.
        let p = presence(&[("a", 1)], 0);
        assert_eq!(current_page(Some("b"), &p, seq), Some("a"));
        // A silent socket may be b coming back: b stays.
        let p = presence(&[("a", 1)], 1);
        assert_eq!(current_page(Some("b"), &p, seq), Some("b"));
        // Nobody with a manifest: still b (the agent sees no pages).
        let p = presence(&[("z", 1)], 0);
        assert_eq!(current_page(Some("b"), &p, seq), Some("b"));
        assert_eq!(current_page(None, &p, seq), None);
    }

    #[test]
    fn calls_are_accepted_while_a_socket_is_open_or_a_drained_page_is_expected_back() {
        assert!(accepts_calls(Some("a"), 1, None));
        assert!(!accepts_calls(None, 1, None));
        assert!(!accepts_calls(Some("a"), 0, None));
        assert!(accepts_calls(Some("a"), 0, Some(Duration::from_secs(9))));
        assert!(!accepts_calls(Some("a"), 0, Some(RECONNECT_GRACE)));
    }

    #[test]
    fn a_silent_socket_may_be_any_page_and_another_pages_socket_is_not() {
        // A silent socket may be the page; a socket of another page is not.
        assert!(presence(&[], 1).possibly("p1"));
        assert!(!presence(&[("p2", 1)], 0).possibly("p1"));
        assert!(presence(&[("p1", 1)], 0).possibly("p1"));
    }
}
