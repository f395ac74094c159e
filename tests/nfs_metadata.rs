//! What a writable mount keeps that the Hub cannot store, over NFS: SETATTR of modes, owners and
//! times, SYMLINK, READLINK, MKNOD and LINK, with callers named by AUTH_UNIX credentials, checked
//! against what the VirtualFs (and so the FUSE mount) shows; the permission rules the server applies
//! itself for callers other than root; NFS3ERR_ROFS on a read-only mount and NFS3ERR_PERM under
//! `--posix strict`; symlinks and special files never reaching the Hub; and all of it after the
//! server is stopped and another one started on the same cache dir.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use hubfs::nfs::server::NfsServer;
use hubfs::process::session::open_vfs;
use hubfs::vfs::{Attr, Hold, Kind, ROOT_INO, VfsOptions, VirtualFs};
use nfs3_client::nfs3_types::nfs3::{
    self, Nfs3Option, Nfs3Result, diropargs3, fattr3, filename3, ftype3, nfs_fh3, nfspath3, nfsstat3, nfstime3, sattr3,
    set_atime, set_mtime, specdata3,
};
use nfs3_client::nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_client::nfs3_types::xdr_codec::{self, Opaque, Pack};
use nfs3_client::tokio::{TokioConnector, TokioIo};

#[path = "common/write_env.rs"]
mod write_env;
use write_env::{Env, sha};

type Conn = nfs3_client::Nfs3Connection<TokioIo<tokio::net::TcpStream>>;

/// Callers: root, two users (alice is also in group 4000) and AUTH_NONE.
const ROOT: Option<(u32, u32, &[u32])> = Some((0, 0, &[]));
const ALICE: Option<(u32, u32, &[u32])> = Some((1000, 1000, &[1000, 4000]));
const BOB: Option<(u32, u32, &[u32])> = Some((2000, 2000, &[2000]));

const ACCESS_READ: u32 = 0x01;
const ACCESS_MODIFY: u32 = 0x04;
const ACCESS_EXTEND: u32 = 0x08;
const ACCESS_EXECUTE: u32 = 0x20;

fn credential(who: (u32, u32, &[u32])) -> opaque_auth<'static> {
    opaque_auth::auth_unix(&auth_unix {
        stamp: 1,
        machinename: Opaque::borrowed(b"tester"),
        uid: who.0,
        gid: who.1,
        gids: who.2.to_vec(),
    })
}

/// MOUNT `/` and an NFS connection on `port` as `who` (None: AUTH_NONE).
async fn connect(port: u16, who: Option<(u32, u32, &[u32])>) -> Conn {
    let mut b = nfs3_client::Nfs3ConnectionBuilder::new(TokioConnector, "127.0.0.1", "/")
        .connect_from_privileged_port(false)
        .mount_port(port)
        .nfs3_port(port);
    if let Some(w) = who {
        b = b.credential(credential(w));
    }
    tokio::time::timeout(Duration::from_secs(20), b.mount())
        .await
        .expect("MOUNT within 20 s")
        .expect("MOUNT")
}

/// Serves dataset `local/NAME` with `opts` on a free loopback port.
fn serve(env: &Env, name: &str, opts: &VfsOptions) -> (NfsServer, Arc<VirtualFs>) {
    let opened = open_vfs(
        &format!("datasets/local/{name}"),
        None,
        &env.client_cfg(),
        opts,
        &env.rt,
    )
    .expect("open repo");
    let server = env
        .rt
        .block_on(NfsServer::start(opened.vfs.clone(), "127.0.0.1:0".parse().unwrap()))
        .expect("nfs server");
    (server, opened.vfs)
}

fn name(s: &str) -> filename3<'static> {
    filename3(Opaque::owned(s.as_bytes().to_vec()))
}

fn at(dir: &nfs_fh3, n: &str) -> diropargs3<'static> {
    diropargs3 {
        dir: dir.clone(),
        name: name(n),
    }
}

fn mode(m: u32) -> sattr3 {
    sattr3 {
        mode: Nfs3Option::Some(m),
        ..Default::default()
    }
}

fn time(seconds: u32, nseconds: u32) -> nfstime3 {
    nfstime3 { seconds, nseconds }
}

fn status<T, E>(r: &Nfs3Result<T, E>) -> nfsstat3 {
    match r {
        Nfs3Result::Ok(_) => nfsstat3::NFS3_OK,
        Nfs3Result::Err((s, _)) => *s,
    }
}

/// A new object's handle and attributes, from a CREATE, MKDIR, SYMLINK or MKNOD reply.
fn made(obj: Nfs3Option<nfs_fh3>, attr: Nfs3Option<fattr3>) -> (nfs_fh3, fattr3) {
    match (obj, attr) {
        (Nfs3Option::Some(fh), Nfs3Option::Some(a)) => (fh, a),
        _ => panic!("a reply without the new object's handle or attributes"),
    }
}

