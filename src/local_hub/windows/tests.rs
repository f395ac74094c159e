//! Unit tests of the request windows: routing of paths to buckets, tier quotas, fixed-window
//! arithmetic on an injected clock, key expiry and the admin JSON.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// A limiter whose clock is the returned counter (ms since the epoch).
fn limiter(settings: RequestWindows, start_ms: u64) -> (WindowLimiter, Arc<AtomicU64>) {
    let now = Arc::new(AtomicU64::new(start_ms));
    let n = now.clone();
    let clock: Clock = Arc::new(move || Duration::from_millis(n.load(Ordering::SeqCst)));
    (WindowLimiter::with_clock(settings, clock), now)
}

fn user(u: &str) -> Who {
    Who::User(u.to_string())
}

#[test]
fn paths_to_buckets() {
    let cases = [
        ("/api/models/ns/m", Some(Bucket::Api)),
        ("/api/datasets/ns/d/commit/main", Some(Bucket::Api)),
        ("/api/models/ns/m/xet-read-token/main", Some(Bucket::Api)),
        ("/api/whoami-v2", Some(Bucket::Api)),
        ("/api/buckets/ns/b/paths-info", Some(Bucket::Api)),
        ("/api/models/ns/m/tree/main/resolve/x", Some(Bucket::Api)),
        ("/ns/m.git/info/lfs/objects/batch", Some(Bucket::Api)),
        ("/datasets/ns/d.git/info/lfs/objects/verify", Some(Bucket::Api)),
        ("/ns/m/resolve/main/config.json", Some(Bucket::Resolvers)),
        ("/datasets/ns/d/resolve/refs%2Fpr%2F1/a.csv", Some(Bucket::Resolvers)),
        ("/buckets/ns/b/resolve/x.bin", Some(Bucket::Resolvers)),
        ("/ns/m/resolve/main/x.git/info/lfs/y", Some(Bucket::Resolvers)),
        ("/ns/m", Some(Bucket::Pages)),
        ("/", Some(Bucket::Pages)),
        ("/datasets/ns/d/tree/main", Some(Bucket::Pages)),
        ("/admin/stats", None),
        ("/admin/limits", None),
        ("/admin/anything", None),
    ];
    for (path, want) in cases {
        assert_eq!(bucket_of(path), want, "{path}");
    }
}

#[test]
fn tier_quotas() {
    let hub = RequestWindows::default();
    let q = |t, b| hub.quota(t, b);
    assert_eq!(
        [
            q(Tier::Anonymous, Bucket::Api),
            q(Tier::Anonymous, Bucket::Resolvers),
            q(Tier::Anonymous, Bucket::Pages)
        ],
        [Some(500), Some(3000), Some(100)]
    );
    assert_eq!(
        [
            q(Tier::Free, Bucket::Api),
            q(Tier::Free, Bucket::Resolvers),
            q(Tier::Free, Bucket::Pages)
        ],
        [Some(1000), Some(5000), Some(200)]
    );
    assert_eq!(q(Tier::Pro, Bucket::Api), Some(2500));
    assert_eq!(q(Tier::Team, Bucket::Resolvers), Some(20_000));
    assert_eq!(q(Tier::Enterprise, Bucket::Pages), Some(600));
    assert_eq!(q(Tier::EnterprisePlus, Bucket::Resolvers), Some(100_000));
    assert_eq!(q(Tier::Free, Bucket::Cas), None, "no CAS quota by default");
    let scaled = RequestWindows {
        cas_quota: 7,
        ..RequestWindows::scaled(6, 0.0006)
    };
    assert_eq!(
        scaled.quota(Tier::Free, Bucket::Resolvers),
        Some(3),
        "5000 × 0.0006 is 3, not 4"
    );
    assert_eq!(scaled.quota(Tier::Free, Bucket::Api), Some(1), "0.6 rounds up");
    assert_eq!(scaled.quota(Tier::Anonymous, Bucket::Pages), Some(1), "at least 1");
    assert_eq!(
        scaled.quota(Tier::Pro, Bucket::Cas),
        Some(7),
        "the CAS quota is not scaled"
    );
    assert_eq!(RequestWindows::scaled(30, 0.1).quota(Tier::Pro, Bucket::Api), Some(250));
    let mut s = RequestWindows::default();
    s.tiers.insert("alice".into(), "pro".parse().unwrap());
    assert_eq!((s.tier_of("alice"), s.tier_of("bob")), (Tier::Pro, Tier::Free));
    assert_eq!("enterprise-plus".parse::<Tier>(), Ok(Tier::EnterprisePlus));
    assert!("anonymous".parse::<Tier>().is_err());
    assert!("gold".parse::<Tier>().unwrap_err().contains("free, pro, team"));
    assert!(RequestWindows::scaled(0, 1.0).validate().is_err());
    assert!(RequestWindows::scaled(30, 0.0).validate().is_err());
    assert!(RequestWindows::scaled(30, f64::NAN).validate().is_err());
}

