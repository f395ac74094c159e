//! The NFS v3 program (RFC 1813): dispatch, and the procedures about one file or the filesystem.
//! Procedures that change or list a directory are in `nfs3_dir`.

use nfsserve::nfs::{
    fattr3, fileid3, nfs_fh3, nfsstat3, nfstime3, post_op_attr, pre_op_attr, sattr3, wcc_attr, wcc_data,
};

use super::msg::{self, Call, Refusal};
use super::nfs3_dir;
use super::xdr::{Decoder, Encoder, Garbage};
use super::{Front, Fs, Stability, Who};
use crate::nfs::MAX_TRANSFER;
use nfsserve::xdr::XDR;

pub const PROGRAM: u32 = 100003;

pub(super) const OK: u32 = 0;
/// What FSSTAT reports as room on a writable mount: the same 4 TiB as the FUSE mount's statfs (the
/// real limits are the staging disk and the Hub's quota).
const WRITABLE_ROOM: u64 = 4 << 40;

pub(super) type Args<'a, 'b> = &'a mut Decoder<'b>;

pub async fn dispatch<T: Fs>(front: &Front<T>, call: Call<'_>) -> Vec<u8> {
    let Call {
        xid,
        proc_,
        mut args,
        cred,
        ..
    } = call;
    let _timer = crate::metrics::timer("nfs", crate::metrics::nfs_proc_name(proc_));
    let mut out = msg::success(xid);
    let (a, o, w) = (&mut args, &mut out, cred.as_ref());
    let done = match proc_ {
        0 => Ok(()),
        1 => getattr(front, a, o).await,
        2 => setattr(front, w, a, o).await,
        3 => lookup(front, a, o).await,
        4 => access(front, w, a, o).await,
        5 => readlink(front, a, o).await,
        6 => read(front, w, a, o).await,
        7 => write(front, w, a, o).await,
        8 => nfs3_dir::create(front, w, a, o).await,
        9 => nfs3_dir::mkdir(front, w, a, o).await,
        10 => nfs3_dir::symlink(front, w, a, o).await,
        11 => nfs3_dir::mknod(front, w, a, o).await,
        12 | 13 => nfs3_dir::remove(front, w, a, o).await,
        14 => nfs3_dir::rename(front, w, a, o).await,
        15 => nfs3_dir::link(front, w, a, o).await,
        16 => nfs3_dir::readdir(front, a, o).await,
        17 => nfs3_dir::readdirplus(front, a, o).await,
        18 => fsstat(front, a, o).await,
        19 => fsinfo(front, a, o).await,
        20 => pathconf(front, a, o).await,
        21 => commit(front, a, o).await,
        _ => return msg::refused(xid, Refusal::ProcUnavail),
    };
    match done {
        Ok(()) => out.finish(),
        Err(Garbage(why)) => {
            tracing::debug!(proc_, why, "NFS: arguments do not decode");
            msg::refused(xid, Refusal::GarbageArgs)
        }
    }
}

pub(super) fn status(out: &mut Encoder, s: nfsstat3) {
    out.u32(s as u32);
}

pub(super) async fn post_attr<T: Fs>(front: &Front<T>, id: fileid3) -> post_op_attr {
    match front.fs.getattr(id).await {
        Ok(a) => post_op_attr::attributes(a),
        Err(_) => post_op_attr::Void,
    }
}

pub(super) fn pre_of(a: &fattr3) -> pre_op_attr {
    pre_op_attr::attributes(wcc_attr {
        size: a.size,
        mtime: a.mtime,
        ctime: a.ctime,
    })
}

pub(super) async fn pre_attr<T: Fs>(front: &Front<T>, id: fileid3) -> pre_op_attr {
    match front.fs.getattr(id).await {
        Ok(a) => pre_of(&a),
        Err(_) => pre_op_attr::Void,
    }
}

/// Weak cache consistency data of `id`: `before` and its attributes now.
pub(super) async fn wcc<T: Fs>(front: &Front<T>, id: fileid3, before: pre_op_attr) -> wcc_data {
    wcc_data {
        before,
        after: post_attr(front, id).await,
    }
}

fn put_fh(out: &mut Encoder, fh: &nfs_fh3) {
    out.opaque(&fh.data);
}

