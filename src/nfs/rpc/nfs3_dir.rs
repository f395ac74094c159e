//! NFS v3 procedures that change or list a directory (RFC 1813 §3.3.8–3.3.17).
//!
//! Listing cookies are file ids, as nfsserve's `readdir(dirid, start_after, max)` takes them; the
//! filesystem resolves them in its listing snapshot, so READDIR and READDIRPLUS both pass the
//! client's cookie through.

use nfsserve::nfs::{
    filename3, nfs_fh3, nfsstat3, post_op_attr, post_op_fh3, pre_op_attr, sattr3, specdata3, wcc_data,
};

use super::nfs3::{Args, OK, id_or_refuse, post_attr, pre_attr, status, wcc};
use super::xdr::{Encoder, Garbage};
use super::{CreateHow, Front, Fs, NodeType, Who};

/// Smallest XDR size of a READDIR entry (flag, file id, empty name, cookie) and of a READDIRPLUS
/// one (plus attributes and a 16-byte handle): how many entries a reply could hold at most.
const MIN_ENTRY: usize = 4 + 8 + 4 + 8;
const MIN_ENTRY_PLUS: usize = MIN_ENTRY + 4 + 84 + 4 + 4 + 16;
/// Entries asked of the filesystem for one page, at most.
const MAX_PAGE: usize = 4096;
const CREATE_UNCHECKED: u32 = 0;
const CREATE_GUARDED: u32 = 1;
const CREATE_EXCLUSIVE: u32 = 2;
/// ftype3 values (RFC 1813 §2.6).
const NF3REG: u32 = 1;
const NF3DIR: u32 = 2;
const NF3BLK: u32 = 3;
const NF3CHR: u32 = 4;
const NF3LNK: u32 = 5;
const NF3SOCK: u32 = 6;
const NF3FIFO: u32 = 7;

fn dirop(a: Args<'_, '_>) -> Result<(nfs_fh3, filename3), Garbage> {
    Ok((a.fh()?, a.name()?))
}

/// The id of the directory a call names, or its status answered with empty wcc data.
fn dir_id<T: Fs>(front: &Front<T>, fh: &nfs_fh3, out: &mut Encoder) -> Option<u64> {
    id_or_refuse(front, fh, out, &wcc_data::default())
}

/// The reply of CREATE, MKDIR, SYMLINK and MKNOD: the new object, or the status; and the
/// directory's wcc.
async fn made<T: Fs>(
    front: &Front<T>,
    out: &mut Encoder,
    dirid: u64,
    before: pre_op_attr,
    made: Result<(u64, post_op_attr), nfsstat3>,
) {
    let dir_wcc = wcc(front, dirid, before).await;
    match made {
        Ok((id, attr)) => {
            out.u32(OK);
            out.put(&post_op_fh3::handle(front.fs.id_to_fh(id)));
            out.put(&attr);
        }
        Err(s) => status(out, s),
    }
    out.put(&dir_wcc);
}

pub async fn create<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (dir, name) = dirop(a)?;
    let how = match a.u32()? {
        CREATE_UNCHECKED => CreateHow::Unchecked(a.fixed_size::<sattr3>()?),
        CREATE_GUARDED => CreateHow::Guarded(a.fixed_size::<sattr3>()?),
        CREATE_EXCLUSIVE => {
            a.fixed::<8>()?;
            CreateHow::Exclusive
        }
        _ => return Err(Garbage("unknown createmode3")),
    };
    let Some(dirid) = dir_id(front, &dir, out) else {
        return Ok(());
    };
    let before = pre_attr(front, dirid).await;
    let result = match front.fs.create_by(who, dirid, &name, how).await {
        Ok((id, Some(a))) => Ok((id, post_op_attr::attributes(a))),
        Ok((id, None)) => Ok((id, post_attr(front, id).await)),
        Err(s) => Err(s),
    };
    made(front, out, dirid, before, result).await;
    Ok(())
}

