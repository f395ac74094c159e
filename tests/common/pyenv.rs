//! A Python venv for tests that drive hubfs with stock Python clients (grpcio, the Prometheus
//! client's parser). Created on first use at `$HUBFS_OBS_VENV` (default
//! `~/.cache/hubfs/venv-obs`) from `obs-requirements.txt`, the way tests/conformance/run.sh
//! sets up its venv: reinstalled only when the requirements change, under a file lock so that
//! parallel tests install once.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

const REQUIREMENTS: &str = include_str!("obs-requirements.txt");

fn venv_dir() -> PathBuf {
    if let Some(v) = std::env::var_os("HUBFS_OBS_VENV") {
        return PathBuf::from(v);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/hubfs/venv-obs")
}

/// The venv's python, installing it first when needed. Panics with pip's output on failure.
pub fn python() -> PathBuf {
    let dir = venv_dir();
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` is dropped.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let py = dir.join("bin/python");
    let stamp = dir.join(".hubfs-obs-requirements");
    let want = crate::common::sha256_hex(REQUIREMENTS.as_bytes());
    let works = || {
        Command::new(&py)
            .args(["-c", "import sys"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if works() && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) {
        return py;
    }
    if !works() {
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "python3 -m venv (on Debian: apt-get install -y python3-venv): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let req = dir.join("requirements.txt");
    std::fs::write(&req, REQUIREMENTS).unwrap();
    let out = Command::new(&py)
        .args(["-m", "pip", "install", "--disable-pip-version-check", "-q", "-r"])
        .arg(&req)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pip install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&stamp, want).unwrap();
    py
}
