//! The real Hub's limits as the local Hub enforces them: the commit budget per repository (429 past
//! N commits in a sliding window, 128 per hour by default), regular files over 10 MiB and
//! directories over 10,000 entries refused in a commit (400), `/admin/limits`, and the
//! `--commit-limit` flag.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hubfs::local_hub::{CommitLimit, LocalHub};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A second write token of user `local`.
const WRITE2: &str = "hf_local_write_2";

/// A hub with `limit`, the tokens WRITE, WRITE2 and READ of user `local`, and the repos
/// `local/{names}` (datasets), created.
async fn hub_with(limit: &str, names: &[&str]) -> (LocalHub, Vec<Repo>) {
    let limit: CommitLimit = limit.parse().unwrap();
    let hub = LocalHub::start_temp_with(false, |c| {
        c.commit_limit = limit;
        c.tokens = [WRITE, WRITE2]
            .iter()
            .map(|t| format!("local:{t}:write"))
            .chain([format!("local:{READ}:read")])
            .map(|s| s.parse().unwrap())
            .collect();
    })
    .await
    .unwrap();
    let c = client();
    let mut repos = Vec::new();
    for n in names {
        let r = Repo::dataset(&format!("local/{n}"));
        create_repo_ok(&c, hub.endpoint(), WRITE, &r, false).await;
        repos.push(r);
    }
    (hub, repos)
}

async fn commit_file(c: &reqwest::Client, ep: &str, repo: &Repo, path: &str) -> reqwest::Response {
    let body = ndjson(&[header_line(&format!("add {path}"), None), utf8_line(path, path)]);
    commit_raw(c, ep, WRITE, repo, "main", "", body).await
}

/// Asserts the Hub's 429 for a spent commit budget; returns (message, Retry-After seconds).
async fn assert_rate_limited(r: reqwest::Response, max: u32, window: u64) -> (String, u64) {
    let (h, v) = assert_hub_error(r, Some(StatusCode::TOO_MANY_REQUESTS), "commit past the budget").await;
    let msg = v["error"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("You have exceeded the rate limit for repository commits ("),
        "{msg}"
    );
    assert!(msg.contains("You can retry this action in "), "{msg}");
    assert!(
        msg.contains("To reduce the number of commits, you can upload entire folders at once"),
        "{msg}"
    );
    assert_eq!(header_str(&h, "x-error-message"), Some(msg.as_str()));
    let retry: u64 = header_str(&h, "retry-after")
        .expect("Retry-After")
        .parse()
        .expect("Retry-After in seconds");
    assert!(
        (1..=window).contains(&retry),
        "Retry-After {retry} outside 1..={window}"
    );
    assert_eq!(
        header_str(&h, "ratelimit"),
        Some(format!("\"commits\";r=0;t={retry}").as_str())
    );
    assert_eq!(
        header_str(&h, "ratelimit-policy"),
        Some(format!("\"sliding window\";\"commits\";q={max};w={window}").as_str())
    );
    (msg, retry)
}

async fn admin_limits(c: &reqwest::Client, ep: &str, token: &str, body: Option<Value>) -> reqwest::Response {
    let req = match body {
        Some(b) => c.post(format!("{ep}/admin/limits")).json(&b),
        None => c.get(format!("{ep}/admin/limits")),
    };
    req.header("authorization", bearer(token)).send().await.unwrap()
}