pub async fn mkdir<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (dir, name) = dirop(a)?;
    let attr: sattr3 = a.fixed_size()?;
    let Some(dirid) = dir_id(front, &dir, out) else {
        return Ok(());
    };
    let before = pre_attr(front, dirid).await;
    let result = front
        .fs
        .mkdir_by(who, dirid, &name, attr)
        .await
        .map(|(id, a)| (id, post_op_attr::attributes(a)));
    made(front, out, dirid, before, result).await;
    Ok(())
}

pub async fn symlink<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (dir, name) = dirop(a)?;
    let attr: sattr3 = a.fixed_size()?;
    let target = a.path()?;
    let Some(dirid) = dir_id(front, &dir, out) else {
        return Ok(());
    };
    let before = pre_attr(front, dirid).await;
    let result = front
        .fs
        .symlink_by(who, dirid, &name, &target, attr)
        .await
        .map(|(id, a)| (id, post_op_attr::attributes(a)));
    made(front, out, dirid, before, result).await;
    Ok(())
}

/// MKNOD (RFC 1813 §3.3.11): character and block devices, sockets and FIFOs; a regular file, a
/// directory or a symlink is NFS3ERR_BADTYPE (they have procedures of their own), an unknown type
/// does not decode.
pub async fn mknod<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (dir, name) = dirop(a)?;
    let what = match a.u32()? {
        t @ (NF3CHR | NF3BLK) => {
            let attr: sattr3 = a.fixed_size()?;
            let spec: specdata3 = a.fixed_size()?;
            let node = if t == NF3CHR {
                NodeType::Char(spec)
            } else {
                NodeType::Block(spec)
            };
            Some((node, attr))
        }
        NF3SOCK => Some((NodeType::Socket, a.fixed_size::<sattr3>()?)),
        NF3FIFO => Some((NodeType::Fifo, a.fixed_size::<sattr3>()?)),
        NF3REG | NF3DIR | NF3LNK => None,
        _ => return Err(Garbage("unknown ftype3")),
    };
    let Some(dirid) = dir_id(front, &dir, out) else {
        return Ok(());
    };
    let before = pre_attr(front, dirid).await;
    let result = match what {
        None => Err(nfsstat3::NFS3ERR_BADTYPE),
        Some(_) if !front.writable => Err(nfsstat3::NFS3ERR_ROFS),
        Some((node, attr)) => front
            .fs
            .mknod_by(who, dirid, &name, node, attr)
            .await
            .map(|(id, a)| (id, post_op_attr::attributes(a))),
    };
    made(front, out, dirid, before, result).await;
    Ok(())
}

/// LINK (RFC 1813 §3.3.15): the reply carries the file's attributes and the directory's wcc.
pub async fn link<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let file = a.fh()?;
    let (dir, name) = dirop(a)?;
    let (id, dirid) = match (front.fs.fh_to_id(&file), front.fs.fh_to_id(&dir)) {
        (Ok(id), Ok(dirid)) => (id, dirid),
        (Err(s), _) => {
            status(out, s);
            out.put(&post_op_attr::Void);
            out.put(&wcc_data::default());
            return Ok(());
        }
        (Ok(id), Err(s)) => {
            status(out, s);
            out.put(&post_attr(front, id).await);
            out.put(&wcc_data::default());
            return Ok(());
        }
    };
    let before = pre_attr(front, dirid).await;
    let result = if front.writable {
        front.fs.link_by(who, id, dirid, &name).await
    } else {
        Err(nfsstat3::NFS3ERR_ROFS)
    };
    match result {
        Ok(()) => out.u32(OK),
        Err(s) => status(out, s),
    }
    out.put(&post_attr(front, id).await);
    out.put(&wcc(front, dirid, before).await);
    Ok(())
}

/// REMOVE and RMDIR: the filesystem removes whichever kind the name is.
pub async fn remove<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (dir, name) = dirop(a)?;
    let Some(dirid) = dir_id(front, &dir, out) else {
        return Ok(());
    };
    let before = pre_attr(front, dirid).await;
    match front.fs.remove_by(who, dirid, &name).await {
        Ok(()) => out.u32(OK),
        Err(s) => status(out, s),
    }
    out.put(&wcc(front, dirid, before).await);
    Ok(())
}

