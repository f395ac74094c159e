//! Fault injection of the local Hub: each knob (latency, bandwidth, errors, stalls, resets, rate
//! limit) has its effect on the class it is set on and leaves the other classes alone; the admin
//! endpoint and the CLI flags set them.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hubfs::local_hub::{FaultSettings, LocalHub, RouteClass};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A Hub with one public dataset holding `f.bin` (regular, `regular_len` bytes) and `l.bin` (LFS,
/// `lfs_len` bytes). Returns the hub, the repo and the two contents.
async fn hub_with_files(regular_len: usize, lfs_len: usize) -> (LocalHub, Repo, Vec<u8>, Vec<u8>) {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let c = client();
    let ep = hub.endpoint();
    let repo = Repo::dataset("local/faults");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let regular = bytes(regular_len, 1);
    let lfs = bytes(lfs_len, 2);
    let oid = lfs_upload_basic(&c, ep, WRITE, &repo, &lfs).await;
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[
            header_line("files", None),
            file_line("f.bin", &regular),
            lfs_line("l.bin", &oid, lfs.len() as u64),
        ],
    )
    .await;
    (hub, repo, regular, lfs)
}

/// The presigned blob-origin URL of an LFS file (taken before faults are set).
async fn blob_url_of(c: &reqwest::Client, ep: &str, repo: &Repo, path: &str) -> String {
    let r = c.get(repo.resolve(ep, "main", path)).send().await.unwrap();
    assert_eq!(r.status(), 302);
    header_str(r.headers(), "location").unwrap().to_string()
}

/// Times one GET and reads its whole body; returns (elapsed, status, body length).
async fn timed_get(c: &reqwest::Client, url: &str) -> (Duration, StatusCode, usize) {
    let t = Instant::now();
    let r = c.get(url).send().await.unwrap();
    let status = r.status();
    let n = r.bytes().await.unwrap().len();
    (t.elapsed(), status, n)
}

