//! The local Hub's HTTP protocol, spoken with plain reqwest: repos, NDJSON commits, tree listings and
//! their pagination, paths-info, resolve (ranges, conditional requests, 302s to the blob origin),
//! LFS batch uploads (basic and multipart), revisions, concurrency, auth, bad input, persistence and
//! atomicity of commits across `kill -9`.

mod common;

use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use hubfs::local_hub::{LocalHub, LocalHubConfig, TokenSpec};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// GETs a JSON answer that must be 200.
async fn get_json(c: &reqwest::Client, url: &str, token: Option<&str>) -> (reqwest::header::HeaderMap, Value) {
    let mut req = c.get(url);
    if let Some(t) = token {
        req = req.header("authorization", bearer(t));
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "GET {url}: {text}");
    (headers, serde_json::from_str(&text).unwrap())
}

/// Follows `Link: <…>; rel="next"` verbatim from `first`; returns every page.
async fn all_pages(c: &reqwest::Client, first: &str) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut next = Some(first.to_string());
    while let Some(url) = next.take() {
        let (h, v) = get_json(c, &url, None).await;
        pages.push(v.as_array().expect("tree page is an array").clone());
        if let Some(link) = header_str(&h, "link") {
            let start = link.find('<').expect("link <") + 1;
            let end = link.find('>').expect("link >");
            assert!(link[end..].contains("rel=\"next\""), "{link}");
            let u = &link[start..end];
            assert!(u.starts_with("http://"), "next URL must be absolute: {u}");
            next = Some(u.to_string());
        }
        assert!(pages.len() < 200, "pagination does not end");
    }
    pages
}

fn paths_of(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

fn entry<'a>(entries: &'a [Value], path: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in {:?}", paths_of(entries)))
}