pub async fn rename<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (from_dir, from_name) = dirop(a)?;
    let (to_dir, to_name) = dirop(a)?;
    let (from, to) = match (front.fs.fh_to_id(&from_dir), front.fs.fh_to_id(&to_dir)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(s), _) | (_, Err(s)) => {
            status(out, s);
            out.put(&wcc_data::default());
            out.put(&wcc_data::default());
            return Ok(());
        }
    };
    let (from_before, to_before) = (pre_attr(front, from).await, pre_attr(front, to).await);
    match front.fs.rename_by(who, from, &from_name, to, &to_name).await {
        Ok(()) => out.u32(OK),
        Err(s) => status(out, s),
    }
    out.put(&wcc(front, from, from_before).await);
    out.put(&wcc(front, to, to_before).await);
    Ok(())
}

/// READDIR and READDIRPLUS: entries from `cookie` on, as many as fit `maxcount` bytes of reply (and
/// `dircount` bytes of names and cookies, for READDIRPLUS).
struct Page {
    cookie: u64,
    /// Byte budget of the whole result.
    maxcount: usize,
    /// Byte budget of file ids, names and cookies (READDIRPLUS only).
    dircount: Option<usize>,
    plus: bool,
}

async fn list<T: Fs>(front: &Front<T>, dir: nfs_fh3, page: Page, out: &mut Encoder) {
    let Some(dirid) = id_or_refuse(front, &dir, out, &post_op_attr::Void) else {
        return;
    };
    let per_entry = if page.plus { MIN_ENTRY_PLUS } else { MIN_ENTRY };
    let mut want = page.maxcount / per_entry;
    if let Some(d) = page.dircount {
        want = want.min(d / MIN_ENTRY);
    }
    let listing = front.fs.readdir(dirid, page.cookie, want.clamp(1, MAX_PAGE)).await;
    let dir_attr = post_attr(front, dirid).await;
    let listing = match listing {
        Ok(l) => l,
        Err(s) => {
            status(out, s);
            out.put(&dir_attr);
            return;
        }
    };
    let start = out.len();
    out.u32(OK);
    out.put(&dir_attr);
    out.fixed(&front.fs.serverid());
    // Room for the list's closing flag and eof.
    let limit = (start + page.maxcount).saturating_sub(8);
    let (mut names, mut fitted) = (0usize, 0usize);
    for e in &listing.entries {
        let before = out.len();
        out.bool(true);
        out.u64(e.fileid);
        out.opaque(&e.name.0);
        out.u64(e.fileid);
        names += out.len() - before - 4;
        if page.plus {
            out.put(&post_op_attr::attributes(e.attr));
            out.put(&post_op_fh3::handle(front.fs.id_to_fh(e.fileid)));
        }
        if out.len() > limit || page.dircount.is_some_and(|d| names > d) {
            out.truncate(before);
            break;
        }
        fitted += 1;
    }
    if fitted == 0 && !listing.entries.is_empty() {
        out.truncate(start);
        status(out, nfsstat3::NFS3ERR_TOOSMALL);
        out.put(&dir_attr);
        return;
    }
    out.bool(false);
    out.bool(listing.end && fitted == listing.entries.len());
}

pub async fn readdir<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (dir, cookie) = (a.fh()?, a.u64()?);
    let _verf = a.fixed::<8>()?;
    let maxcount = a.u32()? as usize;
    let page = Page {
        cookie,
        maxcount,
        dircount: None,
        plus: false,
    };
    list(front, dir, page, out).await;
    Ok(())
}

pub async fn readdirplus<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (dir, cookie) = (a.fh()?, a.u64()?);
    let _verf = a.fixed::<8>()?;
    let (dircount, maxcount) = (a.u32()? as usize, a.u32()? as usize);
    let page = Page {
        cookie,
        maxcount,
        // A dircount too small for one entry is taken as no limit (it is a hint in RFC 1813).
        dircount: (dircount >= MIN_ENTRY).then_some(dircount),
        plus: true,
    };
    list(front, dir, page, out).await;
    Ok(())
}
