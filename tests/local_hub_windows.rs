//! The real Hub's request windows as the local Hub enforces them, over real HTTP: each bucket
//! (`api`, `resolvers`, `pages`, `cas`) refuses past its quota with the Hub's 429, per user (all of a
//! user's tokens together) and per client IP, at the user's tier; the `RateLimit` headers, the
//! window reopening, `/admin/stats`, `/admin/limits`, the CLI flags, and what is never counted
//! (`/admin/…`, the blob origin). Windows are shortened and quotas scaled down so that each test
//! takes seconds.

mod common;

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use hubfs::local_hub::{LocalHub, RequestWindows, Tier};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

const ALICE1: &str = "hf_alice_one";
const ALICE2: &str = "hf_alice_two";
const BOB: &str = "hf_bob_token";
const CAROL: &str = "hf_carol_pro";

/// Seconds since the epoch, with a fraction.
fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Waits, if needed, until at least `need` seconds are left in the current fixed window of
/// `window` seconds, then forgets every count: the test's requests all fall in one fresh window.
async fn fresh_window(hub: &LocalHub, window: u64, need: f64) {
    let left = window as f64 - unix_now() % window as f64;
    if left < need {
        tokio::time::sleep(Duration::from_secs_f64(left + 0.05)).await;
    }
    hub.reset_request_windows();
}

/// A client whose requests come from `ip` (any 127.0.0.0/8 address reaches the loopback Hub).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

async fn get(c: &reqwest::Client, url: &str, token: Option<&str>) -> reqwest::Response {
    let mut r = c.get(url);
    if let Some(t) = token {
        r = r.header("authorization", bearer(t));
    }
    r.send().await.unwrap()
}

/// `RateLimit: "BUCKET";r=R;t=T` → (bucket, r, t), checking the exact format.
fn ratelimit(h: &HeaderMap) -> (String, u64, u64) {
    let v = header_str(h, "ratelimit").expect("RateLimit header");
    let (name, rest) = v
        .strip_prefix('"')
        .and_then(|v| v.split_once("\";r="))
        .unwrap_or_else(|| panic!("RateLimit {v:?}"));
    let (r, t) = rest.split_once(";t=").unwrap_or_else(|| panic!("RateLimit {v:?}"));
    (name.to_string(), r.parse().unwrap(), t.parse().unwrap())
}

/// Asserts the `RateLimit-Policy` of a fixed window.
fn assert_policy(h: &HeaderMap, bucket: &str, quota: u64, window: u64) {
    assert_eq!(
        header_str(h, "ratelimit-policy"),
        Some(format!("\"fixed window\";\"{bucket}\";q={quota};w={window}").as_str())
    );
}

/// Sends `n` requests that must all be answered `want` with `RateLimit` counting down from
/// `quota - 1 - already`; returns the `t` of the last.
async fn spend(
    n: u64,
    already: u64,
    quota: u64,
    window: u64,
    bucket: &str,
    want: StatusCode,
    send: impl AsyncFn() -> reqwest::Response,
) -> u64 {
    let mut t = 0;
    for i in 0..n {
        let r = send().await;
        assert_eq!(r.status(), want, "{bucket} request {i}");
        let (name, remaining, secs) = ratelimit(r.headers());
        assert_eq!(
            (name.as_str(), remaining),
            (bucket, quota - 1 - already - i),
            "{bucket} request {i}"
        );
        assert!((1..=window).contains(&secs), "t={secs}");
        assert_policy(r.headers(), bucket, quota, window);
        t = secs;
    }
    t
}

/// Asserts the Hub's 429 for a spent window; returns (message, t).
async fn assert_refused(r: reqwest::Response, bucket: &str, quota: u64, window: u64) -> (String, u64) {
    let before = unix_now();
    let (h, v) = assert_hub_error(r, Some(StatusCode::TOO_MANY_REQUESTS), bucket).await;
    let (name, remaining, t) = ratelimit(&h);
    assert_eq!((name.as_str(), remaining), (bucket, 0));
    // Whole seconds to the next multiple of the window, rounded up.
    let expect = (window as f64 - before % window as f64).ceil() as u64;
    assert!(
        t.abs_diff(expect) <= 1 && (1..=window).contains(&t),
        "t={t}, expected about {expect}"
    );
    assert_eq!(header_str(&h, "retry-after"), Some(t.to_string().as_str()));
    assert_policy(&h, bucket, quota, window);
    let msg = v["error"].as_str().unwrap().to_string();
    assert_eq!(header_str(&h, "x-error-message"), Some(msg.as_str()));
    (msg, t)
}