/// The file id a handle names; for a handle the filesystem refuses (stale, bad), the reply is its
/// status followed by `empty` (the procedure's failure tail: no attributes, or empty wcc data).
pub(super) fn id_or_refuse<T: Fs, E: XDR>(
    front: &Front<T>,
    fh: &nfs_fh3,
    out: &mut Encoder,
    empty: &E,
) -> Option<fileid3> {
    match front.fs.fh_to_id(fh) {
        Ok(id) => Some(id),
        Err(s) => {
            status(out, s);
            out.put(empty);
            None
        }
    }
}

async fn getattr<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let fh = a.fh()?;
    let got = match front.fs.fh_to_id(&fh) {
        Ok(id) => front.fs.getattr(id).await,
        Err(s) => Err(s),
    };
    match got {
        Ok(attr) => {
            out.u32(OK);
            out.put(&attr);
        }
        Err(s) => status(out, s),
    }
    Ok(())
}

/// SETATTR. The guard (RFC 1813: the ctime the client last saw) is checked against the ctime now,
/// just before the change; a change by another call in between is not excluded.
async fn setattr<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let fh = a.fh()?;
    let attr: sattr3 = a.fixed_size()?;
    let guard = if a.bool()? {
        Some(a.fixed_size::<nfstime3>()?)
    } else {
        None
    };
    let Some(id) = id_or_refuse(front, &fh, out, &wcc_data::default()) else {
        return Ok(());
    };
    let now = front.fs.getattr(id).await;
    let before = now.as_ref().map(pre_of).unwrap_or_default();
    if let (Some(g), Ok(now)) = (guard, &now)
        && (g.seconds, g.nseconds) != (now.ctime.seconds, now.ctime.nseconds)
    {
        status(out, nfsstat3::NFS3ERR_NOT_SYNC);
        out.put(&wcc(front, id, before).await);
        return Ok(());
    }
    match front.fs.setattr_by(who, id, attr).await {
        Ok(after) => {
            out.u32(OK);
            out.put(&wcc_data {
                before,
                after: post_op_attr::attributes(after),
            });
        }
        Err(s) => {
            status(out, s);
            out.put(&wcc(front, id, before).await);
        }
    }
    Ok(())
}

async fn lookup<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (dir, name) = (a.fh()?, a.name()?);
    let Some(dirid) = id_or_refuse(front, &dir, out, &post_op_attr::Void) else {
        return Ok(());
    };
    match front.fs.lookup(dirid, &name).await {
        Ok(id) => {
            out.u32(OK);
            put_fh(out, &front.fs.id_to_fh(id));
            out.put(&post_attr(front, id).await);
            out.put(&post_attr(front, dirid).await);
        }
        Err(s) => {
            status(out, s);
            out.put(&post_attr(front, dirid).await);
        }
    }
    Ok(())
}

async fn access<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let fh = a.fh()?;
    let asked = a.u32()?;
    let got = match front.fs.fh_to_id(&fh) {
        Ok(id) => front.fs.access_by(who, id, asked).await,
        Err(s) => Err(s),
    };
    match got {
        Ok((attr, mask)) => {
            out.u32(OK);
            out.put(&post_op_attr::attributes(attr));
            out.u32(mask);
        }
        Err(s) => {
            status(out, s);
            out.put(&post_op_attr::Void);
        }
    }
    Ok(())
}

async fn readlink<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let fh = a.fh()?;
    let Some(id) = id_or_refuse(front, &fh, out, &post_op_attr::Void) else {
        return Ok(());
    };
    match front.fs.readlink(id).await {
        Ok(path) => {
            out.u32(OK);
            out.put(&post_attr(front, id).await);
            out.opaque(&path.0);
        }
        Err(s) => {
            status(out, s);
            out.put(&post_attr(front, id).await);
        }
    }
    Ok(())
}

async fn read<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (fh, offset, count) = (a.fh()?, a.u64()?, a.u32()?);
    let Some(id) = id_or_refuse(front, &fh, out, &post_op_attr::Void) else {
        return Ok(());
    };
    match front.fs.read_attr(who, id, offset, count.min(MAX_TRANSFER)).await {
        Ok((data, eof, attr)) => {
            crate::metrics::read("nfs", data.len());
            out.reserve(data.len() + 128);
            out.u32(OK);
            out.put(&attr.map_or(post_op_attr::Void, post_op_attr::attributes));
            out.u32(data.len() as u32);
            out.bool(eof);
            out.opaque(&data);
        }
        Err(s) => {
            status(out, s);
            out.put(&post_attr(front, id).await);
        }
    }
    Ok(())
}

