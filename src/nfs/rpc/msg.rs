//! ONC RPC messages (RFC 5531): parsing a call's header and writing the reply headers.

use super::Cred;
use super::xdr::{Decoder, Encoder, Garbage};

const RPC_VERSION: u32 = 2;
const CALL: u32 = 0;
const REPLY: u32 = 1;
const MSG_ACCEPTED: u32 = 0;
const MSG_DENIED: u32 = 1;
const RPC_MISMATCH: u32 = 0;
const AUTH_ERROR: u32 = 1;
const AUTH_NONE: u32 = 0;
const AUTH_UNIX: u32 = 1;
/// auth_stat: credentials that do not decode as their flavour says.
const AUTH_BADCRED: u32 = 1;
/// auth_stat: credentials of a flavour this server does not take.
const AUTH_REJECTEDCRED: u32 = 2;
/// Credentials and verifiers are at most 400 bytes (RFC 5531 `opaque_auth`).
const MAX_AUTH: usize = 400;
/// AUTH_UNIX's limits (RFC 5531 appendix A): a machine name of 255 bytes, 16 groups.
const MAX_MACHINE_NAME: usize = 255;
const MAX_GROUPS: u32 = 16;

/// accept_stat values of an accepted call that did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    ProgUnavail = 1,
    ProcUnavail = 3,
    GarbageArgs = 4,
}

/// A call, its arguments still to be decoded.
pub struct Call<'a> {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    /// Who calls, as AUTH_UNIX says (None: AUTH_NONE).
    pub cred: Option<Cred>,
    pub args: Decoder<'a>,
}

/// A record that is not a call this server can take.
#[derive(Debug)]
pub enum BadCall {
    /// Too short or malformed to answer at all: the connection is closed.
    Unreadable(Garbage),
    /// A reply, or another message type: ignored.
    NotACall,
    /// RPC version other than 2: answered RPC_MISMATCH.
    RpcVersion(u32),
    /// A credential flavour other than AUTH_NONE and AUTH_UNIX: answered AUTH_ERROR
    /// (AUTH_REJECTEDCRED).
    Auth(u32),
    /// AUTH_UNIX credentials that do not decode: answered AUTH_ERROR (AUTH_BADCRED).
    BadCred(u32),
}

pub fn parse_call<'a>(record: &'a [u8]) -> Result<Call<'a>, BadCall> {
    let mut d = Decoder::new(record);
    let head = |d: &mut Decoder<'_>| -> Result<(u32, u32, u32), Garbage> { Ok((d.u32()?, d.u32()?, d.u32()?)) };
    let (xid, mtype, rpcvers) = head(&mut d).map_err(BadCall::Unreadable)?;
    if mtype != CALL {
        return Err(BadCall::NotACall);
    }
    if rpcvers != RPC_VERSION {
        return Err(BadCall::RpcVersion(xid));
    }
    let rest = |d: &mut Decoder<'a>| -> Result<(u32, u32, u32, u32, &'a [u8]), Garbage> {
        let (prog, vers, proc_) = (d.u32()?, d.u32()?, d.u32()?);
        let flavor = d.u32()?;
        let body = d.opaque(MAX_AUTH)?;
        let _verf_flavor = d.u32()?;
        d.opaque(MAX_AUTH)?;
        Ok((prog, vers, proc_, flavor, body))
    };
    let (prog, vers, proc_, flavor, body) = rest(&mut d).map_err(BadCall::Unreadable)?;
    let cred = match flavor {
        AUTH_NONE => None,
        AUTH_UNIX => Some(auth_unix(body).map_err(|_| BadCall::BadCred(xid))?),
        _ => return Err(BadCall::Auth(xid)),
    };
    Ok(Call {
        xid,
        prog,
        vers,
        proc_,
        cred,
        args: d,
    })
}

/// The body of AUTH_UNIX credentials (RFC 5531 appendix A): stamp, machine name, uid, gid, groups.
/// The whole body must be used.
fn auth_unix(body: &[u8]) -> Result<Cred, Garbage> {
    let mut d = Decoder::new(body);
    let _stamp = d.u32()?;
    d.opaque(MAX_MACHINE_NAME)?;
    let (uid, gid) = (d.u32()?, d.u32()?);
    let n = d.u32()?;
    if n > MAX_GROUPS {
        return Err(Garbage("AUTH_UNIX with more than 16 groups"));
    }
    let mut groups = [0u32; MAX_GROUPS as usize];
    for g in groups.iter_mut().take(n as usize) {
        *g = d.u32()?;
    }
    if !d.is_empty() {
        return Err(Garbage("AUTH_UNIX credentials longer than their fields"));
    }
    Ok(Cred::new(uid, gid, &groups[..n as usize]))
}

fn accepted(xid: u32, stat: u32) -> Encoder {
    let mut e = Encoder::new();
    e.u32(xid);
    e.u32(REPLY);
    e.u32(MSG_ACCEPTED);
    // Verifier: AUTH_NONE, empty.
    e.u32(AUTH_NONE);
    e.u32(0);
    e.u32(stat);
    e
}

