//! The NFSv3 frontend against an in-process local Hub, driven by a userspace NFSv3 client (the
//! kernel here has none): tree, attributes and bytes equal the Hub's, readdir cookies over more than
//! 1,000 entries, NFS3ERR_ROFS for every mutation, stale handles after a restart, and the same answers
//! as the FUSE mount of the same repo.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;
use std::time::Duration;

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::LocalHub;
use hubfs::nfs::WriteLimits;
use hubfs::nfs::server::NfsServer;
use hubfs::process::session::{MountRequest, open_vfs};
use hubfs::vfs::VfsOptions;
use nfs3_client::nfs3_types::nfs3::{
    self, Nfs3Option, Nfs3Result, READ3args, READDIR3args, READDIRPLUS3args, diropargs3, fattr3, filename3, ftype3,
    nfs_fh3, nfsstat3,
};
use nfs3_client::nfs3_types::xdr_codec::Opaque;

mod common;

type Conn = common::NfsConn;

struct Env {
    rt: tokio::runtime::Runtime,
    hub: Option<LocalHub>,
}

impl Env {
    fn new() -> Env {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let hub = rt.block_on(LocalHub::start_temp(true)).expect("local hub");
        Env { rt, hub: Some(hub) }
    }

    fn hub(&self) -> &LocalHub {
        self.hub.as_ref().unwrap()
    }

    fn client_cfg(&self) -> HubClientConfig {
        HubClientConfig {
            endpoint: self.hub().endpoint().to_string(),
            token: self.hub().write_token(),
            timeout: Duration::from_secs(10),
            max_retries: 1,
            patience: std::time::Duration::ZERO,
            ..HubClientConfig::from_env()
        }
    }

    /// Opens `spec` and serves it on a free loopback port.
    fn serve(&self, spec: &str) -> (NfsServer, String) {
        let opened = open_vfs(spec, None, &self.client_cfg(), &VfsOptions::default(), &self.rt).expect("open repo");
        let server = self
            .rt
            .block_on(NfsServer::start(opened.vfs.clone(), "127.0.0.1:0".parse().unwrap()))
            .expect("nfs server");
        (server, opened.commit)
    }

    fn listing(&self, spec: &str, commit: &str) -> Vec<TreeEntry> {
        let client = HubClient::new(self.client_cfg()).unwrap();
        let (r, _, _) = RepoRef::parse(spec).unwrap();
        self.rt.block_on(client.list_tree_recursive(&r, commit, "")).unwrap()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(h) = self.hub.take() {
            self.rt.block_on(h.stop());
        }
    }
}

async fn connect(server: &NfsServer) -> Conn {
    common::nfs_mount(server.addr().port()).await.unwrap()
}

/// UMNT, which returns void: any error is a defect of the front (nfsserve's answered it with a
/// status word the protocol does not have).
async fn finish(c: Conn) {
    if let Err(e) = c.unmount().await {
        panic!("UMNT failed: {e:?}");
    }
}

fn status<T, E>(r: &Nfs3Result<T, E>) -> nfsstat3 {
    match r {
        Nfs3Result::Ok(_) => nfsstat3::NFS3_OK,
        Nfs3Result::Err((s, _)) => *s,
    }
}

