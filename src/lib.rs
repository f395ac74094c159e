//! hubfs: mount Hugging Face Hub repositories as local directories, with an offline local Hub.
//!
//! Layers, bottom to top (docs/ARCHITECTURE.md; `tests/layers.rs` checks that a module imports
//! only modules of lower layers):

// A block the compiler cannot check states the invariant it relies on in a `// SAFETY:` comment;
// the few there are, and why each remains, are listed in docs/ARCHITECTURE.md.
#![deny(clippy::undocumented_unsafe_blocks)]

/// Bottom: the process's Prometheus metrics, which every layer records into; imports util only.
pub mod metrics;
/// Bottom: sizes, durations, URL encoding, deterministic test bytes; imports no hubfs module.
pub mod util;

/// The Hub's HTTP, LFS and Xet client; imports util.
pub mod hub_client;
/// The offline Hub, reached only over HTTP; imports util and nothing of the client side.
pub mod local_hub;

/// Core: the content-addressed chunk store (memory and disk tiers, buffer pool).
pub mod chunk_store;
/// Core, above the chunk store and the write layer: VirtualFs, the POSIX semantics both
/// frontends share.
pub mod vfs;
/// Core: what a writable mount keeps on local disk (staging, metadata journal, uploads).
pub mod write;

/// Frontend: the FUSE adapter (and the FUSE ceiling for benchmarks).
pub mod fuse;
/// Frontend: the NFSv3 server.
pub mod nfs;

/// Process plumbing: daemon, logging, mount registry, mountinfo, signals, control socket, session.
pub mod process;

/// Top: one module per subcommand of the `hubfs` binary.
pub mod commands;
/// Top: the Kubernetes CSI node plugin (`hubfs csi-node`, `hubfs csi-serve`).
pub mod csi;
