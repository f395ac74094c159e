//! ONC RPC messages (RFC 5531): parsing a call's header and writing the reply headers.

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
/// auth_stat: credentials of a flavour this server does not take.
const AUTH_REJECTEDCRED: u32 = 2;
/// Credentials and verifiers are at most 400 bytes (RFC 5531 `opaque_auth`).
const MAX_AUTH: usize = 400;

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
    /// A credential flavour other than AUTH_NONE and AUTH_UNIX: answered AUTH_ERROR.
    Auth(u32),
}

pub fn parse_call(record: &[u8]) -> Result<Call<'_>, BadCall> {
    let mut d = Decoder::new(record);
    let head = |d: &mut Decoder<'_>| -> Result<(u32, u32, u32), Garbage> { Ok((d.u32()?, d.u32()?, d.u32()?)) };
    let (xid, mtype, rpcvers) = head(&mut d).map_err(BadCall::Unreadable)?;
    if mtype != CALL {
        return Err(BadCall::NotACall);
    }
    if rpcvers != RPC_VERSION {
        return Err(BadCall::RpcVersion(xid));
    }
    let rest = |d: &mut Decoder<'_>| -> Result<(u32, u32, u32, u32), Garbage> {
        let (prog, vers, proc_) = (d.u32()?, d.u32()?, d.u32()?);
        let flavor = d.u32()?;
        // AUTH_UNIX credentials name a uid and gids; hubfs serves every caller the same tree with
        // the mount's owner, so they are read past, not used.
        d.opaque(MAX_AUTH)?;
        let _verf_flavor = d.u32()?;
        d.opaque(MAX_AUTH)?;
        Ok((prog, vers, proc_, flavor))
    };
    let (prog, vers, proc_, flavor) = rest(&mut d).map_err(BadCall::Unreadable)?;
    if flavor != AUTH_NONE && flavor != AUTH_UNIX {
        return Err(BadCall::Auth(xid));
    }
    Ok(Call {
        xid,
        prog,
        vers,
        proc_,
        args: d,
    })
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
        let mut e = Encoder::new();
        for v in [9, CALL, rpcvers, 100003, 3, 1, flavor] {
            e.u32(v);
        }
        e.opaque(&[0; 20]);
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
        assert_eq!(c.args.u32().unwrap(), 0xabcd);
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
