//! hubfs's RPC front at the wire: the refusals RFC 5531 defines for calls it cannot take, MOUNT and
//! the portmapper on the NFS port, pipelined calls, and records it will not read. Driven with raw
//! records over TCP against the in-memory NFS server (`hubfs::nfs::ceiling`), which is served
//! through the same front as hubfs.

use std::collections::HashSet;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NFS: u32 = 100003;
const MOUNT: u32 = 100005;
const PORTMAP: u32 = 100000;

/// An RPC call record (mark included) with AUTH_UNIX credentials or the given flavour.
fn call(xid: u32, rpcvers: u32, prog: u32, vers: u32, proc_: u32, flavor: u32, args: &[u8]) -> Vec<u8> {
    // Credentials: stamp, machine name "h", uid 0, gid 0, no groups (AUTH_UNIX's shape).
    let cred: Vec<u8> = [1u32, 1]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .chain(*b"h\0\0\0")
        .chain([0u32, 0, 0].iter().flat_map(|v| v.to_be_bytes()))
        .collect();
    call_with_cred(xid, rpcvers, prog, vers, proc_, flavor, &cred, args)
}

/// `call` with the credentials' body given.
#[allow(clippy::too_many_arguments)]
fn call_with_cred(
    xid: u32,
    rpcvers: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    flavor: u32,
    cred: &[u8],
    args: &[u8],
) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [xid, 0, rpcvers, prog, vers, proc_, flavor] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(&(cred.len() as u32).to_be_bytes());
    b.extend_from_slice(cred);
    b.extend_from_slice(&[0; 8]); // verifier: AUTH_NONE, empty
    b.extend_from_slice(args);
    let mut rec = (0x8000_0000u32 | b.len() as u32).to_be_bytes().to_vec();
    rec.extend(b);
    rec
}

fn nfs_call(xid: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    call(xid, 2, NFS, 3, proc_, 1, args)
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn opaque(b: &[u8]) -> Vec<u8> {
    let mut v = (b.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(b);
    v.resize(4 + b.len().div_ceil(4) * 4, 0);
    v
}

/// A reply as words (the record's body is always a multiple of four bytes here).
async fn reply(s: &mut TcpStream) -> Vec<u32> {
    let mut mark = [0u8; 4];
    s.read_exact(&mut mark).await.expect("reply mark");
    let mark = u32::from_be_bytes(mark);
    assert!(mark & 0x8000_0000 != 0, "a reply is one fragment");
    let mut body = vec![0u8; (mark & 0x7fff_ffff) as usize];
    s.read_exact(&mut body).await.expect("reply body");
    body.chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_be_bytes(w)
        })
        .collect()
}

/// xid, then (reply_stat, accept_stat or reject_stat) and the words after it.
fn head(r: &[u32]) -> (u32, u32, u32, &[u32]) {
    assert_eq!(r[1], 1, "a REPLY");
    if r[2] == 0 {
        // accepted: verifier flavour and (empty) body, then accept_stat
        (r[0], 0, r[5], &r[6..])
    } else {
        (r[0], 1, r[3], &r[4..])
    }
}

async fn ask(s: &mut TcpStream, rec: Vec<u8>) -> Vec<u32> {
    s.write_all(&rec).await.unwrap();
    reply(s).await
}

