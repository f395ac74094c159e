//! Whose local state a staging directory holds: one repo instance on one Hub.
//!
//! Staged files and the metadata log (modes, owners, times, symlinks, special files) describe paths
//! of one repo as one Hub knew it. Shown or committed anywhere else they are wrong: a recreated
//! repo, or the same name on another Hub, would get another repo's tree. So the directory lives
//! under its Hub (`hubs/<endpoint key>/…`) and records the repo's identity in `instance.json`. A
//! mount that finds another identity there moves the directory aside to `quarantine/` (kept for a
//! person, never shown or committed) and starts empty.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record of which repo instance a staging directory belongs to.
pub const INSTANCE_FILE: &str = "instance.json";
/// Below the staging root: one directory per Hub endpoint.
pub const HUBS_DIR: &str = "hubs";
/// Below the staging root: directories set aside because they belong to another repo instance.
pub const QUARANTINE_DIR: &str = "quarantine";

/// One repo instance as a Hub describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// The endpoint URL the mount talks to.
    pub endpoint: String,
    /// `kind/ns/name`.
    pub repo: String,
    /// The Hub's `_id` of the repo (new when a repo is deleted and created again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The repo's `createdAt`: the same test when a Hub sends no `_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// A commit of the repo this directory saw (the head at the last mount; none for buckets):
    /// the last test, when neither of the above is known on both sides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// Whether a recorded instance is the one a mount sees now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Same,
    /// Another instance; the reason, in words.
    Other(String),
    /// Only the Hub can tell: the instance is the same if it still knows this commit.
    AskCommit(String),
}

/// Compares the recorded instance `old` with `now`: `_id` first, then `createdAt`, then the commit.
pub fn compare(old: &Instance, now: &Instance) -> Verdict {
    if old.endpoint != now.endpoint || old.repo != now.repo {
        return Verdict::Other(format!("it was recorded for {} on {}", old.repo, old.endpoint));
    }
    if let (Some(a), Some(b)) = (&old.id, &now.id) {
        return if a == b {
            Verdict::Same
        } else {
            Verdict::Other(format!(
                "the repo's id is {b}, not {a}: it was deleted and created again, or another Hub answers at this address"
            ))
        };
    }
    if let (Some(a), Some(b)) = (&old.created_at, &now.created_at) {
        return if a == b {
            Verdict::Same
        } else {
            Verdict::Other(format!(
                "the repo was created at {b}, not {a}: it was deleted and created again, or another Hub answers at this address"
            ))
        };
    }
    match &old.commit {
        Some(c) => Verdict::AskCommit(c.clone()),
        None => Verdict::Same,
    }
}

/// The directory name of a Hub below [`HUBS_DIR`]: its host, port and path, readable
/// (`huggingface.co`, `127.0.0.1_8080`). The scheme is left out: it names the same Hub.
pub fn endpoint_key(endpoint: &str) -> String {
    let raw = match url::Url::parse(endpoint) {
        Ok(u) => {
            let mut k = u.host_str().unwrap_or("").to_string();
            if let Some(p) = u.port() {
                k.push_str(&format!("_{p}"));
            }
            for seg in u.path().split('/').filter(|s| !s.is_empty()) {
                k.push('_');
                k.push_str(seg);
            }
            k
        }
        Err(_) => endpoint.to_string(),
    };
    let k = crate::util::urlenc::encode_segment(&raw);
    // "." and ".." are valid segments but not usable directory names.
    if k.is_empty() || k.bytes().all(|b| b == b'.') {
        format!(
            "endpoint-{}",
            crate::util::urlenc::encode_segment(endpoint).replace('.', "%2E")
        )
    } else {
        k
    }
}

/// The recorded instance of `dir` (`None`: none recorded). An unreadable record is an error.
pub fn read(dir: &Path) -> std::io::Result<Option<Instance>> {
    match std::fs::read(dir.join(INSTANCE_FILE)) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, format!("{INSTANCE_FILE}: {e}"))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records `inst` as `dir`'s instance (written aside, fsynced, renamed into place).
pub fn write(dir: &Path, inst: &Instance) -> std::io::Result<()> {
    let tmp = dir.join(format!("{INSTANCE_FILE}.tmp"));
    let body = serde_json::to_vec_pretty(inst).map_err(std::io::Error::other)?;
    {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, &body)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(INSTANCE_FILE))
}

/// Whether `dir` holds anything of a repo: staged files, saved open files, or metadata records.
/// The lock, the upload copies of a stopped run, the instance record and spare (empty) staging
/// files are not.
pub fn holds_state(dir: &Path) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else { return false };
    rd.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        match name.as_ref() {
            "lock" | "uploads" => false,
            n if n.starts_with(INSTANCE_FILE) => false,
            n if n.starts_with(super::staging::SPARE_PREFIX) => false,
            "metadata.log" | "opened.log" | "data.log" => e.metadata().map(|m| m.len() > 0).unwrap_or(true),
            _ => true,
        }
    })
}

