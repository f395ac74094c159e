//! `hubfs mount` as a person runs it: the binary, its exit codes and the one-line errors.

use std::process::{Command, Output};
use std::time::Duration;

use hubfs::local_hub::LocalHub;

fn hubfs(args: &[&str], endpoint: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hubfs"))
        .args(args)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_TOKEN", "hf_local_write")
        .env("HF_HOME", std::env::temp_dir().join("hubfs-cli-test-home"))
        .env("XDG_CACHE_HOME", std::env::temp_dir().join("hubfs-cli-test-cache"))
        .output()
        .expect("run hubfs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn mount_errors_daemon_and_unmount() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
    let ep = hub.endpoint().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let mnt_s = mnt.to_str().unwrap();

    // The mountpoint must exist.
    let o = hubfs(&["mount", "demo/tiny-model", mnt_s], &ep);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    std::fs::create_dir(&mnt).unwrap();

    // Unknown repo, bad revision, bad repo spec, unusable cache dir: one clear line each, non-zero exit.
    let not_a_dir = dir.path().join("plain-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let not_a_dir = not_a_dir.to_str().unwrap();
    for (args, want) in [
        (
            vec!["mount", "demo/tiny-model", mnt_s, "--cache-dir", not_a_dir],
            "cache dir",
        ),
        (vec!["mount", "demo/nope", mnt_s], "not found"),
        (vec!["mount", "demo/tiny-model", mnt_s, "--revision", "v9"], "revision"),
        (vec!["mount", "not a repo", mnt_s], "repo"),
        (
            vec!["mount", "demo/tiny-model", mnt_s, "--memory-cache-size", "lots"],
            "size",
        ),
    ] {
        let o = hubfs(&args, &ep);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).to_lowercase().contains(want), "{args:?}: {}", stderr(&o));
    }

    // --daemon returns once the mount is usable and leaves it running.
    let o = hubfs(&["mount", "--daemon", "demo/tiny-model", mnt_s], &ep);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("mounted demo/tiny-model@"));
    let cfg = std::fs::read_to_string(mnt.join("config.json")).unwrap();
    assert!(cfg.contains("tiny-demo"));

    // A second mount on the same directory is refused as busy.
    let o = hubfs(&["mount", "demo/tiny-model", mnt_s], &ep);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("busy"), "{}", stderr(&o));

    let o = hubfs(&["unmount", mnt_s], &ep);
    assert!(o.status.success(), "{}", stderr(&o));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!mnt.join("config.json").exists(), "still mounted after unmount");
    rt.block_on(hub.stop());
}
