//! Storage buckets on the local Hub: the hf-hub crate's bucket API end to end (real Xet uploads and
//! downloads), then the wire shapes over plain HTTP: info, lists, tree pagination with an absolute
//! `Link`, paths-info, resolve headers and ranges, batch per-op failures, access rules and error
//! shapes, the batch limit and its knob, the fault class of batches, and a restart on the same data
//! dir. Every byte and status is checked.

mod common;

use common::{bytes, client, sha256_hex};
use futures::StreamExt;
use hf_hub::HFClient;
use hf_hub::buckets::{BucketCopyFile, BucketCopySourceType, BucketTreeEntry};
use hf_hub::repository::AddSource;
use hubfs::local_hub::{FaultSettings, LocalHub, LocalHubConfig, RouteClass, TokenSpec};
use reqwest::StatusCode;
use serde_json::{Value, json};

const ALICE: &str = "hf_alice_w";
const ALICE_READ: &str = "hf_alice_r";
const BOB: &str = "hf_bob_w";

fn tokens() -> Vec<TokenSpec> {
    vec![
        format!("alice:{ALICE}:write").parse().unwrap(),
        format!("alice:{ALICE_READ}:read").parse().unwrap(),
        format!("bob:{BOB}:write").parse().unwrap(),
    ]
}

async fn start(dir: &std::path::Path) -> LocalHub {
    let mut cfg = LocalHubConfig::new(dir);
    cfg.tokens = tokens();
    LocalHub::start(cfg).await.expect("hub")
}

fn hf(hub: &LocalHub, token: &str, cache: &std::path::Path) -> HFClient {
    HFClient::builder()
        .endpoint(hub.endpoint())
        .token(token)
        .cache_dir(cache)
        .build()
        .expect("client")
}

/// Uploads `files` through hf-hub (Xet, then a batch of addFile) and returns path → xetHash.
async fn upload(
    c: &HFClient,
    ns: &str,
    name: &str,
    files: &[(&str, Vec<u8>)],
) -> std::collections::HashMap<String, String> {
    let b = c.bucket(ns, name);
    b.upload_source_files()
        .files(
            files
                .iter()
                .map(|(p, d)| (p.to_string(), AddSource::bytes(d.clone())))
                .collect(),
        )
        .send()
        .await
        .expect("upload");
    let paths: Vec<String> = files.iter().map(|(p, _)| p.to_string()).collect();
    b.get_paths_info()
        .paths(paths)
        .send()
        .await
        .expect("paths-info")
        .into_iter()
        .map(|e| match e {
            BucketTreeEntry::File { path, xet_hash, .. } => (path, xet_hash),
            other => panic!("not a file: {other:?}"),
        })
        .collect()
}

async fn send(req: reqwest::RequestBuilder, token: Option<&str>) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let req = match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    };
    let r = req.send().await.expect("request");
    let (status, headers) = (r.status(), r.headers().clone());
    let text = r.text().await.expect("body");
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, headers, v)
}

fn ndjson(lines: &[Value]) -> String {
    lines.iter().map(|l| l.to_string() + "\n").collect()
}

async fn batch(hub: &LocalHub, id: &str, token: Option<&str>, lines: &[Value]) -> (StatusCode, Value) {
    let (s, _, v) = send(
        client()
            .post(format!("{}/api/buckets/{id}/batch", hub.endpoint()))
            .header("content-type", "application/x-ndjson")
            .body(ndjson(lines)),
        token,
    )
    .await;
    (s, v)
}