async fn getattr(c: &mut Conn, fh: &nfs_fh3) -> fattr3 {
    c.getattr(&fh.clone().into()).await.unwrap().unwrap().obj_attributes
}

async fn lookup(c: &mut Conn, dir: &nfs_fh3, n: &str) -> Result<nfs_fh3, nfsstat3> {
    match c.lookup(&nfs3::LOOKUP3args { what: at(dir, n) }).await.unwrap() {
        Nfs3Result::Ok(ok) => Ok(ok.object),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn create(c: &mut Conn, dir: &nfs_fh3, n: &str, attr: sattr3) -> Result<(nfs_fh3, fattr3), nfsstat3> {
    let r = c
        .create(&nfs3::CREATE3args {
            where_: at(dir, n),
            how: nfs3::createhow3::UNCHECKED(attr),
        })
        .await
        .unwrap();
    match r {
        Nfs3Result::Ok(ok) => Ok(made(ok.obj, ok.obj_attributes)),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn mkdir(c: &mut Conn, dir: &nfs_fh3, n: &str, attr: sattr3) -> Result<(nfs_fh3, fattr3), nfsstat3> {
    let r = c
        .mkdir(&nfs3::MKDIR3args {
            where_: at(dir, n),
            attributes: attr,
        })
        .await
        .unwrap();
    match r {
        Nfs3Result::Ok(ok) => Ok(made(ok.obj, ok.obj_attributes)),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn symlink(
    c: &mut Conn,
    dir: &nfs_fh3,
    n: &str,
    target: &str,
    attr: sattr3,
) -> Result<(nfs_fh3, fattr3), nfsstat3> {
    let r = c
        .symlink(&nfs3::SYMLINK3args {
            where_: at(dir, n),
            symlink: nfs3::symlinkdata3 {
                symlink_attributes: attr,
                symlink_data: nfspath3(Opaque::owned(target.as_bytes().to_vec())),
            },
        })
        .await
        .unwrap();
    match r {
        Nfs3Result::Ok(ok) => Ok(made(ok.obj, ok.obj_attributes)),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn mknod(c: &mut Conn, dir: &nfs_fh3, n: &str, what: nfs3::mknoddata3) -> Result<(nfs_fh3, fattr3), nfsstat3> {
    let r = c
        .mknod(&nfs3::MKNOD3args {
            where_: at(dir, n),
            what,
        })
        .await
        .unwrap();
    match r {
        Nfs3Result::Ok(ok) => Ok(made(ok.obj, ok.obj_attributes)),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

fn device(major: u32, minor: u32, m: u32) -> nfs3::devicedata3 {
    nfs3::devicedata3 {
        dev_attributes: mode(m),
        spec: specdata3 {
            specdata1: major,
            specdata2: minor,
        },
    }
}

/// SETATTR; the attributes after it.
async fn setattr(c: &mut Conn, fh: &nfs_fh3, attr: sattr3, guard: Option<nfstime3>) -> Result<fattr3, nfsstat3> {
    let r = c
        .setattr(&nfs3::SETATTR3args {
            object: fh.clone(),
            new_attributes: attr,
            guard: match guard {
                Some(t) => Nfs3Option::Some(t),
                None => Nfs3Option::None,
            },
        })
        .await
        .unwrap();
    match r {
        Nfs3Result::Ok(ok) => match ok.obj_wcc.after {
            Nfs3Option::Some(a) => Ok(a),
            Nfs3Option::None => panic!("SETATTR without attributes after"),
        },
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn readlink(c: &mut Conn, fh: &nfs_fh3) -> Result<String, nfsstat3> {
    let r = c.readlink(&nfs3::READLINK3args { symlink: fh.clone() }).await.unwrap();
    match r {
        Nfs3Result::Ok(ok) => Ok(String::from_utf8(ok.data.0.to_vec()).unwrap()),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn link(c: &mut Conn, file: &nfs_fh3, dir: &nfs_fh3, n: &str) -> nfsstat3 {
    let r = c
        .link(&nfs3::LINK3args {
            file: file.clone(),
            link: at(dir, n),
        })
        .await
        .unwrap();
    status(&r)
}

async fn access(c: &mut Conn, fh: &nfs_fh3, asked: u32) -> u32 {
    c.access(&nfs3::ACCESS3args {
        object: fh.clone(),
        access: asked,
    })
    .await
    .unwrap()
    .unwrap()
    .access
}

async fn write(c: &mut Conn, fh: &nfs_fh3, data: &[u8]) -> nfsstat3 {
    let r = c
        .write(&nfs3::WRITE3args {
            file: fh.clone(),
            offset: 0,
            count: data.len() as u32,
            stable: nfs3::stable_how::FILE_SYNC,
            data: Opaque::owned(data.to_vec()),
        })
        .await
        .unwrap();
    status(&r)
}

async fn read(c: &mut Conn, fh: &nfs_fh3) -> Result<Vec<u8>, nfsstat3> {
    let r = c
        .read(&nfs3::READ3args {
            file: fh.clone(),
            offset: 0,
            count: 1 << 20,
        })
        .await
        .unwrap();
    match r {
        Nfs3Result::Ok(ok) => Ok(ok.data.0.to_vec()),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn remove(c: &mut Conn, dir: &nfs_fh3, n: &str) -> nfsstat3 {
    status(&c.remove(&nfs3::REMOVE3args { object: at(dir, n) }).await.unwrap())
}

async fn rename(c: &mut Conn, dir: &nfs_fh3, from: &str, to: &str) -> nfsstat3 {
    let r = c
        .rename(&nfs3::RENAME3args {
            from: at(dir, from),
            to: at(dir, to),
        })
        .await
        .unwrap();
    status(&r)
}

/// MKNOD arguments of any `ftype3`, which nfs3_client will not encode for the types MKNOD refuses.
struct MknodOfType {
    where_: diropargs3<'static>,
    ftype: u32,
}

impl Pack for MknodOfType {
    fn packed_size(&self) -> usize {
        self.where_.packed_size() + 4
    }

    fn pack(&self, out: &mut impl Write) -> xdr_codec::Result<usize> {
        Ok(self.where_.pack(out)? + self.ftype.pack(out)?)
    }
}

/// The status of a MKNOD of `ftype` (a raw ftype3 value), sent as root.
async fn mknod_of_type(port: u16, dir: &nfs_fh3, n: &str, ftype: u32) -> nfsstat3 {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut rpc = nfs3_client::rpc::RpcClient::new_with_auth(
        TokioIo::new(tcp),
        credential(ROOT.unwrap()),
        opaque_auth::default(),
    );
    let args = MknodOfType {
        where_: at(dir, n),
        ftype,
    };
    let r: nfs3::MKNOD3res = rpc.call(100003, 3, 11, &args).await.unwrap();
    status(&r)
}

/// What `ls -l` shows of an NFS object: kind, mode, owner, size, device and mtime.
fn show(a: &fattr3) -> String {
    format!(
        "{:?} mode {:o} owner {}:{} size {} rdev {}:{} mtime {}.{:09}",
        a.type_, a.mode, a.uid, a.gid, a.size, a.rdev.specdata1, a.rdev.specdata2, a.mtime.seconds, a.mtime.nseconds
    )
}

/// The same of the VirtualFs's attributes (what the FUSE mount reports).
fn show_vfs(a: &Attr) -> String {
    let kind = match a.kind {
        Kind::File => ftype3::NF3REG,
        Kind::Dir => ftype3::NF3DIR,
        Kind::Symlink => ftype3::NF3LNK,
        Kind::Fifo => ftype3::NF3FIFO,
        Kind::Socket => ftype3::NF3SOCK,
        Kind::CharDevice => ftype3::NF3CHR,
        Kind::BlockDevice => ftype3::NF3BLK,
    };
    let t = a.mtime.duration_since(UNIX_EPOCH).unwrap();
    let rdev = libc::dev_t::from(a.rdev);
    format!(
        "{kind:?} mode {:o} owner {}:{} size {} rdev {}:{} mtime {}.{:09}",
        a.perm,
        a.uid,
        a.gid,
        a.size,
        libc::major(rdev),
        libc::minor(rdev),
        t.as_secs(),
        t.subsec_nanos()
    )
}

/// The VirtualFs's attributes of `path`.
async fn vfs_attr(vfs: &VirtualFs, path: &str) -> Attr {
    let mut a = vfs.getattr(ROOT_INO).await.unwrap();
    for part in path.split('/') {
        a = vfs.lookup_as(a.ino, part, Hold::Remembered).await.unwrap();
    }
    a
}

async fn walk(c: &mut Conn, path: &str) -> nfs_fh3 {
    let mut fh = c.root_nfs_fh3();
    for part in path.split('/') {
        fh = lookup(c, &fh, part).await.unwrap_or_else(|s| panic!("{path}: {s:?}"));
    }
    fh
}

#[test]
fn setattr_symlink_readlink_mknod_and_link_as_the_vfs_shows_them() {
    let env = Env::new();
    env.create_dataset("nm1");
    let (server, vfs) = serve(&env, "nm1", &env.write_opts(false));
    let port = server.addr().port();
    env.rt.block_on(async {
        let mut root = connect(port, ROOT).await;
        let mut alice = connect(port, ALICE).await;
        let top = root.root_nfs_fh3();

        // MKDIR takes the mode asked and the caller's ids; root gives the directory to alice.
        let (home, a) = mkdir(&mut root, &top, "home", mode(0o711)).await.unwrap();
        assert_eq!((a.type_, a.mode, a.uid, a.gid), (ftype3::NF3DIR, 0o711, 0, 0));
        let chown = sattr3 {
            mode: Nfs3Option::Some(0o755),
            uid: Nfs3Option::Some(1000),
            gid: Nfs3Option::Some(1000),
            ..Default::default()
        };
        let a = setattr(&mut root, &home, chown, None).await.unwrap();
        assert_eq!((a.mode, a.uid, a.gid), (0o755, 1000, 1000));

        // CREATE, MKDIR, SYMLINK and MKNOD by alice: hers, with the modes asked.
        let (file, a) = create(&mut alice, &home, "f.txt", mode(0o640)).await.unwrap();
        assert_eq!((a.type_, a.mode, a.uid, a.gid), (ftype3::NF3REG, 0o640, 1000, 1000));
        assert_eq!(write(&mut alice, &file, b"hello").await, nfsstat3::NFS3_OK);
        let (_, a) = mkdir(&mut alice, &home, "sub", mode(0o700)).await.unwrap();
        assert_eq!((a.type_, a.mode, a.uid), (ftype3::NF3DIR, 0o700, 1000));
        let link_attr = sattr3 {
            mtime: set_mtime::SET_TO_CLIENT_TIME(time(7, 0)),
            ..Default::default()
        };
        let (ln, a) = symlink(&mut alice, &home, "ln", "f.txt", link_attr).await.unwrap();
        assert_eq!(
            (a.type_, a.mode, a.uid, a.gid, a.size, a.mtime),
            (ftype3::NF3LNK, 0o777, 1000, 1000, 5, time(7, 0)),
            "a symlink is 0777, its size its target's length, its mtime the one asked"
        );
        assert_eq!(readlink(&mut alice, &ln).await.unwrap(), "f.txt");
        assert_eq!(readlink(&mut alice, &file).await, Err(nfsstat3::NFS3ERR_INVAL));
        assert_eq!(readlink(&mut alice, &home).await, Err(nfsstat3::NFS3ERR_INVAL));
        let (_, a) = mknod(&mut alice, &home, "fifo", nfs3::mknoddata3::NF3FIFO(mode(0o640)))
            .await
            .unwrap();
        assert_eq!((a.type_, a.mode, a.uid), (ftype3::NF3FIFO, 0o640, 1000));
        let (_, a) = mknod(&mut alice, &home, "sock", nfs3::mknoddata3::NF3SOCK(mode(0o600)))
            .await
            .unwrap();
        assert_eq!((a.type_, a.mode, a.uid), (ftype3::NF3SOCK, 0o600, 1000));
        // Device nodes: root only (CAP_MKNOD), Linux's numbers only.
        let r = mknod(&mut alice, &home, "null", nfs3::mknoddata3::NF3CHR(device(1, 3, 0o666))).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM));
        let (_, a) = mknod(&mut root, &home, "null", nfs3::mknoddata3::NF3CHR(device(1, 3, 0o666)))
            .await
            .unwrap();
        assert_eq!(
            (a.type_, a.mode, a.uid, a.rdev.specdata1, a.rdev.specdata2),
            (ftype3::NF3CHR, 0o666, 0, 1, 3)
        );
        let (_, a) = mknod(
            &mut root,
            &home,
            "disk",
            nfs3::mknoddata3::NF3BLK(device(259, 70_000, 0o660)),
        )
        .await
        .unwrap();
        assert_eq!(
            (a.type_, a.mode, a.rdev.specdata1, a.rdev.specdata2),
            (ftype3::NF3BLK, 0o660, 259, 70_000)
        );
        let r = mknod(
            &mut root,
            &home,
            "big",
            nfs3::mknoddata3::NF3CHR(device(4096, 0, 0o600)),
        )
        .await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_INVAL), "a major number Linux has not");
        let r = mknod(&mut root, &home, "fifo", nfs3::mknoddata3::NF3FIFO(mode(0o600))).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_EXIST));
        // A regular file, a directory or a symlink is not MKNOD's to make.
        for (ftype, what) in [(1, "NF3REG"), (2, "NF3DIR"), (5, "NF3LNK")] {
            assert_eq!(
                mknod_of_type(port, &home, "x", ftype).await,
                nfsstat3::NFS3ERR_BADTYPE,
                "{what}"
            );
        }
        assert_eq!(lookup(&mut root, &home, "x").await, Err(nfsstat3::NFS3ERR_NOENT));

        // SETATTR by the owner: mode, atime and mtime as given; ctime moves; the guard is checked.
        let before = getattr(&mut alice, &file).await;
        let times = sattr3 {
            mode: Nfs3Option::Some(0o604),
            atime: set_atime::SET_TO_CLIENT_TIME(time(1_000_000_005, 7)),
            mtime: set_mtime::SET_TO_CLIENT_TIME(time(981_173_106, 123_456_789)),
            ..Default::default()
        };
        let a = setattr(&mut alice, &file, times, Some(before.ctime)).await.unwrap();
        assert_eq!(
            (a.mode, a.atime, a.mtime),
            (0o604, time(1_000_000_005, 7), time(981_173_106, 123_456_789))
        );
        assert!(
            (a.ctime.seconds, a.ctime.nseconds) > (before.ctime.seconds, before.ctime.nseconds),
            "ctime moves"
        );
        let r = setattr(&mut alice, &file, mode(0o600), Some(time(1, 0))).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_NOT_SYNC), "a guard with another ctime");
        assert_eq!(getattr(&mut alice, &file).await.mode, 0o604, "NOT_SYNC changes nothing");
        let sized = sattr3 {
            size: Nfs3Option::Some(2),
            ..Default::default()
        };
        let a = setattr(&mut alice, &file, sized, None).await.unwrap();
        assert_eq!((a.size, a.mode), (2, 0o604));
        let a = setattr(
            &mut alice,
            &file,
            sattr3 {
                mtime: set_mtime::SET_TO_CLIENT_TIME(time(981_173_106, 123_456_789)),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
        assert_eq!(a.mtime, time(981_173_106, 123_456_789));

        // LINK: a second name of the same file (one fileid, two links, one content); the usual
        // checks first.
        assert_eq!(link(&mut alice, &file, &home, "hard").await, nfsstat3::NFS3_OK);
        let hard = lookup(&mut alice, &home, "hard").await.unwrap();
        let (a, b) = (getattr(&mut alice, &file).await, getattr(&mut alice, &hard).await);
        assert_eq!(
            (a.fileid, a.nlink, b.nlink, b.mode, b.size),
            (b.fileid, 2, 2, a.mode, a.size)
        );
        assert_eq!(
            read(&mut alice, &hard).await.unwrap(),
            read(&mut alice, &file).await.unwrap()
        );
        assert_eq!(remove(&mut alice, &home, "hard").await, nfsstat3::NFS3_OK);
        assert_eq!(getattr(&mut alice, &file).await.nlink, 1);
        assert_eq!(link(&mut alice, &file, &home, "sub").await, nfsstat3::NFS3ERR_EXIST);
        assert_eq!(link(&mut alice, &file, &file, "hard").await, nfsstat3::NFS3ERR_NOTDIR);
        let (gone, _) = mkdir(&mut alice, &home, "gone", mode(0o755)).await.unwrap();
        assert_eq!(
            status(
                &alice
                    .rmdir(&nfs3::RMDIR3args {
                        object: at(&home, "gone")
                    })
                    .await
                    .unwrap()
            ),
            nfsstat3::NFS3_OK
        );
        assert_eq!(link(&mut alice, &file, &gone, "hard").await, nfsstat3::NFS3ERR_NOENT);
        assert_eq!(lookup(&mut alice, &home, "hard").await, Err(nfsstat3::NFS3ERR_NOENT));

        // The VirtualFs (and so the FUSE mount) shows the same of every entry.
        for n in ["f.txt", "sub", "ln", "fifo", "sock", "null", "disk"] {
            let fh = lookup(&mut alice, &home, n).await.unwrap();
            let over_nfs = show(&getattr(&mut alice, &fh).await);
            assert_eq!(over_nfs, show_vfs(&vfs_attr(&vfs, &format!("home/{n}")).await), "{n}");
        }
        let ln_ino = vfs_attr(&vfs, "home/ln").await.ino;
        assert_eq!(vfs.readlink(ln_ino).await.unwrap(), "f.txt");
        assert_eq!(read(&mut alice, &file).await.unwrap(), b"he");

        root.unmount().await.unwrap();
        alice.unmount().await.unwrap();
    });
}

#[test]
fn callers_other_than_root_get_the_permission_errors_of_a_linux_server() {
    let env = Env::new();
    env.create_dataset("nm2");
    // The mount's owner is 1234: its root directory is 1234's, and AUTH_NONE stands for 1234.
    let mut opts = env.write_opts(false);
    opts.uid = 1234;
    opts.gid = 1234;
    let (server, _vfs) = serve(&env, "nm2", &opts);
    let port = server.addr().port();
    env.rt.block_on(async {
        let mut root = connect(port, ROOT).await;
        let mut alice = connect(port, ALICE).await;
        let mut bob = connect(port, BOB).await;
        let mut anon = connect(port, None).await;
        let top = root.root_nfs_fh3();
        assert_eq!(getattr(&mut root, &top).await.uid, 1234);

        // Nobody but the owner and root adds names to a 0755 directory.
        let r = create(&mut bob, &top, "b.txt", mode(0o644)).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ACCES), "create");
        let r = mkdir(&mut bob, &top, "d", mode(0o755)).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ACCES), "mkdir");
        let r = symlink(&mut bob, &top, "l", "x", sattr3::default()).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ACCES), "symlink");
        let r = mknod(&mut bob, &top, "p", nfs3::mknoddata3::NF3FIFO(mode(0o644))).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ACCES), "mknod");
        let (_, a) = create(&mut anon, &top, "anon.txt", sattr3::default()).await.unwrap();
        assert_eq!(
            (a.uid, a.gid, a.mode),
            (1234, 1234, 0o644),
            "AUTH_NONE: the mount's owner"
        );

        // A sticky world-writable directory, as /tmp.
        let (tmp, a) = mkdir(&mut root, &top, "tmp", mode(0o1777)).await.unwrap();
        assert_eq!((a.mode, a.uid), (0o1777, 0));
        let (file, a) = create(&mut alice, &tmp, "a.txt", mode(0o644)).await.unwrap();
        assert_eq!((a.uid, a.gid), (1000, 1000));

        // SETATTR of alice's file by bob.
        let r = setattr(&mut bob, &file, mode(0o666), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "chmod by another user");
        let owner = |uid: Option<u32>, gid: Option<u32>| sattr3 {
            uid: uid.map_or(Nfs3Option::None, Nfs3Option::Some),
            gid: gid.map_or(Nfs3Option::None, Nfs3Option::Some),
            ..Default::default()
        };
        let r = setattr(&mut bob, &file, owner(Some(2000), None), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "chown by another user");
        let r = setattr(&mut bob, &file, owner(None, Some(2000)), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "chgrp by another user");
        let given = sattr3 {
            mtime: set_mtime::SET_TO_CLIENT_TIME(time(5, 0)),
            ..Default::default()
        };
        let now = sattr3 {
            atime: set_atime::SET_TO_SERVER_TIME,
            mtime: set_mtime::SET_TO_SERVER_TIME,
            ..Default::default()
        };
        let r = setattr(&mut bob, &file, given.clone(), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "utimes to given times");
        let r = setattr(&mut bob, &file, now.clone(), None).await;
        assert_eq!(
            r.err(),
            Some(nfsstat3::NFS3ERR_ACCES),
            "utimes(NULL) without write permission"
        );
        let truncate = sattr3 {
            size: Nfs3Option::Some(0),
            ..Default::default()
        };
        let r = setattr(&mut bob, &file, truncate, None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ACCES), "truncate");
        assert_eq!(write(&mut bob, &file, b"x").await, nfsstat3::NFS3ERR_ACCES, "write");
        assert_eq!(read(&mut bob, &file).await, Ok(Vec::new()), "0644 is readable");
        let all = ACCESS_READ | ACCESS_MODIFY | ACCESS_EXTEND | ACCESS_EXECUTE;
        assert_eq!(access(&mut bob, &file, all).await, ACCESS_READ);
        assert_eq!(
            access(&mut alice, &file, all).await,
            ACCESS_READ | ACCESS_MODIFY | ACCESS_EXTEND
        );

        // By alice, the owner: chown only to herself, chgrp only to her groups.
        let r = setattr(&mut alice, &file, owner(Some(2000), None), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "chown to another user");
        assert!(setattr(&mut alice, &file, owner(Some(1000), None), None).await.is_ok());
        let r = setattr(&mut alice, &file, owner(None, Some(2000)), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "chgrp to a group she is not in");
        let a = setattr(&mut alice, &file, owner(None, Some(4000)), None).await.unwrap();
        assert_eq!(a.gid, 4000);
        let a = setattr(&mut alice, &file, mode(0o6755), None).await.unwrap();
        assert_eq!(a.mode, 0o6755, "setuid and setgid by the owner, in the file's group");
        assert!(setattr(&mut alice, &file, given.clone(), None).await.is_ok());
        // A chown clears setuid and setgid, as Linux does.
        let a = setattr(&mut root, &file, owner(Some(1000), None), None).await.unwrap();
        assert_eq!(a.mode, 0o755);
        // Writable for all: bob may write, truncate and touch it, still not set given times.
        setattr(&mut alice, &file, mode(0o666), None).await.unwrap();
        assert_eq!(write(&mut bob, &file, b"bob").await, nfsstat3::NFS3_OK);
        assert!(setattr(&mut bob, &file, now.clone(), None).await.is_ok());
        let r = setattr(&mut bob, &file, given.clone(), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM));
        assert_eq!(
            getattr(&mut bob, &file).await.uid,
            1000,
            "writing does not change the owner"
        );
        setattr(&mut alice, &file, mode(0o600), None).await.unwrap();
        assert_eq!(read(&mut bob, &file).await, Err(nfsstat3::NFS3ERR_ACCES), "0600");
        assert_eq!(read(&mut alice, &file).await.unwrap(), b"bob");

        // The sticky bit: only the owner (or the directory's, or root) removes or renames.
        assert_eq!(remove(&mut bob, &tmp, "a.txt").await, nfsstat3::NFS3ERR_PERM);
        assert_eq!(rename(&mut bob, &tmp, "a.txt", "b.txt").await, nfsstat3::NFS3ERR_PERM);
        let (_, a) = create(&mut bob, &tmp, "b.txt", mode(0o644)).await.unwrap();
        assert_eq!((a.uid, a.gid), (2000, 2000));
        assert_eq!(remove(&mut alice, &tmp, "b.txt").await, nfsstat3::NFS3ERR_PERM);
        assert_eq!(
            rename(&mut alice, &tmp, "a.txt", "b.txt").await,
            nfsstat3::NFS3ERR_PERM,
            "replacing bob's file"
        );
        assert_eq!(remove(&mut bob, &tmp, "b.txt").await, nfsstat3::NFS3_OK);
        assert_eq!(rename(&mut alice, &tmp, "a.txt", "c.txt").await, nfsstat3::NFS3_OK);
        assert_eq!(remove(&mut alice, &tmp, "c.txt").await, nfsstat3::NFS3_OK);
        // LINK is refused on permission first, as knfsd does.
        assert_eq!(link(&mut bob, &file, &top, "hard").await, nfsstat3::NFS3ERR_ACCES);

        for c in [root, alice, bob, anon] {
            c.unmount().await.unwrap();
        }
    });
}

