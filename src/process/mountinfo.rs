//! Reading `/proc/self/mountinfo`: which paths are mounted, and which mounts share a superblock
//! (a CSI source mount and its bind mounts carry the same `MAJ:MIN`). `hubfs unmount` and the CSI
//! plugin both ask it. Nothing here stats a mount: a FUSE mount whose server died answers stat with
//! ENOTCONN, and one whose server hangs never answers.

use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: u64,
    /// `MAJ:MIN` of the filesystem: equal for a mount and its binds.
    pub dev: String,
    pub mountpoint: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// Undoes the octal escapes of mountinfo (`\040` space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL…] - FSTYPE SOURCE SUPER`.
pub fn parse(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let mut h = head.split(' ');
            let id = h.next()?.parse().ok()?;
            let _parent = h.next()?;
            let dev = h.next()?.to_string();
            let _root = h.next()?;
            let mountpoint = PathBuf::from(unescape(h.next()?));
            let mut t = tail.split(' ');
            Some(Entry {
                id,
                dev,
                mountpoint,
                fstype: t.next()?.to_string(),
                source: unescape(t.next().unwrap_or("")),
            })
        })
        .collect()
}

/// This process's mount table (empty if it cannot be read, which only happens without /proc).
pub fn read() -> Vec<Entry> {
    match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(t) => parse(&t),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read /proc/self/mountinfo");
            Vec::new()
        }
    }
}

/// The topmost mount at `path` (mounts stack; the last line wins).
pub fn at<'a>(table: &'a [Entry], path: &Path) -> Option<&'a Entry> {
    table.iter().rev().find(|e| e.mountpoint == path)
}

/// Every mount of the filesystem `dev`.
pub fn with_dev<'a>(table: &'a [Entry], dev: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
    table.iter().filter(move |e| e.dev == dev)
}

/// The mount at `dir` (the last one: mounts stack).
pub fn mounted_at(dir: &Path) -> Option<Entry> {
    at(&read(), dir).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_share_the_device_and_escapes_are_undone() {
        let text = "40 1 0:52 / /var/lib/hubfs-csi/sources/k/mnt rw,nosuid - fuse.hubfs hubfs:demo/m rw\n\
                    41 30 0:52 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/a\\040b/mount ro - fuse.hubfs hubfs:demo/m rw\n\
                    42 1 8:1 / / rw - ext4 /dev/sda1 rw\n";
        let t = parse(text);
        assert_eq!(t.len(), 3);
        assert_eq!(with_dev(&t, "0:52").count(), 2);
        assert_eq!(
            at(
                &t,
                Path::new("/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/a b/mount")
            )
            .map(|e| e.id),
            Some(41)
        );
        assert!(at(&t, Path::new("/nope")).is_none());
    }

    #[test]
    fn optional_fields_bad_lines_and_plain_backslashes() {
        let text = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                    bad line\n";
        let t = parse(text);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].mountpoint, Path::new("/mnt/a b"));
        assert_eq!((t[0].fstype.as_str(), t[0].source.as_str()), ("ext3", "/dev/root"));
        assert_eq!(unescape("a\\134b"), "a\\b");
        assert_eq!(unescape("a\\xb"), "a\\xb");
        assert_eq!(unescape("end\\"), "end\\");
    }
}