async fn server() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    hubfs::nfs::ceiling::serve(1, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// The root's handle, through MOUNT.
async fn root_fh(s: &mut TcpStream) -> Vec<u8> {
    let r = ask(s, call(1, 2, MOUNT, 3, 1, 1, &opaque(b"/"))).await;
    let (_, _, stat, rest) = head(&r);
    assert_eq!((stat, rest[0]), (0, 0), "MNT / succeeds");
    let len = rest[1] as usize;
    rest[2..2 + len / 4].iter().flat_map(|w| w.to_be_bytes()).collect()
}

#[tokio::test]
async fn calls_it_cannot_take_get_the_rfc_refusals() {
    let (addr, task) = server().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // NFS version 2: PROG_MISMATCH, versions 3 to 3.
    let r = ask(&mut s, call(10, 2, NFS, 2, 0, 1, &[])).await;
    assert_eq!(head(&r), (10, 0, 2, &[3, 3][..]));
    // An unknown program: PROG_UNAVAIL.
    let r = ask(&mut s, call(11, 2, 400_000, 1, 0, 1, &[])).await;
    assert_eq!(head(&r).2, 1);
    // NFS procedure 22: PROC_UNAVAIL.
    let r = ask(&mut s, nfs_call(12, 22, &[])).await;
    assert_eq!(head(&r).2, 3);
    // GETATTR without its handle, and with a 65-byte one: GARBAGE_ARGS.
    let r = ask(&mut s, nfs_call(13, 1, &[])).await;
    assert_eq!(head(&r).2, 4);
    let r = ask(&mut s, nfs_call(14, 1, &opaque(&[7; 65]))).await;
    assert_eq!(head(&r).2, 4);
    // RPC version 3: MSG_DENIED, RPC_MISMATCH, versions 2 to 2.
    let r = ask(&mut s, call(15, 3, NFS, 3, 0, 1, &[])).await;
    assert_eq!(head(&r), (15, 1, 0, &[2, 2][..]));
    // RPCSEC_GSS credentials: MSG_DENIED, AUTH_ERROR, AUTH_REJECTEDCRED.
    let r = ask(&mut s, call(16, 2, NFS, 3, 0, 6, &[])).await;
    assert_eq!(head(&r), (16, 1, 1, &[2][..]));
    // A handle of another server: NFS3ERR_STALE or NFS3ERR_BADHANDLE, in an NFS reply.
    let r = ask(&mut s, nfs_call(17, 1, &opaque(&[0; 16]))).await;
    let (_, _, stat, rest) = head(&r);
    assert_eq!(stat, 0);
    assert!(rest[0] == 70 || rest[0] == 10001, "status {}", rest[0]);
    // The connection still serves: NULL.
    let r = ask(&mut s, nfs_call(18, 0, &[])).await;
    assert_eq!(head(&r), (18, 0, 0, &[][..]));
    task.abort();
}

#[tokio::test]
async fn mount_and_portmap_answer_on_the_nfs_port() {
    let (addr, task) = server().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let getport = |xid, prog, proto| call(xid, 2, PORTMAP, 2, 3, 0, &words(&[prog, 3, proto, 0]));
    let r = ask(&mut s, getport(1, NFS, 6)).await;
    assert_eq!(head(&r), (1, 0, 0, &[addr.port() as u32][..]));
    let r = ask(&mut s, getport(2, MOUNT, 6)).await;
    assert_eq!(head(&r).3, &[addr.port() as u32]);
    // Not over UDP, and not for other programs: 0.
    let r = ask(&mut s, getport(3, NFS, 17)).await;
    assert_eq!(head(&r).3, &[0]);
    let r = ask(&mut s, getport(4, 100021, 6)).await;
    assert_eq!(head(&r).3, &[0]);
    // EXPORT: "/" to everyone.
    let r = ask(&mut s, call(5, 2, MOUNT, 3, 5, 1, &[])).await;
    assert_eq!(head(&r).3, &[1, 1, u32::from_be_bytes(*b"/\0\0\0"), 0, 0]);
    // MNT of a missing path and of a path outside the export: MNT3ERR_NOENT.
    for (xid, path) in [(6, &b"/missing"[..]), (7, &b"elsewhere"[..])] {
        let r = ask(&mut s, call(xid, 2, MOUNT, 3, 1, 1, &opaque(path))).await;
        assert_eq!(head(&r).3, &[2], "{}", String::from_utf8_lossy(path));
    }
    // MNT of "/": a handle that GETATTR takes (the root directory, file id 1).
    let fh = root_fh(&mut s).await;
    let r = ask(&mut s, nfs_call(8, 1, &opaque(&fh))).await;
    let (_, _, stat, rest) = head(&r);
    assert_eq!((stat, rest[0], rest[1]), (0, 0, 2), "NFS3_OK, NF3DIR");
    task.abort();
}

#[tokio::test]
async fn pipelined_calls_are_each_answered_once() {
    let (addr, task) = server().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let root = root_fh(&mut s).await;
    let mut lookup = opaque(&root);
    lookup.extend(opaque(b"data.bin"));
    let r = ask(&mut s, nfs_call(2, 3, &lookup)).await;
    let (_, _, _, rest) = head(&r);
    assert_eq!(rest[0], 0, "LOOKUP data.bin");
    let file: Vec<u8> = rest[2..2 + rest[1] as usize / 4]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect();
    // 300 READs of 4 KiB in one write, more than the 64 a connection answers at once.
    let mut batch = Vec::new();
    for xid in 1000..1300u32 {
        let mut args = opaque(&file);
        // The file is 1 MiB: 256 blocks.
        args.extend((u64::from(xid % 256) * 4096).to_be_bytes());
        args.extend(4096u32.to_be_bytes());
        batch.extend(nfs_call(xid, 6, &args));
    }
    s.write_all(&batch).await.unwrap();
    let mut seen = HashSet::new();
    for _ in 0..300 {
        let r = reply(&mut s).await;
        let (xid, _, stat, rest) = head(&r);
        assert_eq!((stat, rest[0]), (0, 0), "READ {xid}");
        assert!(seen.insert(xid), "xid {xid} answered twice");
        // status, attributes (follows + 21 words), count, eof, then the data's length and bytes
        assert_eq!(rest[23], 4096, "READ count");
        assert_eq!(r.len(), 6 + 1 + 22 + 3 + 1024);
    }
    assert_eq!(seen, (1000..1300).collect());
    task.abort();
}

#[tokio::test]
async fn records_it_will_not_read_end_the_connection() {
    let (addr, task) = server().await;
    // A record claiming 2 MiB (the limit is 1 MiB plus 64 KiB).
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&(0x8000_0000u32 | (2 << 20)).to_be_bytes()).await.unwrap();
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut b))
        .await
        .expect("closed, not left hanging");
    assert_eq!(n.unwrap_or(0), 0, "connection closed");
    // A reply (message type 1) sent to the server gets no answer, and the connection goes on.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut not_a_call = nfs_call(1, 0, &[]);
    not_a_call[8..12].copy_from_slice(&1u32.to_be_bytes());
    s.write_all(&not_a_call).await.unwrap();
    let r = ask(&mut s, nfs_call(2, 0, &[])).await;
    assert_eq!(head(&r).0, 2, "the next answer is the NULL's");
    task.abort();
}