fn settings(f: impl FnOnce(&mut FaultSettings)) -> FaultSettings {
    let mut s = FaultSettings::default();
    f(&mut s);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_applies_to_its_class_only() {
    let (hub, repo, regular, _) = hub_with_files(1000, 1000).await;
    let ep = hub.endpoint();
    let c = client();
    let info = repo.api(ep);
    let file = repo.resolve(ep, "main", "f.bin");
    let (base, s, _) = timed_get(&c, &info).await;
    assert_eq!(s, 200);
    assert!(base < Duration::from_millis(300), "baseline api request took {base:?}");

    hub.set_faults(RouteClass::Api, settings(|s| s.latency_ms = 300))
        .unwrap();
    for _ in 0..2 {
        let (t, s, _) = timed_get(&c, &info).await;
        assert_eq!(s, 200);
        assert!(
            t >= Duration::from_millis(300),
            "api request with 300 ms latency took {t:?}"
        );
        assert!(t < Duration::from_secs(5), "{t:?}");
    }
    // resolve is another class (even on the API origin).
    let (t, s, n) = timed_get(&c, &file).await;
    assert_eq!((s, n), (StatusCode::OK, regular.len()));
    assert!(
        t < Duration::from_millis(300),
        "resolve took {t:?} with latency only on api"
    );
    // Latency on resolve only: now it is the other way round.
    hub.set_faults(RouteClass::Api, FaultSettings::default()).unwrap();
    hub.set_faults(RouteClass::Resolve, settings(|s| s.latency_ms = 300))
        .unwrap();
    let (t, _, _) = timed_get(&c, &file).await;
    assert!(t >= Duration::from_millis(300), "resolve with latency took {t:?}");
    let (t, _, _) = timed_get(&c, &info).await;
    assert!(
        t < Duration::from_millis(300),
        "api took {t:?} with latency only on resolve"
    );
    hub.clear_faults();
    let (t, _, _) = timed_get(&c, &file).await;
    assert!(t < Duration::from_millis(300), "{t:?} after clear_faults");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bandwidth_caps_resolve_downloads() {
    let (hub, repo, regular, lfs) = hub_with_files(1 << 20, 4 << 20).await;
    let ep = hub.endpoint();
    let c = client();
    let blob = blob_url_of(&c, ep, &repo, "l.bin").await;
    let (fast, s, n) = timed_get(&c, &blob).await;
    assert_eq!((s, n), (StatusCode::OK, lfs.len()));
    assert!(
        fast < Duration::from_millis(500),
        "uncapped 4 MiB download took {fast:?}"
    );

    // 40 Mbit/s: 4 MiB * 8 / 40e6 ≈ 0.84 s.
    hub.set_faults(RouteClass::Resolve, settings(|s| s.bandwidth_mbps = 40.0))
        .unwrap();
    let (slow, s, n) = timed_get(&c, &blob).await;
    assert_eq!(
        (s, n),
        (StatusCode::OK, lfs.len()),
        "capped download must still be complete"
    );
    assert!(
        slow >= Duration::from_millis(700),
        "capped 4 MiB download took {slow:?}"
    );
    assert!(slow < Duration::from_secs(5), "capped download far too slow: {slow:?}");
    // The bytes are intact.
    let got = c.get(&blob).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(sha256_hex(&got), sha256_hex(&lfs));
    // Regular files through /resolve/ on the API origin are the resolve class too: 1 MiB ≈ 0.21 s.
    let (t, _, n) = timed_get(&c, &repo.resolve(ep, "main", "f.bin")).await;
    assert_eq!(n, regular.len());
    assert!(t >= Duration::from_millis(150), "capped 1 MiB resolve took {t:?}");
    // The API class is not capped (a ~100 KiB tree page would not be noticeably slower anyway, so
    // check the settings are untouched and a request is quick).
    assert_eq!(hub.stats(RouteClass::Api).faults_injected, 0);
    let (t, s, _) = timed_get(&c, &repo.api(ep)).await;
    assert_eq!(s, 200);
    assert!(t < Duration::from_millis(300), "{t:?}");
    hub.clear_faults();
    let (t, _, _) = timed_get(&c, &blob).await;
    assert!(t < Duration::from_millis(500), "after clear_faults: {t:?}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_rate_gives_500s() {
    let (hub, repo, regular, lfs) = hub_with_files(1000, 2000).await;
    let ep = hub.endpoint();
    let c = client();
    let blob = blob_url_of(&c, ep, &repo, "l.bin").await;
    hub.set_faults(RouteClass::Api, settings(|s| s.error_rate = 1.0))
        .unwrap();
    for _ in 0..5 {
        let r = c.get(repo.api(ep)).send().await.unwrap();
        assert_eq!(r.status(), 500);
        let v: Value = r.json().await.unwrap();
        assert!(v["error"].is_string(), "{v}");
    }
    // Commits are a class of their own: unaffected by `api` faults, refused by `commit` faults.
    hub.set_faults(RouteClass::Commit, settings(|s| s.error_rate = 1.0))
        .unwrap();
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "",
        ndjson(&[header_line("x", None), utf8_line("x", "x")]),
    )
    .await;
    assert_eq!(r.status(), 500);
    assert_eq!(hub.stats(RouteClass::Commit).faults_injected, 1);
    // Other classes are unaffected.
    let (_, s, n) = timed_get(&c, &repo.resolve(ep, "main", "f.bin")).await;
    assert_eq!((s, n), (StatusCode::OK, regular.len()));
    let (_, s, n) = timed_get(&c, &blob).await;
    assert_eq!((s, n), (StatusCode::OK, lfs.len()));
    assert_eq!(hub.stats(RouteClass::Resolve).faults_injected, 0);

    // 0.5: roughly half of 200 requests fail.
    hub.set_faults(RouteClass::Api, settings(|s| s.error_rate = 0.5))
        .unwrap();
    hub.reset_stats();
    let mut failed = 0;
    for _ in 0..200 {
        let r = c
            .get(format!("{ep}/api/whoami-v2"))
            .header("authorization", bearer(WRITE))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => {}
            500 => failed += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(
        (60..=140).contains(&failed),
        "{failed} of 200 failed with error_rate 0.5"
    );
    let st = hub.stats(RouteClass::Api);
    assert_eq!(st.requests, 200);
    assert_eq!(st.faults_injected, failed);
    hub.clear_faults();
    let r = c.get(repo.api(ep)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // The failed commit above did not land.
    let (_, hist) = {
        let r = c.get(format!("{}/commits/main", repo.api(ep))).send().await.unwrap();
        ((), r.json::<Value>().await.unwrap())
    };
    assert_eq!(hist.as_array().unwrap().len(), 2);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stall_never_answers_and_stop_is_prompt() {
    let (hub, repo, regular, _) = hub_with_files(1000, 1000).await;
    let ep = hub.endpoint().to_string();
    let c = client();
    hub.set_faults(RouteClass::Api, settings(|s| s.stall_rate = 1.0))
        .unwrap();
    let t = Instant::now();
    let r = c.get(repo.api(&ep)).timeout(Duration::from_secs(1)).send().await;
    let e = r.expect_err("a stalled request must not be answered");
    assert!(e.is_timeout(), "expected a client timeout, got {e}");
    assert!(t.elapsed() >= Duration::from_millis(900));
    // Resolve is another class: answered.
    let (_, s, n) = timed_get(&c, &repo.resolve(&ep, "main", "f.bin")).await;
    assert_eq!((s, n), (StatusCode::OK, regular.len()));

    // A stalled request left outstanding (no client timeout short of the test's).
    let (c2, url) = (client(), repo.api(&ep));
    let outstanding = tokio::spawn(async move {
        let t = Instant::now();
        let r = c2.get(url).timeout(Duration::from_secs(30)).send().await;
        (t.elapsed(), r.map(|r| r.status()).map_err(|e| e.to_string()))
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!outstanding.is_finished(), "the stalled request was answered");
    assert!(hub.stats(RouteClass::Api).faults_injected >= 2);

    // Cleared: new requests are answered (the stalled one stays stalled).
    hub.clear_faults();
    let r = c
        .get(repo.api(&ep))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(!outstanding.is_finished());

    // stop() returns promptly and releases the stalled request.
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), hub.stop())
        .await
        .expect("stop() hung with a stalled request outstanding");
    let took = t.elapsed();
    assert!(took < Duration::from_secs(5), "stop() took {took:?}");
    let (waited, res) = tokio::time::timeout(Duration::from_secs(10), outstanding)
        .await
        .expect("the stalled request was not released by stop()")
        .unwrap();
    assert!(
        waited < Duration::from_secs(10),
        "stalled request ended after {waited:?}: {res:?}"
    );
    if let Ok(s) = res {
        assert_ne!(s, StatusCode::OK, "a stalled request must not succeed");
    }
}

/// Streams `url` and counts the bytes until the body ends or fails.
async fn count_body(c: &reqwest::Client, url: &str) -> (StatusCode, Option<u64>, usize, Option<String>) {
    let mut r = c.get(url).send().await.unwrap();
    let status = r.status();
    let len = r.content_length();
    let mut n = 0;
    loop {
        match r.chunk().await {
            Ok(Some(b)) => n += b.len(),
            Ok(None) => return (status, len, n, None),
            Err(e) => return (status, len, n, Some(format!("{e:?}"))),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_cuts_downloads_mid_body() {
    let (hub, repo, regular, lfs) = hub_with_files(1 << 20, 1 << 20).await;
    let ep = hub.endpoint();
    let c = client();
    let blob = blob_url_of(&c, ep, &repo, "l.bin").await;
    hub.set_faults(RouteClass::Resolve, settings(|s| s.reset_rate = 1.0))
        .unwrap();
    for (what, url, size) in [
        ("blob origin", blob.clone(), lfs.len()),
        (
            "resolve of a regular file",
            repo.resolve(ep, "main", "f.bin"),
            regular.len(),
        ),
    ] {
        let (status, len, n, err) = count_body(&c, &url).await;
        assert_eq!(status, 200, "{what}");
        assert_eq!(len, Some(size as u64), "{what}: the full length is announced");
        assert!(err.is_some(), "{what}: the body ended cleanly after {n} bytes");
        assert!(n > 0 && n < size, "{what}: received {n} of {size} bytes");
    }
    assert!(hub.stats(RouteClass::Resolve).faults_injected >= 2);
    // The API class is unaffected.
    let r = c.get(format!("{}/tree/main", repo.api(ep))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.expect("whole API body");
    hub.clear_faults();
    let (status, _, n, err) = count_body(&c, &blob).await;
    assert_eq!((status, n, err), (StatusCode::OK, lfs.len(), None));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_answers_429() {
    let (hub, repo, _, _) = hub_with_files(1000, 1000).await;
    let ep = hub.endpoint().to_string();
    let c = client();
    hub.set_faults(RouteClass::Api, settings(|s| s.rate_limit = 5.0))
        .unwrap();
    let url = repo.api(&ep);
    let futs: Vec<_> = (0..30).map(|_| c.get(&url).send()).collect();
    let mut ok = 0;
    let mut limited = 0;
    for r in futures::future::join_all(futs).await {
        let r = r.unwrap();
        match r.status().as_u16() {
            200 => ok += 1,
            429 => {
                limited += 1;
                let rl = header_str(r.headers(), "ratelimit").expect("429 without a RateLimit header");
                assert!(rl.contains("t="), "{rl}");
                let v: Value = r.json().await.unwrap();
                assert!(v["error"].is_string());
            }
            s => panic!("unexpected {s}"),
        }
    }
    assert!(limited >= 10, "only {limited} of 30 rate-limited ({ok} ok)");
    assert!(ok >= 1, "nothing got through");
    // The resolve class has its own (unlimited) budget.
    for _ in 0..20 {
        let r = c.get(repo.resolve(&ep, "main", "f.bin")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // After a pause the budget is back.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for _ in 0..3 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    hub.clear_faults();
    for _ in 0..30 {
        assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_class_faults() {
    let hub = LocalHub::start_temp(true).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let model = Repo::model("demo/tiny-model");
    let r = c
        .post(format!("{}/paths-info/main", model.api(ep)))
        .json(&json!({"paths": ["model.safetensors"]}))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    let xet = v[0]["xetHash"].as_str().expect("demo weights are in Xet").to_string();
    let (_, tok) = {
        let r = c
            .get(format!("{}/xet-read-token/main", model.api(ep)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        ((), r.json::<Value>().await.unwrap())
    };
    let token = tok["accessToken"].as_str().unwrap().to_string();
    assert_eq!(tok["casUrl"], hub.cas_url());
    let recon = format!("{}/v1/reconstructions/{xet}", hub.cas_url());
    let get = || c.get(&recon).header("authorization", bearer(&token)).send();

    let r = get().await.unwrap();
    assert_eq!(r.status(), 200);
    hub.set_faults(RouteClass::Cas, settings(|s| s.error_rate = 1.0))
        .unwrap();
    for _ in 0..3 {
        let r = get().await.unwrap();
        assert_eq!(r.status(), 500);
    }
    // API and resolve are unaffected.
    let r = c.get(model.api(ep)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = c.head(model.resolve(ep, "main", "config.json")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(hub.stats(RouteClass::Cas).faults_injected, 3);
    hub.clear_faults();
    let r = get().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert!(v["terms"].as_array().is_some_and(|t| !t.is_empty()), "{v}");
    // Without a token the CAS refuses.
    let r = c.get(&recon).send().await.unwrap();
    assert_eq!(r.status(), 401);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoint_sets_faults_and_counts() {
    let (hub, repo, regular, lfs) = hub_with_files(5000, 7000).await;
    let ep = hub.endpoint();
    let c = client();
    let blob = blob_url_of(&c, ep, &repo, "l.bin").await;
    let faults = format!("{ep}/admin/faults");
    let post = |token: Option<&str>, body: Value| {
        let mut r = c.post(&faults).json(&body);
        if let Some(t) = token {
            r = r.header("authorization", bearer(t));
        }
        r.send()
    };

    // Read-only or anonymous callers cannot see or change faults.
    for token in [None, Some(READ)] {
        let r = post(token, json!({"api": {"error_rate": 1.0}})).await.unwrap();
        assert_hub_error(r, Some(StatusCode::FORBIDDEN), "admin POST without write").await;
        let mut g = c.get(&faults);
        if let Some(t) = token {
            g = g.header("authorization", bearer(t));
        }
        assert_eq!(g.send().await.unwrap().status(), 403);
    }
    assert_eq!(
        c.get(repo.api(ep)).send().await.unwrap().status(),
        200,
        "nothing changed"
    );

    // Write token: set api latency + error rate, resolve untouched.
    let r = post(Some(WRITE), json!({"api": {"latency_ms": 50, "error_rate": 1.0}}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let shown: Value = r.json().await.unwrap();
    assert_eq!(shown["api"]["latency_ms"], 50);
    let r = c
        .get(&faults)
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["api"]["latency_ms"], 50);
    assert_eq!(v["api"]["error_rate"], 1.0);
    assert_eq!(v["resolve"]["error_rate"], 0.0);
    assert_eq!(v["cas"]["latency_ms"], 0);
    // They take effect; admin routes themselves are exempt, so faults can always be cleared.
    assert_eq!(c.get(repo.api(ep)).send().await.unwrap().status(), 500);
    assert_eq!(
        c.get(repo.resolve(ep, "main", "f.bin")).send().await.unwrap().status(),
        200
    );
    // Invalid settings → 400, and the settings stay as they were.
    for (what, body) in [
        ("error_rate 2", json!({"api": {"error_rate": 2}})),
        ("negative stall", json!({"resolve": {"stall_rate": -0.1}})),
        ("negative bandwidth", json!({"cas": {"bandwidth_mbps": -5}})),
        ("unknown class", json!({"widgets": {"latency_ms": 1}})),
        ("wrong type", json!({"api": {"latency_ms": "slow"}})),
        ("not an object", json!([1, 2])),
    ] {
        let r = post(Some(WRITE), body).await.unwrap();
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), what).await;
    }
    let r = c
        .post(&faults)
        .header("authorization", bearer(WRITE))
        .body("{garbage")
        .send()
        .await
        .unwrap();
    assert_hub_error(r, Some(StatusCode::BAD_REQUEST), "malformed admin JSON").await;
    let v: Value = c
        .get(&faults)
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["api"]["error_rate"], 1.0);
    assert_eq!(v["resolve"]["stall_rate"], 0.0);
    // Reset through the endpoint ({} = defaults); `blob` is an alias of resolve.
    let r = post(Some(WRITE), json!({"api": {}, "blob": {"latency_ms": 7}}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["api"]["error_rate"], 0.0);
    assert_eq!(v["resolve"]["latency_ms"], 7);
    assert_eq!(c.get(repo.api(ep)).send().await.unwrap().status(), 200);
    post(Some(WRITE), json!({"resolve": {}})).await.unwrap();

    // Stats: per class, reset with ?reset=1 (the answer is the snapshot before the reset).
    let stats_url = format!("{ep}/admin/stats");
    let r = c.get(format!("{stats_url}?reset=1")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = c.get(&stats_url).send().await.unwrap().json().await.unwrap();
    for class in ["api", "resolve", "cas"] {
        assert_eq!(v[class]["requests"], 0, "{class} after reset: {v}");
    }
    for _ in 0..3 {
        assert_eq!(c.get(repo.api(ep)).send().await.unwrap().status(), 200);
    }
    let (_, _, n) = timed_get(&c, &repo.resolve(ep, "main", "f.bin")).await;
    assert_eq!(n, regular.len());
    let (_, _, n) = timed_get(&c, &blob).await;
    assert_eq!(n, lfs.len());
    let r = c
        .get(format!("{}/v1/reconstructions/{}", hub.cas_url(), "0".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = c.get(&stats_url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["api"]["requests"], 3, "{v}");
    assert_eq!(v["resolve"]["requests"], 2, "{v}");
    assert_eq!(v["cas"]["requests"], 1, "{v}");
    assert!(
        v["resolve"]["bytes_out"].as_u64().unwrap() >= (regular.len() + lfs.len()) as u64,
        "{v}"
    );
    assert_eq!(v["api"]["faults_injected"], 0);
    // The library view agrees.
    assert_eq!(hub.stats(RouteClass::Api).requests, 3);
    assert_eq!(hub.stats(RouteClass::Resolve).requests, 2);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_fault_flags_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let hub = spawn_cli(
        dir.path(),
        &["--latency-ms", "api=250", "--error-rate", "cas=1"],
        &[],
        None,
    )
    .await;
    let ep = hub.endpoint.clone();
    let c = client();
    let repo = Repo::model("local/cli");
    create_repo_ok(&c, &ep, WRITE, &repo, false).await;
    commit_ok(
        &c,
        &ep,
        WRITE,
        &repo,
        &[header_line("f", None), utf8_line("f.txt", "f")],
    )
    .await;
    let (t, s, _) = timed_get(&c, &repo.api(&ep)).await;
    assert_eq!(s, 200);
    assert!(
        t >= Duration::from_millis(250),
        "api request took {t:?} with --latency-ms api=250"
    );
    let (t, s, _) = timed_get(&c, &repo.resolve(&ep, "main", "f.txt")).await;
    assert_eq!(s, 200);
    assert!(
        t < Duration::from_millis(250),
        "resolve took {t:?}; latency was for api only"
    );
    // A valid CAS token; the CAS answers 500.
    let r = c
        .get(format!("{}/xet-read-token/main", repo.api(&ep)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let tok: Value = r.json().await.unwrap();
    let cas = tok["casUrl"].as_str().unwrap();
    let token = tok["accessToken"].as_str().unwrap();
    for path in ["/v1/reconstructions/", "/v2/reconstructions/"] {
        let r = c
            .get(format!("{cas}{path}{}", "a".repeat(64)))
            .header("authorization", bearer(token))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 500, "{path}");
    }
    // The admin endpoint shows what the flags set.
    let v: Value = c
        .get(format!("{ep}/admin/faults"))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["api"]["latency_ms"], 250);
    assert_eq!(v["cas"]["error_rate"], 1.0);
    assert_eq!(v["resolve"]["latency_ms"], 0);
    assert_eq!(v["api"]["error_rate"], 0.0);
    hub.kill9().await;

    // A flag without a class applies to every class.
    let hub = spawn_cli(dir.path(), &["--latency-ms", "120"], &[], None).await;
    let v: Value = c
        .get(format!("{}/admin/faults", hub.endpoint))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for class in ["api", "resolve", "cas"] {
        assert_eq!(v[class]["latency_ms"], 120, "{class}: {v}");
    }
    hub.kill9().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_rejects_bad_fault_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // (args, text the message must contain)
    for (args, want) in [
        (vec!["--latency-ms", "bogus=5"], "--latency-ms"),
        (vec!["--latency-ms", "abc"], "--latency-ms"),
        (vec!["--error-rate", "cas=lots"], "--error-rate"),
        (vec!["--rate-limit", "=3"], "--rate-limit"),
        (vec!["--token", "nocolons"], "--token"),
        // Out of range: the message names the knob (see also the strict test below).
        (vec!["--error-rate", "2"], "error"),
        (vec!["--stall-rate", "resolve=1.5"], "stall"),
        (vec!["--reset-rate", "cas=2"], "reset"),
        (vec!["--bandwidth-mbps=-1"], "bandwidth"),
        (vec!["--rate-limit=api=-1"], "rate"),
    ] {
        let mut full = vec!["local-hub", "--data-dir", d];
        full.extend(&args);
        let t = Instant::now();
        let (ok, out) = run_cli(&full).await;
        assert!(!ok, "{args:?} was accepted: {out}");
        assert!(
            out.to_lowercase().replace('_', "-").contains(want),
            "{args:?}: message does not name {want}: {out}"
        );
        assert!(!out.contains("endpoint:"), "{args:?}: the Hub started anyway");
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}

/// A bad value must be refused with a message naming the flag the user typed, and no value may be
/// silently turned into something else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_out_of_range_fault_flags_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for (args, flag) in [
        (vec!["--error-rate", "2"], "--error-rate"),
        (vec!["--stall-rate", "resolve=1.5"], "--stall-rate"),
        (vec!["--reset-rate", "cas=2"], "--reset-rate"),
        (vec!["--bandwidth-mbps=-1"], "--bandwidth-mbps"),
        (vec!["--rate-limit=api=-1"], "--rate-limit"),
        (vec!["--latency-ms=api=-5"], "--latency-ms"),
        (vec!["--latency-ms=NaN"], "--latency-ms"),
    ] {
        let mut full = vec!["local-hub", "--data-dir", d];
        full.extend(&args);
        let (ok, out) = run_cli_briefly(&full).await;
        assert!(!ok, "{args:?} was accepted: {out}");
        assert!(out.contains(flag), "{args:?}: message does not name {flag}: {out}");
    }
}

/// Like `run_cli`, but a Hub that starts (prints its endpoint) is killed and reported as accepted.
async fn run_cli_briefly(args: &[&str]) -> (bool, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hubfs"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(status) => {
            let out = child.wait_with_output().await.unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (status.unwrap().success(), text)
        }
        Err(_) => {
            let _ = child.start_kill();
            let out = child.wait_with_output().await.unwrap();
            (
                true,
                format!(
                    "still running after 5 s; stdout: {}",
                    String::from_utf8_lossy(&out.stdout)
                ),
            )
        }
    }
}

/// A tiny bandwidth is either refused as a setting or paces the body (the request just takes long);
/// it must not break the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_bandwidth_does_not_break_connections() {
    let (hub, repo, _, _) = hub_with_files(100_000, 1000).await;
    let ep = hub.endpoint();
    let c = client();
    for bw in [1e-300, 1e-12] {
        let accepted = hub.set_faults(RouteClass::Resolve, settings(|s| s.bandwidth_mbps = bw));
        if accepted.is_err() {
            continue;
        }
        let mut r = c
            .get(repo.resolve(ep, "main", "f.bin"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .unwrap();
        let mut outcome = None;
        loop {
            match r.chunk().await {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    outcome = Some(e);
                    break;
                }
            }
        }
        let e = outcome.expect("a 100 kB body can't finish at this bandwidth");
        assert!(
            e.is_timeout(),
            "bandwidth {bw}: the connection broke instead of being paced: {e:?}"
        );
    }
    hub.stop().await;
}
