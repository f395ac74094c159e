//! URL → route. The raw path is split on `/` before percent-decoding, so an encoded `%2F` stays in
//! its segment: `refs%2Fpr%2F1` is one revision, `dir%2Fsub` one tree path. Both encodings of file
//! paths (slashes kept or encoded) give the same route.

use axum::http::Method;

use super::bucket_store::BucketId;
use super::error::{HubError, HubResult};
use super::names::{RepoId, RepoType, decode_segment, validate_file_path};

/// Routes of storage buckets (`/api/buckets/…` and `/buckets/{ns}/{name}/resolve/…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketRoute {
    /// `GET /api/buckets/{ns}`.
    List {
        namespace: String,
    },
    /// `GET` info, `POST` create, `DELETE` delete. The namespace may be `me` (the caller).
    Bucket {
        id: BucketId,
    },
    Settings {
        id: BucketId,
    },
    /// `prefix` is the raw key prefix (no trailing slash trimmed: `a/` lists inside `a`).
    Tree {
        id: BucketId,
        prefix: String,
    },
    PathsInfo {
        id: BucketId,
    },
    Batch {
        id: BucketId,
    },
    XetToken {
        id: BucketId,
        write: bool,
    },
    Resolve {
        id: BucketId,
        path: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Whoami,
    CreateRepo,
    DeleteRepo,
    ValidateYaml,
    ListRepos(RepoType),
    Info {
        repo: RepoId,
        rev: Option<String>,
    },
    Tree {
        repo: RepoId,
        rev: String,
        path: String,
    },
    PathsInfo {
        repo: RepoId,
        rev: String,
    },
    Preupload {
        repo: RepoId,
        rev: String,
    },
    Commit {
        repo: RepoId,
        rev: String,
    },
    Refs {
        repo: RepoId,
    },
    Commits {
        repo: RepoId,
        rev: String,
    },
    XetToken {
        repo: RepoId,
        rev: String,
        write: bool,
    },
    Branch {
        repo: RepoId,
        name: String,
    },
    Tag {
        repo: RepoId,
        name: String,
    },
    Settings {
        repo: RepoId,
    },
    Discussions {
        repo: RepoId,
    },
    Discussion {
        repo: RepoId,
        num: u64,
    },
    Resolve {
        repo: RepoId,
        rev: String,
        path: String,
    },
    LfsBatch {
        repo: RepoId,
    },
    LfsVerify {
        repo: RepoId,
    },
    AdminFaults,
    AdminStats,
    AdminLimits,
    /// `POST /api/repos/move` (buckets only on this local Hub).
    MoveRepo,
    Bucket(BucketRoute),
}

fn join_path(segs: &[String]) -> String {
    segs.join("/")
}

fn repo_of(ty: RepoType, ns: &str, name: &str) -> HubResult<RepoId> {
    RepoId::new(ty, ns, name)
}

/// Parses a request path (raw, still percent-encoded). Unknown shapes are 404.
pub fn parse(method: &Method, raw_path: &str) -> HubResult<Route> {
    let raw: Vec<&str> = raw_path.trim_start_matches('/').split('/').collect();
    let segs: Vec<String> = raw.iter().map(|s| decode_segment(s)).collect::<HubResult<_>>()?;
    let s: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
    match s.as_slice() {
        ["admin", "faults"] => return Ok(Route::AdminFaults),
        ["admin", "stats"] => return Ok(Route::AdminStats),
        ["admin", "limits"] => return Ok(Route::AdminLimits),
        ["api", "whoami-v2"] => return Ok(Route::Whoami),
        ["api", "repos", "create"] => return Ok(Route::CreateRepo),
        ["api", "repos", "delete"] => return Ok(Route::DeleteRepo),
        ["api", "validate-yaml"] => return Ok(Route::ValidateYaml),
        ["api", "repos", "move"] => return Ok(Route::MoveRepo),
        ["api", "buckets", rest @ ..] => return parse_bucket_api(rest).map(Route::Bucket),
        ["buckets", ns, name, "resolve", path @ ..] if !path.is_empty() => {
            let path = join_path(&segs[4..]);
            validate_file_path(&path)?;
            return Ok(Route::Bucket(BucketRoute::Resolve {
                id: BucketId::new(ns, name)?,
                path,
            }));
        }
        ["api", types] if *method == Method::GET => {
            if let Some(ty) = RepoType::from_plural(types) {
                return Ok(Route::ListRepos(ty));
            }
        }
        _ => {}
    }
    if s.first() == Some(&"api") {
        return parse_api(&segs[1..]);
    }
    parse_web(&segs)
}

