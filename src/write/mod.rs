//! The write side of a writable mount: staged files on local disk, the overlay of local namespace
//! changes, and the uploader that turns staged files into commit operations. The committer that
//! drives them lives in `vfs::commit`, beside the core state it updates.

pub mod compression;
pub mod instance;
pub mod layer;
pub mod layer_log;
pub mod lazy;
pub mod metadata;
pub mod overlay;
pub mod staging;
pub mod upload;