/// A Hub with `windows`, tokens ALICE1 and ALICE2 (user alice), BOB, CAROL (carol, on `pro`) and
/// WRITE (user local), and the public model `local/w` holding `f.txt` and the LFS file `l.bin`.
async fn hub_with(mut windows: RequestWindows) -> (LocalHub, Repo) {
    windows.tiers.insert("carol".into(), Tier::Pro);
    let hub = LocalHub::start_temp_with(false, |c| {
        c.request_windows = windows.clone();
        c.tokens = [
            format!("local:{WRITE}:write"),
            format!("alice:{ALICE1}:write"),
            format!("alice:{ALICE2}:read"),
            format!("bob:{BOB}:write"),
            format!("carol:{CAROL}:read"),
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    })
    .await
    .unwrap();
    assert_eq!(hub.request_windows(), windows, "the config's windows are in force");
    // The setup needs more requests than the tests' small quotas allow.
    hub.set_request_windows(RequestWindows::off()).unwrap();
    let (c, ep) = (client(), hub.endpoint());
    let repo = Repo::model("local/w");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let lfs = bytes(4096, 7);
    let oid = lfs_upload_basic(&c, ep, WRITE, &repo, &lfs).await;
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[
            header_line("files", None),
            utf8_line("f.txt", "hello"),
            lfs_line("l.bin", &oid, lfs.len() as u64),
        ],
    )
    .await;
    hub.set_request_windows(windows).unwrap();
    (hub, repo)
}

