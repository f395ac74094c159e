//! Readdir paging, two ways: from the snapshot `VirtualFs::opendir` takes (what the FUSE adapter
//! does today: one snapshot per open directory, each page a slice of it) and the counterfactual the
//! snapshot replaced, where every page request rebuilds the directory's merged listing and skips to
//! the requested offset. The rebuild is done with VirtualFs's own building blocks: `opendir` builds
//! exactly that listing (revision check, parent lookup, merged listing, a number and attributes per
//! entry), so "rebuild per page" is `opendir` + page + `releasedir` for every request.

use hubfs::vfs::{DirEntry, Ino, Kind, VirtualFs};

/// Bytes of one readdir reply. The kernel asks a FUSE server for one page (4 KiB) per READDIR
/// request on the kernels this project targets (newer ones may ask for more, up to 32 KiB for a
/// `getdents64` buffer that large, which divides the page count by as much).
pub const REPLY_BYTES: usize = 4096;

/// Size of one `fuse_dirent` in a reply: a 24-byte header and the name, padded to 8 bytes.
fn dirent_len(name: &str) -> usize {
    (24 + name.len() + 7) & !7
}

/// Serialises entries from `offset` into `buf` until the next one does not fit, as fuser's
/// `ReplyDirectory::add` does for `FuseAdapter::readdir`. Returns the offset the kernel asks for
/// next; a reply with no entry (`offset` at the end) tells it the listing is over.
pub fn fill_page(entries: &[DirEntry], offset: usize, buf: &mut Vec<u8>) -> usize {
    buf.clear();
    for (i, e) in entries.iter().enumerate().skip(offset) {
        let len = dirent_len(&e.name);
        if buf.len() + len > REPLY_BYTES {
            return i;
        }
        let kind: u32 = if e.attr.kind == Kind::Dir { 4 } else { 8 }; // DT_DIR, DT_REG
        buf.extend_from_slice(&e.attr.ino.to_ne_bytes());
        buf.extend_from_slice(&(i as u64 + 1).to_ne_bytes());
        buf.extend_from_slice(&(e.name.len() as u32).to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(e.name.as_bytes());
        buf.resize(buf.len() + len - 24 - e.name.len(), 0);
    }
    entries.len()
}

/// One page from an open directory's snapshot (FuseAdapter::readdir).
pub fn page_from_snapshot(vfs: &VirtualFs, fh: u64, offset: usize, buf: &mut Vec<u8>) -> usize {
    let entries = vfs.dir_entries(fh).unwrap();
    fill_page(&entries, offset, buf)
}

/// One page with the listing rebuilt for this request alone.
pub async fn page_rebuilt(vfs: &VirtualFs, ino: Ino, offset: usize, buf: &mut Vec<u8>) -> usize {
    let fh = vfs.opendir(ino).await.unwrap();
    let entries = vfs.dir_entries(fh).unwrap();
    let next = fill_page(&entries, offset, buf);
    vfs.releasedir(fh);
    next
}

/// A whole listing as the kernel pages it (ending with the empty page), served from one snapshot.
/// `sink` sees every reply; returns the number of READDIR requests.
pub async fn list_snapshot(vfs: &VirtualFs, ino: Ino, buf: &mut Vec<u8>, mut sink: impl FnMut(&[u8])) -> usize {
    let fh = vfs.opendir(ino).await.unwrap();
    let (mut offset, mut requests) = (0, 0);
    loop {
        let next = page_from_snapshot(vfs, fh, offset, buf);
        requests += 1;
        sink(buf);
        if buf.is_empty() {
            break;
        }
        offset = next;
    }
    vfs.releasedir(fh);
    requests
}

/// The same listing with the merged listing rebuilt for every READDIR request.
pub async fn list_rebuilt(vfs: &VirtualFs, ino: Ino, buf: &mut Vec<u8>, mut sink: impl FnMut(&[u8])) -> usize {
    let (mut offset, mut requests) = (0, 0);
    loop {
        let next = page_rebuilt(vfs, ino, offset, buf).await;
        requests += 1;
        sink(buf);
        if buf.is_empty() {
            break;
        }
        offset = next;
    }
    requests
}
