//! Repo references (`ns/name`, `datasets/ns/name@rev`, `hf://…` URLs) and the percent-encoding of
//! revisions and file paths in Hub URLs.
//!
//! # Accepted forms of [`RepoRef::parse`]
//!
//! | input | kind | revision | subfolder |
//! |---|---|---|---|
//! | `ns/name` | model | – | – |
//! | `models/ns/name`, `datasets/ns/name`, `spaces/ns/name` | as prefixed | – | – |
//! | any of the above + `@REV` | | `REV` (everything after the first `@`, may hold `/`: `ns/m@refs/pr/3`) | – |
//! | `hf://[models/|datasets/|spaces/]ns/name[@REV][/sub/dir]` | as prefixed, model without | see below | `sub/dir` |
//! | `buckets/ns/name`, `hf://buckets/ns/name[/prefix]` | bucket | – (a bucket has none: `@` is refused) | `prefix` |
//!
//! In the `hf://` form the revision ends at the next `/`, because what follows is the subfolder.
//! Two rules keep revisions with a `/` expressible there:
//! - a revision starting with `refs/pr/`, `refs/heads/`, `refs/tags/` or `refs/convert/` takes
//!   exactly three segments (`hf://ns/m@refs/pr/3/sub` → revision `refs/pr/3`, subfolder `sub`);
//! - the revision is percent-decoded, so any other `/` is written `%2F`
//!   (`hf://datasets/ns/d@feature%2Fx/data` → revision `feature/x`).
//!
//! In both forms the revision is percent-decoded (`ns/m@refs%2Fpr%2F1` = `ns/m@refs/pr/1`).
//!
//! Names follow the Hub's rule (letters, digits, `-`, `_`, `.`; at most 96 characters; no leading or
//! trailing `-`/`.`, no `--` or `..`). The plain (non-URL) form has no subfolder: `a/b/c` is refused.

use std::fmt;

use percent_encoding::percent_decode_str;

use super::error::HubClientError;

/// Type of a Hub repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RepoKind {
    Model,
    Dataset,
    Space,
    /// A Storage Bucket: mutable, Xet-only, no git history (no revisions, no commits).
    Bucket,
}

impl RepoKind {
    /// `models`, `datasets`, `spaces`: the segment of `/api/{kind}s/…` routes.
    pub fn plural(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
            RepoKind::Space => "spaces",
            RepoKind::Bucket => "buckets",
        }
    }

    /// Prefix of "web" routes (`resolve`, `.git`): models have none.
    pub fn web_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
            RepoKind::Space => "spaces/",
            RepoKind::Bucket => "buckets/",
        }
    }

    fn from_prefix(s: &str) -> Option<RepoKind> {
        match s {
            "models" => Some(RepoKind::Model),
            "datasets" => Some(RepoKind::Dataset),
            "spaces" => Some(RepoKind::Space),
            "buckets" => Some(RepoKind::Bucket),
            _ => None,
        }
    }
}

/// A repository on the Hub: kind plus `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoRef {
    pub kind: RepoKind,
    pub namespace: String,
    pub name: String,
}

/// What [`RepoRef::parse`] returns: the repo, the revision if one was given, the subfolder if one was given.
pub type ParsedRepo = (RepoRef, Option<String>, Option<String>);

impl RepoRef {
    pub fn new(kind: RepoKind, namespace: impl Into<String>, name: impl Into<String>) -> RepoRef {
        RepoRef {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn model(id: &str) -> Result<RepoRef, HubClientError> {
        Self::with_kind(RepoKind::Model, id)
    }

    pub fn dataset(id: &str) -> Result<RepoRef, HubClientError> {
        Self::with_kind(RepoKind::Dataset, id)
    }

    fn with_kind(kind: RepoKind, id: &str) -> Result<RepoRef, HubClientError> {
        let (ns, name) = id
            .split_once('/')
            .ok_or_else(|| HubClientError::bad_input(id, "a repo id is namespace/name"))?;
        let r = RepoRef::new(kind, ns, name);
        r.validate()?;
        Ok(r)
    }

    pub fn is_bucket(&self) -> bool {
        self.kind == RepoKind::Bucket
    }

    /// `ns/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `/api/{kind}s/ns/name`.
    pub fn api_path(&self) -> String {
        format!("/api/{}/{}/{}", self.kind.plural(), self.namespace, self.name)
    }

    /// `ns/name`, `datasets/ns/name` or `spaces/ns/name` (no leading slash).
    pub fn web_path(&self) -> String {
        format!("{}{}/{}", self.kind.web_prefix(), self.namespace, self.name)
    }

    /// Checks namespace and name against the Hub's naming rule (fields are public, so a hand-built
    /// `RepoRef` is checked again before it goes into a URL).
    pub fn validate(&self) -> Result<(), HubClientError> {
        for part in [&self.namespace, &self.name] {
            if !valid_name_part(part) {
                return Err(HubClientError::bad_input(
                    self.id(),
                    format!("invalid repo name part {part:?}: use letters, digits, '-', '_', '.'"),
                ));
            }
        }
        Ok(())
    }

    /// Parses a repo reference; see the module documentation for the accepted forms.
    pub fn parse(s: &str) -> Result<ParsedRepo, HubClientError> {
        let bad = |why: &str| HubClientError::bad_input(s, why);
        if s.is_empty() {
            return Err(bad("empty repo reference"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("repo reference contains whitespace or control characters"));
        }
        match s.strip_prefix("hf://") {
            Some(rest) => parse_url(s, rest),
            None => parse_plain(s),
        }
    }
}

impl fmt::Display for RepoRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.web_path())
    }
}