#[test]
fn a_read_only_mount_answers_rofs_and_strict_mode_perm() {
    let env = Env::new();
    env.create_dataset("nm3");
    env.remote_commit("nm3", "a.txt", "from the hub");
    let (server, _vfs) = serve(&env, "nm3", &VfsOptions::default());
    let port = server.addr().port();
    env.rt.block_on(async {
        let mut bob = connect(port, BOB).await;
        let top = bob.root_nfs_fh3();
        let file = walk(&mut bob, "a.txt").await;
        assert_eq!(getattr(&mut bob, &file).await.mode, 0o444);
        // Read-only comes before any permission check.
        let r = setattr(&mut bob, &file, mode(0o600), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ROFS), "setattr");
        let r = symlink(&mut bob, &top, "l", "a.txt", sattr3::default()).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ROFS), "symlink");
        let r = mknod(&mut bob, &top, "p", nfs3::mknoddata3::NF3FIFO(mode(0o644))).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ROFS), "mknod");
        let r = mknod(&mut bob, &top, "n", nfs3::mknoddata3::NF3CHR(device(1, 3, 0o644))).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ROFS), "mknod of a device");
        assert_eq!(mknod_of_type(port, &top, "x", 1).await, nfsstat3::NFS3ERR_BADTYPE);
        assert_eq!(
            link(&mut bob, &file, &top, "hard").await,
            nfsstat3::NFS3ERR_ROFS,
            "link"
        );
        let r = create(&mut bob, &top, "new.txt", mode(0o644)).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_ROFS), "create");
        assert_eq!(readlink(&mut bob, &file).await, Err(nfsstat3::NFS3ERR_INVAL));
        // ACCESS grants what is asked, as before (libnfs opens read-write); changes are ROFS.
        assert_eq!(
            access(&mut bob, &file, ACCESS_READ | ACCESS_MODIFY).await,
            ACCESS_READ | ACCESS_MODIFY
        );
        assert_eq!(read(&mut bob, &file).await.unwrap(), b"from the hub");
        bob.unmount().await.unwrap();
    });
    drop(server);

    // --posix strict: what the Hub cannot store is refused with NFS3ERR_PERM, as FUSE's EPERM.
    env.create_dataset("nm4");
    let mut opts = env.write_opts(false);
    if let Some(w) = opts.write.as_mut() {
        w.posix_strict = true;
    }
    let (server, _vfs) = serve(&env, "nm4", &opts);
    let port = server.addr().port();
    env.rt.block_on(async {
        let mut root = connect(port, ROOT).await;
        let top = root.root_nfs_fh3();
        let (file, a) = create(&mut root, &top, "f.txt", mode(0o600)).await.unwrap();
        assert_eq!((a.mode, a.uid, a.gid), (0o644, 0, 0), "strict keeps the mount's mode");
        let (_, a) = mkdir(&mut root, &top, "d", mode(0o700)).await.unwrap();
        assert_eq!(a.mode, 0o755);
        let r = setattr(&mut root, &file, mode(0o600), None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "chmod to another mode");
        assert!(
            setattr(&mut root, &file, mode(0o644), None).await.is_ok(),
            "chmod to its mode"
        );
        let chown = sattr3 {
            uid: Nfs3Option::Some(1234),
            ..Default::default()
        };
        let r = setattr(&mut root, &file, chown, None).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "chown");
        let touch = sattr3 {
            mtime: set_mtime::SET_TO_CLIENT_TIME(time(5, 0)),
            ..Default::default()
        };
        assert_eq!(setattr(&mut root, &file, touch, None).await.unwrap().mtime, time(5, 0));
        let r = symlink(&mut root, &top, "l", "f.txt", sattr3::default()).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "symlink");
        let r = mknod(&mut root, &top, "p", nfs3::mknoddata3::NF3FIFO(mode(0o644))).await;
        assert_eq!(r.err(), Some(nfsstat3::NFS3ERR_PERM), "mknod");
        assert_eq!(
            link(&mut root, &file, &top, "hard").await,
            nfsstat3::NFS3ERR_PERM,
            "link"
        );
        root.unmount().await.unwrap();
    });
}

