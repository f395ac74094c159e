//! The Hub's request classes ("buckets") of its rate-limit docs, and which one a URL path falls in:
//! what the local Hub counts its windows by and what the Hub client keeps its answers by, so both
//! route a request the same way.

/// A bucket of the Hub's request windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bucket {
    /// `/api/…` (repo info, listings, paths-info, tokens, commits) and the LFS batch API.
    Api,
    /// Any other URL with a `/resolve/` segment: file downloads.
    Resolvers,
    /// Anything else on the Hub's origin (web pages).
    Pages,
    /// The Xet CAS API: its limits are not documented.
    Cas,
}

impl Bucket {
    pub const ALL: [Bucket; 4] = [Bucket::Api, Bucket::Resolvers, Bucket::Pages, Bucket::Cas];

    /// The name in `RateLimit` headers, messages, stats and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Api => "api",
            Bucket::Resolvers => "resolvers",
            Bucket::Pages => "pages",
            Bucket::Cas => "cas",
        }
    }

    /// The bucket a `RateLimit` header names.
    pub fn from_name(name: &str) -> Option<Bucket> {
        Bucket::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Its place in [`Bucket::ALL`], for per-bucket arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The bucket of a request path on the Hub's origin; `None` for the local Hub's own
    /// `/admin/…`, which no window counts.
    pub fn of_path(path: &str) -> Option<Bucket> {
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        if segs.first() == Some(&"admin") {
            return None;
        }
        if segs.first() == Some(&"api") || is_lfs(&segs) {
            return Some(Bucket::Api);
        }
        if segs.contains(&"resolve") {
            return Some(Bucket::Resolvers);
        }
        Some(Bucket::Pages)
    }
}

/// `{ns}/{name}.git/info/lfs/…` or `{type}s/{ns}/{name}.git/info/lfs/…`: the LFS API, where the
/// repo is, not in a file path that happens to hold `.git/info/lfs`.
fn is_lfs(segs: &[&str]) -> bool {
    [1, 2].iter().any(|&i| {
        segs.get(i).is_some_and(|s| s.ends_with(".git"))
            && segs.get(i + 1) == Some(&"info")
            && segs.get(i + 2) == Some(&"lfs")
    })
}