/// A successful reply's header; the procedure's results follow.
pub fn success(xid: u32) -> Encoder {
    accepted(xid, 0)
}

pub fn refused(xid: u32, why: Refusal) -> Vec<u8> {
    accepted(xid, why as u32).finish()
}

/// PROG_MISMATCH: the program exists, in versions `low..=high` only.
pub fn prog_mismatch(xid: u32, low: u32, high: u32) -> Vec<u8> {
    let mut e = accepted(xid, 2);
    e.u32(low);
    e.u32(high);
    e.finish()
}

pub fn denied(bad: &BadCall) -> Option<Vec<u8>> {
    let (xid, body): (u32, [u32; 3]) = match *bad {
        BadCall::RpcVersion(xid) => (xid, [RPC_MISMATCH, RPC_VERSION, RPC_VERSION]),
        BadCall::Auth(xid) => (xid, [AUTH_ERROR, AUTH_REJECTEDCRED, 0]),
        BadCall::BadCred(xid) => (xid, [AUTH_ERROR, AUTH_BADCRED, 0]),
        BadCall::Unreadable(_) | BadCall::NotACall => return None,
    };
    let mut e = Encoder::new();
    e.u32(xid);
    e.u32(REPLY);
    e.u32(MSG_DENIED);
    e.u32(body[0]);
    e.u32(body[1]);
    if body[0] == RPC_MISMATCH {
        e.u32(body[2]);
    }
    Some(e.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(rpcvers: u32, flavor: u32) -> Vec<u8> {
        call_with(rpcvers, flavor, &[0; 20])
    }

    fn call_with(rpcvers: u32, flavor: u32, cred: &[u8]) -> Vec<u8> {
        let mut e = Encoder::new();
        for v in [9, CALL, rpcvers, 100003, 3, 1, flavor] {
            e.u32(v);
        }
        e.opaque(cred);
        e.u32(AUTH_NONE);
        e.opaque(&[]);
        e.u32(0xabcd);
        e.finish()[4..].to_vec()
    }

    #[test]
    fn a_call_parses_to_its_arguments() {
        let rec = call(2, AUTH_UNIX);
        let mut c = parse_call(&rec).unwrap();
        assert_eq!((c.xid, c.prog, c.vers, c.proc_), (9, 100003, 3, 1));
        assert_eq!(c.cred, Some(Cred::new(0, 0, &[])));
        assert_eq!(c.args.u32().unwrap(), 0xabcd);
        let rec = call(2, AUTH_NONE);
        assert_eq!(parse_call(&rec).ok().unwrap().cred, None);
    }

    fn unix_body(name: &[u8], uid: u32, gid: u32, groups: &[u32]) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u32(77);
        e.opaque(name);
        e.u32(uid);
        e.u32(gid);
        e.u32(groups.len() as u32);
        for g in groups {
            e.u32(*g);
        }
        e.finish()[4..].to_vec()
    }

    #[test]
    fn auth_unix_credentials_name_the_caller() {
        let body = unix_body(b"host", 1000, 100, &[100, 27, 4000]);
        let rec = call_with(2, AUTH_UNIX, &body);
        let c = parse_call(&rec).ok().unwrap();
        let cred = c.cred.unwrap();
        assert_eq!((cred.uid, cred.gid, cred.groups()), (1000, 100, &[100, 27, 4000][..]));
        // 17 groups, a cut body and trailing bytes are not AUTH_UNIX: AUTH_ERROR, AUTH_BADCRED.
        let many: Vec<u32> = (0..17).collect();
        let cut = &body[..body.len() - 4];
        let mut long = body.clone();
        long.extend_from_slice(&[0; 4]);
        for bad in [unix_body(b"h", 1, 1, &many), cut.to_vec(), long] {
            let rec = call_with(2, AUTH_UNIX, &bad);
            let r = parse_call(&rec).err().unwrap();
            assert!(matches!(r, BadCall::BadCred(9)));
            let d = denied(&r).unwrap();
            assert_eq!(&d[16..24], &[0, 0, 0, 1, 0, 0, 0, 1], "AUTH_ERROR, AUTH_BADCRED");
        }
    }

    #[test]
    fn wrong_version_and_flavour_are_denied() {
        let r = parse_call(&call(3, AUTH_NONE)).err().unwrap();
        let d = denied(&r).unwrap();
        // mark, xid, REPLY, MSG_DENIED, RPC_MISMATCH, low, high
        assert_eq!(d.len(), 4 + 6 * 4);
        assert_eq!(&d[12..16], &MSG_DENIED.to_be_bytes());
        let r = parse_call(&call(2, 6)).err().unwrap();
        assert!(matches!(r, BadCall::Auth(9)));
        assert!(matches!(parse_call(&[0, 0]), Err(BadCall::Unreadable(_))));
    }
}
