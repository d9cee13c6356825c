//! What a node keeps in memory besides its connections, as parts that each own their state and
//! its lock and say what they do with it: the live nodes ([`Liveness`]), the requests waiting
//! for outcomes ([`Waiters`]), the pages this node holds ([`HeldPages`]), what it last read of
//! each conversation's page ([`Expectations`]), the partitions of calls it found by id
//! ([`Located`]), the event feeds of live readers ([`Feeds`]) and the probes of its
//! subscriptions ([`Probes`]). A tenant's reserve of call tokens is
//! [`crate::rate::Reserves`]. No part does I/O; `RedisBroker` composes them.

mod expected;
mod feeds;
mod held;
mod liveness;
mod located;
mod probes;
mod waiters;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub(super) use expected::{Expectations, Expected};
pub(super) use feeds::Feeds;
pub(super) use held::{HeldPages, HeldSnapshot};
pub(super) use liveness::Liveness;
pub(super) use located::Located;
pub(super) use probes::{Probed, Probes};
pub(super) use waiters::Waiters;

/// The value behind `m`, even if a holder panicked (every part stays consistent at each step).
pub(in crate::redis) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
