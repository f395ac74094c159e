//! The chunk store's error: a block that could not be loaded.

use std::sync::Arc;

/// Why a block load failed. `E` is the error of the fetch the caller handed in (the Hub's, for
/// VirtualFs), kept whole so the caller converts it back at its own boundary.
#[derive(Debug, thiserror::Error)]
pub enum ChunkStoreError<E> {
    /// The block's fetch failed. A block is loaded once however many callers wait for it, and
    /// each of them gets this one error.
    #[error("{0}")]
    Fetch(Arc<E>),
}
