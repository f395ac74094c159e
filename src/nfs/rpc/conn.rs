//! One TCP connection: records in (RFC 5531 record marking), calls answered concurrently, replies
//! out through one buffered writer.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};

use super::{Front, Fs};
use crate::nfs::MAX_TRANSFER;

/// Largest record taken: a 1 MiB WRITE with room for its header. A bigger one ends the connection
/// (the client was told 1 MiB in FSINFO).
const MAX_RECORD: usize = MAX_TRANSFER as usize + (64 << 10);

/// Calls of one connection being answered at once. The reader stops taking records when all are
/// busy (TCP then holds the client back), which bounds the memory one client can claim to about
/// this many replies.
const IN_FLIGHT: usize = 64;

/// Serves one connection until the client closes it or breaks the framing.
pub async fn serve<T: Fs>(front: Arc<Front<T>>, socket: TcpStream) {
    let _ = socket.set_nodelay(true);
    let (rd, wr) = socket.into_split();
    let mut rd = BufReader::with_capacity(128 << 10, rd);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT);
    let writer = tokio::spawn(write_replies(BufWriter::with_capacity(128 << 10, wr), rx));
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let record = match read_record(&mut rd).await {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(error = %e, "NFS connection dropped");
                break;
            }
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let (front, tx) = (front.clone(), tx.clone());
        tokio::spawn(async move {
            if let Some(reply) = front.answer(&record).await {
                let _ = tx.send(reply).await;
            }
            drop(slot);
        });
    }
    // The writer ends once every call still being answered has sent its reply.
    drop(tx);
    let _ = writer.await;
}

/// Writes replies as they come, each whole; replies ready together go out in one flush.
async fn write_replies<W: tokio::io::AsyncWrite + Unpin>(mut wr: BufWriter<W>, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(reply) = rx.recv().await {
        if wr.write_all(&reply).await.is_err() {
            return;
        }
        while let Ok(more) = rx.try_recv() {
            if wr.write_all(&more).await.is_err() {
                return;
            }
        }
        if wr.flush().await.is_err() {
            return;
        }
    }
}

/// The next record, its fragments joined; None at a clean end of stream.
async fn read_record<R: AsyncRead + Unpin>(rd: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let mut record = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        match rd.read_exact(&mut mark).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && record.is_empty() => return Ok(None),
            Err(e) => return Err(e),
        }
        let mark = u32::from_be_bytes(mark);
        let len = (mark & 0x7fff_ffff) as usize;
        if record.len() + len > MAX_RECORD {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("RPC record over {MAX_RECORD} bytes"),
            ));
        }
        let start = record.len();
        record.resize(start + len, 0);
        rd.read_exact(&mut record[start..]).await?;
        if mark & 0x8000_0000 != 0 {
            return Ok(Some(record));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(last: bool, body: &[u8]) -> Vec<u8> {
        let mut v = ((body.len() as u32) | if last { 0x8000_0000 } else { 0 })
            .to_be_bytes()
            .to_vec();
        v.extend_from_slice(body);
        v
    }

    #[tokio::test]
    async fn fragments_join_into_one_record() {
        let mut wire = frag(false, b"abc");
        wire.extend(frag(true, b"de"));
        wire.extend(frag(true, b"f"));
        let mut rd = &wire[..];
        assert_eq!(read_record(&mut rd).await.unwrap().unwrap(), b"abcde");
        assert_eq!(read_record(&mut rd).await.unwrap().unwrap(), b"f");
        assert!(read_record(&mut rd).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn oversized_and_cut_records_are_errors() {
        let big = ((MAX_RECORD as u32 + 1) | 0x8000_0000).to_be_bytes();
        assert!(read_record(&mut &big[..]).await.is_err());
        let cut = frag(true, b"abcdef");
        assert!(read_record(&mut &cut[..5]).await.is_err());
    }
}
