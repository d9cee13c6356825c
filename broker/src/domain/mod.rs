//! The broker's domains, one trait each: what every implementation keeps and how it answers.

pub mod calls;
pub mod confirmations;
pub mod dead_letters;
pub mod events;
pub mod idempotency;
pub mod limits;
pub mod pages;
pub mod records;