// ---------------------------------------------------------------------------------------------
// Repos, commits, info, tree
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_commit_info_and_tree() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();

    let model = Repo::model("local/m1");
    let dataset = Repo::dataset("local/d1");
    let private = Repo::dataset("local/secret-ds");
    create_repo_ok(&c, ep, WRITE, &model, false).await;
    create_repo_ok(&c, ep, WRITE, &dataset, false).await;
    create_repo_ok(&c, ep, WRITE, &private, true).await;
    // Duplicate → 409 (same type); a model and a dataset of the same name are different repos.
    let r = create_repo(&c, ep, WRITE, &model, false).await;
    let (_, v) = assert_hub_error(r, Some(StatusCode::CONFLICT), "duplicate create").await;
    assert!(v["error"].as_str().unwrap().contains("already"), "{v}");
    create_repo_ok(&c, ep, WRITE, &Repo::dataset("local/m1"), false).await;

    // Info of a fresh repo: the initial commit with .gitattributes.
    let (h, info) = get_json(&c, &dataset.api(ep), None).await;
    assert_eq!(info["id"], "local/d1");
    assert_eq!(info["private"], false);
    let first = info["sha"].as_str().unwrap().to_string();
    assert_eq!(first.len(), 40);
    assert_eq!(header_str(&h, "x-repo-commit"), Some(first.as_str()));
    let (_, pinfo) = get_json(&c, &private.api(ep), Some(WRITE)).await;
    assert_eq!(pinfo["private"], true);

    let readme = b"# hello\n".to_vec();
    let bin = bytes(3000, 1);
    let out = commit_ok(
        &c,
        ep,
        WRITE,
        &dataset,
        &[
            header_line("add files", None),
            file_line("README.md", &readme),
            utf8_line("notes/héllo.txt", "héllo wörld"),
            file_line("dir/a.txt", b"a"),
            file_line("dir/sub/b.txt", b"bb"),
            file_line("dir/sub/deeper/c.txt", b"ccc"),
            file_line("data.raw", &bin),
        ],
    )
    .await;
    let c1 = out["commitOid"].as_str().unwrap().to_string();
    assert_ne!(c1, first);
    let url = out["commitUrl"].as_str().unwrap();
    assert!(
        url.starts_with(ep) && url.ends_with(&format!("/datasets/local/d1/commit/{c1}")),
        "{url}"
    );

    // Info: sha is the new head; blobs=true gives sizes and blob ids.
    let (_, info) = get_json(&c, &format!("{}?blobs=true", dataset.api(ep)), None).await;
    assert_eq!(info["sha"], c1.as_str());
    let sib: BTreeMap<String, Value> = info["siblings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["rfilename"].as_str().unwrap().to_string(), s.clone()))
        .collect();
    let want: BTreeSet<&str> = [
        ".gitattributes",
        "README.md",
        "notes/héllo.txt",
        "dir/a.txt",
        "dir/sub/b.txt",
        "dir/sub/deeper/c.txt",
        "data.raw",
    ]
    .into();
    assert_eq!(sib.keys().map(|s| s.as_str()).collect::<BTreeSet<_>>(), want);
    assert_eq!(sib["README.md"]["size"], readme.len());
    assert_eq!(sib["README.md"]["blobId"], git_blob_oid(&readme));
    assert_eq!(sib["data.raw"]["size"], 3000);
    assert_eq!(sib["notes/héllo.txt"]["size"], "héllo wörld".len());
    // Without blobs=true: names only.
    let (_, info) = get_json(&c, &dataset.api(ep), None).await;
    assert!(info["siblings"][0].get("size").is_none(), "{info}");

    // The utf-8 encoded file has exactly those bytes.
    let r = c
        .get(dataset.resolve(ep, "main", "notes/h%C3%A9llo.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), "héllo wörld".as_bytes());

    // Tree, one level.
    let (h, root) = get_json(&c, &format!("{}/tree/main", dataset.api(ep)), None).await;
    assert_eq!(header_str(&h, "x-repo-commit"), Some(c1.as_str()));
    let root = root.as_array().unwrap().clone();
    assert_eq!(
        paths_of(&root).into_iter().collect::<BTreeSet<_>>(),
        [".gitattributes", "README.md", "data.raw", "dir", "notes"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    let e = entry(&root, "README.md");
    assert_eq!(e["type"], "file");
    assert_eq!(e["size"], readme.len());
    assert_eq!(e["oid"], git_blob_oid(&readme));
    assert!(e.get("lfs").is_none());
    let d = entry(&root, "dir");
    assert_eq!(d["type"], "directory");
    assert_eq!(d["oid"].as_str().map(str::len), Some(40));
    // A sub-directory, with slashes kept or encoded.
    for sub in ["dir/sub", "dir%2Fsub"] {
        let (_, v) = get_json(&c, &format!("{}/tree/main/{sub}", dataset.api(ep)), None).await;
        let v = v.as_array().unwrap().clone();
        assert_eq!(paths_of(&v), ["dir/sub/b.txt", "dir/sub/deeper"], "{sub}");
    }
    // Recursive: files and directories below the path.
    for q in ["recursive=true", "recursive=1"] {
        let (_, v) = get_json(&c, &format!("{}/tree/main/dir?{q}", dataset.api(ep)), None).await;
        let got: BTreeSet<String> = paths_of(v.as_array().unwrap()).into_iter().collect();
        let want: BTreeSet<String> = [
            "dir/a.txt",
            "dir/sub",
            "dir/sub/b.txt",
            "dir/sub/deeper",
            "dir/sub/deeper/c.txt",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(got, want, "{q}");
    }
    let (_, v) = get_json(&c, &format!("{}/tree/main?recursive=true", dataset.api(ep)), None).await;
    assert_eq!(v.as_array().unwrap().len(), 7 + 4, "7 files and 4 directories: {v}");
    // Missing tree path, and a file path given as a directory → 404 EntryNotFound.
    for p in ["nope", "README.md"] {
        let r = c
            .get(format!("{}/tree/main/{p}", dataset.api(ep)))
            .send()
            .await
            .unwrap();
        let (h, _) = assert_hub_error(r, Some(StatusCode::NOT_FOUND), "missing tree path").await;
        assert_eq!(header_str(&h, "x-error-code"), Some("EntryNotFound"));
    }

    // Second commit: delete a file and a folder, overwrite one.
    let out = commit_ok(
        &c,
        ep,
        WRITE,
        &dataset,
        &[
            header_line("prune", Some(&c1)),
            deleted_file_line("README.md"),
            deleted_folder_line("dir/sub/"),
            utf8_line("dir/a.txt", "A2"),
        ],
    )
    .await;
    let c2 = out["commitOid"].as_str().unwrap().to_string();
    let (_, v) = get_json(&c, &format!("{}/tree/main?recursive=true", dataset.api(ep)), None).await;
    let got: BTreeSet<String> = paths_of(v.as_array().unwrap()).into_iter().collect();
    let want: BTreeSet<String> = [
        ".gitattributes",
        "data.raw",
        "dir",
        "dir/a.txt",
        "notes",
        "notes/héllo.txt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(got, want);
    assert_eq!(head_sha(&c, ep, None, &dataset, "main").await, c2);
    // The old revision still has everything.
    let (_, v) = get_json(&c, &format!("{}/tree/{c1}/dir/sub", dataset.api(ep)), None).await;
    assert_eq!(v.as_array().unwrap().len(), 2);
    // Deleting what is not there → 404 EntryNotFound; the head does not move.
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &dataset,
        "main",
        "",
        ndjson(&[header_line("bad delete", None), deleted_file_line("README.md")]),
    )
    .await;
    let (h, _) = assert_hub_error(r, Some(StatusCode::NOT_FOUND), "delete missing file").await;
    assert_eq!(header_str(&h, "x-error-code"), Some("EntryNotFound"));
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &dataset,
        "main",
        "",
        ndjson(&[header_line("bad delete", None), deleted_folder_line("nowhere/")]),
    )
    .await;
    assert_hub_error(r, Some(StatusCode::NOT_FOUND), "delete missing folder").await;
    assert_eq!(head_sha(&c, ep, None, &dataset, "main").await, c2);

    // Model repos use the same routes under /api/models and no prefix on resolve.
    commit_ok(
        &c,
        ep,
        WRITE,
        &model,
        &[header_line("cfg", None), utf8_line("config.json", "{}")],
    )
    .await;
    let r = c.get(model.resolve(ep, "main", "config.json")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "{}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_pagination_and_expand() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::dataset("local/many");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    const N: usize = 1_500;
    let mut lines = vec![header_line("many files", None)];
    for i in 0..N {
        lines.push(utf8_line(&format!("many/f-{i:05}.txt"), &format!("{i}\n")));
    }
    lines.push(utf8_line("other.txt", "x"));
    let first = commit_ok(&c, ep, WRITE, &repo, &lines).await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();
    // A later commit touches one file: its lastCommit must be this one.
    let second = commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("touch one", None), utf8_line("many/f-00007.txt", "changed")],
    )
    .await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();

    let want: BTreeSet<String> = (0..N).map(|i| format!("many/f-{i:05}.txt")).collect();
    let check_union = |pages: &[Vec<Value>], what: &str| {
        let all: Vec<String> = pages.iter().flat_map(|p| paths_of(p)).collect();
        let set: BTreeSet<String> = all.iter().cloned().collect();
        assert_eq!(all.len(), set.len(), "{what}: duplicates across pages");
        set
    };

    // Non-recursive listing of the folder: pages of 1,000.
    let pages = all_pages(&c, &format!("{}/tree/main/many", repo.api(ep))).await;
    assert_eq!(pages.iter().map(|p| p.len()).collect::<Vec<_>>(), [1000, 500]);
    assert_eq!(check_union(&pages, "folder"), want);
    // The same with the folder path encoded and an explicit small limit.
    let pages = all_pages(&c, &format!("{}/tree/main/many?limit=700", repo.api(ep))).await;
    assert_eq!(pages.iter().map(|p| p.len()).collect::<Vec<_>>(), [700, 700, 100]);
    assert_eq!(check_union(&pages, "limit=700"), want);

    // Recursive from the root: the folder itself, every file, .gitattributes and other.txt.
    let pages = all_pages(&c, &format!("{}/tree/main?recursive=true", repo.api(ep))).await;
    assert_eq!(pages.len(), 2);
    let mut want_all = want.clone();
    want_all.extend(["many", ".gitattributes", "other.txt"].map(String::from));
    assert_eq!(check_union(&pages, "recursive"), want_all);

    // expand=true: pages of 50 entries, each with lastCommit.
    let t = Instant::now();
    let pages = all_pages(&c, &format!("{}/tree/main/many?expand=true", repo.api(ep))).await;
    assert!(pages.iter().all(|p| p.len() <= 50));
    assert_eq!(pages.len(), N.div_ceil(50));
    assert_eq!(check_union(&pages, "expand"), want);
    for e in pages.iter().flatten() {
        let lc = &e["lastCommit"];
        let want_id = if e["path"] == "many/f-00007.txt" {
            &second
        } else {
            &first
        };
        assert_eq!(lc["id"], want_id.as_str(), "{e}");
        assert!(lc["title"].is_string() && lc["date"].is_string(), "{e}");
    }
    assert_eq!(pages[0][7]["lastCommit"]["title"], "touch one");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "expanded listing took {:?}",
        t.elapsed()
    );
    // Directories get the newest commit below them.
    let (_, v) = get_json(&c, &format!("{}/tree/main?expand=true", repo.api(ep)), None).await;
    let root = v.as_array().unwrap();
    assert_eq!(entry(root, "many")["lastCommit"]["id"], second.as_str());
    assert_eq!(entry(root, "other.txt")["lastCommit"]["id"], first.as_str());
    assert_eq!(entry(root, ".gitattributes")["lastCommit"]["title"], "initial commit");
    // expand caps the page at 50 even when a larger limit is asked for.
    let (h, v) = get_json(
        &c,
        &format!("{}/tree/main/many?expand=true&limit=1000", repo.api(ep)),
        None,
    )
    .await;
    assert_eq!(v.as_array().unwrap().len(), 50);
    assert!(header_str(&h, "link").is_some());
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_info_form_and_json() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/pi");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let lfs_data = bytes(5000, 3);
    let oid = lfs_upload_basic(&c, ep, WRITE, &repo, &lfs_data).await;
    let head = commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[
            header_line("files", None),
            utf8_line("a", "A"),
            utf8_line("dir/b", "BB"),
            utf8_line("dir/c d#?.txt", "C"),
            lfs_line("w.bin", &oid, 5000),
        ],
    )
    .await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();
    let url = format!("{}/paths-info/main", repo.api(ep));

    // Form body, as the Python client sends it; missing paths are left out; folders allowed.
    let r = c
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("paths=a&paths=dir%2Fb&paths=missing&paths=dir&paths=dir%2Fc+d%23%3F.txt&expand=false")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header_str(r.headers(), "x-repo-commit"), Some(head.as_str()));
    let v: Vec<Value> = r.json().await.unwrap();
    let got: BTreeSet<String> = paths_of(&v).into_iter().collect();
    assert_eq!(got, ["a", "dir/b", "dir", "dir/c d#?.txt"].map(String::from).into());
    assert_eq!(entry(&v, "a")["oid"], git_blob_oid(b"A"));
    assert_eq!(entry(&v, "dir/b")["size"], 2);
    assert_eq!(entry(&v, "dir")["type"], "directory");

    // JSON body, as hf-hub sends it; LFS entries carry lfs {oid,size,pointerSize}.
    let r = c
        .post(&url)
        .json(&json!({"paths": ["w.bin", "dir/b", "nope/nope"], "expand": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Vec<Value> = r.json().await.unwrap();
    assert_eq!(
        paths_of(&v).into_iter().collect::<BTreeSet<_>>(),
        ["w.bin", "dir/b"].map(String::from).into()
    );
    let w = entry(&v, "w.bin");
    let pointer = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize 5000\n");
    assert_eq!(w["size"], 5000);
    assert_eq!(w["lfs"]["oid"], oid.as_str());
    assert_eq!(w["lfs"]["size"], 5000);
    assert_eq!(w["lfs"]["pointerSize"], pointer.len());
    assert_eq!(w["oid"], git_blob_oid(pointer.as_bytes()));
    assert_eq!(w["lastCommit"]["id"], head.as_str(), "expand adds lastCommit: {w}");

    // Nothing matches → an empty array, not an error.
    let r = c.post(&url).json(&json!({"paths": ["x", "y/z"]})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!([]));
    hub.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Resolve
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_regular_file_ranges_and_errors() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::dataset("local/res");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let data = bytes(10_000, 5);
    let head = commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("f", None), file_line("dir/f.bin", &data)],
    )
    .await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();
    let url = repo.resolve(ep, "main", "dir/f.bin");
    let etag = format!("\"{}\"", git_blob_oid(&data));

    // GET: 200, the bytes, ETag = quoted git blob sha1, X-Repo-Commit, Content-Length.
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(header_str(&h, "etag"), Some(etag.as_str()));
    assert_eq!(header_str(&h, "x-repo-commit"), Some(head.as_str()));
    assert_eq!(header_str(&h, "content-length"), Some("10000"));
    assert_eq!(header_str(&h, "accept-ranges"), Some("bytes"));
    assert!(h.contains_key("last-modified"));
    assert_eq!(r.bytes().await.unwrap().as_ref(), &data[..]);
    // The encoded form of the path and a commit id as revision serve the same.
    let r = c.get(repo.resolve(ep, &head, "dir%2Ff.bin")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), &data[..]);

    // HEAD: the same headers, no body.
    let r = c.head(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header_str(r.headers(), "etag"), Some(etag.as_str()));
    assert_eq!(header_str(r.headers(), "x-repo-commit"), Some(head.as_str()));
    assert_eq!(header_str(r.headers(), "content-length"), Some("10000"));
    assert!(r.bytes().await.unwrap().is_empty());

    // Ranges.
    for (range, start, end) in [
        ("bytes=0-0", 0usize, 0usize),
        ("bytes=100-199", 100, 199),
        ("bytes=9990-", 9990, 9999),
        ("bytes=-10", 9990, 9999),
        ("bytes=-20000", 0, 9999),
        ("bytes=5000-99999", 5000, 9999),
    ] {
        let r = c.get(&url).header("range", range).send().await.unwrap();
        assert_eq!(r.status(), 206, "{range}");
        assert_eq!(
            header_str(r.headers(), "content-range"),
            Some(format!("bytes {start}-{end}/10000").as_str()),
            "{range}"
        );
        assert_eq!(
            header_str(r.headers(), "content-length"),
            Some((end - start + 1).to_string().as_str())
        );
        assert_eq!(r.bytes().await.unwrap().as_ref(), &data[start..=end], "{range}");
    }
    // Unsatisfiable → 416 with Content-Range: bytes */size.
    for range in ["bytes=10000-", "bytes=20000-30000", "bytes=500-100", "bytes=-0"] {
        let r = c.get(&url).header("range", range).send().await.unwrap();
        assert_eq!(r.status(), 416, "{range}");
        assert_eq!(
            header_str(r.headers(), "content-range"),
            Some("bytes */10000"),
            "{range}"
        );
    }

    // If-None-Match with the ETag → 304, no body; another ETag → 200.
    for inm in [etag.clone(), format!("W/{etag}"), format!("\"zzz\", {etag}")] {
        let r = c.get(&url).header("if-none-match", &inm).send().await.unwrap();
        assert_eq!(r.status(), 304, "{inm}");
        assert!(r.bytes().await.unwrap().is_empty());
    }
    let r = c.get(&url).header("if-none-match", "\"other\"").send().await.unwrap();
    assert_eq!(r.status(), 200);

    // Missing file → 404 EntryNotFound with X-Repo-Commit, for GET and HEAD.
    let r = c.get(repo.resolve(ep, "main", "dir/nope.bin")).send().await.unwrap();
    let (h, _) = assert_hub_error(r, Some(StatusCode::NOT_FOUND), "missing file").await;
    assert_eq!(header_str(&h, "x-error-code"), Some("EntryNotFound"));
    assert_eq!(header_str(&h, "x-repo-commit"), Some(head.as_str()));
    let r = c.head(repo.resolve(ep, "main", "dir/nope.bin")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(header_str(r.headers(), "x-error-code"), Some("EntryNotFound"));
    assert_eq!(header_str(r.headers(), "x-repo-commit"), Some(head.as_str()));
    // A directory is not a file either.
    let r = c.get(repo.resolve(ep, "main", "dir")).send().await.unwrap();
    assert_eq!(r.status(), 404);

    // Bad revision → 404 RevisionNotFound; missing repo → RepoNotFound.
    for rev in ["nope", "0123456789012345678901234567890123456789", "refs%2Fpr%2F9"] {
        let r = c.get(repo.resolve(ep, rev, "dir/f.bin")).send().await.unwrap();
        let (h, _) = assert_hub_error(r, Some(StatusCode::NOT_FOUND), "bad revision").await;
        assert_eq!(header_str(&h, "x-error-code"), Some("RevisionNotFound"), "{rev}");
    }
    let r = c
        .get(Repo::dataset("local/none").resolve(ep, "main", "f"))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    let (h, _) = assert_hub_error(r, Some(StatusCode::NOT_FOUND), "missing repo").await;
    assert_eq!(header_str(&h, "x-error-code"), Some("RepoNotFound"));
    // Writing methods on resolve are refused.
    let r = c.post(&url).body("x").send().await.unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    hub.stop().await;
}

// ---------------------------------------------------------------------------------------------
// LFS
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lfs_basic_upload_and_resolve_redirect() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/lfs");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let data = bytes(1 << 20, 11);
    let oid = sha256_hex(&data);
    let size = data.len() as u64;

    let batch = lfs_batch(&c, ep, WRITE, &repo, &["basic"], &oid, size).await;
    assert_eq!(batch["transfer"], "basic");
    let obj = &batch["objects"][0];
    assert_eq!(obj["oid"], oid.as_str());
    let href = obj["actions"]["upload"]["href"]
        .as_str()
        .expect("upload href")
        .to_string();
    assert!(href.starts_with(hub.blob_url()), "{href}");
    // The presigned URL works without Authorization; a tampered signature does not.
    let bad = href.replace("sig=", "sig=0");
    let r = c.put(&bad).body(data.clone()).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r = c.put(&href).body(data.clone()).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let verify = obj["actions"]["verify"]["href"].as_str().unwrap();
    let r = c
        .post(verify)
        .header("authorization", bearer(WRITE))
        .json(&json!({"oid": oid, "size": size}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "verify {}", r.status());
    // Asking again: present, so no actions.
    let again = lfs_batch(&c, ep, WRITE, &repo, &["basic"], &oid, size).await;
    assert!(again["objects"][0].get("actions").is_none(), "{again}");

    let head = commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("weights", None), lfs_line("w/model.bin", &oid, size)],
    )
    .await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();

    // resolve → 302 to the blob origin with X-Linked-*; HEAD too.
    for method in [reqwest::Method::HEAD, reqwest::Method::GET] {
        let r = c
            .request(method.clone(), repo.resolve(ep, "main", "w/model.bin"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 302, "{method}");
        let h = r.headers();
        assert_eq!(header_str(h, "x-linked-etag"), Some(format!("\"{oid}\"").as_str()));
        assert_eq!(header_str(h, "x-linked-size"), Some(size.to_string().as_str()));
        assert_eq!(header_str(h, "x-repo-commit"), Some(head.as_str()));
        assert_eq!(header_str(h, "etag"), Some(format!("\"{oid}\"").as_str()));
        let loc = header_str(h, "location").unwrap();
        assert!(loc.starts_with(hub.blob_url()), "{loc}");
        let blob_port = url::Url::parse(loc).unwrap().port();
        assert_ne!(
            blob_port,
            url::Url::parse(ep).unwrap().port(),
            "the blob origin is another port"
        );
    }
    // Follow by hand, without Authorization.
    let got = download_lfs(&c, ep, &repo, "main", "w/model.bin").await;
    assert_eq!(got.len(), data.len());
    assert_eq!(sha256_hex(&got), oid);
    // Ranges and conditional requests work on the blob origin too.
    let r = c.get(repo.resolve(ep, "main", "w/model.bin")).send().await.unwrap();
    let loc = header_str(r.headers(), "location").unwrap().to_string();
    let r = c.get(&loc).header("range", "bytes=1000-1999").send().await.unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(
        header_str(r.headers(), "content-range"),
        Some(format!("bytes 1000-1999/{size}").as_str())
    );
    assert_eq!(r.bytes().await.unwrap().as_ref(), &data[1000..2000]);
    let r = c
        .get(&loc)
        .header("range", format!("bytes={size}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 416);
    let r = c
        .get(&loc)
        .header("if-none-match", format!("\"{oid}\""))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    // resolve itself answers 304 for a matching If-None-Match.
    let r = c
        .get(repo.resolve(ep, "main", "w/model.bin"))
        .header("if-none-match", format!("\"{oid}\""))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    // A blob URL with no or a forged signature is refused.
    let unsigned = loc.split('?').next().unwrap();
    let r = c.get(unsigned).send().await.unwrap();
    assert_eq!(r.status(), 403);
    // Tree entry of the LFS file.
    let (_, v) = get_json(&c, &format!("{}/tree/main/w", repo.api(ep)), None).await;
    assert_eq!(v[0]["lfs"]["oid"], oid.as_str());
    assert_eq!(v[0]["size"], size);
    // LFS batch download hands out a working URL.
    let r = c
        .post(format!("{}.git/info/lfs/objects/batch", repo.web(ep)))
        .json(&json!({"operation": "download", "objects": [{"oid": oid, "size": size}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let dl = v["objects"][0]["actions"]["download"]["href"].as_str().unwrap();
    let got = c.get(dl).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(sha256_hex(&got), oid);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lfs_multipart_upload() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::dataset("local/mp");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let data = bytes((17 << 20) + 12345, 21);
    let oid = sha256_hex(&data);
    let size = data.len() as u64;

    let batch = lfs_batch(&c, ep, WRITE, &repo, &["basic", "multipart"], &oid, size).await;
    assert_eq!(batch["transfer"], "multipart");
    let up = &batch["objects"][0]["actions"]["upload"];
    let header = up["header"].as_object().expect("multipart header");
    let chunk: usize = header["chunk_size"]
        .as_str()
        .expect("chunk_size string")
        .parse()
        .unwrap();
    let nparts = data.len().div_ceil(chunk);
    assert!(nparts >= 2);
    let mut parts = Vec::new();
    for n in 1..=nparts {
        let part_url = header[&format!("{n:05}")].as_str().expect("part url");
        assert!(part_url.starts_with(hub.blob_url()));
        let slice = data[(n - 1) * chunk..(n * chunk).min(data.len())].to_vec();
        let r = c.put(part_url).body(slice).send().await.unwrap();
        assert!(r.status().is_success(), "part {n}: {}", r.status());
        let etag = header_str(r.headers(), "etag").expect("part etag").to_string();
        parts.push(json!({"partNumber": n, "etag": etag}));
    }
    assert!(header.get(&format!("{:05}", nparts + 1)).is_none());
    let complete = up["href"].as_str().unwrap();
    // An incomplete parts list is refused.
    let r = c
        .post(complete)
        .json(&json!({"oid": oid, "parts": parts[..1]}))
        .send()
        .await
        .unwrap();
    assert_hub_error(r, None, "incomplete multipart").await;
    // A corrupted part makes the completion fail; re-sending the part fixes it (client retries).
    let part1 = header["00001"].as_str().unwrap();
    let mut bad = data[..chunk].to_vec();
    bad[0] ^= 0xff;
    assert!(c.put(part1).body(bad).send().await.unwrap().status().is_success());
    let r = c
        .post(complete)
        .json(&json!({"oid": oid, "parts": parts}))
        .send()
        .await
        .unwrap();
    assert_hub_error(r, None, "corrupted part").await;
    let again = lfs_batch(&c, ep, WRITE, &repo, &["basic", "multipart"], &oid, size).await;
    assert!(
        again["objects"][0]["actions"].is_object(),
        "a failed assembly must not store the object"
    );
    // A part larger than the part size is refused.
    let r = c.put(part1).body(bytes(chunk + 1, 5)).send().await.unwrap();
    assert_hub_error(r, None, "oversized part").await;
    assert!(
        c.put(part1)
            .body(data[..chunk].to_vec())
            .send()
            .await
            .unwrap()
            .status()
            .is_success()
    );
    let r = c
        .post(complete)
        .json(&json!({"oid": oid, "parts": parts}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "complete: {}", r.status());
    let verify = batch["objects"][0]["actions"]["verify"]["href"].as_str().unwrap();
    let r = c
        .post(verify)
        .header("authorization", bearer(WRITE))
        .json(&json!({"oid": oid, "size": size}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "verify {}", r.status());

    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("big", None), lfs_line("big.bin", &oid, size)],
    )
    .await;
    let got = download_lfs(&c, ep, &repo, "main", "big.bin").await;
    assert_eq!(got.len(), data.len());
    assert_eq!(sha256_hex(&got), oid);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lfs_refuses_missing_and_wrong_objects() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/lfsbad");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let head = head_sha(&c, ep, None, &repo, "main").await;

    // An lfsFile whose object was never uploaded.
    let ghost = sha256_hex(b"never uploaded");
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "",
        ndjson(&[header_line("ghost", None), lfs_line("ghost.bin", &ghost, 14)]),
    )
    .await;
    assert_hub_error(r, None, "lfsFile never uploaded").await;
    // Malformed oids.
    for bad in ["abc", &ghost.to_uppercase()] {
        let r = commit_raw(
            &c,
            ep,
            WRITE,
            &repo,
            "main",
            "",
            ndjson(&[header_line("bad oid", None), lfs_line("x.bin", bad, 14)]),
        )
        .await;
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), "bad oid").await;
    }

    // Upload with the wrong content for the oid (same size) → 4xx, and the object stays absent.
    let data = bytes(4096, 8);
    let oid = sha256_hex(&data);
    let batch = lfs_batch(&c, ep, WRITE, &repo, &["basic"], &oid, 4096).await;
    let href = batch["objects"][0]["actions"]["upload"]["href"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.put(&href).body(bytes(4096, 9)).send().await.unwrap();
    assert_hub_error(r, None, "wrong content").await;
    // Wrong size too (short and long).
    let r = c.put(&href).body(data[..100].to_vec()).send().await.unwrap();
    assert_hub_error(r, None, "short content").await;
    let mut long = data.clone();
    long.extend_from_slice(b"extra");
    let r = c.put(&href).body(long).send().await.unwrap();
    assert_hub_error(r, None, "long content").await;
    let again = lfs_batch(&c, ep, WRITE, &repo, &["basic"], &oid, 4096).await;
    assert!(
        again["objects"][0]["actions"]["upload"].is_object(),
        "object must still be missing"
    );
    let verify = again["objects"][0]["actions"]["verify"]["href"].as_str().unwrap();
    let r = c
        .post(verify)
        .header("authorization", bearer(WRITE))
        .json(&json!({"oid": oid, "size": 4096}))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_client_error(),
        "verify of a missing object: {}",
        r.status()
    );
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "",
        ndjson(&[header_line("x", None), lfs_line("x.bin", &oid, 4096)]),
    )
    .await;
    assert_hub_error(r, None, "lfsFile after a failed upload").await;
    // A real upload, then an lfsFile line with the wrong size.
    lfs_upload_basic(&c, ep, WRITE, &repo, &data).await;
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "",
        ndjson(&[header_line("x", None), lfs_line("x.bin", &oid, 4097)]),
    )
    .await;
    assert_hub_error(r, None, "lfsFile with a wrong size").await;
    // Per-object errors in a batch are reported inside a 200.
    let r = c
        .post(format!("{}.git/info/lfs/objects/batch", repo.web(ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"operation": "upload", "objects": [{"oid": "nothex", "size": 1}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["objects"][0]["error"]["code"]
            .as_u64()
            .is_some_and(|c| (400..500).contains(&c)),
        "{v}"
    );
    assert_eq!(head_sha(&c, ep, None, &repo, "main").await, head, "nothing landed");
    hub.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Revisions, refs, history, parentCommit, concurrency
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_branches_tags_prs() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/revs");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let c1 = commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("one", None), utf8_line("f.txt", "v1")],
    )
    .await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();
    let c2 = commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("two", None), utf8_line("f.txt", "v2")],
    )
    .await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();
    let text = |rev: String| {
        let c = c.clone();
        let url = repo.resolve(ep, &rev, "f.txt");
        async move {
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200, "resolve at {rev}");
            r.text().await.unwrap()
        }
    };

    // Branch from an older commit.
    let r = c
        .post(format!("{}/branch/dev", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"startingPoint": c1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(text("dev".into()).await, "v1");
    assert_eq!(head_sha(&c, ep, None, &repo, "dev").await, c1);
    // A branch that exists already → 409.
    let r = c
        .post(format!("{}/branch/dev", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"startingPoint": "main"}))
        .send()
        .await
        .unwrap();
    assert_hub_error(r, Some(StatusCode::CONFLICT), "duplicate branch").await;
    // Committing to the branch leaves main alone.
    let d1 = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "dev",
        "",
        ndjson(&[header_line("on dev", None), utf8_line("f.txt", "dev")]),
    )
    .await;
    assert_eq!(d1.status(), 200);
    assert_eq!(text("dev".into()).await, "dev");
    assert_eq!(text("main".into()).await, "v2");

    // Tag of a revision (POST /tag/{rev} with {"tag": …}).
    let r = c
        .post(format!("{}/tag/{c1}", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"tag": "v1.0"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(text("v1.0".into()).await, "v1");
    // Commit ids as revisions.
    assert_eq!(text(c1.clone()).await, "v1");
    assert_eq!(text(c2.clone()).await, "v2");
    // Commits can't be made on a tag or a commit id.
    for rev in ["v1.0", c1.as_str()] {
        let r = commit_raw(
            &c,
            ep,
            WRITE,
            &repo,
            rev,
            "",
            ndjson(&[header_line("x", None), utf8_line("g", "g")]),
        )
        .await;
        assert_hub_error(r, None, "commit on a tag/commit").await;
    }

    // A PR: ?create_pr=1 opens refs/pr/1; its URL ends with /discussions/1.
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "?create_pr=1",
        ndjson(&[header_line("pr", None), utf8_line("f.txt", "pr1")]),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let pr_url = v["pullRequestUrl"].as_str().expect("pullRequestUrl");
    assert!(pr_url.ends_with("/local/revs/discussions/1"), "{pr_url}");
    let pr_commit = v["commitOid"].as_str().unwrap().to_string();
    assert_eq!(text("refs%2Fpr%2F1".into()).await, "pr1");
    assert_eq!(text("main".into()).await, "v2", "a PR leaves main alone");
    assert_eq!(head_sha(&c, ep, None, &repo, "refs%2Fpr%2F1").await, pr_commit);
    // A second PR is number 2; a commit to refs/pr/1 moves that PR.
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "?create_pr=1",
        ndjson(&[header_line("pr2", None), utf8_line("f.txt", "pr2")]),
    )
    .await;
    let v: Value = r.json().await.unwrap();
    assert!(v["pullRequestUrl"].as_str().unwrap().ends_with("/discussions/2"), "{v}");
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "refs%2Fpr%2F1",
        "",
        ndjson(&[header_line("pr1 update", None), utf8_line("f.txt", "pr1b")]),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(text("refs%2Fpr%2F1".into()).await, "pr1b");
    assert_eq!(text("refs%2Fpr%2F2".into()).await, "pr2");

    // Refs listing.
    let (_, refs) = get_json(&c, &format!("{}/refs?include_pull_requests=true", repo.api(ep)), None).await;
    let names = |k: &str| -> BTreeMap<String, String> {
        refs[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["ref"].as_str().unwrap().to_string(),
                    r["targetCommit"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let branches = names("branches");
    assert_eq!(
        branches.keys().collect::<Vec<_>>(),
        ["refs/heads/dev", "refs/heads/main"]
    );
    assert_eq!(branches["refs/heads/main"], c2);
    assert_eq!(names("tags")["refs/tags/v1.0"], c1);
    let prs = names("pullRequests");
    assert_eq!(prs.keys().collect::<Vec<_>>(), ["refs/pr/1", "refs/pr/2"]);
    let (_, refs) = get_json(&c, &format!("{}/refs", repo.api(ep)), None).await;
    assert!(refs.get("pullRequests").is_none());

    // Commit history of main: newest first, down to the initial commit.
    let (_, hist) = get_json(&c, &format!("{}/commits/main", repo.api(ep)), None).await;
    let hist = hist.as_array().unwrap();
    assert_eq!(hist.len(), 3);
    assert_eq!(hist[0]["id"], c2.as_str());
    assert_eq!(hist[0]["title"], "two");
    assert_eq!(hist[1]["id"], c1.as_str());
    assert_eq!(hist[2]["title"], "initial commit");
    let (_, hist) = get_json(&c, &format!("{}/commits/dev", repo.api(ep)), None).await;
    assert_eq!(hist.as_array().unwrap().len(), 3);
    assert_eq!(hist[0]["title"], "on dev");
    // Paginated by Link.
    let (h, p0) = get_json(&c, &format!("{}/commits/main?limit=2", repo.api(ep)), None).await;
    assert_eq!(p0.as_array().unwrap().len(), 2);
    let link = header_str(&h, "link").expect("commits link").to_string();
    let next = &link[link.find('<').unwrap() + 1..link.find('>').unwrap()];
    let (_, p1) = get_json(&c, next, None).await;
    assert_eq!(p1.as_array().unwrap().len(), 1);
    assert_eq!(p1[0]["title"], "initial commit");

    // Delete the branch and the tag.
    let r = c
        .delete(format!("{}/branch/dev", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c.get(repo.resolve(ep, "dev", "f.txt")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .delete(format!("{}/tag/v1.0", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .delete(format!("{}/branch/main", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    assert_hub_error(r, Some(StatusCode::FORBIDDEN), "delete main").await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_commit_mismatch_is_412() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/parent");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let base = head_sha(&c, ep, None, &repo, "main").await;
    let c1 = commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("a", Some(&base)), utf8_line("a", "a")],
    )
    .await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();
    // `base` is stale now.
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "",
        ndjson(&[header_line("b", Some(&base)), utf8_line("b", "b")]),
    )
    .await;
    assert_hub_error(r, Some(StatusCode::PRECONDITION_FAILED), "stale parentCommit").await;
    // A parent that is no commit at all.
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "",
        ndjson(&[header_line("b", Some(&"f".repeat(40))), utf8_line("b", "b")]),
    )
    .await;
    assert_hub_error(r, Some(StatusCode::PRECONDITION_FAILED), "unknown parentCommit").await;
    assert_eq!(head_sha(&c, ep, None, &repo, "main").await, c1);
    // The right parent works.
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("b", Some(&c1)), utf8_line("b", "b")],
    )
    .await;
    hub.stop().await;
}

/// `?create_pr=1` with a `parentCommit` behind the branch: the PR is made from that parent (the
/// branch's later commits are not in it) and targets the branch of the URL; without `create_pr`
/// the same stale parent is still 412.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_from_parent_commit() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/pr-parent");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let oid = |v: Value| v["commitOid"].as_str().unwrap().to_string();
    let old = oid(commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("old", None), utf8_line("old.txt", "old")],
    )
    .await);
    // main moves past `old`.
    let main = oid(commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("later", None), utf8_line("later.txt", "later")],
    )
    .await);
    let files = |rev: &'static str| {
        let c = c.clone();
        let url = format!("{}/tree/{rev}?recursive=true", repo.api(ep));
        async move {
            let (_, v) = get_json(&c, &url, None).await;
            paths_of(v.as_array().unwrap()).into_iter().collect::<BTreeSet<_>>()
        }
    };

    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "?create_pr=1",
        ndjson(&[header_line("from old", Some(&old)), utf8_line("pr.txt", "pr")]),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert!(v["pullRequestUrl"].as_str().unwrap().ends_with("/discussions/1"), "{v}");
    let pr = oid(v);
    assert_eq!(head_sha(&c, ep, None, &repo, "refs%2Fpr%2F1").await, pr);
    // The PR's commit sits on `old`, holds its file and old's, and not main's later one.
    let (_, hist) = get_json(&c, &format!("{}/commits/refs%2Fpr%2F1", repo.api(ep)), None).await;
    assert_eq!(hist[0]["id"], pr.as_str());
    assert_eq!(hist[1]["id"], old.as_str(), "parent of the PR commit");
    assert_eq!(
        files("refs%2Fpr%2F1").await,
        [".gitattributes", "old.txt", "pr.txt"].map(String::from).into()
    );
    let r = c
        .get(repo.resolve(ep, "refs%2Fpr%2F1", "later.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "main's later file is not in the PR");
    // main is untouched.
    assert_eq!(head_sha(&c, ep, None, &repo, "main").await, main);
    assert!(files("main").await.contains("later.txt"));
    assert!(!files("main").await.contains("pr.txt"));
    let (_, d) = get_json(&c, &format!("{}/discussions/1", repo.api(ep)), None).await;
    assert_eq!(d["isPullRequest"], json!(true));
    assert_eq!(d["changes"]["base"], "refs/heads/main");
    assert_eq!(d["changes"]["headCommit"], pr.as_str());

    // A PR targets the branch it was opened on.
    let r = c
        .post(format!("{}/branch/dev", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"startingPoint": old}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "dev",
        "?create_pr=1",
        ndjson(&[header_line("to dev", Some(&old)), utf8_line("dev.txt", "dev")]),
    )
    .await;
    assert_eq!(r.status(), 200);
    let (_, d) = get_json(&c, &format!("{}/discussions/2", repo.api(ep)), None).await;
    assert_eq!(d["changes"]["base"], "refs/heads/dev");
    let (_, list) = get_json(&c, &format!("{}/discussions", repo.api(ep)), None).await;
    let bases: Vec<&str> = list["discussions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["changes"]["base"].as_str().unwrap())
        .collect();
    assert_eq!(bases, ["refs/heads/dev", "refs/heads/main"]);

    // A parent that is no commit of this repo (unknown, short, or another repo's) is a 4xx.
    let other = Repo::model("local/pr-parent-other");
    create_repo_ok(&c, ep, WRITE, &other, false).await;
    let foreign = head_sha(&c, ep, None, &other, "main").await;
    for bad in ["f".repeat(40), old[..7].to_string(), foreign] {
        let r = commit_raw(
            &c,
            ep,
            WRITE,
            &repo,
            "main",
            "?create_pr=1",
            ndjson(&[header_line("bad parent", Some(&bad)), utf8_line("x.txt", "x")]),
        )
        .await;
        assert_hub_error(r, Some(StatusCode::NOT_FOUND), &format!("PR from parent {bad}")).await;
    }
    // Without create_pr the stale parent is still refused.
    let r = commit_raw(
        &c,
        ep,
        WRITE,
        &repo,
        "main",
        "",
        ndjson(&[header_line("stale", Some(&old)), utf8_line("y.txt", "y")]),
    )
    .await;
    assert_hub_error(
        r,
        Some(StatusCode::PRECONDITION_FAILED),
        "stale parentCommit without create_pr",
    )
    .await;
    assert_eq!(head_sha(&c, ep, None, &repo, "main").await, main);
    let (_, refs) = get_json(&c, &format!("{}/refs?include_pull_requests=true", repo.api(ep)), None).await;
    assert_eq!(
        refs["pullRequests"].as_array().unwrap().len(),
        2,
        "refused PRs leave no ref"
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_all_land() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint().to_string();
    let c = client();
    let repo = Repo::dataset("local/concurrent");
    create_repo_ok(&c, &ep, WRITE, &repo, false).await;
    let count = |c: reqwest::Client, ep: String, repo: Repo| async move {
        let (_, v) = get_json(&c, &format!("{}/commits/main?limit=1000", repo.api(&ep)), None).await;
        v.as_array().unwrap().len()
    };
    let before = count(c.clone(), ep.clone(), repo.clone()).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (c, ep, repo) = (c.clone(), ep.clone(), repo.clone());
        tasks.push(tokio::spawn(async move {
            let lines = [
                header_line(&format!("writer {i}"), None),
                utf8_line(&format!("w/{i}.txt"), &format!("writer {i}")),
            ];
            commit_ok(&c, &ep, WRITE, &repo, &lines).await["commitOid"]
                .as_str()
                .unwrap()
                .to_string()
        }));
    }
    let mut ids = BTreeSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    assert_eq!(ids.len(), 8, "8 distinct commits");
    let (_, v) = get_json(&c, &format!("{}/tree/main/w", repo.api(&ep)), None).await;
    let got: BTreeSet<String> = paths_of(v.as_array().unwrap()).into_iter().collect();
    assert_eq!(got, (0..8).map(|i| format!("w/{i}.txt")).collect());
    assert_eq!(count(c.clone(), ep.clone(), repo.clone()).await, before + 8);
    // The history is a line through all 8 commits.
    let (_, hist) = get_json(&c, &format!("{}/commits/main", repo.api(&ep)), None).await;
    let listed: BTreeSet<String> = hist.as_array().unwrap()[..8]
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ids);
    hub.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Auth
// ---------------------------------------------------------------------------------------------

const ALICE: &str = "hf_alice_token";
const BOB: &str = "hf_bob_token";
const CAROL: &str = "hf_carol_read";

/// Records every response so the test can check none of them carries a token value.
struct Seen(Vec<String>);

impl Seen {
    async fn send(&mut self, req: reqwest::RequestBuilder) -> (StatusCode, reqwest::header::HeaderMap, String) {
        let r = req.send().await.unwrap();
        let status = r.status();
        let h = r.headers().clone();
        let body = r.text().await.unwrap();
        let mut dump = format!("{status}\n");
        for (k, v) in &h {
            dump.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
        }
        dump.push_str(&body);
        self.0.push(dump);
        (status, h, body)
    }

    fn assert_no_tokens(&self) {
        for d in &self.0 {
            for t in [ALICE, BOB, CAROL, "hf_not_a_real_token"] {
                assert!(!d.contains(t), "a response carries the token {t}: {d}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_rules() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LocalHubConfig::new(dir.path());
    cfg.tokens = vec![
        format!("alice:{ALICE}:write").parse::<TokenSpec>().unwrap(),
        format!("bob:{BOB}:write").parse().unwrap(),
        format!("carol:{CAROL}:read").parse().unwrap(),
    ];
    let hub = LocalHub::start(cfg).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let mut seen = Seen(Vec::new());
    let secret = Repo::model("alice/secret");
    let open = Repo::model("alice/open");
    // The default tokens do not exist when tokens are configured.
    let (s, _, _) = seen
        .send(
            c.get(format!("{ep}/api/whoami-v2"))
                .header("authorization", bearer(WRITE)),
        )
        .await;
    assert_eq!(s, 401);

    for (repo, private) in [(&secret, true), (&open, false)] {
        let (ns, name) = repo.id.split_once('/').unwrap();
        let (s, _, body) = seen
            .send(
                c.post(format!("{ep}/api/repos/create"))
                    .header("authorization", bearer(ALICE))
                    .json(&json!({"name": name, "organization": ns, "private": private})),
            )
            .await;
        assert_eq!(s, 200, "{body}");
    }
    commit_ok(
        &c,
        ep,
        ALICE,
        &secret,
        &[header_line("s", None), utf8_line("s.txt", "secret")],
    )
    .await;
    // Bob may not create repos under alice; carol (read-only) may not create at all.
    let (s, _, _) = seen
        .send(
            c.post(format!("{ep}/api/repos/create"))
                .header("authorization", bearer(BOB))
                .json(&json!({"name": "bobs", "organization": "alice"})),
        )
        .await;
    assert_eq!(s, 403);
    let (s, _, _) = seen
        .send(
            c.post(format!("{ep}/api/repos/create"))
                .header("authorization", bearer(CAROL))
                .json(&json!({"name": "mine"})),
        )
        .await;
    assert_eq!(s, 403);

    // Private repo: anonymous 401 RepoNotFound, bob 404 RepoNotFound, alice 200 — on info, tree
    // and resolve alike.
    for url in [
        secret.api(ep),
        format!("{}/tree/main", secret.api(ep)),
        secret.resolve(ep, "main", "s.txt"),
    ] {
        let (s, h, body) = seen.send(c.get(&url)).await;
        assert_eq!(s, 401, "anonymous {url}: {body}");
        assert_eq!(header_str(&h, "x-error-code"), Some("RepoNotFound"), "{url}");
        let (s, h, _) = seen.send(c.get(&url).header("authorization", bearer(BOB))).await;
        assert_eq!(s, 404, "bob {url}");
        assert_eq!(header_str(&h, "x-error-code"), Some("RepoNotFound"), "{url}");
        let (s, _, _) = seen.send(c.get(&url).header("authorization", bearer(CAROL))).await;
        assert_eq!(s, 404, "carol {url}");
        let (s, _, body) = seen.send(c.get(&url).header("authorization", bearer(ALICE))).await;
        assert_eq!(s, 200, "alice {url}: {body}");
    }
    // A missing repo looks exactly like the private one.
    let (s, h, _) = seen.send(c.get(Repo::model("alice/nothing").api(ep))).await;
    assert_eq!(s, 401);
    assert_eq!(header_str(&h, "x-error-code"), Some("RepoNotFound"));
    let (s, _, _) = seen
        .send(
            c.get(Repo::model("alice/nothing").api(ep))
                .header("authorization", bearer(BOB)),
        )
        .await;
    assert_eq!(s, 404);

    // Public repo: everyone reads; only alice writes.
    let (s, _, _) = seen.send(c.get(open.api(ep))).await;
    assert_eq!(s, 200);
    let body = ndjson(&[header_line("x", None), utf8_line("x.txt", "x")]);
    let commit = |token: Option<&str>| {
        let mut r = c
            .post(format!("{}/commit/main", open.api(ep)))
            .header("content-type", "application/x-ndjson")
            .body(body.clone());
        if let Some(t) = token {
            r = r.header("authorization", bearer(t));
        }
        r
    };
    let (s, _, body_carol) = seen.send(commit(Some(CAROL))).await;
    assert_eq!(s, 403, "read-only token commits: {body_carol}");
    let (s, _, _) = seen.send(commit(Some(BOB))).await;
    assert_eq!(s, 403, "bob commits to alice's repo");
    let (s, _, _) = seen.send(commit(None)).await;
    assert!(s == 401 || s == 403, "anonymous commit: {s}");
    let (s, _, _) = seen.send(commit(Some(ALICE))).await;
    assert_eq!(s, 200);
    // Other writes by bob: branch, LFS upload, preupload, settings.
    let (s, _, _) = seen
        .send(
            c.post(format!("{}/branch/b", open.api(ep)))
                .header("authorization", bearer(BOB))
                .json(&json!({})),
        )
        .await;
    assert_eq!(s, 403);
    let (s, _, _) = seen
        .send(
            c.post(format!("{}.git/info/lfs/objects/batch", open.web(ep)))
                .header("authorization", bearer(BOB))
                .json(&json!({"operation": "upload", "objects": [{"oid": sha256_hex(b"x"), "size": 1}]})),
        )
        .await;
    assert_eq!(s, 403);
    let (s, _, _) = seen
        .send(
            c.put(format!("{}/settings", open.api(ep)))
                .header("authorization", bearer(BOB))
                .json(&json!({"private": true})),
        )
        .await;
    assert_eq!(s, 403);
    // Xet write tokens only for writers.
    let (s, _, _) = seen
        .send(
            c.get(format!("{}/xet-write-token/main", open.api(ep)))
                .header("authorization", bearer(CAROL)),
        )
        .await;
    assert_eq!(s, 403);
    let (s, _, _) = seen
        .send(
            c.get(format!("{}/xet-write-token/main", open.api(ep)))
                .header("authorization", bearer(ALICE)),
        )
        .await;
    assert_eq!(s, 200);

    // An unknown token is refused outright, even on public data; so is a malformed header.
    let (s, _, _) = seen
        .send(
            c.get(open.api(ep))
                .header("authorization", bearer("hf_not_a_real_token")),
        )
        .await;
    assert_eq!(s, 401);
    let (s, _, _) = seen
        .send(c.get(open.api(ep)).header("authorization", "Basic Zm9vOmJhcg=="))
        .await;
    assert_eq!(s, 401);
    // whoami names the user and role, not the token.
    let (s, _, body) = seen
        .send(
            c.get(format!("{ep}/api/whoami-v2"))
                .header("authorization", bearer(CAROL)),
        )
        .await;
    assert_eq!(s, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["name"], "carol");
    assert_eq!(v["auth"]["accessToken"]["role"], "read");
    // Listing repos hides the private one from others.
    let (_, _, body) = seen.send(c.get(format!("{ep}/api/models"))).await;
    assert!(!body.contains("alice/secret"), "{body}");
    let (_, _, body) = seen
        .send(c.get(format!("{ep}/api/models")).header("authorization", bearer(ALICE)))
        .await;
    assert!(body.contains("alice/secret"), "{body}");

    seen.assert_no_tokens();
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_never_logs_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr.log");
    let token = "hf_cli_secret_0123456789";
    let other = "hf_cli_intruder_987654";
    let tok_arg = format!("ana:{token}:write");
    let hub = spawn_cli(
        &dir.path().join("data"),
        &["--token", &tok_arg],
        &[("RUST_LOG", "debug")],
        Some(&log),
    )
    .await;
    let ep = hub.endpoint.clone();
    let c = client();
    let repo = Repo::model("ana/m");
    create_repo_ok(&c, &ep, token, &repo, true).await;
    commit_ok(
        &c,
        &ep,
        token,
        &repo,
        &[header_line("x", None), utf8_line("a.txt", "a")],
    )
    .await;
    let oid = lfs_upload_basic(&c, &ep, token, &repo, &bytes(2000, 1)).await;
    commit_ok(
        &c,
        &ep,
        token,
        &repo,
        &[header_line("y", None), lfs_line("b.bin", &oid, 2000)],
    )
    .await;
    for path in ["a.txt", "b.bin", "missing"] {
        let r = c
            .get(repo.resolve(&ep, "main", path))
            .header("authorization", bearer(token))
            .send()
            .await
            .unwrap();
        assert!(r.status().as_u16() < 500);
    }
    let r = c
        .get(format!("{}/xet-read-token/main", repo.api(&ep)))
        .header("authorization", bearer(token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Refused requests: a wrong token, a failed commit.
    let r = c
        .get(repo.api(&ep))
        .header("authorization", bearer(other))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = commit_raw(&c, &ep, token, &repo, "main", "", "garbage".into()).await;
    assert_eq!(r.status(), 400);
    tokio::time::sleep(Duration::from_millis(200)).await;
    hub.kill9().await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("DEBUG") || text.contains("INFO"),
        "no logs captured: {text}"
    );
    assert!(!text.contains(token), "the token appears in the server's stderr");
    assert!(
        !text.contains(other),
        "a presented (unknown) token appears in the server's stderr"
    );
    assert!(!text.contains("cli_secret"), "part of the token appears in stderr");
    // Nor is it written anywhere in the data dir.
    let mut stack = vec![dir.path().join("data")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.metadata().map(|m| m.len() < (64 << 20)).unwrap_or(false) {
                let b = std::fs::read(&p).unwrap_or_default();
                assert!(
                    !b.windows(token.len()).any(|w| w == token.as_bytes()),
                    "the token is stored in {}",
                    p.display()
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_hub_shaped_400s() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/bad");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let head = head_sha(&c, ep, None, &repo, "main").await;
    let auth = bearer(WRITE);
    let post = |url: String, ct: &'static str, body: &'static str| {
        c.post(url)
            .header("authorization", &auth)
            .header("content-type", ct)
            .body(body)
    };
    let json_ct = "application/json";
    for (what, url, ct) in [
        ("create", format!("{ep}/api/repos/create"), json_ct),
        ("paths-info", format!("{}/paths-info/main", repo.api(ep)), json_ct),
        ("preupload", format!("{}/preupload/main", repo.api(ep)), json_ct),
        (
            "lfs batch",
            format!("{}.git/info/lfs/objects/batch", repo.web(ep)),
            "application/vnd.git-lfs+json",
        ),
        ("branch", format!("{}/branch/x", repo.api(ep)), json_ct),
        ("settings", format!("{}/settings", repo.api(ep)), json_ct),
        ("delete", format!("{ep}/api/repos/delete"), json_ct),
        ("validate-yaml", format!("{ep}/api/validate-yaml"), json_ct),
    ] {
        // Valid JSON of the wrong shape only matters where the body has required fields.
        let wrong_shape = !matches!(what, "branch" | "settings" | "validate-yaml");
        for body in [
            "{not json",
            "[1,2",
            "\u{0}\u{1}\u{2}",
            "{\"files\": 3, \"paths\": 7, \"objects\": \"x\"}",
        ] {
            if body.starts_with("{\"files") && !wrong_shape {
                continue;
            }
            let req = if what == "settings" {
                c.put(&url)
                    .header("authorization", &auth)
                    .header("content-type", ct)
                    .body(body)
            } else if what == "delete" {
                c.delete(&url)
                    .header("authorization", &auth)
                    .header("content-type", ct)
                    .body(body)
            } else {
                post(url.clone(), ct, body)
            };
            let r = req.send().await.unwrap();
            assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &format!("{what} with {body:?}")).await;
        }
    }
    // Wrong JSON shapes.
    for (what, url, body) in [
        (
            "create without name",
            format!("{ep}/api/repos/create"),
            json!({"type": "model"}),
        ),
        (
            "create bad type",
            format!("{ep}/api/repos/create"),
            json!({"name": "x", "type": "widget"}),
        ),
        (
            "preupload bad path",
            format!("{}/preupload/main", repo.api(ep)),
            json!({"files": [{"path": "../x", "size": 1}]}),
        ),
        (
            "lfs bad op",
            format!("{}.git/info/lfs/objects/batch", repo.web(ep)),
            json!({"operation": "steal", "objects": []}),
        ),
        ("tag without name", format!("{}/tag/main", repo.api(ep)), json!({})),
        (
            "paths not strings",
            format!("{}/paths-info/main", repo.api(ep)),
            json!({"paths": [1, 2]}),
        ),
    ] {
        let r = c
            .post(&url)
            .header("authorization", &auth)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), what).await;
    }

    // Commits: malformed NDJSON, no header, empty summary, unknown keys and encodings, bad base64.
    let hdr = header_line("ok", None);
    for (what, body) in [
        ("not json", "this is not json\n".to_string()),
        ("truncated", format!("{hdr}\n{{\"key\":\"file\",\"value\":{{\"path\"")),
        ("no header", format!("{}\n", utf8_line("a", "a"))),
        ("empty body", String::new()),
        (
            "empty summary",
            format!("{}\n{}\n", header_line("", None), utf8_line("a", "a")),
        ),
        (
            "unknown key",
            format!("{hdr}\n{{\"key\":\"rmrf\",\"value\":{{\"path\":\"a\"}}}}\n"),
        ),
        (
            "unknown encoding",
            format!(
                "{hdr}\n{{\"key\":\"file\",\"value\":{{\"path\":\"a\",\"content\":\"x\",\"encoding\":\"rot13\"}}}}\n"
            ),
        ),
        (
            "bad base64",
            format!(
                "{hdr}\n{{\"key\":\"file\",\"value\":{{\"path\":\"a\",\"content\":\"!!!\",\"encoding\":\"base64\"}}}}\n"
            ),
        ),
        (
            "missing path",
            format!("{hdr}\n{{\"key\":\"file\",\"value\":{{\"content\":\"x\"}}}}\n"),
        ),
        ("array line", format!("{hdr}\n[1,2,3]\n")),
    ] {
        let r = commit_raw(&c, ep, WRITE, &repo, "main", "", body).await;
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &format!("commit: {what}")).await;
    }
    let r = c
        .post(format!("{}/commit/main", repo.api(ep)))
        .header("authorization", &auth)
        .body(vec![0xffu8, 0xfe, 0x00, b'\n'])
        .send()
        .await
        .unwrap();
    assert_hub_error(r, Some(StatusCode::BAD_REQUEST), "commit: not utf-8").await;
    // A file where a directory is, and a directory where a file is.
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("f", None), utf8_line("f", "f"), utf8_line("d/x", "x")],
    )
    .await;
    for (what, line) in [
        ("under a file", utf8_line("f/x", "x")),
        ("over a dir", utf8_line("d", "d")),
    ] {
        let r = commit_raw(
            &c,
            ep,
            WRITE,
            &repo,
            "main",
            "",
            ndjson(&[header_line("c", None), line]),
        )
        .await;
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), what).await;
    }
    let now = head_sha(&c, ep, None, &repo, "main").await;
    assert_ne!(now, head);
    // Nothing above moved the head past the one good commit.
    let (_, hist) = get_json(&c, &format!("{}/commits/main", repo.api(ep)), None).await;
    assert_eq!(hist.as_array().unwrap().len(), 2);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_paths_are_refused() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/paths");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("f", None), utf8_line("ok.txt", "ok")],
    )
    .await;
    let head = head_sha(&c, ep, None, &repo, "main").await;

    // Unknown repo type in the URL.
    for url in [
        format!("{ep}/api/widgets/a/b"),
        format!("{ep}/api/widgets/a/b/tree/main"),
    ] {
        let r = c.get(&url).send().await.unwrap();
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &url).await;
    }
    // Invalid repo names, at creation and in URLs.
    let long = "x".repeat(97);
    for name in ["a..b", "-x", "x-", ".x", "a--b", "a b", long.as_str()] {
        let r = c
            .post(format!("{ep}/api/repos/create"))
            .header("authorization", bearer(WRITE))
            .json(&json!({"name": name, "type": "model"}))
            .send()
            .await
            .unwrap();
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &format!("create {name:?}")).await;
        let enc = name.replace(' ', "%20");
        let r = c.get(format!("{ep}/api/models/local/{enc}")).send().await.unwrap();
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &format!("info {name:?}")).await;
    }
    // 96 characters is fine.
    create_repo_ok(&c, ep, WRITE, &Repo::model(&format!("local/{}", "y".repeat(96))), false).await;

    // Traversal and odd paths in commits.
    for p in [
        "../x",
        "/abs",
        "a/./b",
        "a/../../b",
        "a\u{0}b",
        "a//b",
        ".git/config",
        "..",
        "a\nb",
    ] {
        for line in [
            utf8_line(p, "x"),
            deleted_file_line(p),
            deleted_folder_line(p),
            lfs_line(p, &sha256_hex(b"x"), 1),
        ] {
            let r = commit_raw(
                &c,
                ep,
                WRITE,
                &repo,
                "main",
                "",
                ndjson(&[header_line("evil", None), line.clone()]),
            )
            .await;
            assert_hub_error(
                r,
                Some(StatusCode::BAD_REQUEST),
                &format!("commit path {p:?} in {line}"),
            )
            .await;
        }
    }
    assert_eq!(
        head_sha(&c, ep, None, &repo, "main").await,
        head,
        "no bad commit landed"
    );
    // Nothing escaped the data dir.
    assert!(!hub.data_dir().parent().unwrap().join("x").exists());

    // Traversal in resolve and tree URLs (percent-encoded, so the client keeps them).
    for p in [
        "..%2Fx",
        "..%2F..%2Fetc%2Fpasswd",
        "a%00b",
        "%00",
        "..",
        "%2E%2E%2Fok.txt",
        "%2Fok.txt",
    ] {
        let r = c.get(repo.resolve(ep, "main", p)).send().await.unwrap();
        assert_hub_error(r, None, &format!("resolve {p}")).await;
        let r = c.get(format!("{}/tree/main/{p}", repo.api(ep))).send().await.unwrap();
        assert_hub_error(r, None, &format!("tree {p}")).await;
    }
    // Invalid UTF-8 after decoding.
    let r = c.get(repo.resolve(ep, "main", "%ff%fe")).send().await.unwrap();
    assert_hub_error(r, Some(StatusCode::BAD_REQUEST), "resolve non-utf8").await;
    // Literal dot segments, sent raw so no client normalises them away.
    for path in [
        "/local/paths/resolve/main/../../../etc/passwd",
        "/local/paths/resolve/main/./ok.txt",
        "/local/paths/resolve/main/a/../ok.txt",
        "/api/models/local/paths/tree/main/../..",
    ] {
        let (status, text) = raw_request(ep, "GET", path, "").await;
        assert!((400..500).contains(&status), "{path}: {status} {text}");
        assert!(!text.contains("root:"), "{path}");
    }
    // Unknown routes are 404, wrong methods 405; still JSON errors.
    let r = c
        .get(format!("{ep}/api/models/local/paths/unknown"))
        .send()
        .await
        .unwrap();
    assert_hub_error(r, Some(StatusCode::NOT_FOUND), "unknown route").await;
    let r = c.get(format!("{ep}/nothing/here")).send().await.unwrap();
    assert_hub_error(r, Some(StatusCode::NOT_FOUND), "unknown web route").await;
    let r = c.delete(repo.api(ep)).send().await.unwrap();
    assert_hub_error(r, Some(StatusCode::METHOD_NOT_ALLOWED), "DELETE info").await;
    // Bad revision names for refs.
    for name in ["a..b", "x~1", "-x"] {
        let r = c
            .post(format!("{}/branch/{name}", repo.api(ep)))
            .header("authorization", bearer(WRITE))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &format!("branch {name}")).await;
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_the_body_is_read_close_the_connection() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/refused");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    // A read token may not commit: refused before the body is read. The body's first part is
    // sent and the rest held back, so the answer comes while the body is unread (a large body sent
    // whole races the server's close: the client may fail writing it before it reads the answer).
    let first = futures::stream::once(async { Ok::<_, std::io::Error>(header_line("x", None) + "\n") });
    let body = reqwest::Body::wrap_stream(first.chain(futures::stream::pending()));
    let r = c
        .post(format!("{}/commit/main", repo.api(ep)))
        .header("authorization", bearer(READ))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        r.headers().get("connection").and_then(|v| v.to_str().ok()),
        Some("close")
    );
    // A request whose body was read keeps its connection, and the client goes on.
    let r = commit_raw(&c, ep, WRITE, &repo, "main", "", ndjson(&[header_line("ok", None)])).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers().get("connection"), None);
    let r = c.get(repo.api(ep)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_body_is_413() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/big");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    // paths-info takes at most 16 MiB.
    let body = format!("paths={}", "a".repeat(17 << 20));
    let t = Instant::now();
    let r = c
        .post(format!("{}/paths-info/main", repo.api(ep)))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await;
    match r {
        Ok(r) => {
            assert_hub_error(r, Some(StatusCode::PAYLOAD_TOO_LARGE), "17 MiB paths-info").await;
        }
        // The server may close the connection once it has answered; what matters is no 2xx/5xx.
        Err(e) => panic!("17 MiB paths-info: no answer ({e}); expected 413"),
    }
    assert!(t.elapsed() < Duration::from_secs(20));
    // Just under the limit is served.
    let body = format!("paths={}", "a".repeat((16 << 20) - 100));
    let r = c
        .post(format!("{}/paths-info/main", repo.api(ep)))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The create endpoint takes 1 MiB.
    let r = c
        .post(format!("{ep}/api/repos/create"))
        .header("authorization", bearer(WRITE))
        .json(&json!({"name": "x", "pad": "p".repeat(2 << 20)}))
        .send()
        .await
        .unwrap();
    let (headers, _) = assert_hub_error(r, Some(StatusCode::PAYLOAD_TOO_LARGE), "2 MiB create").await;
    // Its unread body ends the connection, and the answer says so: a pooled connection the server
    // is closing would fail the next request (seen in CI: hyper's IncompleteMessage).
    assert_eq!(headers.get("connection").and_then(|v| v.to_str().ok()), Some("close"));
    // The server is still fine.
    let r = c.get(repo.api(ep)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_range_headers() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/ranges");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let data = bytes(1000, 4);
    let oid = lfs_upload_basic(&c, ep, WRITE, &repo, &data).await;
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[
            header_line("f", None),
            file_line("f.bin", &data),
            file_line("empty", b""),
            lfs_line("l.bin", &oid, 1000),
        ],
    )
    .await;
    let r = c.get(repo.resolve(ep, "main", "l.bin")).send().await.unwrap();
    let blob = header_str(r.headers(), "location").unwrap().to_string();
    for url in [repo.resolve(ep, "main", "f.bin"), blob] {
        for range in [
            "bytes=abc",
            "bytes=1-a",
            "bytes=--5",
            "items=0-10",
            "bytes=",
            "bytes=-",
            "bytes=99999999999999999999999-",
            "bytes=5",
            "bytes=1000-",
            "bytes=2000-3000",
            "bytes=9-3",
        ] {
            let r = c.get(&url).header("range", range).send().await.unwrap();
            let status = r.status();
            assert!(
                status == 416 || status == 200,
                "{range} on {url}: {status} (must be 416, or 200 if ignored)"
            );
            if status == 416 {
                assert_eq!(
                    header_str(r.headers(), "content-range"),
                    Some("bytes */1000"),
                    "{range}"
                );
                assert_hub_error(r, Some(StatusCode::RANGE_NOT_SATISFIABLE), range).await;
            } else {
                assert_eq!(r.bytes().await.unwrap().as_ref(), &data[..], "{range}");
            }
        }
        // Multiple ranges may be answered with the whole file.
        let r = c.get(&url).header("range", "bytes=0-1,5-6").send().await.unwrap();
        assert!(r.status() == 200 || r.status() == 206, "{}", r.status());
    }
    // Any range of an empty file is unsatisfiable; without a range it is an empty 200.
    let r = c.get(repo.resolve(ep, "main", "empty")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header_str(r.headers(), "content-length"), Some("0"));
    let r = c
        .get(repo.resolve(ep, "main", "empty"))
        .header("range", "bytes=0-")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 416);
    hub.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Persistence and crash atomicity
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_persists_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let repo = Repo::dataset("local/persist");
    let small = b"persisted bytes\n".to_vec();
    let big = bytes(300_000, 77);
    let cas_path = |url: &str| url::Url::parse(url).unwrap().path().to_string();
    let (head, tag_commit, cas_path_before) = {
        let hub = LocalHub::start(LocalHubConfig::new(dir.path())).await.unwrap();
        let ep = hub.endpoint();
        create_repo_ok(&c, ep, WRITE, &repo, true).await;
        let oid = lfs_upload_basic(&c, ep, WRITE, &repo, &big).await;
        let t = commit_ok(
            &c,
            ep,
            WRITE,
            &repo,
            &[header_line("one", None), file_line("a/small.txt", &small)],
        )
        .await;
        let t = t["commitOid"].as_str().unwrap().to_string();
        let r = c
            .post(format!("{}/tag/main", repo.api(ep)))
            .header("authorization", bearer(WRITE))
            .json(&json!({"tag": "v1"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let h = commit_ok(
            &c,
            ep,
            WRITE,
            &repo,
            &[header_line("two", None), lfs_line("big.bin", &oid, 300_000)],
        )
        .await;
        let h = h["commitOid"].as_str().unwrap().to_string();
        let cas_path = cas_path(hub.cas_url());
        hub.stop().await;
        (h, t, cas_path)
    };
    // The port is free again after stop().
    let hub = LocalHub::start(LocalHubConfig::new(dir.path())).await.unwrap();
    let ep = hub.endpoint();
    // Xet clients key their dedup caches by CAS URL: it is the same across a restart of one data dir
    // and different for another data dir, even if that one got the same port.
    assert_eq!(cas_path(hub.cas_url()), cas_path_before);
    let other_dir = tempfile::tempdir().unwrap();
    let other = LocalHub::start(LocalHubConfig::new(other_dir.path())).await.unwrap();
    assert_ne!(cas_path(other.cas_url()), cas_path_before);
    other.stop().await;
    // Outside the prefix, the CAS origin answers nothing but presigned reads.
    let origin = hub.cas_url().trim_end_matches(&cas_path_before);
    let r = c
        .get(format!("{origin}/v1/reconstructions/{}", "0".repeat(64)))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(head_sha(&c, ep, Some(WRITE), &repo, "main").await, head);
    assert_eq!(head_sha(&c, ep, Some(WRITE), &repo, "v1").await, tag_commit);
    // Still private.
    let r = c.get(repo.api(ep)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(repo.resolve(ep, "main", "a/small.txt"))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), &small[..]);
    let r = c
        .get(repo.resolve(ep, "main", "big.bin"))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    let loc = header_str(r.headers(), "location").unwrap().to_string();
    let got = c.get(&loc).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(sha256_hex(&got), sha256_hex(&big));
    // New commits continue the history.
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("three", Some(&head)), utf8_line("c", "c")],
    )
    .await;
    let (_, hist) = get_json(&c, &format!("{}/commits/main", repo.api(ep)), Some(WRITE)).await;
    assert_eq!(hist.as_array().unwrap().len(), 4);
    hub.stop().await;
}