async fn stats(c: &reqwest::Client, ep: &str) -> Value {
    let r = get(c, &format!("{ep}/admin/stats"), Some(WRITE)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(!r.headers().contains_key("ratelimit"), "/admin/ is not counted");
    r.json().await.unwrap()
}

async fn admin_limits(c: &reqwest::Client, ep: &str, body: Option<Value>) -> reqwest::Response {
    let req = match body {
        Some(b) => c.post(format!("{ep}/admin/limits")).json(&b),
        None => c.get(format!("{ep}/admin/limits")),
    };
    req.header("authorization", bearer(WRITE)).send().await.unwrap()
}

/// Each bucket refuses past its quota, with the Hub's headers, `Retry-After` and message; a commit
/// is an api request; `/admin/` and the blob origin are never refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bucket_refuses_past_its_quota() {
    // 20 s windows at 1/100 of the quotas: a free user has 10 api, 50 resolvers, 2 pages.
    let (w, (api_q, res_q, pages_q)) = (20, (10, 50, 2));
    let (hub, repo) = hub_with(RequestWindows::scaled(w, 0.01)).await;
    let (c, ep) = (client(), hub.endpoint().to_string());
    let blob = header_str(
        get(&c, &repo.resolve(&ep, "main", "l.bin"), Some(WRITE))
            .await
            .headers(),
        "location",
    )
    .expect("302 to the blob origin")
    .to_string();
    fresh_window(&hub, w, 12.0).await;
    hub.reset_stats();

    let info = repo.api(&ep);
    spend(api_q, 0, api_q, w, "api", StatusCode::OK, async || {
        get(&c, &info, Some(WRITE)).await
    })
    .await;
    let (msg, _) = assert_refused(get(&c, &info, Some(WRITE)).await, "api", api_q, w).await;
    assert_eq!(
        msg,
        "We had to rate limit you, you hit the quota of 10 api requests per 20 seconds period. Upgrade to a PRO \
         user or Team/Enterprise organization account (https://hf.co/pricing) to get higher limits. See \
         https://huggingface.co/docs/hub/rate-limits"
    );
    // A commit is an api request: refused before it is looked at, with the window's headers.
    let body = ndjson(&[header_line("late", None), utf8_line("g.txt", "x")]);
    let r = commit_raw(&c, &ep, WRITE, &repo, "main", "", body).await;
    assert_refused(r, "api", api_q, w).await;
    // The LFS API too.
    let r = c
        .post(format!("{}.git/info/lfs/objects/batch", repo.web(&ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"operation": "download", "objects": []}))
        .send()
        .await
        .unwrap();
    assert_refused(r, "api", api_q, w).await;

    // Resolvers: GET and HEAD, 200 and 302 alike; other buckets are not spent by the api's.
    let file = repo.resolve(&ep, "main", "f.txt");
    let lfs = repo.resolve(&ep, "main", "l.bin");
    spend(res_q - 1, 0, res_q, w, "resolvers", StatusCode::OK, async || {
        get(&c, &file, Some(WRITE)).await
    })
    .await;
    spend(1, res_q - 1, res_q, w, "resolvers", StatusCode::FOUND, async || {
        c.head(&lfs)
            .header("authorization", bearer(WRITE))
            .send()
            .await
            .unwrap()
    })
    .await;
    let r = get(&c, &file, Some(WRITE)).await;
    let (msg, _) = assert_refused(r, "resolvers", res_q, w).await;
    assert!(
        msg.contains("the quota of 50 resolvers requests per 20 seconds period"),
        "{msg}"
    );

    // Pages: everything else on the API origin, 404s included.
    let page = repo.web(&ep);
    spend(pages_q, 0, pages_q, w, "pages", StatusCode::NOT_FOUND, async || {
        get(&c, &page, Some(WRITE)).await
    })
    .await;
    assert_refused(get(&c, &page, Some(WRITE)).await, "pages", pages_q, w).await;

    // The blob origin is the Hub's CDN: never counted.
    for _ in 0..res_q + 5 {
        let r = get(&c, &blob, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(!r.headers().contains_key("ratelimit"));
    }
    // The admin endpoints are never refused, and show the figures.
    let v = stats(&c, &ep).await;
    let local = &v["request_windows"]["keys"]["user:local"];
    assert_eq!(
        local["api"],
        json!({"used": api_q, "quota": api_q, "remaining": 0, "reset_secs": local["api"]["reset_secs"], "refused": 3})
    );
    assert!((1..=w).contains(&local["api"]["reset_secs"].as_u64().unwrap()));
    assert_eq!(
        (
            local["resolvers"]["used"].as_u64(),
            local["resolvers"]["refused"].as_u64()
        ),
        (Some(50), Some(1))
    );
    assert_eq!(
        (local["pages"]["used"].as_u64(), local["pages"]["refused"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(local["cas"]["quota"], Value::Null, "no CAS quota by default");
    assert_eq!(
        v["request_windows"]["refused"],
        json!({"api": 3, "resolvers": 1, "pages": 1, "cas": 0})
    );
    assert_eq!(v["request_windows"]["window_secs"], w);
    // The route classes count refused requests too: the api class has the pages (404s) as well.
    assert_eq!(v["api"]["requests"], api_q + 2 + pages_q + 1, "{v}");
    assert_eq!(v["commit"]["requests"], 1, "{v}");
    assert_eq!(admin_limits(&c, &ep, None).await.status(), StatusCode::OK);
    // The library view agrees.
    let s = hub.request_window_stats();
    assert_eq!(s.keys["user:local"]["api"].used, api_q);
    assert_eq!(s.refused["api"], 3);
    hub.stop().await;
}

/// A spent window reopens when the fixed window ends, `t` seconds after the 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_reopens_after_t_seconds() {
    let w = 3;
    let (hub, repo) = hub_with(RequestWindows::scaled(w, 0.002)).await;
    let (c, ep) = (client(), hub.endpoint().to_string());
    let info = repo.api(&ep);
    fresh_window(&hub, w, 1.5).await;
    spend(2, 0, 2, w, "api", StatusCode::OK, async || {
        get(&c, &info, Some(WRITE)).await
    })
    .await;
    let (_, t) = assert_refused(get(&c, &info, Some(WRITE)).await, "api", 2, w).await;
    tokio::time::sleep(Duration::from_secs(t)).await;
    let r = get(&c, &info, Some(WRITE)).await;
    assert_eq!(r.status(), StatusCode::OK, "after waiting t={t}");
    let (_, remaining, t2) = ratelimit(r.headers());
    assert_eq!(remaining, 1, "a new window");
    assert!(t2 >= 2, "early in the new window: t={t2}");
    hub.stop().await;
}

/// Per user (all of a user's tokens share one window, others have their own), per IP for
/// anonymous requests and unknown tokens, and at the user's tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_are_per_user_per_ip_and_per_tier() {
    // 30 s windows at 1/100: free 10 api, anonymous 5, pro 25.
    let w = 30;
    let (hub, repo) = hub_with(RequestWindows::scaled(w, 0.01)).await;
    let ep = hub.endpoint().to_string();
    let info = repo.api(&ep);
    let (c1, c2, c3) = (
        client_from("127.0.0.1"),
        client_from("127.0.0.2"),
        client_from("127.0.0.3"),
    );
    fresh_window(&hub, w, 20.0).await;

    // alice's two tokens (one write, one read) share her 10.
    spend(6, 0, 10, w, "api", StatusCode::OK, async || {
        get(&c1, &info, Some(ALICE1)).await
    })
    .await;
    spend(4, 6, 10, w, "api", StatusCode::OK, async || {
        get(&c2, &info, Some(ALICE2)).await
    })
    .await;
    for t in [ALICE1, ALICE2] {
        assert_refused(get(&c1, &info, Some(t)).await, "api", 10, w).await;
    }
    // bob is another user: a window of his own, from the same IP.
    spend(10, 0, 10, w, "api", StatusCode::OK, async || {
        get(&c1, &info, Some(BOB)).await
    })
    .await;
    assert_refused(get(&c1, &info, Some(BOB)).await, "api", 10, w).await;

    // Anonymous: per IP, at the anonymous quota (5).
    spend(5, 0, 5, w, "api", StatusCode::OK, async || get(&c1, &info, None).await).await;
    let (msg, _) = assert_refused(get(&c1, &info, None).await, "api", 5, w).await;
    assert_eq!(
        msg,
        "We had to rate limit your IP (127.0.0.1). To continue using our service, create a HF account or login \
         to your existing account, and make sure you pass a HF_TOKEN if you're using the API."
    );
    spend(5, 0, 5, w, "api", StatusCode::OK, async || get(&c2, &info, None).await).await;
    let (msg, _) = assert_refused(get(&c2, &info, None).await, "api", 5, w).await;
    assert!(msg.contains("(127.0.0.2)"), "{msg}");
    // An unknown token keeps its 401, and is counted against the IP.
    spend(5, 0, 5, w, "api", StatusCode::UNAUTHORIZED, async || {
        get(&c3, &info, Some("hf_nobody")).await
    })
    .await;
    assert_refused(get(&c3, &info, Some("hf_nobody")).await, "api", 5, w).await;

    // carol is on `pro`: 2.5 times the free api quota.
    spend(25, 0, 25, w, "api", StatusCode::OK, async || {
        get(&c1, &info, Some(CAROL)).await
    })
    .await;
    let (msg, _) = assert_refused(get(&c1, &info, Some(CAROL)).await, "api", 25, w).await;
    assert_eq!(
        msg,
        "We had to rate limit you, you hit the quota of 25 api requests per 30 seconds period. See \
         https://huggingface.co/docs/hub/rate-limits"
    );

    let v = stats(&client(), &ep).await;
    let keys = &v["request_windows"]["keys"];
    let fig = |k: &str| {
        let a = &keys[k]["api"];
        (
            a["used"].as_u64(),
            a["quota"].as_u64(),
            a["remaining"].as_u64(),
            a["refused"].as_u64(),
        )
    };
    assert_eq!(fig("user:alice"), (Some(10), Some(10), Some(0), Some(2)));
    assert_eq!(fig("user:bob"), (Some(10), Some(10), Some(0), Some(1)));
    assert_eq!(fig("user:carol"), (Some(25), Some(25), Some(0), Some(1)));
    assert_eq!(fig("ip:127.0.0.1"), (Some(5), Some(5), Some(0), Some(1)));
    assert_eq!(fig("ip:127.0.0.2"), (Some(5), Some(5), Some(0), Some(1)));
    assert_eq!(fig("ip:127.0.0.3"), (Some(5), Some(5), Some(0), Some(1)));
    assert_eq!(keys.as_object().unwrap().len(), 6, "{keys}");
    hub.stop().await;
}

/// `/admin/limits` shows and changes the windows (tiers, scale, length, off); `LocalHub` does too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_limits_change_the_windows() {
    let (hub, repo) = hub_with(RequestWindows::default()).await;
    let (c, ep) = (client(), hub.endpoint().to_string());
    let info = repo.api(&ep);
    // The default is the Hub's.
    let r = get(&c, &info, Some(WRITE)).await;
    let (_, remaining, _) = ratelimit(r.headers());
    assert!(remaining < 1000 && remaining > 900, "r={remaining}");
    assert_policy(r.headers(), "api", 1000, 300);
    let v: Value = admin_limits(&c, &ep, None).await.json().await.unwrap();
    let rw = &v["request_windows"];
    assert_eq!(
        (
            rw["enabled"].clone(),
            rw["window_secs"].clone(),
            rw["quota_scale"].clone()
        ),
        (json!(true), json!(300), json!(1.0))
    );
    assert_eq!(
        rw["quotas"]["free"],
        json!({"api": 1000, "resolvers": 5000, "pages": 200, "cas": null})
    );
    assert_eq!(
        rw["quotas"]["anonymous"],
        json!({"api": 500, "resolvers": 3000, "pages": 100, "cas": null})
    );
    assert_eq!(rw["quotas"]["enterprise-plus"]["resolvers"], 100_000);
    assert_eq!(rw["tiers"], json!({"carol": "pro"}));

    // local becomes pro, windows of 30 s at 1/500: pro api 5.
    let w = 30;
    let body =
        json!({"request_windows": {"window_secs": w, "quota_scale": 0.002, "tiers": {"local": "pro"}, "reset": true}});
    let r = admin_limits(&c, &ep, Some(body)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["request_windows"]["quotas"]["pro"]["api"], 5);
    assert_eq!(v["request_windows"]["tiers"], json!({"carol": "pro", "local": "pro"}));
    fresh_window(&hub, w, 10.0).await;
    spend(5, 0, 5, w, "api", StatusCode::OK, async || {
        get(&c, &info, Some(WRITE)).await
    })
    .await;
    assert_refused(get(&c, &info, Some(WRITE)).await, "api", 5, w).await;
    // A bad change is refused whole.
    for bad in [
        json!({"request_windows": {"window_secs": 0}}),
        json!({"request_windows": {"quota_scale": -1}}),
        json!({"request_windows": {"tiers": {"local": "platinum"}}}),
        json!({"request_windows": {"burst": 3}}),
    ] {
        let r = admin_limits(&c, &ep, Some(bad.clone())).await;
        let (_, e) = assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &bad.to_string()).await;
        assert!(
            e["error"].as_str().unwrap().starts_with("Invalid request_windows"),
            "{e}"
        );
    }
    assert_eq!(hub.request_windows().window_secs, w);
    // Reset through the endpoint: a full window again.
    admin_limits(&c, &ep, Some(json!({"request_windows": {"reset": true}}))).await;
    let (_, remaining, _) = ratelimit(get(&c, &info, Some(WRITE)).await.headers());
    assert_eq!(remaining, 4);
    // Off: nothing counted, no headers.
    let r = admin_limits(&c, &ep, Some(json!({"request_windows": {"enabled": false}}))).await;
    assert_eq!(r.status(), StatusCode::OK);
    for _ in 0..10 {
        let r = get(&c, &info, Some(WRITE)).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(!r.headers().contains_key("ratelimit"));
    }
    let v = stats(&c, &ep).await;
    assert_eq!(v["request_windows"]["enabled"], false);
    // From Rust.
    hub.set_request_windows(RequestWindows::scaled(w, 0.001)).unwrap();
    assert!(hub.set_request_windows(RequestWindows::scaled(0, 1.0)).is_err());
    hub.reset_request_windows();
    fresh_window(&hub, w, 5.0).await;
    spend(1, 0, 1, w, "api", StatusCode::OK, async || {
        get(&c, &info, Some(WRITE)).await
    })
    .await;
    assert_refused(get(&c, &info, Some(WRITE)).await, "api", 1, w).await;
    hub.stop().await;
}