async fn write<T: Fs>(front: &Front<T>, who: Who<'_>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (fh, offset, count, stable) = (a.fh()?, a.u64()?, a.u32()?, a.u32()?);
    let asked = Stability::from_wire(stable).ok_or(Garbage("WRITE with an unknown stable_how"))?;
    let data = a.opaque(usize::MAX)?;
    if data.len() != count as usize {
        return Err(Garbage("WRITE count differs from its data's length"));
    }
    let Some(id) = id_or_refuse(front, &fh, out, &wcc_data::default()) else {
        return Ok(());
    };
    tracing::trace!(id, offset, count, ?asked, "NFS WRITE");
    match front.fs.write_durable(who, id, offset, data, asked).await {
        Ok((after, reached)) => {
            out.u32(OK);
            out.put(&wcc_data {
                before: pre_op_attr::Void,
                after: post_op_attr::attributes(after),
            });
            out.u32(count);
            out.u32(reached as u32);
            out.fixed(&front.fs.serverid());
        }
        Err(s) => {
            status(out, s);
            out.put(&wcc(front, id, pre_op_attr::Void).await);
        }
    }
    Ok(())
}

/// COMMIT: the whole file is made stable (the range is a hint a server may widen); the Hub commit
/// still follows the file's quiet period (docs/SEMANTICS.md). The verifier is the WRITEs': it
/// changes only with a new server instance, which tells the client to send its unstable WRITEs again.
async fn commit<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let (fh, _offset, _count) = (a.fh()?, a.u64()?, a.u32()?);
    let Some(id) = id_or_refuse(front, &fh, out, &wcc_data::default()) else {
        return Ok(());
    };
    tracing::trace!(id, "NFS COMMIT");
    match front.fs.commit(id).await {
        Ok(()) => {
            out.u32(OK);
            out.put(&wcc(front, id, pre_op_attr::Void).await);
            out.fixed(&front.fs.serverid());
        }
        Err(s) => {
            status(out, s);
            out.put(&wcc(front, id, pre_op_attr::Void).await);
        }
    }
    Ok(())
}

/// The object a FSSTAT, FSINFO or PATHCONF names, or the status that ends its reply.
async fn object_attr<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<Option<fileid3>, Garbage> {
    let fh = a.fh()?;
    Ok(id_or_refuse(front, &fh, out, &post_op_attr::Void))
}

async fn fsstat<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let Some(id) = object_attr(front, a, out).await? else {
        return Ok(());
    };
    out.u32(OK);
    out.put(&post_attr(front, id).await);
    // Read-only mounts have no room, as their FUSE statfs says; files are not counted.
    let (bytes, files) = if front.writable {
        (WRITABLE_ROOM, 1 << 20)
    } else {
        (0, 0)
    };
    for v in [bytes, bytes, bytes, files, files, files] {
        out.u64(v);
    }
    out.u32(0); // invarsec: these may change at any time
    Ok(())
}

async fn fsinfo<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let Some(id) = object_attr(front, a, out).await? else {
        return Ok(());
    };
    match front.fs.fsinfo(id).await {
        Ok(info) => {
            out.u32(OK);
            out.put(&info);
        }
        Err(s) => {
            status(out, s);
            out.put(&post_attr(front, id).await);
        }
    }
    Ok(())
}

async fn pathconf<T: Fs>(front: &Front<T>, a: Args<'_, '_>, out: &mut Encoder) -> Result<(), Garbage> {
    let Some(id) = object_attr(front, a, out).await? else {
        return Ok(());
    };
    out.u32(OK);
    out.put(&post_attr(front, id).await);
    out.u32(1); // linkmax: no hard links
    out.u32(255); // name_max
    out.bool(true); // no_trunc: longer names are refused, not cut
    out.bool(true); // chown_restricted
    out.bool(false); // case_insensitive
    out.bool(true); // case_preserving
    Ok(())
}
