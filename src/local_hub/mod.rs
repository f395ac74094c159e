//! The local Hub: an offline Hugging Face Hub (HTTP API, LFS and Xet) in the hubfs binary.
//!
//! It speaks only HTTP; nothing in the filesystem layers imports it. Tests, benchmarks and
//! `hubfs demo` start it and point hubfs (or any stock client) at its endpoint. See
//! docs/LOCAL_HUB.md for what it supports and how it differs from the real Hub.

mod api_read;
mod api_write;
pub mod auth;
mod bucket_api;
mod bucket_batch;
pub mod bucket_store;
mod discussions;
pub mod error;
pub mod faults;
mod http_util;
mod lfs;
pub mod limits;
pub mod model;
pub mod names;
mod resolve;
mod routes;
pub mod seed;
mod server;
mod state;
pub mod store;
pub mod windows;
mod xet;
mod xet_batch;

pub use auth::{DEFAULT_READ_TOKEN, DEFAULT_WRITE_TOKEN, Role, TokenSpec};
pub use faults::{ClassStatsSnapshot, FaultSettings, RouteClass};
pub use limits::{CommitLimit, RepoCommitStats};
pub use server::{LocalHub, LocalHubConfig};
pub use windows::{RequestWindows, Tier};