/// AUTH_UNIX credentials (RFC 5531 appendix A) are read: a well-formed body with the most groups
/// allowed is taken; one with more groups, or cut short, is MSG_DENIED, AUTH_ERROR, AUTH_BADCRED.
#[tokio::test]
async fn auth_unix_credentials_that_do_not_decode_are_denied_badcred() {
    let (addr, task) = server().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let unix = |groups: u32| {
        let mut v = words(&[7]);
        v.extend(opaque(b"client"));
        v.extend(words(&[1000, 1000, groups]));
        v.extend(words(&(0..groups).collect::<Vec<_>>()));
        v
    };
    let r = ask(&mut s, call_with_cred(1, 2, NFS, 3, 0, 1, &unix(16), &[])).await;
    assert_eq!(head(&r), (1, 0, 0, &[][..]), "16 groups: NULL answered");
    let r = ask(&mut s, call_with_cred(2, 2, NFS, 3, 0, 1, &unix(17), &[])).await;
    assert_eq!(head(&r), (2, 1, 1, &[1][..]), "17 groups");
    let cut = unix(2);
    let r = ask(&mut s, call_with_cred(3, 2, NFS, 3, 0, 1, &cut[..cut.len() - 4], &[])).await;
    assert_eq!(head(&r), (3, 1, 1, &[1][..]), "a body cut short");
    // AUTH_NONE is taken as before.
    let r = ask(&mut s, call_with_cred(4, 2, NFS, 3, 0, 0, &[], &[])).await;
    assert_eq!(head(&r), (4, 0, 0, &[][..]));
    task.abort();
}
