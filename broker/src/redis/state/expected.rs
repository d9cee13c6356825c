//! The expectation cache: per conversation, the page this node last found current, with its
//! manifest's `seq`, which `place.lua` checks, so that a call to a conversation whose page did
//! not change is one round trip.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::lock;
use crate::{CallTarget, ConvKey};

/// At most this many conversations' expectations are kept per node (then they start over).
const EXPECTED_MAX: usize = 65_536;

/// The page a node last found current in a conversation, with its manifest's `seq`.
#[derive(Debug, Clone)]
pub(in crate::redis) struct Expected {
    /// The page a call goes to (`None`: none).
    pub(in crate::redis) target: Option<CallTarget>,
    /// Its manifest's `seq`, '' without a page.
    pub(in crate::redis) seq: String,
    /// The `(llmName, name)` of each tool of its manifest
    /// ([`crate::CallRequest::resolve`]).
    pub(in crate::redis) llm_names: Vec<(String, String)>,
}

impl Expected {
    /// What a request named by an LLM name is resolved against: the page's tools, if any page.
    pub(in crate::redis) fn tools(&self) -> Option<impl Iterator<Item = (&str, &str)>> {
        self.target.as_ref().map(|_| {
            self.llm_names
                .iter()
                .map(|(llm, name)| (llm.as_str(), name.as_str()))
        })
    }
}

/// What this node last read of each conversation's current page.
#[derive(Debug, Default)]
pub(in crate::redis) struct Expectations {
    by_conv: Mutex<HashMap<ConvKey, Arc<Expected>>>,
}

impl Expectations {
    /// What this node last read of `conv`, if it still has it.
    pub(in crate::redis) fn get(&self, conv: &ConvKey) -> Option<Arc<Expected>> {
        lock(&self.by_conv).get(conv).cloned()
    }

    /// Remembers what this node read of `conv`.
    pub(in crate::redis) fn remember(&self, conv: &ConvKey, e: Expected) -> Arc<Expected> {
        let e = Arc::new(e);
        let mut cache = lock(&self.by_conv);
        if cache.len() >= EXPECTED_MAX {
            cache.clear();
        }
        cache.insert(conv.clone(), Arc::clone(&e));
        e
    }

    /// Forgets everything (Redis may have lost its data).
    pub(in crate::redis) fn clear(&self) {
        lock(&self.by_conv).clear();
    }
}