#[test]
fn fixed_windows_on_the_unix_clock() {
    // 10 s windows, free api quota scaled to 2; the clock starts 3.5 s into a window.
    let (l, now) = limiter(RequestWindows::scaled(10, 0.002), 1_000_003_500);
    let a = user("alice");
    let Verdict::Allowed(c) = l.check(&a, Bucket::Api) else {
        panic!()
    };
    assert_eq!(
        c,
        Charge {
            bucket: Bucket::Api,
            quota: 2,
            remaining: 1,
            reset_secs: 7,
            window_secs: 10
        }
    );
    assert_eq!(
        c.headers(),
        [
            ("ratelimit", "\"api\";r=1;t=7".to_string()),
            ("ratelimit-policy", "\"fixed window\";\"api\";q=2;w=10".to_string())
        ]
    );
    now.store(1_000_009_200, Ordering::SeqCst);
    assert!(matches!(
        l.check(&a, Bucket::Api),
        Verdict::Allowed(Charge { remaining: 0, .. })
    ));
    let Verdict::Refused(r) = l.check(&a, Bucket::Api) else {
        panic!()
    };
    assert_eq!(
        (r.charge.remaining, r.charge.reset_secs),
        (0, 1),
        "0.8 s left rounds up to 1"
    );
    assert!(
        matches!(l.check(&a, Bucket::Resolvers), Verdict::Allowed(_)),
        "buckets apart"
    );
    assert!(
        matches!(l.check(&user("bob"), Bucket::Api), Verdict::Allowed(_)),
        "users apart"
    );
    // The next window starts at the multiple of 10 s, not 10 s after the first request.
    now.store(1_000_010_000, Ordering::SeqCst);
    let Verdict::Allowed(c) = l.check(&a, Bucket::Api) else {
        panic!()
    };
    assert_eq!((c.remaining, c.reset_secs), (1, 10));
    let s = l.stats();
    let alice = &s.keys["user:alice"];
    assert_eq!(
        alice["api"],
        BucketStats {
            used: 1,
            quota: Some(2),
            remaining: Some(1),
            reset_secs: 10,
            refused: 1
        }
    );
    assert_eq!(alice["resolvers"].used, 0, "a new window");
    assert_eq!(alice["cas"].quota, None);
    assert_eq!(s.refused["api"], 1);
    // Off: nothing is counted.
    l.set_settings(RequestWindows::off()).unwrap();
    assert!(matches!(l.check(&a, Bucket::Api), Verdict::Untracked));
    l.reset();
    assert!(l.stats().keys.is_empty());
    assert_eq!(l.stats().refused["api"], 0);
}