async fn lookup_raw(c: &mut Conn, dir: &nfs_fh3, name: &[u8]) -> Result<nfs_fh3, nfsstat3> {
    let r = c
        .lookup(&nfs3::LOOKUP3args {
            what: diropargs3 {
                dir: dir.clone(),
                name: filename3(Opaque::owned(name.to_vec())),
            },
        })
        .await
        .expect("lookup rpc");
    match r {
        Nfs3Result::Ok(ok) => Ok(ok.object),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

/// Walks `path` from the root.
async fn walk(c: &mut Conn, path: &str) -> Result<nfs_fh3, nfsstat3> {
    let mut fh = c.root_nfs_fh3();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        fh = lookup_raw(c, &fh, part.as_bytes()).await?;
    }
    Ok(fh)
}

async fn getattr(c: &mut Conn, fh: &nfs_fh3) -> Result<fattr3, nfsstat3> {
    match c.getattr(&fh.clone().into()).await.expect("getattr rpc") {
        Nfs3Result::Ok(ok) => Ok(ok.obj_attributes),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

/// `count` bytes at `offset` (one READ) and the EOF flag.
async fn read_at(c: &mut Conn, fh: &nfs_fh3, offset: u64, count: u32) -> (Vec<u8>, bool) {
    let r = c
        .read(&READ3args {
            file: fh.clone(),
            offset,
            count,
        })
        .await
        .expect("read rpc");
    match r {
        Nfs3Result::Ok(ok) => {
            // Every READ reply carries the file's attributes; its end of file agrees with them.
            let Nfs3Option::Some(attr) = ok.file_attributes else {
                panic!("READ at {offset} without attributes");
            };
            assert_eq!(attr.type_, ftype3::NF3REG);
            let end = offset + ok.data.len() as u64;
            assert!(end <= attr.size, "READ past the size its reply gives");
            assert_eq!(ok.eof, end >= attr.size, "eof at {offset} vs size {}", attr.size);
            (ok.data.to_vec(), ok.eof)
        }
        Nfs3Result::Err((s, _)) => panic!("read at {offset}: {s:?}"),
    }
}

/// The whole file, read in 1 MiB requests until EOF.
async fn read_all(c: &mut Conn, fh: &nfs_fh3) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let (data, eof) = read_at(c, fh, out.len() as u64, 1 << 20).await;
        out.extend_from_slice(&data);
        if eof {
            return out;
        }
        assert!(!data.is_empty(), "empty read before EOF at {}", out.len());
    }
}

/// Every name of a directory through READDIRPLUS pages of at most `maxcount` bytes; also checks
/// that each entry carries attributes and a handle. Returns (names, pages).
async fn readdirplus_all(c: &mut Conn, dir: &nfs_fh3, maxcount: u32) -> (Vec<String>, usize) {
    let (mut names, mut cookie, mut verf, mut pages) = (Vec::new(), 0u64, nfs3::cookieverf3::default(), 0);
    loop {
        let r = c
            .readdirplus(&READDIRPLUS3args {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                dircount: maxcount,
                maxcount,
            })
            .await
            .expect("readdirplus rpc")
            .unwrap();
        pages += 1;
        verf = r.cookieverf;
        for e in r.reply.entries.into_inner() {
            assert!(
                matches!(e.name_attributes, Nfs3Option::Some(_)),
                "entry without attributes"
            );
            assert!(matches!(e.name_handle, Nfs3Option::Some(_)), "entry without a handle");
            names.push(String::from_utf8(e.name.0.to_vec()).unwrap());
            cookie = e.cookie;
        }
        if r.reply.eof {
            return (names, pages);
        }
        assert!(pages < 100_000, "readdirplus never ends");
    }
}

async fn readdir_all(c: &mut Conn, dir: &nfs_fh3, count: u32) -> Vec<String> {
    let (mut names, mut cookie) = (Vec::new(), 0u64);
    loop {
        let r = c
            .readdir(&READDIR3args {
                dir: dir.clone(),
                cookie,
                cookieverf: nfs3::cookieverf3::default(),
                count,
            })
            .await
            .expect("readdir rpc")
            .unwrap();
        for e in r.reply.entries.into_inner() {
            names.push(String::from_utf8(e.name.0.to_vec()).unwrap());
            cookie = e.cookie;
        }
        if r.reply.eof {
            return names;
        }
    }
}

#[test]
fn model_over_nfs_equals_the_hub() {
    let env = Env::new();
    let (server, commit) = env.serve("demo/tiny-model");
    let listing = env.listing("demo/tiny-model", &commit);
    env.rt.block_on(async {
        let mut c = connect(&server).await;
        let mut files = 0;
        for e in &listing {
            let TreeEntry::File {
                path,
                size,
                oid,
                lfs_sha256,
                ..
            } = e
            else {
                continue;
            };
            let fh = walk(&mut c, path).await.expect(path);
            let a = getattr(&mut c, &fh).await.unwrap();
            assert_eq!(a.size, *size, "{path} size");
            assert!(matches!(a.type_, ftype3::NF3REG));
            assert_eq!(a.mode & 0o777, 0o444, "{path} mode");
            let data = read_all(&mut c, &fh).await;
            match lfs_sha256 {
                Some(sha) => assert_eq!(&common::sha256_hex(&data), sha, "{path} sha256"),
                None => assert_eq!(&hubfs::local_hub::model::git_blob_oid(&data), oid, "{path} git oid"),
            }
            files += 1;
        }
        assert_eq!(files, 5);

        // Odd offsets and lengths across 8 MiB cache blocks, and EOF flags.
        let expected = hubfs::local_hub::seed::demo_safetensors();
        let fh = walk(&mut c, "model.safetensors").await.unwrap();
        let len = expected.len() as u64;
        for (off, count) in [
            (1u64, 4095u32),
            ((8 << 20) - 3, 7),
            ((16 << 20) + 12345, 1 << 20),
            (len - 5, 100),
            (len, 10),
        ] {
            let (data, eof) = read_at(&mut c, &fh, off, count).await;
            let want = &expected[off as usize..((off + count as u64).min(len)) as usize];
            assert_eq!(data.len(), want.len(), "length at {off}");
            assert!(data == want, "bytes at {off}");
            assert_eq!(eof, off + count as u64 >= len, "eof at {off}");
        }

        // Errors: missing, child of a file, too long, READ of a directory, READLINK.
        let root = c.root_nfs_fh3();
        assert_eq!(lookup_raw(&mut c, &root, b"nope").await, Err(nfsstat3::NFS3ERR_NOENT));
        assert_eq!(walk(&mut c, "config.json/x").await, Err(nfsstat3::NFS3ERR_NOTDIR));
        assert_eq!(
            lookup_raw(&mut c, &root, &[b'x'; 256]).await,
            Err(nfsstat3::NFS3ERR_NAMETOOLONG)
        );
        let r = c
            .read(&READ3args {
                file: root.clone(),
                offset: 0,
                count: 10,
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ISDIR);

        // FSINFO: 1 MiB transfers, files far beyond 128 GiB.
        let info = c
            .fsinfo(&nfs3::FSINFO3args { fsroot: root.clone() })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(info.rtmax, 1 << 20);
        assert!(info.maxfilesize >= 1 << 40, "maxfilesize {}", info.maxfilesize);

        finish(c).await;
    });
}

#[test]
fn every_mutation_is_rofs() {
    let env = Env::new();
    let (server, _) = env.serve("demo/tiny-model");
    env.rt.block_on(async {
        let mut c = connect(&server).await;
        let root = c.root_nfs_fh3();
        let cfg = walk(&mut c, "config.json").await.unwrap();
        let name = |s: &str| filename3(Opaque::owned(s.as_bytes().to_vec()));
        let w = c
            .write(&nfs3::WRITE3args {
                file: cfg.clone(),
                offset: 0,
                count: 3,
                stable: nfs3::stable_how::FILE_SYNC,
                data: Opaque::owned(b"abc".to_vec()),
            })
            .await
            .unwrap();
        assert_eq!(status(&w), nfsstat3::NFS3ERR_ROFS, "write");
        let r = c
            .create(&nfs3::CREATE3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: name("new.txt"),
                },
                how: nfs3::createhow3::UNCHECKED(nfs3::sattr3::default()),
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "create");
        let r = c
            .mkdir(&nfs3::MKDIR3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: name("d"),
                },
                attributes: nfs3::sattr3::default(),
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "mkdir");
        let r = c
            .remove(&nfs3::REMOVE3args {
                object: diropargs3 {
                    dir: root.clone(),
                    name: name("config.json"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "remove");
        let r = c
            .rename(&nfs3::RENAME3args {
                from: diropargs3 {
                    dir: root.clone(),
                    name: name("config.json"),
                },
                to: diropargs3 {
                    dir: root.clone(),
                    name: name("c2.json"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "rename");
        let r = c
            .setattr(&nfs3::SETATTR3args {
                object: cfg.clone(),
                new_attributes: nfs3::sattr3 {
                    mode: Nfs3Option::Some(0o600),
                    ..Default::default()
                },
                guard: Nfs3Option::None,
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "setattr");
        let r = c
            .symlink(&nfs3::SYMLINK3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: name("new.txt"),
                },
                symlink: nfs3::symlinkdata3 {
                    symlink_attributes: nfs3::sattr3::default(),
                    symlink_data: nfs3::nfspath3(Opaque::borrowed(b"config.json")),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "symlink");
        let r = c
            .link(&nfs3::LINK3args {
                file: cfg.clone(),
                link: diropargs3 {
                    dir: root.clone(),
                    name: name("new.txt"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "link");
        let r = c
            .mknod(&nfs3::MKNOD3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: name("new.txt"),
                },
                what: nfs3::mknoddata3::NF3FIFO(nfs3::sattr3::default()),
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "mknod");
        // A read-only mount has no room, as its FUSE statfs says; names are at most 255 bytes.
        let r = c
            .fsstat(&nfs3::FSSTAT3args { fsroot: root.clone() })
            .await
            .unwrap()
            .unwrap();
        assert_eq!((r.tbytes, r.fbytes, r.abytes), (0, 0, 0));
        let r = c
            .pathconf(&nfs3::PATHCONF3args { object: cfg.clone() })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.name_max, 255);
        assert!(r.no_trunc && r.case_preserving && !r.case_insensitive);
        // Nothing changed.
        assert_eq!(
            lookup_raw(&mut c, &root, b"new.txt").await,
            Err(nfsstat3::NFS3ERR_NOENT)
        );
        assert!(walk(&mut c, "config.json").await.is_ok());
        finish(c).await;
    });
}

#[test]
fn readdir_cookies_over_a_large_directory_and_plain_lfs() {
    let env = Env::new();
    let (server, commit) = env.serve("datasets/demo/tiny-dataset");
    let listing = env.listing("datasets/demo/tiny-dataset", &commit);
    let mut want: Vec<String> = listing
        .iter()
        .filter_map(|e| e.path().strip_prefix("data/many/").map(str::to_string))
        .collect();
    want.sort();
    assert!(
        want.len() > 1000,
        "the demo dataset has {} entries in data/many",
        want.len()
    );
    env.rt.block_on(async {
        let mut c = connect(&server).await;
        let many = walk(&mut c, "data/many").await.unwrap();

        // Small pages force many round trips; every entry must come exactly once, in order.
        let (names, pages) = readdirplus_all(&mut c, &many, 4096).await;
        assert!(pages > 10, "only {pages} pages");
        let mut got: Vec<String> = names.into_iter().filter(|n| n != "." && n != "..").collect();
        let listed_in_order = got.clone();
        got.sort();
        assert_eq!(listed_in_order, got, "entries out of order across pages");
        assert_eq!(got, want, "readdirplus of data/many");

        // Plain READDIR, twice: a finished listing leaves nothing behind for the next one.
        for round in 0..2 {
            let names = readdir_all(&mut c, &many, 2048).await;
            let mut got: Vec<String> = names.into_iter().filter(|n| n != "." && n != "..").collect();
            got.sort();
            assert_eq!(got, want, "readdir of data/many, round {round}");
        }

        // Two plain READDIR listings of the same directory, interleaved page by page on two
        // connections: each follows its own cookies.
        let mut c2 = connect(&server).await;
        let many2 = walk(&mut c2, "data/many").await.unwrap();
        let (mut a, mut b) = ((Vec::new(), 0u64, false), (Vec::new(), 0u64, false));
        while !(a.2 && b.2) {
            for (conn, dir, st) in [(&mut c, &many, &mut a), (&mut c2, &many2, &mut b)] {
                if st.2 {
                    continue;
                }
                let r = conn
                    .readdir(&READDIR3args {
                        dir: dir.clone(),
                        cookie: st.1,
                        cookieverf: nfs3::cookieverf3::default(),
                        count: 2048,
                    })
                    .await
                    .expect("readdir rpc")
                    .unwrap();
                for e in r.reply.entries.into_inner() {
                    st.0.push(String::from_utf8(e.name.0.to_vec()).unwrap());
                    st.1 = e.cookie;
                }
                st.2 = r.reply.eof;
            }
        }
        for (names, who) in [(a.0, "first"), (b.0, "second")] {
            let mut got: Vec<String> = names.into_iter().filter(|n| n != "." && n != "..").collect();
            got.sort();
            assert_eq!(got, want, "interleaved plain readdir, {who} lister");
        }
        finish(c2).await;

        // A handle from a readdirplus entry is usable without a LOOKUP.
        let r = c
            .readdirplus(&READDIRPLUS3args {
                dir: many.clone(),
                cookie: 0,
                cookieverf: nfs3::cookieverf3::default(),
                dircount: 4096,
                maxcount: 8192,
            })
            .await
            .unwrap()
            .unwrap();
        let e = r
            .reply
            .entries
            .into_inner()
            .into_iter()
            .find(|e| e.name.0.starts_with(b"item-"))
            .unwrap();
        let Nfs3Option::Some(fh) = e.name_handle else {
            panic!("no handle")
        };
        let data = read_all(&mut c, &fh).await;
        assert!(data.starts_with(b"{\"id\": "), "{:?}", String::from_utf8_lossy(&data));

        // A plain-LFS file read through HTTP ranges, whole and at odd offsets.
        let fh = walk(&mut c, "data/blobs/images.bin").await.unwrap();
        let expected = hubfs::local_hub::seed::demo_bytes(3 << 20, 7);
        assert_eq!(
            common::sha256_hex(&read_all(&mut c, &fh).await),
            common::sha256_hex(&expected)
        );
        let (data, _) = read_at(&mut c, &fh, 1_000_003, 65_537).await;
        assert!(data == expected[1_000_003..1_065_540], "ranged read of plain LFS");
        finish(c).await;
    });
}

#[test]
fn handles_of_a_restarted_server_are_stale() {
    let env = Env::new();
    let (first, _) = env.serve("demo/tiny-model");
    let (second, _) = env.serve("demo/tiny-model");
    env.rt.block_on(async {
        let mut c1 = connect(&first).await;
        let old = walk(&mut c1, "config.json").await.unwrap();
        assert!(getattr(&mut c1, &old).await.is_ok());
        first.stop();
        drop(first);

        let mut c2 = connect(&second).await;
        assert_eq!(getattr(&mut c2, &old).await.err(), Some(nfsstat3::NFS3ERR_STALE));
        let r = c2
            .read(&READ3args {
                file: old.clone(),
                offset: 0,
                count: 10,
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_STALE, "read through a stale handle");
        // A garbage handle is bad, not stale.
        let bad = nfs_fh3 {
            data: Opaque::owned(vec![1, 2, 3]),
        };
        assert_eq!(getattr(&mut c2, &bad).await.err(), Some(nfsstat3::NFS3ERR_BADHANDLE));
        // Looking the path up again works.
        let fresh = walk(&mut c2, "config.json").await.unwrap();
        assert!(getattr(&mut c2, &fresh).await.is_ok());
        finish(c2).await;
    });
}

/// The FUSE mount and the NFS server of one repo give the same tree, sizes, modes, times and bytes.
#[test]
fn nfs_and_fuse_give_the_same_answers() {
    let env = Env::new();
    let (server, commit) = env.serve("datasets/demo/tiny-dataset");
    let dir = tempfile::tempdir().unwrap();
    let fuse = hubfs::process::session::mount(
        MountRequest {
            repo: "datasets/demo/tiny-dataset".to_string(),
            mountpoint: dir.path().to_path_buf(),
            revision: Some(commit.clone()),
            client: env.client_cfg(),
            vfs: VfsOptions::default(),
            allow_other: false,
        },
        &env.rt,
    )
    .expect("FUSE mount");
    let listing = env.listing("datasets/demo/tiny-dataset", &commit);
    let sample: Vec<&TreeEntry> = listing
        .iter()
        .filter(|e| !e.path().starts_with("data/many/") || e.path().ends_with("00007.jsonl"))
        .collect();
    let root = Arc::new(dir.path().to_path_buf());
    env.rt.block_on(async {
        let mut c = connect(&server).await;
        for e in sample {
            let path = e.path();
            let fh = walk(&mut c, path).await.expect(path);
            let a = getattr(&mut c, &fh).await.unwrap();
            let p = root.join(path);
            let m = tokio::task::spawn_blocking({
                let p = p.clone();
                move || std::fs::metadata(p)
            })
            .await
            .unwrap()
            .unwrap();
            assert_eq!(a.size, m.len(), "{path} size");
            assert_eq!(a.mode & 0o777, m.permissions().mode() & 0o777, "{path} mode");
            assert_eq!(a.mtime.seconds as i64, m.mtime(), "{path} mtime");
            assert_eq!(a.nlink as u64, m.nlink(), "{path} nlink");
            assert_eq!(a.fileid, m.ino(), "{path} inode number");
            if m.is_file() {
                let local = tokio::task::spawn_blocking(move || std::fs::read(p))
                    .await
                    .unwrap()
                    .unwrap();
                assert!(read_all(&mut c, &fh).await == local, "{path} bytes");
            } else {
                assert!(matches!(a.type_, ftype3::NF3DIR), "{path} type");
            }
        }
        finish(c).await;
    });
    fuse.unmount().unwrap();
}

/// What the adapter keeps per file and per listing stays bounded, and what it lets go is closed in
/// the core: reading more distinct files than the open-file cache holds leaves at most that many
/// VirtualFs handles open.
#[test]
fn adapter_state_stays_bounded() {
    use hubfs::nfs::NfsAdapter;
    use nfsserve::vfs::NFSFileSystem;
    let env = Env::new();
    let opened = open_vfs(
        "datasets/demo/tiny-dataset",
        None,
        &env.client_cfg(),
        &VfsOptions::default(),
        &env.rt,
    )
    .unwrap();
    let vfs = opened.vfs.clone();
    let nfs = NfsAdapter::new(vfs.clone());
    env.rt.block_on(async {
        let data = nfs.lookup(nfs.root_dir(), &b"data"[..].into()).await.unwrap();
        let many = nfs.lookup(data, &b"many"[..].into()).await.unwrap();
        let listing = nfs.readdir(many, 0, usize::MAX).await.unwrap();
        assert!(listing.end);
        let files: Vec<u64> = listing
            .entries
            .iter()
            .filter(|e| e.name.0.starts_with(b"item-"))
            .map(|e| e.fileid)
            .collect();
        assert!(files.len() > 1024, "{} files", files.len());
        for id in &files {
            let (data, eof) = nfs.read(*id, 0, 4096).await.unwrap();
            assert!(eof && data.starts_with(b"{\"id\": "));
        }
        let (open_files, snapshots) = nfs.held_state();
        assert!(open_files <= 1024, "{open_files} files held open");
        assert_eq!(snapshots, 1);
        assert_eq!(
            vfs.handle_count() as u64,
            open_files + snapshots,
            "released handles stay open in the core"
        );
    });
}

#[test]
fn writes_over_nfs_land_on_the_hub() {
    let env = Env::new();
    let (server, vfs, _cache) = serve_writable(&env, "nfsw");
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    env.rt.block_on(async {
        let mut c = connect(&server).await;
        let root = c.root_nfs_fh3();
        let name = |s: &str| filename3(Opaque::owned(s.as_bytes().to_vec()));
        let r = c
            .mkdir(&nfs3::MKDIR3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: name("dir"),
                },
                attributes: nfs3::sattr3::default(),
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3_OK, "mkdir");
        let dir = walk(&mut c, "dir").await.unwrap();
        for (file, data) in [("a.bin", big.as_slice()), ("b.txt", b"hello nfs\n".as_slice())] {
            let r = c
                .create(&nfs3::CREATE3args {
                    where_: diropargs3 {
                        dir: dir.clone(),
                        name: name(file),
                    },
                    how: nfs3::createhow3::UNCHECKED(nfs3::sattr3::default()),
                })
                .await
                .unwrap();
            assert_eq!(status(&r), nfsstat3::NFS3_OK, "create {file}");
            let fh = walk(&mut c, &format!("dir/{file}")).await.unwrap();
            for (i, chunk) in data.chunks(1 << 20).enumerate() {
                let w = c
                    .write(&nfs3::WRITE3args {
                        file: fh.clone(),
                        offset: (i << 20) as u64,
                        count: chunk.len() as u32,
                        stable: nfs3::stable_how::FILE_SYNC,
                        data: Opaque::owned(chunk.to_vec()),
                    })
                    .await
                    .unwrap();
                assert_eq!(status(&w), nfsstat3::NFS3_OK, "write {file}");
                assert_eq!(
                    w.unwrap().committed,
                    nfs3::stable_how::FILE_SYNC,
                    "a FILE_SYNC WRITE is stable"
                );
            }
            // Reads see the written bytes at once.
            assert_eq!(read_all(&mut c, &fh).await, data);
        }
        // An UNSTABLE WRITE is answered unstable, a DATA_SYNC one stable; the COMMIT that follows
        // has the WRITEs' verifier (tests/nfs_durability.rs shows what each survives).
        let fh = walk(&mut c, "dir/b.txt").await.unwrap();
        let mut verfs = Vec::new();
        for (how, want) in [
            (nfs3::stable_how::UNSTABLE, nfs3::stable_how::UNSTABLE),
            (nfs3::stable_how::DATA_SYNC, nfs3::stable_how::FILE_SYNC),
        ] {
            let w = c
                .write(&nfs3::WRITE3args {
                    file: fh.clone(),
                    offset: 0,
                    count: 5,
                    stable: how,
                    data: Opaque::owned(b"hello".to_vec()),
                })
                .await
                .unwrap()
                .unwrap();
            assert_eq!(w.committed, want, "{how:?}");
            verfs.push(w.verf);
        }
        assert_eq!(verfs[0], verfs[1], "one verifier per server instance");
        let w = &verfs[0];
        let r = c
            .commit(&nfs3::COMMIT3args {
                file: fh.clone(),
                offset: 0,
                count: 0,
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&r.verf, w, "COMMIT and WRITE verifiers");
        // A guarded CREATE of an existing name is refused; LINK makes a second name.
        let r = c
            .create(&nfs3::CREATE3args {
                where_: diropargs3 {
                    dir: dir.clone(),
                    name: name("b.txt"),
                },
                how: nfs3::createhow3::GUARDED(nfs3::sattr3::default()),
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_EXIST, "guarded create");
        let r = c
            .link(&nfs3::LINK3args {
                file: fh.clone(),
                link: diropargs3 {
                    dir: root.clone(),
                    name: name("hard.txt"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3_OK, "link (more in tests/nfs_metadata.rs)");
        let r = c
            .remove(&nfs3::REMOVE3args {
                object: diropargs3 {
                    dir: root.clone(),
                    name: name("hard.txt"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3_OK, "remove of the second name");
        // Rename and remove.
        let r = c
            .rename(&nfs3::RENAME3args {
                from: diropargs3 {
                    dir: dir.clone(),
                    name: name("b.txt"),
                },
                to: diropargs3 {
                    dir: root.clone(),
                    name: name("moved.txt"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3_OK, "rename");
        let moved = walk(&mut c, "moved.txt").await.unwrap();
        assert_eq!(read_all(&mut c, &moved).await, b"hello nfs\n");
        // REMOVE of a written file and RMDIR of an empty directory.
        let r = c
            .create(&nfs3::CREATE3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: name("gone.txt"),
                },
                how: nfs3::createhow3::UNCHECKED(nfs3::sattr3::default()),
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3_OK);
        let r = c
            .remove(&nfs3::REMOVE3args {
                object: diropargs3 {
                    dir: root.clone(),
                    name: name("gone.txt"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3_OK, "remove");
        assert_eq!(
            lookup_raw(&mut c, &root, b"gone.txt").await,
            Err(nfsstat3::NFS3ERR_NOENT)
        );
        let r = c
            .mkdir(&nfs3::MKDIR3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: name("empty"),
                },
                attributes: nfs3::sattr3::default(),
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3_OK);
        let r = c
            .rmdir(&nfs3::RMDIR3args {
                object: diropargs3 {
                    dir: root.clone(),
                    name: name("empty"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3_OK, "rmdir");
        let r = c
            .rmdir(&nfs3::RMDIR3args {
                object: diropargs3 {
                    dir: root.clone(),
                    name: name("dir"),
                },
            })
            .await
            .unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_NOTEMPTY, "rmdir of a non-empty directory");
        finish(c).await;
    });
    // NFS has no close: files are committed once they have been quiet for WRITE_QUIET.
    let files = committed_files(&env, "local/nfsw", &vfs, 2, Duration::from_secs(30));
    assert_eq!(
        files,
        [
            ("dir/a.bin".to_string(), big.len() as u64),
            ("moved.txt".to_string(), 10)
        ]
    );
    let got = hub_bytes(&env, "local/nfsw", "dir/a.bin");
    assert_eq!(
        common::sha256_hex(&got),
        common::sha256_hex(&big),
        "the Hub has the bytes written over NFS"
    );
    drop(server);
}

/// Creates dataset `local/NAME` on the local Hub and serves it writable over NFS (quiet period
/// 200 ms). The returned directory holds the staging area and must outlive the server.
fn serve_writable(env: &Env, name: &str) -> (NfsServer, Arc<hubfs::vfs::VirtualFs>, tempfile::TempDir) {
    serve_writable_with(env, name, WriteLimits::default())
}

/// `serve_writable` with other write-handle limits.
fn serve_writable_with(
    env: &Env,
    name: &str,
    limits: WriteLimits,
) -> (NfsServer, Arc<hubfs::vfs::VirtualFs>, tempfile::TempDir) {
    let token = env.hub().write_token().unwrap();
    let ep = env.hub().endpoint().to_string();
    env.rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{ep}/api/repos/create"))
            .bearer_auth(&token)
            .json(&serde_json::json!({"name": name, "organization": "local", "type": "dataset"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "create repo: {}", r.status());
    });
    let cache = tempfile::tempdir().unwrap();
    let opts = VfsOptions {
        write: Some(hubfs::vfs::WriteOptions {
            staging_root: cache.path().join("staging"),
            quiet_period: Duration::from_millis(200),
            ..Default::default()
        }),
        ..VfsOptions::default()
    };
    let spec = format!("datasets/local/{name}");
    let opened = open_vfs(&spec, None, &env.client_cfg(), &opts, &env.rt).expect("open repo");
    let server = env
        .rt
        .block_on(NfsServer::start_with(
            opened.vfs.clone(),
            "127.0.0.1:0".parse().unwrap(),
            limits,
        ))
        .expect("nfs server");
    (server, opened.vfs, cache)
}

/// The bytes of `path` on the main branch of dataset `repo`, downloaded from the Hub.
fn hub_bytes(env: &Env, repo: &str, path: &str) -> Vec<u8> {
    let url = format!("{}/datasets/{repo}/resolve/main/{path}", env.hub().endpoint());
    env.rt.block_on(async {
        let r = reqwest::get(url).await.unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.bytes().await.unwrap().to_vec()
    })
}

/// Waits until the Hub's main branch of dataset `repo` holds `count` files (besides
/// .gitattributes) and nothing is left dirty, and returns them (path, size), sorted by path.
fn committed_files(
    env: &Env,
    repo: &str,
    vfs: &hubfs::vfs::VirtualFs,
    count: usize,
    wait: Duration,
) -> Vec<(String, u64)> {
    let client = HubClient::new(env.client_cfg()).unwrap();
    let repo = RepoRef::dataset(repo).unwrap();
    let deadline = std::time::Instant::now() + wait;
    loop {
        let head = env.rt.block_on(client.repo_info(&repo, "main")).unwrap().sha;
        let mut files: Vec<(String, u64)> = env
            .rt
            .block_on(client.list_tree_recursive(&repo, &head, ""))
            .unwrap()
            .into_iter()
            .filter_map(|e| match e {
                TreeEntry::File { path, size, .. } if path != ".gitattributes" => Some((path, size)),
                _ => None,
            })
            .collect();
        files.sort();
        if files.len() == count && vfs.dirty_paths().is_empty() {
            return files;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "NFS writes never all committed: {} of {count} files on the Hub, {} dirty",
            files.len(),
            vfs.dirty_paths().len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Many small files written over NFS while commits are slow (the Hub answers commits after
/// 300 ms): write handles are closed by the quiet-period sweep while new files are being created.
/// This hung the server after a few hundred files when a handle's release ran inside a moka call
/// made under the inode table's lock.
#[test]
fn many_small_files_over_nfs_with_slow_commits() {
    let env = Env::new();
    // Each new name costs a paths-info lookup on a writable mount (its listing is not carried
    // across its own commits), so 1,000 creates need more than the free user's 1,000 api calls a
    // window; this test is about the server under slow commits, not the budget.
    env.hub()
        .set_request_windows(hubfs::local_hub::RequestWindows::off())
        .unwrap();
    env.hub()
        .set_faults(
            hubfs::local_hub::RouteClass::Commit,
            hubfs::local_hub::FaultSettings {
                latency_ms: 300,
                ..Default::default()
            },
        )
        .unwrap();
    write_small_files(env, "many", 1_000, 1, true, WriteLimits::default());
}

/// More files written at once than the server keeps write handles for (8 connections, 4
/// handles), each written UNSTABLE and COMMITted as libnfs does: handles are pushed out of the
/// full cache and closed all the time while other connections write. Every file must land. A
/// WRITE whose handle was closed between getting it and writing through it answered
/// NFS3ERR_STALE (the fio suite met it about once in 10,000 files); that race is too narrow to
/// meet here on demand, so `nfs::release`'s unit tests pin the rule that prevents it.
#[test]
fn more_writers_than_write_handles() {
    let limits = WriteLimits {
        files: 4,
        ..WriteLimits::default()
    };
    write_small_files(Env::new(), "crowd", 400, 8, false, limits);
}

/// Creates `files` small files in the root of a new writable dataset over NFS from `clients`
/// connections at once (file i from connection i % clients), checks every answer, and waits until
/// the Hub has them all with the right bytes. `pace`: pause 250 ms every 50 files, so quiet-period
/// closes interleave with creates, and write FILE_SYNC; else write UNSTABLE and COMMIT each file.
/// The clients run on a thread and runtime of their own with a bound on every call, so a server
/// that stops answering fails the test instead of hanging it.
fn write_small_files(env: Env, name: &str, files: usize, clients: usize, pace: bool, limits: WriteLimits) {
    let (server, vfs, cache) = serve_writable_with(&env, name, limits);
    let port = server.addr().port();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress_w = progress.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(futures::future::join_all((0..clients).map(|k| {
            let mine: Vec<usize> = (k..files).step_by(clients).collect();
            client_writes(port, mine, pace, progress_w.clone())
        })));
        let _ = done_tx.send(r.into_iter().collect::<Result<Vec<()>, String>>().map(|_| ()));
    });
    match done_rx.recv_timeout(Duration::from_secs(300)) {
        Ok(Ok(())) => {}
        outcome => {
            let done = progress.load(std::sync::atomic::Ordering::Relaxed);
            // The server may be deadlocked: leak it (and the Hub's runtime) rather than hang in drop.
            std::mem::forget(server);
            std::mem::forget(cache);
            std::mem::forget(env);
            panic!("NFS client failed after {done} of {files} files: {outcome:?}");
        }
    }
    env.hub().clear_faults();
    let repo = format!("local/{name}");
    let got = committed_files(&env, &repo, &vfs, files, Duration::from_secs(120));
    for (i, (path, size)) in got.iter().enumerate() {
        assert_eq!(path, &format!("f{i:04}.txt"));
        assert_eq!(*size, small_content(i).len() as u64, "{path}");
    }
    for i in [0, files / 2, files - 1] {
        let got = hub_bytes(&env, &repo, &format!("f{i:04}.txt"));
        assert_eq!(got, small_content(i), "f{i:04}.txt on the Hub");
    }
    drop(server);
}

/// The bytes of small file `i`.
fn small_content(i: usize) -> Vec<u8> {
    format!("small file {i}\n").repeat(1 + i % 7).into_bytes()
}

/// One connection of `write_small_files`: CREATE, WRITE (and COMMIT) each file of `mine`.
async fn client_writes(
    port: u16,
    mine: Vec<usize>,
    pace: bool,
    progress: Arc<std::sync::atomic::AtomicUsize>,
) -> Result<(), String> {
    let bound = Duration::from_secs(20);
    let mut c = common::nfs_mount(port).await?;
    let root = c.root_nfs_fh3();
    for (n, i) in mine.into_iter().enumerate() {
        let name = format!("f{i:04}.txt");
        let r = tokio::time::timeout(
            bound,
            c.create(&nfs3::CREATE3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: filename3(Opaque::owned(name.as_bytes().to_vec())),
                },
                how: nfs3::createhow3::UNCHECKED(nfs3::sattr3::default()),
            }),
        )
        .await
        .map_err(|_| format!("CREATE {name} did not answer within {bound:?}"))?
        .map_err(|e| format!("CREATE {name}: {e:?}"))?;
        let fh = match r {
            Nfs3Result::Ok(ok) => match ok.obj {
                Nfs3Option::Some(fh) => fh,
                Nfs3Option::None => return Err(format!("CREATE {name} returned no handle")),
            },
            Nfs3Result::Err((s, _)) => return Err(format!("CREATE {name}: {s:?}")),
        };
        let data = small_content(i);
        let w = tokio::time::timeout(
            bound,
            c.write(&nfs3::WRITE3args {
                file: fh.clone(),
                offset: 0,
                count: data.len() as u32,
                stable: if pace {
                    nfs3::stable_how::FILE_SYNC
                } else {
                    nfs3::stable_how::UNSTABLE
                },
                data: Opaque::owned(data),
            }),
        )
        .await
        .map_err(|_| format!("WRITE {name} did not answer within {bound:?}"))?
        .map_err(|e| format!("WRITE {name}: {e:?}"))?;
        if let Nfs3Result::Err((s, _)) = w {
            return Err(format!("WRITE {name}: {s:?}"));
        }
        if !pace {
            let r = tokio::time::timeout(
                bound,
                c.commit(&nfs3::COMMIT3args {
                    file: fh,
                    offset: 0,
                    count: 0,
                }),
            )
            .await
            .map_err(|_| format!("COMMIT {name} did not answer within {bound:?}"))?
            .map_err(|e| format!("COMMIT {name}: {e:?}"))?;
            if let Nfs3Result::Err((s, _)) = r {
                return Err(format!("COMMIT {name}: {s:?}"));
            }
        }
        progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if pace && n % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let _ = c.unmount().await;
    Ok(())
}