/// Everything the test makes, as `ls -l` and `readlink` show it over NFS.
async fn listing(c: &mut Conn) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for n in ["data.bin", "private", "ln", "fifo", "null", "sock"] {
        let fh = walk(c, n).await;
        let a = getattr(c, &fh).await;
        let mut line = show(&a);
        if a.type_ == ftype3::NF3LNK {
            line.push_str(&format!(" -> {}", readlink(c, &fh).await.unwrap()));
        }
        out.push((n.to_string(), line));
    }
    out
}

#[test]
fn special_files_stay_local_and_everything_survives_a_restart_of_the_server() {
    let env = Env::new();
    env.create_dataset("nm5");
    let opts = env.write_opts(false);
    let data = write_env::pseudo(100_000, 5);
    let (server, vfs) = serve(&env, "nm5", &opts);
    let before = env.rt.block_on(async {
        let mut c = connect(server.addr().port(), ALICE).await;
        let mut root = connect(server.addr().port(), ROOT).await;
        let top = c.root_nfs_fh3();
        // Alice may add names to the root once root lets her.
        setattr(&mut root, &top, mode(0o777), None).await.unwrap();
        let (file, _) = create(&mut c, &top, "data.bin", mode(0o600)).await.unwrap();
        assert_eq!(write(&mut c, &file, &data).await, nfsstat3::NFS3_OK);
        let stamp = sattr3 {
            atime: set_atime::SET_TO_CLIENT_TIME(time(1_500_000_000, 1)),
            mtime: set_mtime::SET_TO_CLIENT_TIME(time(1_234_567_890, 987_654_321)),
            ..Default::default()
        };
        setattr(&mut c, &file, stamp, None).await.unwrap();
        mkdir(&mut c, &top, "private", mode(0o700)).await.unwrap();
        symlink(&mut c, &top, "ln", "data.bin", sattr3::default())
            .await
            .unwrap();
        mknod(&mut c, &top, "fifo", nfs3::mknoddata3::NF3FIFO(mode(0o640)))
            .await
            .unwrap();
        mknod(&mut root, &top, "null", nfs3::mknoddata3::NF3CHR(device(1, 3, 0o666)))
            .await
            .unwrap();
        mknod(&mut c, &top, "sock", nfs3::mknoddata3::NF3SOCK(mode(0o600)))
            .await
            .unwrap();
        let before = listing(&mut c).await;
        let want = [
            (
                "data.bin",
                "NF3REG mode 600 owner 1000:1000 size 100000 rdev 0:0 mtime 1234567890.987654321",
            ),
            ("private", "NF3DIR mode 700 owner 1000:1000"),
            ("ln", "NF3LNK mode 777 owner 1000:1000 size 8"),
            ("fifo", "NF3FIFO mode 640 owner 1000:1000"),
            ("null", "NF3CHR mode 666 owner 0:0 size 0 rdev 1:3"),
            ("sock", "NF3SOCK mode 600 owner 1000:1000"),
        ];
        for ((n, got), (wn, prefix)) in before.iter().zip(want) {
            assert_eq!(n, wn);
            assert!(got.starts_with(prefix), "{n}: {got} (wanted {prefix}…)");
        }
        assert!(before[2].1.ends_with(" -> data.bin"), "{}", before[2].1);
        c.unmount().await.unwrap();
        root.unmount().await.unwrap();
        before
    });

    // Stopped as `hubfs serve-nfs` stops (write handles closed, pending changes committed): the
    // Hub has the regular file and nothing else.
    server.stop();
    env.rt.block_on(vfs.sync_all()).unwrap();
    assert_eq!(env.rt.block_on(vfs.drain(Duration::from_secs(20))), 0);
    let hub = env.hub_files("nm5");
    assert_eq!(hub.keys().collect::<Vec<_>>(), ["data.bin"]);
    assert_eq!(hub["data.bin"], (data.len() as u64, sha(&data)));
    drop(server);
    drop(vfs);

    // Another server on the same cache dir shows the same modes, owners, times and entries.
    let (server, vfs) = serve(&env, "nm5", &opts);
    env.rt.block_on(async {
        let mut c = connect(server.addr().port(), ALICE).await;
        assert_eq!(listing(&mut c).await, before, "after a restart");
        let file = walk(&mut c, "data.bin").await;
        assert_eq!(read(&mut c, &file).await.unwrap(), data);
        let ln = walk(&mut c, "ln").await;
        assert_eq!(readlink(&mut c, &ln).await.unwrap(), "data.bin");
        c.unmount().await.unwrap();
    });
    let report = vfs.status_report().unwrap();
    assert_eq!(
        report.local_only_entries, 4,
        "ln, fifo, null and sock exist only in the mount"
    );
    assert_eq!(env.hub_files("nm5").len(), 1, "still nothing but data.bin on the Hub");
}
