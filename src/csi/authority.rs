//! gRPC clients built on grpc-core (Python's `grpcio`, and every other language binding of it) name
//! a unix socket's path as the HTTP/2 `:authority`, percent-encoded (`tmp%2Fplugin%2Fcsi.sock`).
//! The `h2` server under tonic parses `:authority` as a URI authority, where a `%` outside the
//! userinfo is invalid, and resets every such stream with PROTOCOL_ERROR before any handler runs.
//! Go's gRPC (kubelet, csi-sanity) sends `localhost` and is unaffected.
//!
//! [`relay`] sits between an accepted connection and the gRPC server: it passes every frame through
//! unchanged except request header blocks, which it decodes (HPACK, keeping the client's dynamic
//! table), gives `localhost` as `:authority` when the client's is not a valid authority, and
//! re-encodes as literals without indexing, so the server's HPACK table stays empty and in step.
//! The server-to-client direction is copied byte for byte.

use std::str::FromStr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Frames we write stay within the smallest SETTINGS_MAX_FRAME_SIZE a peer may announce.
const MAX_FRAME: usize = 16_384;
/// A header block larger than this (after CONTINUATION frames) ends the connection: CSI requests
/// carry a few hundred bytes of headers.
const MAX_BLOCK: usize = 1 << 20;

/// Why a relayed connection ended early.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed HTTP/2 from the client: {0}")]
    Malformed(&'static str),
    #[error("HPACK: {0:?}")]
    Hpack(loona_hpack::decoder::DecoderError),
}

/// Relays one connection: `client` (what connected to the plugin's socket) and `server` (the
/// gRPC server's end), until either side closes.
pub async fn relay<C, S>(client: C, server: S) -> Result<(), RelayError>
where
    C: AsyncRead + AsyncWrite + Send + 'static,
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (client_r, mut client_w) = tokio::io::split(client);
    let (mut server_r, server_w) = tokio::io::split(server);
    let back = tokio::spawn(async move {
        let r = tokio::io::copy(&mut server_r, &mut client_w).await;
        let _ = client_w.shutdown().await;
        r
    });
    let forward = forward_requests(client_r, server_w).await;
    // The server closes its side once the client's requests ended (or it gave up on them).
    let _ = back.await;
    forward
}

async fn forward_requests<R, W>(mut r: R, mut w: W) -> Result<(), RelayError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let result = forward_frames(&mut r, &mut w).await;
    let _ = w.shutdown().await;
    result
}

async fn forward_frames<R, W>(r: &mut R, w: &mut W) -> Result<(), RelayError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut preface = [0u8; 24];
    r.read_exact(&mut preface).await?;
    w.write_all(&preface).await?;
    if &preface != PREFACE {
        // Not HTTP/2 with prior knowledge: let the server answer it as it would.
        tokio::io::copy(r, w).await?;
        return Ok(());
    }
    let mut decoder = loona_hpack::Decoder::new();
    loop {
        let Some((head, payload)) = read_frame(r).await? else {
            return Ok(());
        };
        if head.kind != HEADERS {
            w.write_all(&head.bytes).await?;
            w.write_all(&payload).await?;
            w.flush().await?;
            continue;
        }
        let (priority, mut block) = split_headers_payload(head.flags, &payload)?;
        let mut flags = head.flags;
        while flags & END_HEADERS == 0 {
            let Some((next, more)) = read_frame(r).await? else {
                return Err(RelayError::Malformed("connection closed inside a header block"));
            };
            if next.kind != CONTINUATION || next.stream != head.stream {
                return Err(RelayError::Malformed("a header block not followed by its CONTINUATION"));
            }
            if block.len() + more.len() > MAX_BLOCK {
                return Err(RelayError::Malformed("header block too large"));
            }
            block.extend_from_slice(&more);
            flags |= next.flags & END_HEADERS;
        }
        let headers = decoder.decode(&block).map_err(RelayError::Hpack)?;
        let encoded = encode_block(&fix_authority(headers));
        write_header_frames(w, head.stream, head.flags & END_STREAM, priority, &encoded).await?;
        w.flush().await?;
    }
}

struct FrameHead {
    bytes: [u8; 9],
    kind: u8,
    flags: u8,
    stream: u32,
}

/// Reads one frame; `None` at a clean end of stream between frames.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<(FrameHead, Vec<u8>)>, RelayError> {
    let mut bytes = [0u8; 9];
    match r.read_exact(&mut bytes).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
    let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Some((
        FrameHead {
            bytes,
            kind: bytes[3],
            flags: bytes[4],
            stream,
        },
        payload,
    )))
}

