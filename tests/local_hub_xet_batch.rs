//! Batch file reconstruction on the local Hub's CAS (`POST /v1/reconstructions` as the CAS API
//! documentation gives it, and xet-core's `GET ?file_id=` form): many small Xet files answered in
//! one request, unknown hashes left out, malformed keys refused, the CAS token required, and the
//! request counted and faulted as a reconstruction.

mod common;

use common::{Repo, bearer, client};
use hubfs::local_hub::{FaultSettings, LocalHub, RouteClass};
use serde_json::{Value, json};

const FILES: usize = 30;

/// A Hub holding `FILES` Xet files of 4 KiB in `d/`, with their Xet hashes and a CAS read token.
async fn setup() -> (LocalHub, Vec<String>, String) {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint().to_string();
    let repo = Repo::dataset("local/small");
    let files: Vec<(String, Vec<u8>)> = (0..FILES)
        .map(|i| (format!("d/{i:04}.bin"), common::bytes(4096, i as u64)))
        .collect();
    common::upload_xet_files(&ep, &repo, &files).await;
    let c = client();
    let tree: Value = c
        .get(format!("{}/tree/main/d", repo.api(&ep)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let hashes: Vec<String> = tree
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["xetHash"]
                .as_str()
                .expect("small binary files are in Xet")
                .to_string()
        })
        .collect();
    assert_eq!(hashes.len(), FILES);
    let tok: Value = c
        .get(format!("{}/xet-read-token/main", repo.api(&ep)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (hub, hashes, tok["accessToken"].as_str().unwrap().to_string())
}

/// Checks a batch answer: exactly `want` files, each term's xorb in `fetch_info`.
fn check_answer(v: &Value, want: &[String]) {
    let files = v["files"].as_object().expect("files");
    let mut got: Vec<&String> = files.keys().collect();
    got.sort();
    let mut want_sorted: Vec<&String> = want.iter().collect();
    want_sorted.sort();
    assert_eq!(got, want_sorted);
    for (h, terms) in files {
        let terms = terms.as_array().unwrap();
        assert!(!terms.is_empty(), "{h} has terms");
        for t in terms {
            let xorb = t["hash"].as_str().unwrap();
            let ranges = v["fetch_info"][xorb].as_array().expect("fetch_info for every xorb");
            let (s, e) = (
                t["range"]["start"].as_u64().unwrap(),
                t["range"]["end"].as_u64().unwrap(),
            );
            assert!(
                ranges.iter().any(|r| r["range"]["start"].as_u64().unwrap() <= s
                    && e <= r["range"]["end"].as_u64().unwrap()
                    && r["url"].as_str().is_some_and(|u| u.starts_with("http"))),
                "a fetch range holds chunks {s}..{e} of {xorb}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_forms_answer_many_files_in_one_request() {
    let (hub, hashes, token) = setup().await;
    let c = client();
    let url = format!("{}/v1/reconstructions", hub.cas_url());
    let unknown = "0123456789abcdef".repeat(4);
    let mut keys: Vec<Value> = hashes.iter().map(|h| json!({"prefix": "default", "hash": h})).collect();
    keys.push(json!({"prefix": "default", "hash": unknown}));
    hub.reset_stats();

    let r = c
        .post(&url)
        .header("authorization", bearer(&token))
        .json(&keys)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let post: Value = r.json().await.unwrap();
    check_answer(&post, &hashes);
    // The files were uploaded together: their terms sit in few xorbs.
    assert!(
        post["fetch_info"].as_object().unwrap().len() <= 2,
        "{}",
        post["fetch_info"]
    );

    let q: Vec<String> = hashes
        .iter()
        .chain([&unknown])
        .map(|h| format!("file_id={h}"))
        .collect();
    let r = c
        .get(format!("{url}?{}", q.join("&")))
        .header("authorization", bearer(&token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let get: Value = r.json().await.unwrap();
    check_answer(&get, &hashes);
    assert_eq!(post["files"], get["files"]);
    assert_eq!(
        hub.stats(RouteClass::Reconstruction).requests,
        2,
        "one request per batch"
    );

    // Only unknown hashes: an empty answer, not a 404 (the batch form has none).
    let r = c
        .post(&url)
        .header("authorization", bearer(&token))
        .json(&json!([{"prefix": "default", "hash": unknown}]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["files"], json!({}));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_batches_tokens_and_faults() {
    let (hub, hashes, token) = setup().await;
    let c = client();
    let url = format!("{}/v1/reconstructions", hub.cas_url());
    let keys: Vec<Value> = hashes.iter().map(|h| json!({"prefix": "default", "hash": h})).collect();
    let post = |body: Value, tok: Option<&str>| {
        let mut r = c.post(&url).json(&body);
        if let Some(t) = tok {
            r = r.header("authorization", bearer(t));
        }
        r.send()
    };
    assert_eq!(post(json!(keys), None).await.unwrap().status(), 401);
    assert_eq!(post(json!(keys), Some("not-a-token")).await.unwrap().status(), 401);
    for bad in [
        json!({"hash": hashes[0]}),
        json!([{"prefix": "other", "hash": hashes[0]}]),
        json!([{"prefix": "default", "hash": "abc"}]),
    ] {
        assert_eq!(post(bad.clone(), Some(&token)).await.unwrap().status(), 400, "{bad}");
    }
    let too_many: Vec<Value> = (0..1001)
        .map(|i| json!({"prefix": "default", "hash": format!("{i:064x}")}))
        .collect();
    assert_eq!(post(json!(too_many), Some(&token)).await.unwrap().status(), 400);
    let r = c
        .get(format!("{url}?file_id=nothex"))
        .header("authorization", bearer(&token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // The reconstruction fault class breaks batches too, and counts them.
    let s = FaultSettings {
        error_rate: 1.0,
        ..FaultSettings::default()
    };
    hub.set_faults(RouteClass::Reconstruction, s).unwrap();
    let before = hub.stats(RouteClass::Reconstruction).faults_injected;
    assert_eq!(post(json!(keys), Some(&token)).await.unwrap().status(), 500);
    assert_eq!(hub.stats(RouteClass::Reconstruction).faults_injected, before + 1);
    hub.clear_faults();
    assert_eq!(post(json!(keys), Some(&token)).await.unwrap().status(), 200);
    hub.stop().await;
}
