//! `hubfs doctor` run as users run it: the built binary, as its own process, against a local Hub
//! started with `hubfs local-hub --seed-demo`. Each test checks what the user sees (the lines,
//! their fixes, the exit status) for one situation a newcomer meets: a healthy machine, no
//! /dev/fuse (a real one: `/dev` replaced by an empty tmpfs in a private mount namespace), a token
//! the Hub refuses, a repo that does not exist, a read token asked to write, an endpoint that
//! refuses connections or never answers.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{READ, WRITE, spawn_cli};

/// Every check `hubfs doctor REPO --write` prints, in order.
const ALL: [&str; 11] = [
    "fuse-device",
    "fusermount3",
    "allow-other",
    "passthrough",
    "nfs-client",
    "endpoint",
    "token",
    "repo",
    "write-access",
    "cache-disk",
    "memory",
];

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    /// The line of check `name` (`STATUS  NAME  detail`) and its `fix:` line, if any.
    fn line(&self, name: &str) -> (String, Option<String>) {
        let lines: Vec<&str> = self.stdout.lines().collect();
        let i = lines
            .iter()
            .position(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{}", self.stdout));
        let fix = lines
            .get(i + 1)
            .and_then(|l| l.trim_start().strip_prefix("fix: "))
            .map(str::to_string);
        (lines[i].to_string(), fix)
    }

    fn status(&self, name: &str) -> String {
        self.line(name)
            .0
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    fn both(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd` (the environment cleared of Hub settings but for `env`) within 60 s.
async fn run_with(mut cmd: tokio::process::Command, home: &Path, env: &[(&str, &str)]) -> Run {
    for k in ["HF_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT", "XDG_CACHE_HOME"] {
        cmd.env_remove(k);
    }
    // No token file from the machine's own HF_HOME.
    cmd.env("HF_HOME", home.join("hf-home"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("doctor did not finish within 60 s")
        .expect("running hubfs doctor");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

/// `hubfs doctor ARGS…` with its cache dir under `home`.
async fn doctor(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_hubfs"));
    cmd.arg("doctor").args(args).arg("--cache-dir").arg(home.join("cache"));
    run_with(cmd, home, env).await
}

async fn hub(dir: &Path) -> common::CliHub {
    spawn_cli(&dir.join("hub"), &["--seed-demo"], &[], None).await
}

#[tokio::test]
async fn a_healthy_machine_passes_every_check_and_names_the_user() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path()).await;
    let ep = hub.endpoint.as_str();
    let r = doctor(
        tmp.path(),
        &["demo/tiny-model", "--write"],
        &[("HF_ENDPOINT", ep), ("HF_TOKEN", WRITE)],
    )
    .await;
    eprintln!("{}{}", r.stdout, r.stderr);
    for name in ALL {
        let status = r.status(name);
        assert!(["ok", "warn", "FAIL"].contains(&status.as_str()), "{name}: {status}");
        let (line, fix) = r.line(name);
        assert_eq!(
            fix.is_some(),
            status != "ok",
            "a fix under every line that is not ok: {line}"
        );
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: /dev/fuse may be refused here, so the exit status is not checked");
        return;
    }
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(!r.stdout.lines().any(|l| l.starts_with("FAIL")), "{}", r.stdout);
    let (token, _) = r.line("token");
    assert!(token.contains("user local") && token.contains("write token"), "{token}");
    let (endpoint, _) = r.line("endpoint");
    assert!(endpoint.contains(ep), "{endpoint}");
    let (repo, _) = r.line("repo");
    assert!(repo.contains("demo/tiny-model@main → commit"), "{repo}");
    assert_eq!(r.status("write-access"), "ok");
    assert!(
        r.stdout.lines().last().unwrap_or_default().starts_with("0 FAIL"),
        "{}",
        r.stdout
    );

    // Anonymous: a warning, not a failure, and the public repo still reads.
    let r = doctor(tmp.path(), &["datasets/demo/tiny-dataset"], &[("HF_ENDPOINT", ep)]).await;
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert_eq!(r.status("token"), "warn");
    assert!(r.line("token").0.contains("anonymous"), "{}", r.stdout);
    assert_eq!(r.status("repo"), "ok", "{}", r.stdout);
}

#[tokio::test]
async fn a_missing_dev_fuse_fails_with_its_fix() {
    let tmp = tempfile::tempdir().unwrap();
    if !common::isolated::can_hide_dev() {
        return;
    }
    let hub = hub(tmp.path()).await;
    let mut cmd = tokio::process::Command::new("unshare");
    // `$0` is the binary: the one the test built, whatever its path.
    cmd.args([
        "-m",
        "sh",
        "-c",
        "mount -t tmpfs none /dev && exec \"$0\" doctor --cache-dir \"$1\"",
    ])
    .arg(env!("CARGO_BIN_EXE_hubfs"))
    .arg(tmp.path().join("cache"));
    let r = run_with(
        cmd,
        tmp.path(),
        &[("HF_ENDPOINT", hub.endpoint.as_str()), ("HF_TOKEN", WRITE)],
    )
    .await;
    eprintln!("{}{}", r.stdout, r.stderr);
    assert_ne!(r.code, Some(0), "{}", r.both());
    let (line, fix) = r.line("fuse-device");
    assert!(
        line.starts_with("FAIL") && line.contains("/dev/fuse does not exist"),
        "{line}"
    );
    let fix = fix.expect("a fix under the FAIL line");
    assert!(
        fix.contains("modprobe fuse") && fix.contains("--device /dev/fuse"),
        "{fix}"
    );
    // The rest still runs: the Hub is fine.
    assert_eq!(r.status("token"), "ok", "{}", r.stdout);
}

#[tokio::test]
async fn a_refused_token_fails_and_is_never_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path()).await;
    let secret = "hf_bogus_doctor_secret_7731";
    let r = doctor(
        tmp.path(),
        &["demo/tiny-model", "--write"],
        &[("HF_ENDPOINT", hub.endpoint.as_str()), ("HF_TOKEN", secret)],
    )
    .await;
    eprintln!("{}{}", r.stdout, r.stderr);
    assert_ne!(r.code, Some(0));
    let (line, fix) = r.line("token");
    assert!(line.starts_with("FAIL") && line.contains("refused"), "{line}");
    assert!(fix.is_some_and(|f| f.contains("settings/tokens")));
    assert_eq!(r.status("endpoint"), "ok", "the Hub answered, with a 401");
    assert!(!r.both().contains(secret), "the token leaked:\n{}", r.both());
    let json = doctor(
        tmp.path(),
        &["--json"],
        &[("HF_ENDPOINT", hub.endpoint.as_str()), ("HF_TOKEN", secret)],
    )
    .await;
    assert!(!json.both().contains(secret), "the token leaked:\n{}", json.both());
}

#[tokio::test]
async fn a_repo_that_does_not_exist_fails_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path()).await;
    let env = [("HF_ENDPOINT", hub.endpoint.as_str()), ("HF_TOKEN", WRITE)];
    let r = doctor(tmp.path(), &["demo/no-such-model"], &env).await;
    eprintln!("{}", r.stdout);
    assert_ne!(r.code, Some(0));
    let (line, fix) = r.line("repo");
    assert!(
        line.starts_with("FAIL") && line.contains("demo/no-such-model"),
        "{line}"
    );
    assert!(fix.is_some_and(|f| f.contains("datasets/ns/name")));
    // A revision that does not exist is told apart.
    let r = doctor(tmp.path(), &["demo/tiny-model@no-such-branch"], &env).await;
    let (line, _) = r.line("repo");
    assert!(
        line.starts_with("FAIL") && line.contains("\"no-such-branch\" does not exist"),
        "{line}"
    );
}

#[tokio::test]
async fn a_read_token_fails_the_write_check() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path()).await;
    let ep = hub.endpoint.as_str();
    for repo in ["datasets/demo/tiny-dataset", "buckets/demo/scratch-bucket"] {
        let r = doctor(
            tmp.path(),
            &[repo, "--write"],
            &[("HF_ENDPOINT", ep), ("HF_TOKEN", READ)],
        )
        .await;
        eprintln!("{}", r.stdout);
        assert_ne!(r.code, Some(0));
        assert_eq!(r.status("token"), "ok");
        assert_eq!(r.status("repo"), "ok", "a read token reads it");
        let (line, fix) = r.line("write-access");
        assert!(line.starts_with("FAIL") && line.contains("read token"), "{line}");
        assert!(fix.is_some_and(|f| f.contains("repo.write")));
        // The write token may.
        let r = doctor(
            tmp.path(),
            &[repo, "--write"],
            &[("HF_ENDPOINT", ep), ("HF_TOKEN", WRITE)],
        )
        .await;
        assert_eq!(r.status("write-access"), "ok", "{}", r.stdout);
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_fails_within_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    // A closed port: connections are refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let ep = format!("http://127.0.0.1:{port}");
    let r = doctor(
        tmp.path(),
        &["demo/tiny-model"],
        &[("HF_ENDPOINT", &ep), ("HF_TOKEN", WRITE)],
    )
    .await;
    eprintln!("{}", r.stdout);
    assert_ne!(r.code, Some(0));
    let (line, fix) = r.line("endpoint");
    assert!(line.starts_with("FAIL") && line.contains(&ep), "{line}");
    assert!(fix.is_some_and(|f| f.contains("HF_ENDPOINT")));
    assert_eq!(r.status("repo"), "warn", "not checked");
    assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);

    // A port that accepts and never answers: the request deadline ends it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("http://{}", silent.local_addr().unwrap());
    let r = doctor(
        tmp.path(),
        &["--timeout", "1s"],
        &[("HF_ENDPOINT", &ep), ("HF_TOKEN", WRITE)],
    )
    .await;
    eprintln!("{}", r.stdout);
    assert_ne!(r.code, Some(0));
    let (line, _) = r.line("endpoint");
    assert!(line.starts_with("FAIL") && line.contains("does not answer"), "{line}");
    assert!(r.took < Duration::from_secs(8), "took {:?}", r.took);
    drop(silent);
}

#[tokio::test]
async fn json_lists_every_check() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path()).await;
    let r = doctor(
        tmp.path(),
        &["demo/tiny-model", "--write", "--json"],
        &[("HF_ENDPOINT", hub.endpoint.as_str()), ("HF_TOKEN", WRITE)],
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}:\n{}", r.stdout));
    let checks = v.as_array().expect("an array");
    let names: Vec<&str> = checks.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ALL);
    for c in checks {
        let status = c["status"].as_str().expect("status");
        assert!(["ok", "warn", "fail"].contains(&status), "{c}");
        assert!(c["detail"].as_str().is_some_and(|d| !d.is_empty()), "{c}");
        assert_eq!(c["fix"].is_null(), status == "ok", "{c}");
    }
    let token = checks.iter().find(|c| c["name"] == "token").expect("token");
    assert!(
        token["detail"].as_str().is_some_and(|d| d.contains("user local")),
        "{token}"
    );
}
