//! The MOUNT v3 program (RFC 1813 appendix I) and the portmapper's GETPORT (RFC 1833, version 2),
//! both answered on the NFS port so a client needs only that one port.

use nfsserve::nfs::nfsstat3;

use super::msg::{self, Call, Refusal};
use super::xdr::{Encoder, Garbage};
use super::{Front, Fs};

pub const MOUNT_PROGRAM: u32 = 100005;
pub const PORTMAP_PROGRAM: u32 = 100000;

/// The one export: the repo's root. MNT also takes a directory below it.
const EXPORT: &[u8] = b"/";
/// MNTPATHLEN.
const MAX_PATH: usize = 1024;
const AUTH_UNIX: u32 = 1;
const IPPROTO_TCP: u32 = 6;

/// mountstat3 for an NFS status met while resolving a mount path.
fn mount_status(s: nfsstat3) -> u32 {
    match s {
        nfsstat3::NFS3ERR_PERM => 1,
        nfsstat3::NFS3ERR_NOENT => 2,
        nfsstat3::NFS3ERR_ACCES => 13,
        nfsstat3::NFS3ERR_NOTDIR => 20,
        nfsstat3::NFS3ERR_INVAL => 22,
        nfsstat3::NFS3ERR_NAMETOOLONG => 63,
        _ => 5, // MNT3ERR_IO
    }
}

pub async fn mount<T: Fs>(front: &Front<T>, mut call: Call<'_>) -> Vec<u8> {
    let xid = call.xid;
    let mut out = msg::success(xid);
    let done = match call.proc_ {
        // NULL, UMNT, UMNTALL: nothing is recorded per client, so there is nothing to forget.
        0 => Ok(()),
        1 => mnt(front, &mut call, &mut out).await,
        3 => call.args.opaque(MAX_PATH).map(|_| ()),
        4 => Ok(()),
        // DUMP: no list of mounted clients is kept.
        2 => {
            out.bool(false);
            Ok(())
        }
        5 => {
            export(&mut out);
            Ok(())
        }
        _ => return msg::refused(xid, Refusal::ProcUnavail),
    };
    match done {
        Ok(()) => out.finish(),
        Err(_) => msg::refused(xid, Refusal::GarbageArgs),
    }
}

async fn mnt<T: Fs>(front: &Front<T>, call: &mut Call<'_>, out: &mut Encoder) -> Result<(), Garbage> {
    let path = call.args.opaque(MAX_PATH)?;
    let Some(below) = path.strip_prefix(EXPORT) else {
        out.u32(2); // MNT3ERR_NOENT: not under the export
        return Ok(());
    };
    match front.fs.path_to_id(below).await {
        Ok(id) => {
            out.u32(0);
            out.opaque(&front.fs.id_to_fh(id).data);
            out.u32(1);
            out.u32(AUTH_UNIX);
        }
        Err(s) => out.u32(mount_status(s)),
    }
    Ok(())
}

/// EXPORT: one export, open to every host (an empty group list).
fn export(out: &mut Encoder) {
    out.bool(true);
    out.opaque(EXPORT);
    out.bool(false);
    out.bool(false);
}

pub fn portmap<T: Fs>(front: &Front<T>, mut call: Call<'_>) -> Vec<u8> {
    let xid = call.xid;
    match call.proc_ {
        0 => msg::success(xid).finish(),
        3 => {
            let a = &mut call.args;
            let Ok((prog, vers, prot, _port)) = (|| Ok::<_, Garbage>((a.u32()?, a.u32()?, a.u32()?, a.u32()?)))()
            else {
                return msg::refused(xid, Refusal::GarbageArgs);
            };
            let served = match prog {
                super::nfs3::PROGRAM => vers == 3,
                MOUNT_PROGRAM => vers == 3,
                _ => false,
            };
            let mut out = msg::success(xid);
            // 0 means "not registered".
            out.u32(if served && prot == IPPROTO_TCP {
                u32::from(front.port)
            } else {
                0
            });
            out.finish()
        }
        _ => msg::refused(xid, Refusal::ProcUnavail),
    }
}
