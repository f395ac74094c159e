//! hubfs: mount Hugging Face Hub repositories as local directories, with an offline local Hub.
//!
//! Layers (see docs/ARCHITECTURE.md): `local_hub` is a self-contained Hub emulator reached only
//! over HTTP; `cli` is the command-line front.

pub mod cli;
pub mod local_hub;
pub mod logging;
