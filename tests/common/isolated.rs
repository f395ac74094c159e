//! The `hubfs` binary run as a user runs it, with a home, cache dir and mount registry of its own
//! under a temporary directory, pointed at one Hub: the tests that drive the binary start here.

use std::path::PathBuf;
use std::process::Command;

pub struct Isolated {
    /// The Hub endpoint (`HF_ENDPOINT`); a test may point it at another Hub between runs.
    pub ep: String,
    root: tempfile::TempDir,
}

impl Isolated {
    pub fn new(ep: &str) -> Isolated {
        Isolated {
            ep: ep.to_string(),
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// A path under the private root.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
    }

    /// The default cache dir of every run (`XDG_CACHE_HOME/hubfs`).
    pub fn cache_dir(&self) -> PathBuf {
        self.path("xdg-cache/hubfs")
    }

    /// `hubfs` with the private `HF_HOME`, `XDG_CACHE_HOME` and registry, and `token` as
    /// `HF_TOKEN` (`None`: no token, not even one from the test's own environment).
    pub fn command(&self, token: Option<&str>) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hubfs"));
        c.env("HF_ENDPOINT", &self.ep)
            .env("HF_HOME", self.path("hf-home"))
            .env("XDG_CACHE_HOME", self.path("xdg-cache"))
            .env("HUBFS_RUNTIME_DIR", self.path("run"))
            .env_remove("HF_TOKEN")
            .env_remove("HF_TOKEN_PATH")
            .env_remove("RUST_LOG");
        if let Some(t) = token {
            c.env("HF_TOKEN", t);
        }
        c
    }
}