/// The CAS has no quota by default; one set makes it refuse, per user of the CAS token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cas_bucket_refuses_only_when_asked() {
    let w = 30;
    let (hub, repo) = hub_with(RequestWindows::scaled(w, 1.0)).await;
    let (c, ep) = (client(), hub.endpoint().to_string());
    let r = get(&c, &format!("{}/xet-read-token/main", repo.api(&ep)), Some(WRITE)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    let (cas, token) = (
        v["casUrl"].as_str().unwrap().to_string(),
        v["accessToken"].as_str().unwrap().to_string(),
    );
    let url = format!("{cas}/v1/reconstructions/{}", "0".repeat(64));
    let cas_get = async || get(&c, &url, Some(&token)).await;
    for _ in 0..20 {
        let r = cas_get().await;
        assert_ne!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(!r.headers().contains_key("ratelimit"), "no CAS quota: no headers");
    }
    let r = admin_limits(
        &c,
        &ep,
        Some(json!({"request_windows": {"cas_quota": 3, "reset": true}})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    fresh_window(&hub, w, 10.0).await;
    for i in 0..3 {
        let r = cas_get().await;
        assert_ne!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(ratelimit(r.headers()).1, 2 - i);
        assert_policy(r.headers(), "cas", 3, w);
    }
    let (msg, _) = assert_refused(cas_get().await, "cas", 3, w).await;
    assert!(
        msg.contains("the quota of 3 cas requests per 30 seconds period"),
        "{msg}"
    );
    let v = stats(&c, &ep).await;
    let cas_fig = &v["request_windows"]["keys"]["user:local"]["cas"];
    assert_eq!(
        (cas_fig["used"].as_u64(), cas_fig["refused"].as_u64()),
        (Some(3), Some(1)),
        "{v}"
    );
    // Presigned CAS URLs are the CDN's: not counted.
    let r = get(
        &c,
        &format!("{}/v1/fetch_term?term=x", cas.split("/cas/").next().unwrap()),
        None,
    )
    .await;
    assert_ne!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    hub.stop().await;
}

/// The CLI flags set the windows; bad values name the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_flags_set_the_windows() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--request-window-secs",
        "40",
        "--request-quota-scale",
        "0.5",
        "--rate-tier",
        "local=team",
        "--cas-request-quota",
        "9",
    ];
    let hub = spawn_cli(dir.path(), &args, &[], None).await;
    let c = client();
    let v: Value = admin_limits(&c, &hub.endpoint, None).await.json().await.unwrap();
    let rw = &v["request_windows"];
    assert_eq!(
        (
            rw["enabled"].clone(),
            rw["window_secs"].clone(),
            rw["quota_scale"].clone(),
            rw["cas_quota"].clone()
        ),
        (json!(true), json!(40), json!(0.5), json!(9))
    );
    assert_eq!(
        rw["quotas"]["team"],
        json!({"api": 1500, "resolvers": 10_000, "pages": 200, "cas": 9})
    );
    let r = get(&c, &format!("{}/api/whoami-v2", hub.endpoint), Some(WRITE)).await;
    assert_policy(r.headers(), "api", 1500, 40);
    hub.kill9().await;

    let dir = tempfile::tempdir().unwrap();
    let hub = spawn_cli(dir.path(), &["--request-windows", "off"], &[], None).await;
    let r = get(&c, &format!("{}/api/whoami-v2", hub.endpoint), Some(WRITE)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(!r.headers().contains_key("ratelimit"));
    hub.kill9().await;

    for (flag, value, says) in [
        ("--request-windows", "maybe", "possible values: on, off"),
        ("--request-window-secs", "0", "whole number of seconds ≥ 1"),
        ("--request-quota-scale", "-2", "above 0"),
        (
            "--rate-tier",
            "local=gold",
            "free, pro, team, enterprise or enterprise-plus",
        ),
        ("--rate-tier", "local", "expected USER=TIER"),
        ("--cas-request-quota", "lots", "whole number ≥ 0"),
    ] {
        let (ok, out) = run_cli(&["local-hub", "--data-dir", "/nonexistent/hubfs-test", flag, value]).await;
        assert!(!ok, "{flag} {value} accepted");
        assert!(out.contains(flag) && out.contains(says), "{flag} {value}: {out}");
    }
}
