//! The record of an overlay layer (`layer.json` in its directory): what the layer lies over.
//!
//! A layer outlives its mount, so `hubfs overlay diff|commit|reset` may meet one whose mount is
//! gone: the record says which Hub, repo and revision to reopen it on, and which commit its changes
//! were made on (what `overlay commit` names as the parent). The mountpoint it was last mounted at
//! lets those commands find it from the directory a user knows.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record's file name in the layer directory.
pub const LAYER_FILE: &str = "layer.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    /// The Hub endpoint URL.
    pub endpoint: String,
    /// The repo as a mount names it (`ns/name`, `datasets/ns/name`, …).
    pub repo: String,
    /// The revision as asked for (branch, tag or commit id).
    pub revision: String,
    /// The commit the layer's changes lie over.
    pub base: String,
    /// Where it was last mounted (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mountpoint: Option<String>,
    /// Paths the layer changed whose Hub version changed too since the changes were made (found
    /// when a remount moved the layer to a newer commit). `overlay commit` refuses them until
    /// they are reset or written again, or `--force` is given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

/// Reads the record of `dir` (`None`: there is none).
pub fn read(dir: &Path) -> std::io::Result<Option<LayerRecord>> {
    match std::fs::read(dir.join(LAYER_FILE)) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            std::io::Error::new(
                ErrorKind::InvalidData,
                format!("{}: {e}", dir.join(LAYER_FILE).display()),
            )
        }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces the record of `dir` atomically (a crash leaves the old one or the new one).
pub fn write(dir: &Path, rec: &LayerRecord) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{LAYER_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(LAYER_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// The layer directories below `root` (the default place of layers), at most `depth` levels down.
pub fn all_below(root: &Path, depth: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((dir, d)) = stack.pop() {
        if dir.join(LAYER_FILE).is_file() {
            found.push(dir);
            continue;
        }
        if d >= depth {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != super::instance::QUARANTINE_DIR {
                stack.push((e.path(), d + 1));
            }
        }
    }
    found.sort();
    found
}

/// The layer last mounted at `mountpoint`, among those below `root`.
pub fn find_for_mountpoint(root: &Path, mountpoint: &Path) -> Option<PathBuf> {
    let want = mountpoint.to_string_lossy();
    all_below(root, 8).into_iter().find(|d| {
        read(d)
            .ok()
            .flatten()
            .and_then(|r| r.mountpoint)
            .is_some_and(|m| m == want)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_is_found_by_its_mountpoint() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("hubs/x/models/demo/m/main");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read(&dir).unwrap(), None);
        let rec = LayerRecord {
            endpoint: "http://127.0.0.1:1".into(),
            repo: "demo/m".into(),
            revision: "main".into(),
            base: "a".repeat(40),
            mountpoint: Some("/mnt/m".into()),
            conflicts: vec!["config.json".into()],
        };
        write(&dir, &rec).unwrap();
        assert_eq!(read(&dir).unwrap(), Some(rec));
        assert_eq!(find_for_mountpoint(root.path(), Path::new("/mnt/m")), Some(dir));
        assert_eq!(find_for_mountpoint(root.path(), Path::new("/mnt/other")), None);
    }
}
