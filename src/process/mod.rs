//! Process plumbing below the commands: daemonizing, child processes, logging, the registry of
//! running mounts, `/proc/self/mountinfo`, the runtime and signals, a writable mount's control
//! socket, the session that opens a repo and serves it over FUSE, and the exit status a failure
//! means. Imports the frontends, the core, the Hub client and util; never a command.

pub mod allocator;
pub mod child;
pub mod control;
pub mod daemon;
pub mod exit;
pub mod logging;
pub mod metrics;
pub mod mountinfo;
pub mod registry;
pub mod session;
pub mod signals;