#[test]
fn anonymous_per_ip_and_tiers() {
    let mut s = RequestWindows::scaled(300, 0.01);
    s.tiers.insert("pro-user".into(), Tier::Pro);
    let (l, _) = limiter(s, 0);
    let ip1 = Who::Ip("127.0.0.1".parse().unwrap());
    let ip2 = Who::Ip("127.0.0.2".parse().unwrap());
    let count = |who: &Who, b| {
        (0..1000)
            .take_while(|_| !matches!(l.check(who, b), Verdict::Refused(_)))
            .count()
    };
    assert_eq!(count(&ip1, Bucket::Pages), 1);
    assert_eq!(count(&ip2, Bucket::Pages), 1);
    assert_eq!(count(&ip1, Bucket::Api), 5);
    assert_eq!(count(&user("free-user"), Bucket::Api), 10);
    assert_eq!(count(&user("pro-user"), Bucket::Api), 25);
    assert_eq!(
        count(&user("pro-user"), Bucket::Cas),
        1000,
        "no CAS quota: never refused"
    );
    let Verdict::Refused(r) = l.check(&ip1, Bucket::Api) else {
        panic!()
    };
    assert_eq!(
        r.message(),
        "We had to rate limit your IP (127.0.0.1). To continue using our service, create a HF account or \
         login to your existing account, and make sure you pass a HF_TOKEN if you're using the API."
    );
    let Verdict::Refused(r) = l.check(&user("free-user"), Bucket::Api) else {
        panic!()
    };
    assert_eq!(
        r.message(),
        "We had to rate limit you, you hit the quota of 10 api requests per 5 minutes period. Upgrade to a PRO \
         user or Team/Enterprise organization account (https://hf.co/pricing) to get higher limits. See \
         https://huggingface.co/docs/hub/rate-limits"
    );
    let Verdict::Refused(r) = l.check(&user("pro-user"), Bucket::Api) else {
        panic!()
    };
    assert_eq!(
        r.message(),
        "We had to rate limit you, you hit the quota of 25 api requests per 5 minutes period. See \
         https://huggingface.co/docs/hub/rate-limits"
    );
    assert_eq!(window_phrase(6), "6 seconds");
    assert_eq!(window_phrase(60), "1 minute");
    assert_eq!(window_phrase(3600), "1 hour");
    assert_eq!(window_phrase(90), "90 seconds");
}

#[test]
fn idle_keys_are_forgotten() {
    let (l, now) = limiter(RequestWindows::scaled(10, 1.0), 0);
    for i in 0..100u8 {
        l.check(&Who::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))), Bucket::Pages);
    }
    l.check(&user("steady"), Bucket::Api);
    assert_eq!(l.len(), 101);
    // Next window: the keys of the last one are kept (their refusals still count).
    now.store(10_000, Ordering::SeqCst);
    l.check(&user("steady"), Bucket::Api);
    assert_eq!(l.len(), 101);
    assert_eq!(l.stats().keys["ip:10.0.0.1"]["pages"].used, 0);
    // A whole window without their requests: gone, from the table and the stats.
    now.store(20_000, Ordering::SeqCst);
    l.check(&user("steady"), Bucket::Api);
    assert_eq!(l.len(), 1);
    assert_eq!(l.stats().keys.keys().collect::<Vec<_>>(), ["user:steady"]);
    now.store(45_000, Ordering::SeqCst);
    assert!(l.stats().keys.is_empty(), "stats leave out keys due to be swept");
}

#[test]
fn admin_json() {
    let mut s = RequestWindows::default();
    let reset = s
        .apply_json(
            &json!({"window_secs": 6, "quota_scale": 0.5, "cas_quota": 4, "tiers": {"a": "team"},
                            "reset": true}),
        )
        .unwrap();
    assert!(reset);
    assert_eq!(
        (s.window_secs, s.quota_scale, s.cas_quota, s.tier_of("a")),
        (6, 0.5, 4, Tier::Team)
    );
    assert!(!s.apply_json(&json!({"enabled": false})).unwrap());
    assert!(!s.enabled && s.window_secs == 6, "other fields kept");
    for bad in [
        json!({"window_secs": 0}),
        json!({"window_secs": -3}),
        json!({"quota_scale": 0}),
        json!({"tiers": {"a": "gold"}}),
        json!({"nope": 1}),
        json!(5),
    ] {
        let before = s.clone();
        assert!(s.apply_json(&bad).is_err(), "{bad}");
        assert_eq!(s, before, "a refused change changes nothing: {bad}");
    }
    let v = s.to_json();
    assert_eq!(v["quotas"]["team"]["api"], 1500);
    assert_eq!(v["quotas"]["anonymous"]["cas"], 4);
    assert_eq!(v["tiers"]["a"], "team");
}
