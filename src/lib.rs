//! hubfs: mount Hugging Face Hub repositories as local directories, with an offline local Hub.
//!
//! Layers (see docs/ARCHITECTURE.md): `local_hub` is a self-contained Hub emulator reached only
//! over HTTP; `cli` is the command-line front.

pub mod buffer_pool;
pub mod ceiling;
pub mod chunk_store;
pub mod cli;
pub mod control;
pub mod csi;
pub mod daemon;
pub mod demo;
pub mod fuse;
pub mod hub_client;
pub mod local_hub;
pub mod logging;
pub mod mount;
pub mod mount_process;
pub mod mountinfo;
pub mod nfs;
pub mod registry;
pub mod status;
pub mod unmount;
pub mod urlenc;
pub mod vfs;
pub mod write;