/// Number of regular-file objects stored under `objects/git`.
fn git_object_count(data: &std::path::Path) -> usize {
    let Ok(dirs) = std::fs::read_dir(data.join("objects/git")) else {
        return 0;
    };
    dirs.flatten()
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .map(|d| d.count())
        .sum()
}

/// When `commit_is_atomic_across_kill9` kills the server.
#[derive(Clone, Copy)]
enum Kill {
    /// Once this many new objects of the commit are on disk.
    Objects(usize),
    /// After the commit was answered.
    Answered,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_is_atomic_across_kill9() {
    const FILES: usize = 2_000;
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let c = client();
    let repo = Repo::dataset("local/crash");
    let mut hub = spawn_cli(&data, &[], &[], None).await;
    create_repo_ok(&c, &hub.endpoint, WRITE, &repo, false).await;
    commit_ok(
        &c,
        &hub.endpoint,
        WRITE,
        &repo,
        &[header_line("base", None), utf8_line("base.txt", "b")],
    )
    .await;
    let mut outcomes = Vec::new();
    // Kill at different points: half-way through storing the commit's objects, and once all of them
    // are stored (the commit record and the ref move come next).
    // A last round kills only after the answer, so the complete-commit branch is checked too.
    for (round, trigger) in [
        (0, Kill::Objects(FILES / 2)),
        (1, Kill::Objects(FILES)),
        (2, Kill::Answered),
    ] {
        let ep = hub.endpoint.clone();
        let old = head_sha(&c, &ep, None, &repo, "main").await;
        let objects_before = git_object_count(&data);
        let mut lines = vec![header_line(&format!("big {round}"), None)];
        for i in 0..FILES {
            lines.push(utf8_line(
                &format!("r{round}/f-{i:05}.txt"),
                &format!("round {round} file {i}\n"),
            ));
        }
        let body = ndjson(&lines);
        let (c2, repo2, ep2) = (c.clone(), repo.clone(), ep.clone());
        // The request fails when the server dies under it: keep the error, don't panic.
        let req = tokio::spawn(async move {
            c2.post(format!("{}/commit/main", repo2.api(&ep2)))
                .header("authorization", bearer(WRITE))
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
                .await
                .map(|r| r.status())
                .map_err(|e| e.to_string())
        });
        let t = Instant::now();
        match trigger {
            Kill::Objects(n) => {
                while git_object_count(&data) < objects_before + n && t.elapsed() < Duration::from_secs(20) {
                    if req.is_finished() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            Kill::Answered => {
                while !req.is_finished() && t.elapsed() < Duration::from_secs(30) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        let at_kill = git_object_count(&data) - objects_before;
        let killed_after = t.elapsed();
        hub.kill9().await;
        let status = req.await.unwrap();
        if matches!(trigger, Kill::Answered) {
            assert_eq!(
                status,
                Ok(StatusCode::OK),
                "round {round}: the commit should have landed"
            );
        }
        hub = spawn_cli(&data, &[], &[], None).await;
        let ep = hub.endpoint.clone();
        let now = head_sha(&c, &ep, None, &repo, "main").await;
        if now == old {
            // The old head: none of the new files.
            let r = c
                .get(format!("{}/tree/main/r{round}", repo.api(&ep)))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 404, "round {round}: head unchanged but new files visible");
            outcomes.push("old");
        } else {
            // The complete new commit: every one of its files, with its content.
            let pages = all_pages(&c, &format!("{}/tree/main/r{round}", repo.api(&ep))).await;
            let n: usize = pages.iter().map(|p| p.len()).sum();
            assert_eq!(n, FILES, "round {round}: partial commit visible ({n} of {FILES} files)");
            let r = c
                .get(repo.resolve(&ep, "main", &format!("r{round}/f-{:05}.txt", FILES - 1)))
                .send()
                .await
                .unwrap();
            assert_eq!(r.text().await.unwrap(), format!("round {round} file {}\n", FILES - 1));
            let (_, hist) = get_json(&c, &format!("{}/commits/main?limit=1", repo.api(&ep)), None).await;
            assert_eq!(hist[0]["title"], format!("big {round}"));
            outcomes.push("new");
        }
        eprintln!(
            "round {round}: {}; killed after {killed_after:?} with {at_kill} objects stored (request: {status:?}); \
             {:?} into the test",
            outcomes.last().unwrap(),
            t0.elapsed()
        );
        // The restarted Hub takes commits normally.
        commit_ok(
            &c,
            &ep,
            WRITE,
            &repo,
            &[header_line("after", None), utf8_line(&format!("after{round}"), "a")],
        )
        .await;
    }
    assert_eq!(outcomes.last(), Some(&"new"));
    hub.kill9().await;
}

// ---------------------------------------------------------------------------------------------
// More protocol: preupload, repo lifecycle, Xet files, odd names in paginated listings
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preupload_modes_and_validate_yaml() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/pre");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let existing = b"existing\n";
    let head = commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("e", None), file_line("exists.txt", existing)],
    )
    .await["commitOid"]
        .as_str()
        .unwrap()
        .to_string();
    let b64 = |b: &[u8]| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(b)
    };
    let r = c
        .post(format!("{}/preupload/main", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"files": [
            {"path": "small.txt", "sample": b64(b"hello"), "size": 5},
            {"path": "weights.bin", "sample": b64(b"hello"), "size": 5},
            {"path": "sub/dir/model.safetensors", "sample": b64(b"x"), "size": 1},
            {"path": "binary.dat", "sample": b64(b"a\0b"), "size": 3},
            {"path": "huge.txt", "sample": b64(b"text"), "size": 11 << 20},
            {"path": "empty.bin", "sample": "", "size": 0},
            {"path": "exists.txt", "sample": b64(existing), "size": existing.len()},
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["commitOid"], head.as_str());
    let mode: BTreeMap<String, (String, Value)> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                (f["uploadMode"].as_str().unwrap().to_string(), f["oid"].clone()),
            )
        })
        .collect();
    assert_eq!(mode["small.txt"].0, "regular");
    assert_eq!(mode["weights.bin"].0, "lfs", ".gitattributes pattern");
    assert_eq!(mode["sub/dir/model.safetensors"].0, "lfs", "pattern at any depth");
    assert_eq!(mode["binary.dat"].0, "lfs", "NUL in the sample");
    assert_eq!(mode["huge.txt"].0, "lfs", "≥ 10 MiB");
    assert_eq!(mode["empty.bin"].0, "regular", "empty files are regular");
    assert_eq!(mode["exists.txt"].1, git_blob_oid(existing).as_str());
    assert_eq!(mode["small.txt"].1, Value::Null);
    // Read tokens may not preupload.
    let r = c
        .post(format!("{}/preupload/main", repo.api(ep)))
        .header("authorization", bearer(READ))
        .json(&json!({"files": []}))
        .send()
        .await
        .unwrap();
    assert_hub_error(r, Some(StatusCode::FORBIDDEN), "preupload with a read token").await;
    // Unknown revision → 404 RevisionNotFound.
    let r = c
        .post(format!("{}/preupload/nope", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"files": []}))
        .send()
        .await
        .unwrap();
    let (h, _) = assert_hub_error(r, Some(StatusCode::NOT_FOUND), "preupload on a missing revision").await;
    assert_eq!(header_str(&h, "x-error-code"), Some("RevisionNotFound"));
    let r = c
        .post(format!("{ep}/api/validate-yaml"))
        .header("authorization", bearer(WRITE))
        .json(&json!({"content": "---\nlicense: mit\n---\n", "repoType": "model"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"errors": [], "warnings": []}));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repo_settings_delete_and_listing() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::dataset("local/life");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let space = Repo {
        ty: "space",
        id: "local/sp".into(),
    };
    create_repo_ok(&c, ep, WRITE, &space, false).await;
    let (_, v) = get_json(&c, &space.api(ep), None).await;
    assert_eq!(v["id"], "local/sp");
    // The `ns/name` form of `name` works without `organization`.
    let r = c
        .post(format!("{ep}/api/repos/create"))
        .header("authorization", bearer(WRITE))
        .json(&json!({"name": "local/slash-form", "type": "model"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert!(v["url"].as_str().unwrap().ends_with("/local/slash-form"), "{v}");
    // Listing.
    let (_, v) = get_json(&c, &format!("{ep}/api/datasets?author=local"), None).await;
    assert!(v.as_array().unwrap().iter().any(|r| r["id"] == "local/life"), "{v}");
    let (_, v) = get_json(&c, &format!("{ep}/api/models"), None).await;
    assert!(
        v.as_array().unwrap().iter().any(|r| r["id"] == "local/slash-form"),
        "{v}"
    );

    // Settings: private, then public again.
    let set = |private: bool| {
        c.put(format!("{}/settings", repo.api(ep)))
            .header("authorization", bearer(WRITE))
            .json(&json!({"private": private}))
            .send()
    };
    assert_eq!(set(true).await.unwrap().status(), 200);
    let r = c.get(repo.api(ep)).send().await.unwrap();
    let (h, _) = assert_hub_error(r, Some(StatusCode::UNAUTHORIZED), "now private").await;
    assert_eq!(header_str(&h, "x-error-code"), Some("RepoNotFound"));
    let (_, v) = get_json(&c, &repo.api(ep), Some(READ)).await;
    assert_eq!(v["private"], true);
    assert_eq!(set(false).await.unwrap().status(), 200);
    assert_eq!(c.get(repo.api(ep)).send().await.unwrap().status(), 200);

    // Delete: gone; the name can be used again, for a fresh repo.
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("x", None), utf8_line("old.txt", "old")],
    )
    .await;
    let del = || {
        c.delete(format!("{ep}/api/repos/delete"))
            .header("authorization", bearer(WRITE))
            .json(&json!({"name": "life", "organization": "local", "type": "dataset"}))
            .send()
    };
    let r = c
        .delete(format!("{ep}/api/repos/delete"))
        .header("authorization", bearer(READ))
        .json(&json!({"name": "life", "organization": "local", "type": "dataset"}))
        .send()
        .await
        .unwrap();
    assert_hub_error(r, Some(StatusCode::FORBIDDEN), "delete with a read token").await;
    assert_eq!(del().await.unwrap().status(), 200);
    let r = c
        .get(repo.api(ep))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    let (h, _) = assert_hub_error(r, Some(StatusCode::NOT_FOUND), "deleted repo").await;
    assert_eq!(header_str(&h, "x-error-code"), Some("RepoNotFound"));
    let r = del().await.unwrap();
    assert_hub_error(r, Some(StatusCode::NOT_FOUND), "delete twice").await;
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let r = c.get(repo.resolve(ep, "main", "old.txt")).send().await.unwrap();
    assert_eq!(r.status(), 404, "a re-created repo starts empty");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_one_repo_give_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let hub = LocalHub::start(LocalHubConfig::new(dir.path())).await.unwrap();
    let ep = hub.endpoint().to_string();
    let c = client();
    let mut problems = Vec::new();
    let mut heads = Vec::new();
    for round in 0..5 {
        let repo = Repo::model(&format!("local/race{round}"));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (c, ep, repo) = (c.clone(), ep.clone(), repo.clone());
                tokio::spawn(async move { create_repo(&c, &ep, WRITE, &repo, false).await.status() })
            })
            .collect();
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap().as_u16());
        }
        statuses.sort();
        let ok = statuses.iter().filter(|s| **s == 200).count();
        if ok != 1 || !statuses.iter().all(|s| *s == 200 || *s == 409) {
            problems.push(format!(
                "round {round}: statuses {statuses:?} (want one 200, the rest 409)"
            ));
        }
        heads.push((repo.clone(), head_sha(&c, &ep, None, &repo, "main").await));
    }
    hub.stop().await;
    // What was served before the restart is what is on disk.
    let hub = LocalHub::start(LocalHubConfig::new(dir.path())).await.unwrap();
    for (repo, before) in &heads {
        let after = head_sha(&c, hub.endpoint(), None, repo, "main").await;
        if &after != before {
            problems.push(format!("{}: head {before} before the restart, {after} after", repo.id));
        }
    }
    hub.stop().await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_with_odd_names_and_pr_revision() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/odd");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let dir = "sp ace/#h?q=1&x/%25é";
    let names: Vec<String> = (0..25).map(|i| format!("{dir}/f {i:02} #?&+=%.txt")).collect();
    let mut lines = vec![header_line("odd", None)];
    for n in &names {
        lines.push(utf8_line(n, n));
    }
    let r = commit_raw(&c, ep, WRITE, &repo, "main", "?create_pr=1", ndjson(&lines)).await;
    assert_eq!(r.status(), 200);
    let want: BTreeSet<String> = names.iter().cloned().collect();
    // Directory path encoded either way; revision refs/pr/1 encoded as one segment.
    let enc_slash = url::form_urlencoded::byte_serialize(dir.as_bytes())
        .collect::<String>()
        .replace('+', "%20");
    let enc_keep: String = dir
        .split('/')
        .map(|s| {
            url::form_urlencoded::byte_serialize(s.as_bytes())
                .collect::<String>()
                .replace('+', "%20")
        })
        .collect::<Vec<_>>()
        .join("/");
    for p in [enc_slash, enc_keep] {
        let pages = all_pages(&c, &format!("{}/tree/refs%2Fpr%2F1/{p}?limit=4", repo.api(ep))).await;
        assert_eq!(pages.len(), 7, "{p}");
        let all: Vec<String> = pages.iter().flat_map(|pg| paths_of(pg)).collect();
        assert_eq!(all.len(), 25, "duplicates or gaps: {all:?}");
        assert_eq!(all.iter().cloned().collect::<BTreeSet<_>>(), want);
    }
    // Each file resolves at the PR revision to its own name.
    for n in names.iter().take(3) {
        let enc: String = n
            .split('/')
            .map(|s| {
                url::form_urlencoded::byte_serialize(s.as_bytes())
                    .collect::<String>()
                    .replace('+', "%20")
            })
            .collect::<Vec<_>>()
            .join("/");
        let r = c.get(repo.resolve(ep, "refs%2Fpr%2F1", &enc)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{n}");
        assert_eq!(&r.text().await.unwrap(), n);
    }
    // Branch names with a slash.
    let r = c
        .post(format!("{}/branch/feature/x", repo.api(ep)))
        .header("authorization", bearer(WRITE))
        .json(&json!({"startingPoint": "refs/pr/1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (_, v) = get_json(&c, &format!("{}/tree/feature%2Fx?recursive=true", repo.api(ep)), None).await;
    assert!(v.as_array().unwrap().len() > 25);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_file_paths_with_trailing_slash_are_refused() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/slash");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    let data = bytes(10, 1);
    let oid = lfs_upload_basic(&c, ep, WRITE, &repo, &data).await;
    let head = head_sha(&c, ep, None, &repo, "main").await;
    for p in ["evil/", "a//", "dir/sub/"] {
        for line in [utf8_line(p, "x"), lfs_line(p, &oid, 10)] {
            let r = commit_raw(
                &c,
                ep,
                WRITE,
                &repo,
                "main",
                "",
                ndjson(&[header_line("slash", None), line.clone()]),
            )
            .await;
            assert_hub_error(r, Some(StatusCode::BAD_REQUEST), &format!("file path {p:?}: {line}")).await;
        }
    }
    assert_eq!(
        head_sha(&c, ep, None, &repo, "main").await,
        head,
        "a file named with a trailing slash landed"
    );
    // A trailing slash stays fine where it means a folder.
    commit_ok(&c, ep, WRITE, &repo, &[header_line("d", None), utf8_line("d/x", "x")]).await;
    commit_ok(
        &c,
        ep,
        WRITE,
        &repo,
        &[header_line("rm", None), deleted_folder_line("d/")],
    )
    .await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_listing_survives_huge_page_numbers() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let repo = Repo::model("local/pages");
    create_repo_ok(&c, ep, WRITE, &repo, false).await;
    for q in [
        "p=18446744073709551615",
        "p=9223372036854775807&limit=1000",
        "p=18446744073709551615&limit=18446744073709551615",
        "p=1&limit=18446744073709551615",
    ] {
        let r = c
            .get(format!("{}/commits/main?{q}", repo.api(ep)))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{q}: no answer ({e})"));
        let status = r.status();
        if status == 200 {
            let v: Value = r.json().await.unwrap();
            assert!(v.as_array().is_some_and(|a| a.len() <= 1), "{q}: {v}");
        } else {
            assert_hub_error(r, None, q).await;
        }
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_addr_and_seed_demo() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let hub = spawn_cli(dir.path(), &["--addr", &addr, "--seed-demo"], &[], None).await;
    assert_eq!(hub.endpoint, format!("http://{addr}"));
    let c = client();
    let ds = Repo::dataset("demo/tiny-dataset");
    let pages = all_pages(&c, &format!("{}/tree/main/data/many", ds.api(&hub.endpoint))).await;
    assert_eq!(pages.iter().map(|p| p.len()).sum::<usize>(), 1100);
    let r = c
        .get(format!("{}/api/whoami-v2", hub.endpoint))
        .header("authorization", bearer(WRITE))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["name"], "local");
    hub.kill9().await;
    // A busy address is an error, not a hang.
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = blocker.local_addr().unwrap().to_string();
    let d = dir.path().to_str().unwrap();
    let (ok, out) = run_cli(&["local-hub", "--data-dir", d, "--addr", &busy]).await;
    assert!(!ok, "started on a busy address: {out}");
    assert!(out.contains(&busy), "the message should name the address: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xet_files_resolve_auth_and_persist() {
    // One seeding (64 MiB through Xet) serves the Xet checks, the CAS auth checks and a restart.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LocalHubConfig::new(dir.path());
    cfg.seed_demo = true;
    let hub = LocalHub::start(cfg.clone()).await.unwrap();
    let ep = hub.endpoint();
    let c = client();
    let model = Repo::model("demo/tiny-model");
    let weights = hubfs::local_hub::seed::demo_safetensors();
    let oid = sha256_hex(&weights);
    let head = head_sha(&c, ep, None, &model, "main").await;

    let r = c
        .head(model.resolve(ep, "main", "model.safetensors"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    let h = r.headers().clone();
    let xet = header_str(&h, "x-xet-hash").expect("X-Xet-Hash").to_string();
    assert_eq!(xet.len(), 64);
    assert_eq!(header_str(&h, "x-linked-etag"), Some(format!("\"{oid}\"").as_str()));
    assert_eq!(
        header_str(&h, "x-linked-size"),
        Some(weights.len().to_string().as_str())
    );
    assert_eq!(header_str(&h, "x-repo-commit"), Some(head.as_str()));
    let link = header_str(&h, "link").expect("Link");
    assert!(
        link.contains("rel=\"xet-auth\"") && link.contains("rel=\"xet-reconstruction-info\""),
        "{link}"
    );
    assert!(
        link.contains(&format!("{}/v1/reconstructions/{xet}", hub.cas_url())),
        "{link}"
    );
    assert!(
        link.contains(&format!("/api/models/demo/tiny-model/xet-read-token/{head}")),
        "{link}"
    );
    // Tree entry: lfs and xetHash.
    let (_, v) = get_json(&c, &format!("{}/tree/main", model.api(ep)), None).await;
    let e = entry(v.as_array().unwrap(), "model.safetensors");
    assert_eq!(e["xetHash"], xet.as_str());
    assert_eq!(e["lfs"]["oid"], oid.as_str());
    assert_eq!(e["lfs"]["size"], weights.len());
    // JSON file info on request.
    let r = c
        .get(model.resolve(ep, "main", "model.safetensors"))
        .header("accept", "application/vnd.xet-fileinfo+json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["hash"], xet.as_str());
    assert_eq!(v["size"], weights.len());
    // The read token works for this revision; the blob origin reconstructs ranges.
    let r = c
        .get(format!("{}/xet-read-token/{head}", model.api(ep)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-xet-access-token"));
    let r = c
        .get(model.resolve(ep, "main", "model.safetensors"))
        .send()
        .await
        .unwrap();
    let loc = header_str(r.headers(), "location").unwrap().to_string();
    assert!(loc.starts_with(hub.blob_url()));
    let size = weights.len();
    for (start, end) in [
        (0usize, 99usize),
        (size - 1000, size - 1),
        (20 << 20, (20 << 20) + (17 << 20)),
    ] {
        let r = c
            .get(&loc)
            .header("range", format!("bytes={start}-{end}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 206);
        assert_eq!(
            header_str(r.headers(), "content-range"),
            Some(format!("bytes {start}-{end}/{size}").as_str())
        );
        let got = r.bytes().await.unwrap();
        assert!(got.as_ref() == &weights[start..=end], "range {start}-{end} differs");
    }
    let r = c
        .get(&loc)
        .header("range", format!("bytes={size}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 416);
    // Ranges are rebuilt from the terms that cover them: one byte inside a term, a suffix, a range
    // from the middle of one term to the middle of another, and an open end.
    let mid = 33usize << 20;
    for (range, from, to) in [
        (format!("bytes={mid}-{mid}"), mid, mid + 1),
        ("bytes=-4097".to_string(), size - 4097, size),
        (format!("bytes={}-", size - (9 << 20) - 5), size - (9 << 20) - 5, size),
    ] {
        let r = c.get(&loc).header("range", &range).send().await.unwrap();
        assert_eq!(r.status(), 206, "{range}");
        let want = &weights[from..to];
        assert_eq!(
            header_str(r.headers(), "content-length"),
            Some(want.len().to_string().as_str()),
            "{range}"
        );
        let got = r.bytes().await.unwrap();
        assert!(got.as_ref() == want, "{range} differs");
    }
    // HEAD and conditional requests answer without a body.
    let r = c.head(&loc).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        header_str(r.headers(), "content-length"),
        Some(size.to_string().as_str())
    );
    let r = c
        .get(&loc)
        .header("if-none-match", format!("\"{xet}\""))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    // The whole file.
    let got = c.get(&loc).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(sha256_hex(&got), oid);
    // The CAS wants a token: no reconstruction, and no direct read of a file's bytes by its hash.
    let cas = hub.cas_url();
    // No token: no reconstruction, and no direct read of the file's bytes by its hash.
    for path in [
        format!("/v1/reconstructions/{xet}"),
        format!("/v2/reconstructions/{xet}"),
        format!("/v1/get_xorb/default/{xet}/"),
    ] {
        let r = c
            .get(format!("{cas}{path}"))
            .header("range", "bytes=0-99")
            .send()
            .await
            .unwrap();
        assert!(
            r.status() == 401 || r.status() == 403,
            "{path} without a token: {}",
            r.status()
        );
    }
    hub.stop().await;

    // A second start with seed_demo finds the demo repos and leaves them alone.
    let hub = LocalHub::start(cfg).await.unwrap();
    let ep = hub.endpoint();
    assert_eq!(head_sha(&c, ep, None, &model, "main").await, head);
    let (_, hist) = get_json(&c, &format!("{}/commits/main", model.api(ep)), None).await;
    assert_eq!(hist.as_array().unwrap().len(), 2, "seeded twice: {hist}");
    let r = c
        .get(model.resolve(ep, "main", "model.safetensors"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    assert!(r.headers().contains_key("x-xet-hash"));
    let loc = header_str(r.headers(), "location").unwrap().to_string();
    let (a, b) = (weights.len() - (3 << 20), weights.len() - 1);
    let r = c
        .get(&loc)
        .header("range", format!("bytes={a}-{b}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert!(r.bytes().await.unwrap().as_ref() == &weights[a..=b]);
    // The plain-LFS demo blob too.
    let ds = Repo::dataset("demo/tiny-dataset");
    let got = download_lfs(&c, ep, &ds, "main", "data/blobs/images.bin").await;
    assert_eq!(got, hubfs::local_hub::seed::demo_bytes(3 << 20, 7));
    hub.stop().await;
}
