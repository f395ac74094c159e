//! Logging setup: `tracing` to stderr, filtered by RUST_LOG (default `info` for hubfs, `warn` for
//! dependencies). Token values are never passed to a log macro anywhere in hubfs.

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,hubfs=info,xet_client=error,xet_data=error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