/// Moves `dir` (below `root`) to `root/quarantine/<UTC time>/<its path below root>` and returns
/// where it went. The caller holds the directory's lock, so no mount uses it meanwhile.
pub fn quarantine(root: &Path, dir: &Path) -> std::io::Result<PathBuf> {
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    let rel = rel.strip_prefix("/").unwrap_or(rel);
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
    let base = root.join(QUARANTINE_DIR);
    let mut n = 1;
    let dest = loop {
        let name = if n == 1 { stamp.clone() } else { format!("{stamp}-{n}") };
        let d = base.join(name).join(rel);
        if !d.exists() {
            break d;
        }
        n += 1;
    };
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::rename(dir, &dest)?;
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst() -> Instance {
        Instance {
            endpoint: "http://127.0.0.1:4000".into(),
            repo: "datasets/ceo/tools".into(),
            id: Some("a".repeat(24)),
            created_at: Some("2026-11-26T21:00:00.000Z".into()),
            commit: Some("c".repeat(40)),
        }
    }

    #[test]
    fn the_id_decides_then_the_creation_date_then_the_commit() {
        let old = inst();
        assert_eq!(compare(&old, &old.clone()), Verdict::Same);
        let recreated = Instance {
            id: Some("b".repeat(24)),
            ..inst()
        };
        assert!(matches!(compare(&old, &recreated), Verdict::Other(w) if w.contains("created again")));
        // Same id, another creation date: the id wins (a Hub may not send a stable createdAt).
        let same_id = Instance {
            created_at: Some("x".into()),
            ..inst()
        };
        assert_eq!(compare(&old, &same_id), Verdict::Same);
        let no_id = Instance { id: None, ..inst() };
        assert_eq!(compare(&no_id, &recreated), Verdict::Same, "dates equal");
        let other_date = Instance {
            id: None,
            created_at: Some("2027-01-01T00:00:00.000Z".into()),
            ..inst()
        };
        assert!(matches!(compare(&no_id, &other_date), Verdict::Other(_)));
        let bare = Instance {
            id: None,
            created_at: None,
            ..inst()
        };
        assert_eq!(compare(&bare, &inst()), Verdict::AskCommit("c".repeat(40)));
        let nothing = Instance { commit: None, ..bare };
        assert_eq!(compare(&nothing, &inst()), Verdict::Same);
        let elsewhere = Instance {
            endpoint: "https://huggingface.co".into(),
            ..inst()
        };
        assert!(matches!(compare(&old, &elsewhere), Verdict::Other(_)));
    }

    #[test]
    fn endpoint_keys_are_readable_and_distinct() {
        assert_eq!(endpoint_key("https://huggingface.co"), "huggingface.co");
        assert_eq!(endpoint_key("http://127.0.0.1:4000"), "127.0.0.1_4000");
        assert_ne!(
            endpoint_key("http://127.0.0.1:4000"),
            endpoint_key("http://127.0.0.1:4001")
        );
        assert_eq!(endpoint_key("https://hub.example/mirror/"), "hub.example_mirror");
        assert_eq!(endpoint_key("http://HUB.example"), "hub.example");
        let odd = endpoint_key("not a url");
        assert!(!odd.contains('/') && !odd.is_empty(), "{odd}");
        assert_eq!(endpoint_key(".."), "endpoint-%2E%2E");
    }

    #[test]
    fn state_is_what_a_person_would_lose_and_quarantine_keeps_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("hubs/h/datasets/ceo/tools/main");
        std::fs::create_dir_all(dir.join("uploads")).unwrap();
        std::fs::write(dir.join("lock"), b"").unwrap();
        std::fs::write(dir.join("metadata.log"), b"").unwrap();
        std::fs::write(dir.join("spare-3"), b"").unwrap();
        write(&dir, &inst()).unwrap();
        assert!(
            !holds_state(&dir),
            "lock, uploads, an empty log, a spare and the record are no state"
        );
        assert_eq!(read(&dir).unwrap(), Some(inst()));
        std::fs::write(dir.join("1.data"), b"staged").unwrap();
        assert!(holds_state(&dir));
        let first = quarantine(root.path(), &dir).unwrap();
        assert!(!dir.exists());
        assert!(first.starts_with(root.path().join(QUARANTINE_DIR)));
        assert!(first.ends_with("hubs/h/datasets/ceo/tools/main"), "{}", first.display());
        assert_eq!(std::fs::read(first.join("1.data")).unwrap(), b"staged");
        // A second one within the same second goes beside it, not over it.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("2.data"), b"more").unwrap();
        let second = quarantine(root.path(), &dir).unwrap();
        assert_ne!(first, second);
        assert_eq!(std::fs::read(second.join("2.data")).unwrap(), b"more");
        assert!(first.join("1.data").exists());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(INSTANCE_FILE), b"{not json").unwrap();
        assert!(
            read(&dir).is_err(),
            "an unreadable record is an error, not a fresh start"
        );
    }
}
