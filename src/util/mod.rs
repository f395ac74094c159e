//! The bottom layer: small value types and parsers that any module may use (sizes, durations, URL
//! encoding, deterministic test bytes), and the two raw Linux calls no safe crate wraps. Nothing here
//! imports another hubfs module.

pub mod hub_bucket;
pub mod linux;
pub mod pattern;
pub mod units;
pub mod urlenc;

/// A full 40-hex commit id: what a revision resolves to, and immutable content (safe to cache
/// and share by). A branch or tag name never has this shape on the Hub.
pub fn is_commit_id(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}
