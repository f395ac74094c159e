//! The bottom layer: small value types and parsers that any module may use (sizes, durations, URL
//! encoding, deterministic test bytes), and the two raw Linux calls no safe crate wraps. Nothing here
//! imports another hubfs module.

pub mod hub_bucket;
pub mod linux;
pub mod pattern;
pub mod units;
pub mod urlenc;