async fn admin_limits_ok(c: &reqwest::Client, ep: &str, body: Option<Value>) -> Value {
    let r = admin_limits(c, ep, WRITE, body).await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "admin/limits: {text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_past_the_budget_gets_the_hubs_429() {
    let (hub, repos) = hub_with("3/3600", &["a", "b"]).await;
    let (c, ep) = (client(), hub.endpoint().to_string());
    let (a, b) = (&repos[0], &repos[1]);
    // A refused or failed commit costs nothing: a deletion of a missing file (404) first.
    let body = ndjson(&[header_line("bad", None), deleted_file_line("nope.txt")]);
    let r = commit_raw(&c, &ep, WRITE, a, "main", "", body).await;
    assert_hub_error(r, Some(StatusCode::NOT_FOUND), "delete a missing file").await;
    for i in 0..3 {
        let r = commit_file(&c, &ep, a, &format!("f{i}.txt")).await;
        assert_eq!(r.status(), StatusCode::OK, "commit {i}: {}", r.text().await.unwrap());
    }
    let head = head_sha(&c, &ep, None, a, "main").await;
    let r = commit_file(&c, &ep, a, "f3.txt").await;
    let (msg, retry) = assert_rate_limited(r, 3, 3600).await;
    assert!(
        msg.starts_with(
            "You have exceeded the rate limit for repository commits (3 per hour). You can retry this action in \
             about 1 hour."
        ),
        "{msg}"
    );
    assert!(
        retry > 3000,
        "the oldest commit leaves the hour in about an hour: {retry}"
    );
    assert_eq!(
        head_sha(&c, &ep, None, a, "main").await,
        head,
        "the refused commit did not land"
    );
    // A PR commit is a commit too.
    let body = ndjson(&[header_line("pr", None), utf8_line("pr.txt", "x")]);
    let r = commit_raw(&c, &ep, WRITE, a, "main", "?create_pr=1", body).await;
    assert_rate_limited(r, 3, 3600).await;
    // Every client and token share the repo's budget.
    let body = ndjson(&[header_line("other token", None), utf8_line("t.txt", "x")]);
    let r = commit_raw(&c, &ep, WRITE2, a, "main", "", body).await;
    assert_rate_limited(r, 3, 3600).await;
    // Another repo has a budget of its own.
    let r = commit_file(&c, &ep, b, "g.txt").await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    // Branches and tags are not commits.
    let r = c
        .post(format!("{}/branch/side", a.api(&ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    let stats = hub.commit_stats();
    let sa = &stats["datasets/local/a"];
    assert_eq!((sa.in_window, sa.total, sa.refused), (3, 3, 3), "{sa:?}");
    assert!(sa.retry_after.is_some_and(|s| s > 3000), "{sa:?}");
    let sb = &stats["datasets/local/b"];
    assert_eq!((sb.in_window, sb.total, sb.refused, sb.retry_after), (1, 1, 0, None));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_slides() {
    // 2 per 4 s: the third commit waits until the first is 4 s old, then lands.
    let (hub, repos) = hub_with("2/4", &["slide"]).await;
    let (c, ep, repo) = (client(), hub.endpoint().to_string(), &repos[0]);
    let t0 = Instant::now();
    for i in 0..2 {
        let r = commit_file(&c, &ep, repo, &format!("f{i}.txt")).await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = commit_file(&c, &ep, repo, "f2.txt").await;
    if t0.elapsed() < Duration::from_secs(3) {
        let (msg, retry) = assert_rate_limited(r, 2, 4).await;
        assert!(msg.contains("(2 per 4 seconds)"), "{msg}");
        assert!(msg.contains(&format!("in {retry} second")), "{msg}");
        tokio::time::sleep(Duration::from_secs(retry)).await;
        let r = commit_file(&c, &ep, repo, "f2.txt").await;
        assert_eq!(
            r.status(),
            StatusCode::OK,
            "after Retry-After: {}",
            r.text().await.unwrap()
        );
    } else {
        eprintln!("machine too slow to commit twice within 3 s: only the later commit is checked");
        assert_eq!(r.status(), StatusCode::OK);
    }
    hub.stop().await;
}

/// The default is the Hub's free plan, 128 per hour: the 129th commit to a repo within the hour
/// is refused, as on the Hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_is_128_per_hour() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    assert_eq!(hub.commit_limit(), CommitLimit::HUB_FREE);
    let (c, ep) = (client(), hub.endpoint().to_string());
    let repo = Repo::dataset("local/busy");
    create_repo_ok(&c, &ep, WRITE, &repo, false).await;
    for i in 0..128 {
        let r = commit_file(&c, &ep, &repo, &format!("f{i:03}.txt")).await;
        assert_eq!(r.status(), StatusCode::OK, "commit {i}: {}", r.text().await.unwrap());
    }
    let r = commit_file(&c, &ep, &repo, "f128.txt").await;
    let (msg, _) = assert_rate_limited(r, 128, 3600).await;
    assert!(
        msg.starts_with(
            "You have exceeded the rate limit for repository commits (128 per hour). You can retry this action in \
             about 1 hour. To reduce the number of commits, you can upload entire folders at once using the Hub \
             Python library: https://huggingface.co/docs/huggingface_hub/guides/upload"
        ),
        "{msg}"
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoint_changes_the_budget() {
    let (hub, repos) = hub_with("1/3600", &["adm"]).await;
    let (c, ep, repo) = (client(), hub.endpoint().to_string(), &repos[0]);
    let v = admin_limits_ok(&c, &ep, None).await;
    assert_eq!(v["commit_limit"], json!("1/3600"));
    assert_eq!(v["repos"], json!({}));
    assert_eq!(commit_file(&c, &ep, repo, "a.txt").await.status(), StatusCode::OK);
    assert_rate_limited(commit_file(&c, &ep, repo, "b.txt").await, 1, 3600).await;

    // A read token, or none, may not change it.
    let r = admin_limits(&c, &ep, READ, Some(json!({"commit_limit": "0"}))).await;
    assert_hub_error(r, Some(StatusCode::FORBIDDEN), "read token").await;
    let r = c.get(format!("{ep}/admin/limits")).send().await.unwrap();
    assert_hub_error(r, Some(StatusCode::FORBIDDEN), "no token").await;
    // Bad values are refused and change nothing.
    for bad in [
        json!({"commit_limit": "abc"}),
        json!({"commit_limit": "5/0"}),
        json!({"commit_limit": "-1/60"}),
        json!({"commit_limit": 7}),
        json!({"commit_limt": "5/60"}),
        json!({"dir_entry_limit": -1}),
        json!({"dir_entry_limit": "10"}),
        json!({"commit_limit": "5/60", "dir_entry_limit": 1.5}),
    ] {
        let r = admin_limits(&c, &ep, WRITE, Some(bad.clone())).await;
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &bad.to_string()).await;
    }
    assert_eq!(hub.commit_limit().to_string(), "1/3600");
    assert_eq!(hub.dir_entry_limit(), 10_000);

    // Looser: commits made before still count.
    let v = admin_limits_ok(&c, &ep, Some(json!({"commit_limit": "2/3600"}))).await;
    assert_eq!(v["commit_limit"], json!("2/3600"));
    assert_eq!(v["repos"]["datasets/local/adm"]["in_window"], json!(1));
    assert_eq!(v["repos"]["datasets/local/adm"]["refused"], json!(1));
    assert_eq!(commit_file(&c, &ep, repo, "b.txt").await.status(), StatusCode::OK);
    assert_rate_limited(commit_file(&c, &ep, repo, "c.txt").await, 2, 3600).await;

    // 0: no limit.
    let v = admin_limits_ok(&c, &ep, Some(json!({"commit_limit": "0"}))).await;
    assert_eq!(v["commit_limit"], json!("0"));
    assert_eq!(v["repos"]["datasets/local/adm"]["retry_after"], Value::Null);
    for i in 0..3 {
        let r = commit_file(&c, &ep, repo, &format!("n{i}.txt")).await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    assert_eq!(hub.commit_stats()["datasets/local/adm"].total, 5);

    // Tighter again, then a reset: a full budget.
    admin_limits_ok(&c, &ep, Some(json!({"commit_limit": "3/60"}))).await;
    assert_rate_limited(commit_file(&c, &ep, repo, "d.txt").await, 3, 60).await;
    let v = admin_limits_ok(&c, &ep, Some(json!({"reset_commits": true}))).await;
    assert_eq!(v["repos"], json!({}));
    assert_eq!(commit_file(&c, &ep, repo, "d.txt").await.status(), StatusCode::OK);

    // The Rust API does the same.
    hub.set_commit_limit(CommitLimit::new(1, 60).unwrap());
    assert_rate_limited(commit_file(&c, &ep, repo, "e.txt").await, 1, 60).await;
    hub.set_commit_limit(CommitLimit::UNLIMITED);
    assert_eq!(commit_file(&c, &ep, repo, "e.txt").await.status(), StatusCode::OK);
    hub.stop().await;
}

/// `hubfs local-hub --commit-limit`: applied, and bad values refused with an error naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_limit_flag() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for bad in ["abc", "5/0", "-1/60", "3/", "1.5/60"] {
        let (ok, out) = run_cli(&["local-hub", "--data-dir", d, "--commit-limit", bad]).await;
        assert!(!ok, "--commit-limit {bad} accepted: {out}");
        assert!(out.contains("--commit-limit"), "{bad}: the error names the flag: {out}");
        assert!(
            out.contains("N/SECONDS"),
            "{bad}: the error says what is expected: {out}"
        );
    }
    let (ok, out) = run_cli(&["local-hub", "--help"]).await;
    assert!(
        ok && out.contains("--commit-limit <N/SECONDS>") && out.contains("128/3600"),
        "{out}"
    );

    let hub = spawn_cli(dir.path(), &["--commit-limit", "1/600"], &[], None).await;
    let (c, ep) = (client(), hub.endpoint.clone());
    let repo = Repo::dataset("local/flag");
    create_repo_ok(&c, &ep, WRITE, &repo, false).await;
    assert_eq!(commit_file(&c, &ep, &repo, "a.txt").await.status(), StatusCode::OK);
    let (msg, _) = assert_rate_limited(commit_file(&c, &ep, &repo, "b.txt").await, 1, 600).await;
    assert!(msg.contains("(1 per 10 minutes)"), "{msg}");
    let v = admin_limits_ok(&c, &ep, None).await;
    assert_eq!(v["commit_limit"], json!("1/600"));
    assert_eq!(v["dir_entry_limit"], json!(10_000));
    hub.kill9().await;

    let hub = spawn_cli(
        dir.path(),
        &["--commit-limit", "0", "--dir-entry-limit", "0"],
        &[],
        None,
    )
    .await;
    let ep = hub.endpoint.clone();
    for i in 0..3 {
        assert_eq!(
            commit_file(&c, &ep, &repo, &format!("n{i}.txt")).await.status(),
            StatusCode::OK
        );
    }
    let v = admin_limits_ok(&c, &ep, None).await;
    assert_eq!((&v["commit_limit"], &v["dir_entry_limit"]), (&json!("0"), &json!(0)));
    hub.kill9().await;
}

/// A regular (inline) file over 10 MiB is refused as the Hub's pre-receive hook refuses it; 10 MiB
/// exactly, and LFS files of any size, are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regular_files_over_10_mib_are_refused() {
    let (hub, repos) = hub_with("0", &["big"]).await;
    let (c, ep, repo) = (client(), hub.endpoint().to_string(), &repos[0]);
    let limit = 10usize << 20;
    let body = ndjson(&[
        header_line("too big", None),
        utf8_line("ok.txt", "fine"),
        file_line("data/big.txt", &vec![b'a'; limit + 1]),
    ]);
    let head = head_sha(&c, &ep, None, repo, "main").await;
    let r = commit_raw(&c, &ep, WRITE, repo, "main", "", body.clone()).await;
    let (_, v) = assert_hub_error(r, Some(StatusCode::BAD_REQUEST), "11 MiB regular file").await;
    assert_eq!(
        v["error"],
        json!(
            "Your push was rejected because it contains files larger than 10 MiB. Please use \
             https://git-lfs.github.com/ to store large files. See also: \
             https://hf.co/docs/hub/repositories-getting-started#terminal Offending files: - data/big.txt \
             (ref: refs/heads/main)"
        )
    );
    assert_eq!(head_sha(&c, &ep, None, repo, "main").await, head, "nothing landed");
    // Into a new PR: named by its ref.
    let r = commit_raw(&c, &ep, WRITE, repo, "main", "?create_pr=1", body).await;
    let (_, v) = assert_hub_error(r, Some(StatusCode::BAD_REQUEST), "11 MiB regular file in a PR").await;
    assert!(v["error"].as_str().unwrap().ends_with("(ref: refs/pr/1)"), "{v}");

    let body = ndjson(&[
        header_line("just fits", None),
        file_line("data/big.txt", &vec![b'a'; limit]),
    ]);
    commit_ok(&c, &ep, WRITE, repo, &[body.trim_end().to_string()]).await;
    // As LFS, any size.
    let data = bytes(limit + 1, 3);
    let oid = lfs_upload_basic(&c, &ep, WRITE, repo, &data).await;
    commit_ok(
        &c,
        &ep,
        WRITE,
        repo,
        &[
            header_line("lfs", None),
            lfs_line("data/big.bin", &oid, data.len() as u64),
        ],
    )
    .await;
    hub.stop().await;
}

/// A directory may hold at most 10,000 entries (files and folders), as on the Hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_over_10000_entries_are_refused() {
    let (hub, repos) = hub_with("0", &["wide"]).await;
    let (c, ep, repo) = (client(), hub.endpoint().to_string(), &repos[0]);
    let mut lines = vec![header_line("10,000 files", None)];
    lines.extend((0..10_000).map(|i| utf8_line(&format!("d/f{i:05}.txt"), "x")));
    commit_ok(&c, &ep, WRITE, repo, &lines).await;

    // One more file, or one more folder, is too many.
    for extra in ["d/one-more.txt", "d/sub/file.txt"] {
        let body = ndjson(&[header_line("one more", None), utf8_line(extra, "x")]);
        let r = commit_raw(&c, &ep, WRITE, repo, "main", "", body).await;
        let (_, v) = assert_hub_error(r, Some(StatusCode::BAD_REQUEST), extra).await;
        assert_eq!(
            v["error"],
            json!(
                "Your push was rejected because it contains too many files per directory. Each directory in \
                 your git repo can only contain up to 10000 files. Offending reference: refs/heads/main \
                 Offending directories: /d/"
            ),
            "{extra}"
        );
    }
    // The limit can be lifted (and set again) at runtime.
    let v = admin_limits_ok(&c, &ep, None).await;
    assert_eq!(v["dir_entry_limit"], json!(10_000));
    let v = admin_limits_ok(&c, &ep, Some(json!({"dir_entry_limit": 0}))).await;
    assert_eq!(v["dir_entry_limit"], json!(0));
    commit_ok(
        &c,
        &ep,
        WRITE,
        repo,
        &[header_line("no limit", None), utf8_line("d/extra.txt", "x")],
    )
    .await;
    hub.set_dir_entry_limit(10_000);
    assert_eq!(hub.dir_entry_limit(), 10_000);
    let body = ndjson(&[header_line("still too many", None), utf8_line("d/extra2.txt", "x")]);
    let r = commit_raw(&c, &ep, WRITE, repo, "main", "", body).await;
    assert_hub_error(r, Some(StatusCode::BAD_REQUEST), "10,002 entries").await;
    // Replacing a file, or adding one where others leave, fits.
    commit_ok(
        &c,
        &ep,
        WRITE,
        repo,
        &[
            header_line("swap", None),
            utf8_line("d/f00000.txt", "y"),
            deleted_file_line("d/f00001.txt"),
            deleted_file_line("d/extra.txt"),
            utf8_line("d/new.txt", "z"),
        ],
    )
    .await;
    hub.stop().await;
}
