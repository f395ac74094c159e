//! Names the local Hub accepts: repo types, repo ids, revisions and file paths, validated the way
//! the real Hub does before anything touches the disk (so `..`, absolute paths and NUL never reach it).

use std::fmt;

use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};

use super::error::{HubError, HubResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepoType {
    Model,
    Dataset,
    Space,
}

impl RepoType {
    pub const ALL: [RepoType; 3] = [RepoType::Model, RepoType::Dataset, RepoType::Space];

    /// Parses the plural form used in `/api/{type}s/`.
    pub fn from_plural(s: &str) -> Option<Self> {
        match s {
            "models" => Some(RepoType::Model),
            "datasets" => Some(RepoType::Dataset),
            "spaces" => Some(RepoType::Space),
            _ => None,
        }
    }

    /// Parses the singular form used in JSON bodies (`"type": "dataset"`); absent means model.
    pub fn from_singular(s: Option<&str>) -> Option<Self> {
        match s {
            None | Some("model") => Some(RepoType::Model),
            Some("dataset") => Some(RepoType::Dataset),
            Some("space") => Some(RepoType::Space),
            _ => None,
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            RepoType::Model => "models",
            RepoType::Dataset => "datasets",
            RepoType::Space => "spaces",
        }
    }

    pub fn singular(self) -> &'static str {
        match self {
            RepoType::Model => "model",
            RepoType::Dataset => "dataset",
            RepoType::Space => "space",
        }
    }

    /// Prefix of "web" routes (resolve, `.git`): models have none.
    pub fn web_prefix(self) -> &'static str {
        match self {
            RepoType::Model => "",
            RepoType::Dataset => "datasets/",
            RepoType::Space => "spaces/",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoId {
    pub ty: RepoType,
    pub namespace: String,
    pub name: String,
}

impl RepoId {
    pub fn new(ty: RepoType, namespace: &str, name: &str) -> HubResult<Self> {
        validate_name_part(namespace)?;
        validate_name_part(name)?;
        Ok(RepoId {
            ty,
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// `ns/name`, as the Hub prints it in `id`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `datasets/ns/name` style path for web routes.
    pub fn web_path(&self) -> String {
        format!("{}{}/{}", self.ty.web_prefix(), self.namespace, self.name)
    }

    /// `/api/datasets/ns/name` style path for API routes.
    pub fn api_path(&self) -> String {
        format!("/api/{}/{}/{}", self.ty.plural(), self.namespace, self.name)
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.web_path())
    }
}

/// Hub rule for user, org and repo names: letters, digits, `-`, `_`, `.`, at most 96 characters,
/// not starting or ending with `-` or `.`, and no `--` or `..`.
pub fn validate_name_part(s: &str) -> HubResult<()> {
    let ok = !s.is_empty()
        && s.len() <= 96
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
        && !s.contains("--")
        && !s.contains("..");
    if ok {
        Ok(())
    } else {
        Err(HubError::bad_request(format!(
            "Invalid repo name part {s:?}: use letters, digits, '-', '_' or '.', at most 96 characters, \
             not starting or ending with '-' or '.', and no '--' or '..'"
        )))
    }
}

/// A branch or tag name as git accepts it (a subset: no `..`, no control characters, no leading `/`).
pub fn validate_ref_name(s: &str) -> HubResult<()> {
    let ok = !s.is_empty()
        && s.len() <= 255
        && !s.starts_with(['/', '-', '.'])
        && !s.ends_with(['/', '.'])
        && !s.ends_with(".lock")
        && !s.contains("..")
        && !s.contains("//")
        && !s.contains("@{")
        && !s
            .chars()
            .any(|c| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'));
    if ok {
        Ok(())
    } else {
        Err(HubError::bad_request(format!("Invalid reference name {s:?}")))
    }
}

/// A repo-relative file path: non-empty segments, no `.`/`..`, no NUL or other control
/// characters, not absolute, at most 4096 bytes with 255-byte segments.
pub fn validate_file_path(p: &str) -> HubResult<()> {
    let bad = |why: &str| Err(HubError::bad_request(format!("Invalid path {p:?}: {why}")));
    if p.is_empty() {
        return bad("empty path");
    }
    if p.len() > 4096 {
        return bad("longer than 4096 bytes");
    }
    if p.starts_with('/') {
        return bad("absolute paths are not allowed");
    }
    if p.chars().any(|c| c.is_control()) {
        return bad("control characters (including NUL) are not allowed");
    }
    for seg in p.split('/') {
        if seg.is_empty() {
            return bad("empty path segment");
        }
        if seg == "." || seg == ".." {
            return bad("'.' and '..' segments are not allowed");
        }
        if seg.len() > 255 {
            return bad("a path segment is longer than 255 bytes");
        }
    }
    if p == ".git" || p.starts_with(".git/") {
        return bad("paths under .git are reserved");
    }
    Ok(())
}

/// Decodes one raw URL path segment. Callers split the raw path on `/` first, so an encoded `%2F`
/// stays inside its segment (that is how `refs%2Fpr%2F1` is one revision).
pub fn decode_segment(raw: &str) -> HubResult<String> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| HubError::bad_request("URL path is not valid UTF-8 after percent-decoding"))
}

pub use crate::util::urlenc::{encode_path, encode_segment};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_names() {
        assert!(validate_name_part("gpt2").is_ok());
        assert!(validate_name_part("tiny-model_v1.0").is_ok());
        for bad in ["", "-a", "a-", ".a", "a..b", "a--b", "a/b", "a b", &"x".repeat(97)] {
            assert!(validate_name_part(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn file_paths() {
        assert!(validate_file_path("a/b c/#?%é.txt").is_ok());
        for bad in ["", "/etc/passwd", "a/../b", "./a", "a//b", "a/\0b", ".git/config", "a/"] {
            assert!(validate_file_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn encoding_round_trip() {
        assert_eq!(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(encode_path("a b/#?%"), "a%20b/%23%3F%25");
        assert_eq!(decode_segment("refs%2Fpr%2F1").unwrap(), "refs/pr/1");
    }

    #[test]
    fn ref_names() {
        assert!(validate_ref_name("main").is_ok());
        assert!(validate_ref_name("feature/x").is_ok());
        for bad in ["", "a..b", "/a", "a b", "a.lock", "a~1"] {
            assert!(validate_ref_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