fn parse_bucket_api(rest: &[&str]) -> HubResult<BucketRoute> {
    let route = match rest {
        [ns] => BucketRoute::List {
            namespace: ns.to_string(),
        },
        [ns, name, more @ ..] => {
            let id = BucketId::new(ns, name)?;
            match more {
                [] => BucketRoute::Bucket { id },
                ["settings"] => BucketRoute::Settings { id },
                ["paths-info"] => BucketRoute::PathsInfo { id },
                ["batch"] => BucketRoute::Batch { id },
                ["xet-read-token"] => BucketRoute::XetToken { id, write: false },
                ["xet-write-token"] => BucketRoute::XetToken { id, write: true },
                ["tree", prefix @ ..] => BucketRoute::Tree {
                    id,
                    prefix: prefix.join("/"),
                },
                _ => return Err(HubError::RouteNotFound),
            }
        }
        _ => return Err(HubError::RouteNotFound),
    };
    Ok(route)
}

fn parse_api(segs: &[String]) -> HubResult<Route> {
    let [types, ns, name, rest @ ..] = segs else {
        return Err(HubError::RouteNotFound);
    };
    let Some(ty) = RepoType::from_plural(types) else {
        return Err(HubError::bad_request(format!(
            "Unknown repo type {types:?}: use models, datasets or spaces"
        )));
    };
    let repo = repo_of(ty, ns, name)?;
    let rev_of = |i: usize| rest.get(i).cloned().ok_or(HubError::RouteNotFound);
    let route = match rest.first().map(|s| s.as_str()) {
        None => Route::Info { repo, rev: None },
        Some("revision") => Route::Info {
            repo,
            rev: Some(rest[1..].join("/")).filter(|r| !r.is_empty()),
        },
        Some("tree") => {
            let rev = rev_of(1)?;
            let path = join_path(&rest[2..]);
            let path = path.trim_end_matches('/').to_string();
            if !path.is_empty() {
                validate_file_path(&path)?;
            }
            Route::Tree { repo, rev, path }
        }
        Some("paths-info") => Route::PathsInfo { repo, rev: rev_of(1)? },
        Some("preupload") => Route::Preupload { repo, rev: rev_of(1)? },
        Some("commit") => Route::Commit { repo, rev: rev_of(1)? },
        Some("refs") if rest.len() == 1 => Route::Refs { repo },
        Some("commits") => Route::Commits { repo, rev: rev_of(1)? },
        Some("xet-read-token") => Route::XetToken {
            repo,
            rev: rev_of(1)?,
            write: false,
        },
        Some("xet-write-token") => Route::XetToken {
            repo,
            rev: rev_of(1)?,
            write: true,
        },
        Some("branch") if rest.len() >= 2 => Route::Branch {
            repo,
            name: rest[1..].join("/"),
        },
        Some("tag") if rest.len() >= 2 => Route::Tag {
            repo,
            name: rest[1..].join("/"),
        },
        Some("settings") if rest.len() == 1 => Route::Settings { repo },
        Some("discussions") if rest.len() == 1 => Route::Discussions { repo },
        Some("discussions") if rest.len() == 2 => {
            let num = rest[1]
                .parse()
                .map_err(|_| HubError::bad_request("Invalid discussion number"))?;
            Route::Discussion { repo, num }
        }
        _ => return Err(HubError::RouteNotFound),
    };
    Ok(route)
}