fn split_kind<'a>(segs: &'a [&'a str]) -> (RepoKind, &'a [&'a str]) {
    match segs.first().and_then(|s| RepoKind::from_prefix(s)) {
        Some(kind) if segs.len() >= 3 => (kind, &segs[1..]),
        _ => (RepoKind::Model, segs),
    }
}

fn make_repo(input: &str, kind: RepoKind, ns: &str, name: &str) -> Result<RepoRef, HubClientError> {
    let r = RepoRef::new(kind, ns, name);
    r.validate().map_err(|_| {
        HubClientError::bad_input(
            input,
            "invalid repo id: namespace and name use letters, digits, '-', '_', '.'",
        )
    })?;
    Ok(r)
}

/// `ns/name`, `{models,datasets,spaces}/ns/name`, each with an optional `@REV` (REV may hold `/`).
fn parse_plain(s: &str) -> Result<ParsedRepo, HubClientError> {
    let (id, rev) = match s.split_once('@') {
        Some((id, rev)) => (id, Some(rev)),
        None => (s, None),
    };
    let segs: Vec<&str> = id.split('/').collect();
    let (kind, rest) = split_kind(&segs);
    let [ns, name] = rest else {
        return Err(HubClientError::bad_input(
            s,
            "expected ns/name, datasets/ns/name or spaces/ns/name (use hf:// for a subfolder)",
        ));
    };
    let repo = make_repo(s, kind, ns, name)?;
    let rev = match rev {
        Some(_) if repo.is_bucket() => return Err(no_bucket_revision(s)),
        Some(r) => Some(decode_revision(s, r)?),
        None => None,
    };
    Ok((repo, rev, None))
}

/// `hf://[kind/]ns/name[@REV][/sub/dir]` (the `hf://` already stripped into `rest`).
fn parse_url(input: &str, rest: &str) -> Result<ParsedRepo, HubClientError> {
    let bad = |why: &str| HubClientError::bad_input(input, why);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let segs: Vec<&str> = rest.split('/').collect();
    if segs.iter().any(|s| s.is_empty()) {
        return Err(bad("empty path segment in hf:// URL"));
    }
    let (kind, segs) = split_kind(&segs);
    let [ns, name_rev, after @ ..] = segs else {
        return Err(bad("an hf:// URL needs ns/name after the optional repo type"));
    };
    let (name, rev_head) = match name_rev.split_once('@') {
        Some((n, r)) => (n, Some(r)),
        None => (*name_rev, None),
    };
    let repo = make_repo(input, kind, ns, name)?;
    if repo.is_bucket() && rev_head.is_some() {
        return Err(no_bucket_revision(input));
    }
    let mut sub = after;
    let rev = match rev_head {
        None => None,
        Some(head) => {
            let mut raw = head.to_string();
            const MULTI: [&str; 4] = ["pr", "heads", "tags", "convert"];
            if head == "refs"
                && let [kind, last, more @ ..] = after
                && MULTI.contains(kind)
            {
                raw = format!("refs/{kind}/{last}");
                sub = more;
            }
            Some(decode_revision(input, &raw)?)
        }
    };
    for s in sub {
        if *s == "." || *s == ".." {
            return Err(bad("'.' and '..' are not allowed in the subfolder"));
        }
    }
    let sub = (!sub.is_empty()).then(|| sub.join("/"));
    Ok((repo, rev, sub))
}

fn no_bucket_revision(input: &str) -> HubClientError {
    HubClientError::bad_input(
        input,
        "a bucket has no revisions: drop the '@…' (buckets/ns/name or hf://buckets/ns/name/prefix)",
    )
}

/// Percent-decodes and checks a revision taken from a repo reference.
fn decode_revision(input: &str, raw: &str) -> Result<String, HubClientError> {
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| HubClientError::bad_input(input, "revision is not valid UTF-8 after percent-decoding"))?;
    check_revision(&decoded).map_err(|why| HubClientError::bad_input(input, why))
}

/// The Hub's rule for user, organisation and repo names.
fn valid_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
        && !s.contains("--")
        && !s.contains("..")
}

/// Git's ref-name rules, loosely: no empty or `.`/`..` segments, no whitespace, control characters
/// or `~^:?*[\`. Returns the revision unchanged.
pub(crate) fn check_revision(rev: &str) -> Result<String, String> {
    if rev.is_empty() {
        return Err("empty revision".to_string());
    }
    if rev.len() > 255 {
        return Err("revision longer than 255 bytes".to_string());
    }
    if rev
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c))
    {
        return Err(format!("invalid character in revision {rev:?}"));
    }
    if rev.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Err(format!("invalid revision {rev:?}"));
    }
    Ok(rev.to_string())
}

/// A file path inside a repo: relative, `/`-separated, no empty, `.` or `..` segments, no NUL.
/// Leading and trailing slashes are dropped; `allow_root` accepts the empty path (repo root).
pub(crate) fn check_path(path: &str, allow_root: bool) -> Result<&str, String> {
    let p = path.trim_matches('/');
    if p.is_empty() {
        return if allow_root {
            Ok(p)
        } else {
            Err("empty file path".to_string())
        };
    }
    if p.contains('\0') {
        return Err("NUL byte in path".to_string());
    }
    if p.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Err("empty, '.' or '..' segment in path".to_string());
    }
    Ok(p)
}

pub use crate::util::urlenc::{encode_path, encode_segment as encode_revision};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_revisions() {
        assert_eq!(check_path("/a/b/", false).unwrap(), "a/b");
        assert_eq!(check_path("", true).unwrap(), "");
        assert!(check_path("", false).is_err());
        assert!(check_path("a//b", false).is_err());
        assert!(check_path("a/../b", false).is_err());
        assert!(check_revision("refs/pr/3").is_ok());
        assert!(check_revision("..").is_err());
        assert!(check_revision("a b").is_err());
        assert!(check_revision("").is_err());
    }
}