/// A HEADERS payload's priority fields (when flagged) and its header block fragment, padding dropped.
fn split_headers_payload(flags: u8, payload: &[u8]) -> Result<(Option<[u8; 5]>, Vec<u8>), RelayError> {
    let mut rest = payload;
    let mut pad = 0usize;
    if flags & PADDED != 0 {
        let (&n, tail) = rest
            .split_first()
            .ok_or(RelayError::Malformed("empty padded HEADERS"))?;
        pad = n as usize;
        rest = tail;
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        if rest.len() < 5 {
            return Err(RelayError::Malformed("HEADERS too short for its priority"));
        }
        let mut p = [0u8; 5];
        p.copy_from_slice(&rest[..5]);
        priority = Some(p);
        rest = &rest[5..];
    }
    if pad > rest.len() {
        return Err(RelayError::Malformed("padding longer than the HEADERS frame"));
    }
    Ok((priority, rest[..rest.len() - pad].to_vec()))
}

/// Replaces an `:authority` the server would refuse with `localhost`, what Go clients send.
fn fix_authority(mut headers: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    for (name, value) in headers.iter_mut() {
        if name.as_slice() == b":authority" {
            let valid = std::str::from_utf8(value).is_ok_and(|v| http::uri::Authority::from_str(v).is_ok());
            if !valid {
                *value = b"localhost".to_vec();
            }
        }
    }
    headers
}

/// HPACK integer with an `n`-bit prefix whose high bits are `first` (RFC 7541 §5.1).
fn encode_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// Every header as "literal header field without indexing, new name", no Huffman (RFC 7541 §6.2.2).
fn encode_block(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0x00);
        encode_int(&mut out, 0x00, 7, name.len());
        out.extend_from_slice(name);
        encode_int(&mut out, 0x00, 7, value.len());
        out.extend_from_slice(value);
    }
    out
}

/// One HEADERS frame, followed by CONTINUATION frames when the block does not fit in one.
async fn write_header_frames<W: AsyncWrite + Unpin>(
    w: &mut W,
    stream: u32,
    end_stream: u8,
    priority: Option<[u8; 5]>,
    block: &[u8],
) -> Result<(), RelayError> {
    let first_room = MAX_FRAME - if priority.is_some() { 5 } else { 0 };
    let (first, mut rest) = block.split_at(block.len().min(first_room));
    let mut flags = end_stream | if priority.is_some() { PRIORITY } else { 0 };
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    let mut payload = Vec::with_capacity(first.len() + 5);
    if let Some(p) = priority {
        payload.extend_from_slice(&p);
    }
    payload.extend_from_slice(first);
    write_frame(w, HEADERS, flags, stream, &payload).await?;
    while !rest.is_empty() {
        let (part, tail) = rest.split_at(rest.len().min(MAX_FRAME));
        rest = tail;
        let flags = if rest.is_empty() { END_HEADERS } else { 0 };
        write_frame(w, CONTINUATION, flags, stream, part).await?;
    }
    Ok(())
}

async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: u8,
    flags: u8,
    stream: u32,
    payload: &[u8],
) -> Result<(), RelayError> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut head = [0u8; 9];
    head[..3].copy_from_slice(&len[1..]);
    head[3] = kind;
    head[4] = flags;
    head[5..].copy_from_slice(&stream.to_be_bytes());
    w.write_all(&head).await?;
    w.write_all(payload).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_use_the_prefix_then_continuation_bytes() {
        // RFC 7541 C.1.1 and C.1.2.
        let mut out = Vec::new();
        encode_int(&mut out, 0, 5, 10);
        assert_eq!(out, [10]);
        out.clear();
        encode_int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
    }

    #[test]
    fn a_path_authority_becomes_localhost_and_the_block_decodes_back() {
        let headers = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":authority".to_vec(), b"tmp%2Fx%2Fcsi.sock".to_vec()),
            (b"x-long".to_vec(), vec![b'a'; 300]),
        ];
        let block = encode_block(&fix_authority(headers));
        let back = loona_hpack::Decoder::new().decode(&block).unwrap();
        assert_eq!(back[1], (b":authority".to_vec(), b"localhost".to_vec()));
        assert_eq!(back[2].1.len(), 300);
        // A valid authority is kept.
        let kept = fix_authority(vec![(b":authority".to_vec(), b"localhost:50051".to_vec())]);
        assert_eq!(kept[0].1, b"localhost:50051");
    }

    #[test]
    fn padding_and_priority_are_taken_off_the_fragment() {
        let payload = [2u8, 0, 0, 0, 1, 16, b'a', b'b', 0, 0];
        let (prio, frag) = split_headers_payload(PADDED | PRIORITY, &payload).unwrap();
        assert_eq!(prio, Some([0, 0, 0, 1, 16]));
        assert_eq!(frag, b"ab");
        assert!(split_headers_payload(PADDED, &[9, 1]).is_err());
    }
}