/// A Hub-shaped "not found": status, `X-Error-Code: RepoNotFound`, JSON error.
fn assert_bucket_missing(got: &(StatusCode, reqwest::header::HeaderMap, Value), status: StatusCode) {
    assert_eq!(got.0, status, "{:?} {:?}", got.1, got.2);
    assert_eq!(got.1.get("x-error-code").unwrap(), "RepoNotFound");
    assert!(got.1.get("x-error-message").is_some());
    // HEAD answers carry no body.
    assert!(got.2.is_null() || got.2["error"].is_string(), "{:?}", got.2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hf_hub_bucket_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start(dir.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let c = hf(&hub, ALICE, cache.path());

    let url = c
        .create_bucket()
        .namespace("alice")
        .name("ckpt")
        .private(true)
        .send()
        .await
        .expect("create");
    assert_eq!(url.url, format!("{}/buckets/alice/ckpt", hub.endpoint()));
    let again = c.create_bucket().namespace("alice").name("ckpt").send().await;
    assert!(again.is_err(), "a second create must fail with 409");
    c.create_bucket()
        .namespace("alice")
        .name("ckpt")
        .exist_ok(true)
        .send()
        .await
        .expect("exist_ok");

    let big = bytes(3 << 20, 7);
    let small = b"step,loss\n1,0.5\n".to_vec();
    let hashes = upload(
        &c,
        "alice",
        "ckpt",
        &[("run/weights.bin", big.clone()), ("run/log.csv", small.clone())],
    )
    .await;
    let b = c.bucket("alice", "ckpt");
    let info = b.info().send().await.expect("info");
    assert_eq!(
        (info.id.as_str(), info.private, info.total_files),
        ("alice/ckpt", true, 2)
    );
    assert_eq!(info.size, (big.len() + small.len()) as u64);

    let stream = b.list_tree().recursive(true).send().expect("list");
    let entries: Vec<BucketTreeEntry> = stream.map(|e| e.expect("entry")).collect().await;
    let files: Vec<(String, u64)> = entries
        .iter()
        .map(|e| match e {
            BucketTreeEntry::File { path, size, mtime, .. } => {
                assert!(mtime.is_some(), "{path} has no mtime");
                (path.clone(), *size)
            }
            BucketTreeEntry::Directory { path, .. } => panic!("recursive listings hold files only: {path}"),
        })
        .collect();
    assert_eq!(
        files,
        [
            ("run/log.csv".to_string(), small.len() as u64),
            ("run/weights.bin".to_string(), big.len() as u64)
        ]
    );
    let top: Vec<BucketTreeEntry> = b.list_tree().send().expect("list").map(|e| e.unwrap()).collect().await;
    assert!(
        matches!(&top[..], [BucketTreeEntry::Directory { path, .. }] if path == "run"),
        "{top:?}"
    );

    let (len, mut body) = b
        .download_file_stream()
        .remote_path("run/weights.bin")
        .send()
        .await
        .expect("download");
    assert_eq!(len, Some(big.len() as u64));
    let mut got = Vec::new();
    while let Some(chunk) = body.next().await {
        got.extend_from_slice(&chunk.expect("chunk"));
    }
    assert_eq!(sha256_hex(&got), sha256_hex(&big));
    let meta = b
        .get_file_metadata()
        .remote_path("run/weights.bin")
        .send()
        .await
        .expect("metadata");
    assert_eq!(
        (meta.size, meta.xet_hash.as_str()),
        (big.len() as u64, hashes["run/weights.bin"].as_str())
    );

    // Server-side copy by hash within the bucket, then delete the original.
    b.batch_operations()
        .copy(vec![BucketCopyFile {
            path: "keep/weights.bin".into(),
            xet_hash: hashes["run/weights.bin"].clone(),
            source_repo_type: BucketCopySourceType::Bucket,
            source_repo_id: "alice/ckpt".into(),
            size: Some(big.len() as u64),
            mtime: Some(1_700_000_000_123),
            content_type: None,
        }])
        .send()
        .await
        .expect("copy");
    b.delete_files()
        .paths(vec!["run/weights.bin".into()])
        .send()
        .await
        .expect("delete");
    let left: Vec<String> = b
        .get_paths_info()
        .paths(vec![
            "run/weights.bin".into(),
            "keep/weights.bin".into(),
            "run/log.csv".into(),
        ])
        .send()
        .await
        .unwrap()
        .into_iter()
        .map(|e| match e {
            BucketTreeEntry::File { path, mtime, .. } => {
                if path == "keep/weights.bin" {
                    assert_eq!(mtime.as_deref(), Some("2023-11-14T22:13:20.123Z"));
                }
                path
            }
            BucketTreeEntry::Directory { path, .. } => path,
        })
        .collect();
    assert_eq!(left, ["keep/weights.bin", "run/log.csv"]);

    let listed: Vec<String> = c
        .list_buckets()
        .namespace("alice")
        .send()
        .unwrap()
        .map(|b| b.unwrap().id)
        .collect()
        .await;
    assert_eq!(listed, ["alice/ckpt"]);
    c.move_bucket()
        .from_id("alice/ckpt")
        .to_id("alice/moved")
        .send()
        .await
        .expect("move");
    assert!(matches!(
        b.info().send().await,
        Err(hf_hub::HFError::BucketNotFound { .. })
    ));
    let moved = c.bucket("alice", "moved");
    assert_eq!(moved.info().send().await.expect("moved info").total_files, 2);
    c.delete_bucket()
        .bucket_id("alice/moved")
        .send()
        .await
        .expect("delete bucket");
    assert!(matches!(
        moved.info().send().await,
        Err(hf_hub::HFError::BucketNotFound { .. })
    ));
    c.delete_bucket()
        .bucket_id("alice/moved")
        .missing_ok(true)
        .send()
        .await
        .expect("missing ok");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_shapes_pagination_failures_and_access() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start(dir.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let c = hf(&hub, ALICE, cache.path());
    let ep = hub.endpoint().to_string();
    let http = client();

    // Create with Python's body; the answer names the bucket's URL.
    let (s, _, v) = send(
        http.post(format!("{ep}/api/buckets/alice/data"))
            .json(&json!({"visibility": "public"})),
        Some(ALICE),
    )
    .await;
    assert_eq!(
        (s, v["url"].as_str()),
        (StatusCode::OK, Some(format!("{ep}/buckets/alice/data").as_str()))
    );
    let (s, _, _) = send(
        http.post(format!("{ep}/api/buckets/alice/data")).json(&json!({})),
        Some(ALICE),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    // `me` is the caller's namespace; bob cannot create under alice; a read token cannot create.
    let (s, _, _) = send(
        http.post(format!("{ep}/api/buckets/me/secret"))
            .json(&json!({"private": true})),
        Some(ALICE),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, _) = send(
        http.post(format!("{ep}/api/buckets/alice/x")).json(&json!({})),
        Some(BOB),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = send(
        http.post(format!("{ep}/api/buckets/alice/x")).json(&json!({})),
        Some(ALICE_READ),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = send(http.post(format!("{ep}/api/buckets/alice/x")).json(&json!({})), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    let (s, _, info0) = send(http.get(format!("{ep}/api/buckets/alice/data")), None).await;
    assert_eq!(s, StatusCode::OK);
    let keys: Vec<&str> = info0.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    for k in ["id", "private", "createdAt", "updatedAt", "size", "totalFiles"] {
        assert!(keys.contains(&k), "info lacks {k}: {info0}");
    }
    assert_eq!(
        (info0["size"].as_u64(), info0["totalFiles"].as_u64()),
        (Some(0), Some(0))
    );

    // Content: one real Xet upload, then 25 more names for it through raw addFile lines.
    let content = bytes(200_000, 3);
    let hashes = upload(&c, "alice", "data", &[("seed.bin", content.clone())]).await;
    let hash = hashes["seed.bin"].clone();
    let lines: Vec<Value> = (0..25)
        .map(|i| json!({"type": "addFile", "path": format!("d/f{i:02}.bin"), "xetHash": hash, "mtime": 1_000 + i, "contentType": "application/octet-stream"}))
        .collect();
    let (s, v) = batch(&hub, "alice/data", Some(ALICE), &lines).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"success": true, "processed": 25, "succeeded": 25, "failed": []})
    );
    let (_, _, info1) = send(http.get(format!("{ep}/api/buckets/alice/data")), None).await;
    assert_eq!(info1["totalFiles"], 26);
    assert_eq!(info1["size"], 26 * content.len() as u64);
    assert!(info1["updatedAt"].as_str() > info0["updatedAt"].as_str());

    // Tree: entry shapes, then pages of 10 chained by absolute Link URLs.
    let mut url = format!("{ep}/api/buckets/alice/data/tree/d%2F?recursive=true&limit=10");
    let mut pages = Vec::new();
    loop {
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let next = r.headers().get("link").map(|l| l.to_str().unwrap().to_string());
        pages.push(r.json::<Vec<Value>>().await.unwrap());
        let Some(link) = next else { break };
        assert!(
            link.starts_with(&format!("<{ep}/api/buckets/alice/data/tree/")),
            "{link}"
        );
        assert!(link.ends_with(">; rel=\"next\""), "{link}");
        url = link[1..link.find('>').unwrap()].to_string();
    }
    assert_eq!(pages.iter().map(|p| p.len()).collect::<Vec<_>>(), [10, 10, 5]);
    let all: Vec<&Value> = pages.iter().flatten().collect();
    let first = all[0];
    assert_eq!(first["type"], "file");
    assert_eq!(first["path"], "d/f00.bin");
    assert_eq!(first["size"], content.len() as u64);
    assert_eq!(first["xetHash"], hash.as_str());
    assert_eq!(first["mtime"], "1970-01-01T00:00:01.000Z");
    assert!(first["uploadedAt"].as_str().unwrap().ends_with('Z'));
    let names: Vec<&str> = all.iter().map(|e| e["path"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..25).map(|i| format!("d/f{i:02}.bin")).collect();
    assert_eq!(names, want);
    // Root, one level: the folder (with the newest upload below it) and the file.
    let (_, _, root) = send(http.get(format!("{ep}/api/buckets/alice/data/tree")), None).await;
    assert_eq!(root[0]["type"], "directory");
    assert_eq!(root[0]["path"], "d");
    assert!(root[0]["uploadedAt"].is_string());
    assert_eq!(root[1]["path"], "seed.bin");
    assert_eq!(root.as_array().unwrap().len(), 2);

    // paths-info: files only, missing paths and folders left out.
    let (s, _, v) = send(
        http.post(format!("{ep}/api/buckets/alice/data/paths-info"))
            .json(&json!({"paths": ["seed.bin", "d", "nope"]})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["path"], "seed.bin");

    // Per-op failures: each fails alone, the rest applies, in order.
    let bogus = "ab".repeat(32);
    let (s, v) = batch(
        &hub,
        "alice/data",
        Some(ALICE),
        &[
            json!({"type": "addFile", "path": "bad/unknown.bin", "xetHash": bogus}),
            json!({"type": "addFile", "path": "bad/size.bin", "xetHash": hash, "size": 1}),
            json!({"type": "addFile", "path": "../escape", "xetHash": hash}),
            json!({"type": "renameFile", "path": "x"}),
            json!({"type": "copyFile", "path": "bad/from-secret.bin", "xetHash": hash, "sourceRepoType": "bucket", "sourceRepoId": "bob/none"}),
            json!({"type": "copyFile", "path": "bad/not-in-source.bin", "xetHash": bogus, "sourceRepoType": "bucket", "sourceRepoId": "alice/data"}),
            json!({"type": "deleteFile", "path": "d/f00.bin"}),
            json!({"type": "copyFile", "path": "copied.bin", "xetHash": hash, "sourceRepoType": "bucket", "sourceRepoId": "alice/data"}),
        ],
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["success"].as_bool(), v["processed"].as_u64(), v["succeeded"].as_u64()),
        (Some(false), Some(8), Some(2))
    );
    let failed: Vec<&str> = v["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        [
            "bad/unknown.bin",
            "bad/size.bin",
            "../escape",
            "x",
            "bad/from-secret.bin",
            "bad/not-in-source.bin"
        ]
    );
    assert!(
        v["failed"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| !f["error"].as_str().unwrap().is_empty())
    );
    let (_, _, info2) = send(http.get(format!("{ep}/api/buckets/alice/data")), None).await;
    assert_eq!(info2["totalFiles"], 26, "one deleted, one copied");
    let (s, v) = batch(
        &hub,
        "alice/data",
        Some(ALICE),
        &[json!({"type": "addFile", "path": "z", "xetHash": bogus})],
    )
    .await;
    assert_eq!(
        (s, v["succeeded"].as_u64()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some(0))
    );
    let (_, _, info3) = send(http.get(format!("{ep}/api/buckets/alice/data")), None).await;
    assert_eq!(
        info3["updatedAt"], info2["updatedAt"],
        "a batch that changed nothing leaves updatedAt"
    );
    let (s, _, v) = send(
        http.post(format!("{ep}/api/buckets/alice/data/batch"))
            .body("{not json\n"),
        Some(ALICE),
    )
    .await;
    assert_eq!((s, v["error"].is_string()), (StatusCode::BAD_REQUEST, true));

    // Resolve: Xet headers, 200 for HEAD and a 302 for GET; the blob origin serves ranges; 304; 404.
    let (s, h, _) = send(http.head(format!("{ep}/buckets/alice/data/resolve/seed.bin")), None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(h.get("location").is_none());
    assert_eq!(h["x-xet-hash"], hash.as_str());
    assert_eq!(h["etag"].to_str().unwrap(), format!("\"{hash}\""));
    assert_eq!(h["x-linked-size"].to_str().unwrap(), content.len().to_string());
    assert_eq!(h["content-length"].to_str().unwrap(), content.len().to_string());
    assert_eq!(
        h["link"].to_str().unwrap(),
        format!(
            "<{ep}/api/buckets/alice/data/xet-read-token>; rel=\"xet-auth\", <{}/v1/reconstructions/{hash}>; rel=\"xet-reconstruction-info\"",
            hub.cas_url()
        )
    );
    assert_eq!(h["x-xet-refresh-route"], "/api/buckets/alice/data/xet-read-token");
    let (s, h, _) = send(http.get(format!("{ep}/buckets/alice/data/resolve/seed.bin")), None).await;
    assert_eq!((s, h["content-length"].to_str().unwrap()), (StatusCode::FOUND, "0"));
    assert_eq!(h["x-xet-hash"], hash.as_str());
    let location = h["location"].to_str().unwrap().to_string();
    assert!(location.starts_with(hub.blob_url()), "{location}");
    let r = http
        .get(&location)
        .header("range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.bytes().await.unwrap().as_ref(), &content[1000..2000]);
    let r = http.get(&location).send().await.unwrap();
    assert_eq!(sha256_hex(&r.bytes().await.unwrap()), sha256_hex(&content));
    let (s, _, _) = send(
        http.get(format!("{ep}/buckets/alice/data/resolve/seed.bin"))
            .header("if-none-match", format!("\"{hash}\"")),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    let (s, h, _) = send(http.head(format!("{ep}/buckets/alice/data/resolve/nope")), None).await;
    assert_eq!(
        (s, h["x-error-code"].to_str().unwrap()),
        (StatusCode::NOT_FOUND, "EntryNotFound")
    );

    // Xet tokens: body and headers; write tokens for writers only.
    let (s, h, v) = send(
        http.get(format!("{ep}/api/buckets/alice/data/xet-write-token")),
        Some(ALICE),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["casUrl"], hub.cas_url());
    assert_eq!(
        h["x-xet-access-token"].to_str().unwrap(),
        v["accessToken"].as_str().unwrap()
    );
    assert!(v["exp"].as_u64().unwrap() > 0);
    let (s, _, _) = send(
        http.get(format!("{ep}/api/buckets/alice/data/xet-write-token")),
        Some(ALICE_READ),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = send(
        http.get(format!("{ep}/api/buckets/alice/data/xet-write-token")),
        Some(BOB),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = send(http.get(format!("{ep}/api/buckets/alice/data/xet-read-token")), None).await;
    assert_eq!(s, StatusCode::OK, "a public bucket is readable by anyone");

    // Access: the private bucket is missing for anonymous (401) and bob (404), everywhere.
    for path in [
        "/api/buckets/alice/secret",
        "/api/buckets/alice/secret/tree",
        "/api/buckets/alice/secret/xet-read-token",
    ] {
        assert_bucket_missing(
            &send(http.get(format!("{ep}{path}")), None).await,
            StatusCode::UNAUTHORIZED,
        );
        assert_bucket_missing(
            &send(http.get(format!("{ep}{path}")), Some(BOB)).await,
            StatusCode::NOT_FOUND,
        );
        assert_eq!(
            send(http.get(format!("{ep}{path}")), Some(ALICE_READ)).await.0,
            StatusCode::OK
        );
    }
    assert_bucket_missing(
        &send(http.head(format!("{ep}/buckets/alice/secret/resolve/x")), Some(BOB)).await,
        StatusCode::NOT_FOUND,
    );
    let (_, _, listed) = send(http.get(format!("{ep}/api/buckets/alice")), Some(BOB)).await;
    assert_eq!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["alice/data"]
    );
    let (_, _, listed) = send(http.get(format!("{ep}/api/buckets/me")), Some(ALICE)).await;
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let (s, _, _) = send(http.get(format!("{ep}/api/buckets/alice?limit=1")), Some(ALICE)).await;
    assert_eq!(s, StatusCode::OK);
    let r = http
        .get(format!("{ep}/api/buckets/alice?limit=1"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let link = r.headers()["link"].to_str().unwrap().to_string();
    let next = &link[1..link.find('>').unwrap()];
    let (_, _, page2) = send(http.get(next), Some(ALICE)).await;
    assert_eq!(page2[0]["id"], "alice/secret");
    // Writes: a read token is refused (403), another user too (403), anonymous 401.
    let del = [json!({"type": "deleteFile", "path": "seed.bin"})];
    assert_eq!(
        batch(&hub, "alice/data", Some(ALICE_READ), &del).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        batch(&hub, "alice/data", Some(BOB), &del).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(batch(&hub, "alice/data", None, &del).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        batch(&hub, "alice/secret", Some(BOB), &del).await.0,
        StatusCode::NOT_FOUND
    );
    let (s, _, _) = send(
        http.put(format!("{ep}/api/buckets/alice/data/settings"))
            .json(&json!({"private": true})),
        Some(BOB),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = send(
        http.post(format!("{ep}/api/repos/move"))
            .json(&json!({"fromRepo": "alice/data", "toRepo": "bob/data", "type": "bucket"})),
        Some(ALICE),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "alice cannot move into bob's namespace");
    let (s, _, _) = send(http.delete(format!("{ep}/api/buckets/alice/data")), Some(BOB)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = send(
        http.post(format!("{ep}/api/repos/move"))
            .json(&json!({"fromRepo": "alice/data", "toRepo": "alice/secret", "type": "bucket"})),
        Some(ALICE),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_faults_and_copy_from_repo() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start(dir.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let c = hf(&hub, ALICE, cache.path());
    let ep = hub.endpoint().to_string();
    let http = client();
    c.create_bucket().namespace("alice").name("lim").send().await.unwrap();

    // 1,000 operations per batch and paths per paths-info by default; more is a 400 that changes nothing.
    assert_eq!(hub.bucket_batch_limit(), 1000);
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"type": "deleteFile", "path": format!("f{i}")}))
        .collect();
    let (s, v) = batch(&hub, "alice/lim", Some(ALICE), &many).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"].as_str().unwrap().contains("1001"), "{v}");
    let paths: Vec<String> = (0..1001).map(|i| format!("f{i}")).collect();
    let (s, _, _) = send(
        http.post(format!("{ep}/api/buckets/alice/lim/paths-info"))
            .json(&json!({"paths": paths})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        batch(&hub, "alice/lim", Some(ALICE), &many[..1000]).await.0,
        StatusCode::OK
    );
    // The knob: /admin/limits (and LocalHub::set_bucket_batch_limit, --bucket-batch-limit), 0 = none.
    let (s, _, v) = send(
        http.post(format!("{ep}/admin/limits"))
            .json(&json!({"bucket_batch_limit": 0})),
        Some(ALICE),
    )
    .await;
    assert_eq!((s, v["bucket_batch_limit"].as_u64()), (StatusCode::OK, Some(0)));
    assert_eq!(batch(&hub, "alice/lim", Some(ALICE), &many).await.0, StatusCode::OK);
    hub.set_bucket_batch_limit(5);
    assert_eq!(
        batch(&hub, "alice/lim", Some(ALICE), &many[..6]).await.0,
        StatusCode::BAD_REQUEST
    );
    hub.set_bucket_batch_limit(1000);

    // Batches are faulted with the `commit` class; listings are not.
    hub.set_faults(
        RouteClass::Commit,
        FaultSettings {
            error_rate: 1.0,
            ..Default::default()
        },
    )
    .unwrap();
    let (s, _) = batch(&hub, "alice/lim", Some(ALICE), &many[..1]).await;
    assert!(s.is_server_error(), "{s}");
    assert_eq!(
        send(http.get(format!("{ep}/api/buckets/alice/lim/tree")), None).await.0,
        StatusCode::OK
    );
    assert!(hub.stats(RouteClass::Commit).faults_injected >= 1);
    hub.clear_faults();

    // copyFile from a repo: a Xet file committed through hf-hub, copied by hash, read back.
    c.create_repository()
        .repo_id("alice/model")
        .repo_type(hf_hub::RepoTypeModel)
        .send()
        .await
        .unwrap();
    let weights = bytes(11 << 20, 5);
    let repo = c.model("alice", "model");
    repo.create_commit()
        .operations(vec![hf_hub::repository::CommitOperation::Add {
            path_in_repo: "w.safetensors".into(),
            source: AddSource::Bytes(weights.clone().into()),
        }])
        .commit_message("weights")
        .send()
        .await
        .expect("commit");
    let (_, _, tree) = send(http.get(format!("{ep}/api/models/alice/model/tree/main")), None).await;
    let xet = tree
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "w.safetensors")
        .and_then(|e| e["xetHash"].as_str())
        .expect("xet file")
        .to_string();
    let (s, v) = batch(
        &hub,
        "alice/lim",
        Some(ALICE),
        &[
            json!({"type": "copyFile", "path": "from-model.bin", "xetHash": xet, "sourceRepoType": "model", "sourceRepoId": "alice/model"}),
            json!({"type": "copyFile", "path": "wrong-type.bin", "xetHash": xet, "sourceRepoType": "dataset", "sourceRepoId": "alice/model"}),
        ],
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["failed"][0]["path"], "wrong-type.bin");
    let (len, mut body) = c
        .bucket("alice", "lim")
        .download_file_stream()
        .remote_path("from-model.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(len, Some(weights.len() as u64));
    let mut got = Vec::new();
    while let Some(chunk) = body.next().await {
        got.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(sha256_hex(&got), sha256_hex(&weights));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_serves_the_same_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let content = bytes(300_000, 11);
    let (info_before, tree_before) = {
        let hub = start(dir.path()).await;
        let c = hf(&hub, ALICE, cache.path());
        c.create_bucket()
            .namespace("alice")
            .name("keep")
            .private(true)
            .send()
            .await
            .unwrap();
        upload(
            &c,
            "alice",
            "keep",
            &[("a/b.bin", content.clone()), ("c.txt", b"text".to_vec())],
        )
        .await;
        let http = client();
        let info = send(
            http.get(format!("{}/api/buckets/alice/keep", hub.endpoint())),
            Some(ALICE),
        )
        .await
        .2;
        let tree = send(
            http.get(format!("{}/api/buckets/alice/keep/tree?recursive=true", hub.endpoint())),
            Some(ALICE),
        )
        .await
        .2;
        hub.stop().await;
        (info, tree)
    };
    let hub = start(dir.path()).await;
    let http = client();
    let ep = hub.endpoint().to_string();
    let info = send(http.get(format!("{ep}/api/buckets/alice/keep")), Some(ALICE))
        .await
        .2;
    assert_eq!(info, info_before);
    let tree = send(
        http.get(format!("{ep}/api/buckets/alice/keep/tree?recursive=true")),
        Some(ALICE),
    )
    .await
    .2;
    assert_eq!(tree, tree_before);
    assert_bucket_missing(
        &send(http.get(format!("{ep}/api/buckets/alice/keep")), None).await,
        StatusCode::UNAUTHORIZED,
    );
    let r = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{ep}/buckets/alice/keep/resolve/a/b.bin"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(sha256_hex(&r.bytes().await.unwrap()), sha256_hex(&content));
    // Still writable after the restart: the CAS still holds the content for a new name.
    let hash = tree[0]["xetHash"].as_str().unwrap().to_string();
    let (s, v) = batch(
        &hub,
        "alice/keep",
        Some(ALICE),
        &[json!({"type": "addFile", "path": "again.bin", "xetHash": hash})],
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    hub.stop().await;
}