fn parse_web(segs: &[String]) -> HubResult<Route> {
    let (ty, rest) = match segs.first().map(|s| s.as_str()) {
        Some("datasets") => (RepoType::Dataset, &segs[1..]),
        Some("spaces") => (RepoType::Space, &segs[1..]),
        _ => (RepoType::Model, segs),
    };
    match rest {
        [ns, name, kind, rev, path @ ..] if kind == "resolve" && !path.is_empty() => {
            let path = join_path(path);
            validate_file_path(&path)?;
            Ok(Route::Resolve {
                repo: repo_of(ty, ns, name)?,
                rev: rev.clone(),
                path,
            })
        }
        [ns, name_git, info, lfs, objects, op]
            if info == "info" && lfs == "lfs" && objects == "objects" && name_git.ends_with(".git") =>
        {
            let repo = repo_of(ty, ns, name_git.trim_end_matches(".git"))?;
            match op.as_str() {
                "batch" => Ok(Route::LfsBatch { repo }),
                "verify" => Ok(Route::LfsVerify { repo }),
                _ => Err(HubError::RouteNotFound),
            }
        }
        _ => Err(HubError::RouteNotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(path: &str) -> HubResult<Route> {
        parse(&Method::GET, path)
    }

    #[test]
    fn api_routes() {
        let r = p("/api/datasets/ns/ds/tree/refs%2Fpr%2F1/dir%2Fsub").unwrap();
        let Route::Tree { repo, rev, path } = r else {
            panic!("{r:?}")
        };
        assert_eq!(repo.ty, RepoType::Dataset);
        assert_eq!(rev, "refs/pr/1");
        assert_eq!(path, "dir/sub");
        assert_eq!(
            p("/api/models/a/b/tree/main/dir/sub").unwrap(),
            p("/api/models/a/b/tree/main/dir%2Fsub").unwrap()
        );
        assert!(matches!(
            p("/api/models/a/b/revision/v1").unwrap(),
            Route::Info { rev: Some(_), .. }
        ));
        assert!(matches!(p("/api/models/a/b").unwrap(), Route::Info { rev: None, .. }));
        assert!(matches!(p("/api/widgets/a/b"), Err(HubError::BadRequest(_))));
        assert!(matches!(
            p("/api/models/a/b/tree/main/..%2Fx"),
            Err(HubError::BadRequest(_))
        ));
        assert!(matches!(p("/api/models/a/b/unknown"), Err(HubError::RouteNotFound)));
    }

    #[test]
    fn bucket_routes() {
        let id = BucketId::new("ns", "b").unwrap();
        assert_eq!(
            p("/api/buckets/ns").unwrap(),
            Route::Bucket(BucketRoute::List { namespace: "ns".into() })
        );
        assert_eq!(
            p("/api/buckets/ns/b").unwrap(),
            Route::Bucket(BucketRoute::Bucket { id: id.clone() })
        );
        // The prefix keeps an encoded or a trailing slash: `logs/` lists inside `logs`.
        for raw in ["/api/buckets/ns/b/tree/logs%2F", "/api/buckets/ns/b/tree/logs/"] {
            assert_eq!(
                p(raw).unwrap(),
                Route::Bucket(BucketRoute::Tree {
                    id: id.clone(),
                    prefix: "logs/".into()
                })
            );
        }
        assert_eq!(
            p("/api/buckets/ns/b/tree").unwrap(),
            Route::Bucket(BucketRoute::Tree {
                id: id.clone(),
                prefix: String::new()
            })
        );
        assert_eq!(
            p("/buckets/ns/b/resolve/a%2Fc%20d.txt").unwrap(),
            p("/buckets/ns/b/resolve/a/c%20d.txt").unwrap()
        );
        assert!(p("/buckets/ns/b/resolve/..%2Fx").is_err());
        assert!(p("/api/buckets/ns/b/unknown").is_err());
        assert_eq!(p("/api/repos/move").unwrap(), Route::MoveRepo);
    }

    #[test]
    fn web_routes() {
        let Route::Resolve { repo, rev, path } = p("/datasets/n/d/resolve/main/a%20b/%23c.txt").unwrap() else {
            panic!()
        };
        assert_eq!(
            (repo.ty, rev.as_str(), path.as_str()),
            (RepoType::Dataset, "main", "a b/#c.txt")
        );
        assert!(matches!(p("/n/m/resolve/main/x").unwrap(), Route::Resolve { .. }));
        assert!(matches!(
            p("/n/m.git/info/lfs/objects/batch").unwrap(),
            Route::LfsBatch { .. }
        ));
        assert!(p("/n/m/resolve/main/..").is_err());
        assert!(p("/n/m/resolve/main/a%00b").is_err());
    }
}
