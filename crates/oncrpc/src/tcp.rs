//! TCP driver pieces: reading records and writing framed messages over tokio streams,
//! and the client's TCP [`Transport`].
//!
//! RFC 5531 §11 record marking is done by the sans-IO [`crate::record`] module; this
//! module only moves bytes. `io::Error` lives here and in the other drivers.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddr;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use xdr::XdrStream;

use crate::record::{frame, RecordDecoder};
use crate::transport::{Incoming, RecordReceiver, RecordSender, Transport};

pub mod call_data;
mod mapped;
mod record_buffers;
mod replies;

/// An unlinked temporary file holding `data`, open for reading and writing: the file
/// ranges of the reply writer's and `mapped`'s tests.
#[cfg(test)]
pub(crate) fn temp_file(data: &[u8]) -> std::sync::Arc<std::fs::File> {
    use std::io::Write;
    let path = std::env::temp_dir().join(format!(
        "oncrpc-tcp-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let mut f = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f.write_all(data).unwrap();
    std::sync::Arc::new(f)
}
pub use call_data::{CallData, Pipes};
pub(crate) use record_buffers::RecordBuffer;
pub use record_buffers::{RecordBuffers, DEFAULT_MAX_IDLE_BYTES, MIN_REUSED_RECORD};
pub(crate) use replies::write_replies;
pub use replies::{read_range, FileData};

/// Smallest buffer reservation for one read, so that small records do not cost one
/// system call each.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// Default largest record accepted: 4 MiB of payload plus headers and slack.
pub const DEFAULT_MAX_RECORD: usize = 4 * 1024 * 1024 + 64 * 1024;
/// Default largest fragment sent: a whole default-size record, so a message goes out
/// as one fragment (as Linux's RPC layer sends them). A 1 MiB limit split every 1 MiB
/// READ reply in two, which cost the receiver a join copy per byte (our client) or
/// much worse (libnfs reallocates per fragment): `docs/bench/README.md`.
pub const DEFAULT_MAX_FRAGMENT: usize = DEFAULT_MAX_RECORD;

/// Reads one record from `r`. `Ok(None)` at a clean end of stream (between records).
/// A broken record stream is an `InvalidData` error whose inner error is the
/// [`crate::RecordError`]. Records of [`MIN_REUSED_RECORD`] bytes and more are read
/// into a buffer of `reuse` when given. Not cancel safe: a future dropped while it
/// reads such a record loses the part read, and the stream must be dropped too (our
/// client awaits it in a task of its own; the server stops reading when it cancels).
pub async fn read_record<R: AsyncRead + Unpin>(
    r: &mut R,
    dec: &mut RecordDecoder,
    buf: &mut BytesMut,
    reuse: Option<&RecordBuffers>,
) -> io::Result<Option<Bytes>> {
    loop {
        if let Some(rec) = dec.decode(buf).map_err(invalid_data)? {
            return Ok(Some(rec));
        }
        if let Some((pool, len)) = reusable(dec, buf, reuse) {
            return read_into_reused(r, dec, buf, pool, len).await.map(Some);
        }
        if read_more(r, dec, buf).await? == 0 {
            return dec.decode_eof(buf).map_err(invalid_data);
        }
    }
}

/// Reads more of the stream into `buf`: how many bytes (0 at the end of the stream).
///
/// Reserves the rest of the current fragment at once: growing the buffer 64 KiB at a
/// time would copy what was already received on every reallocation (about one more
/// copy per byte of a 1 MiB record). DoS bound: `bytes_wanted` never exceeds the
/// fragment's announced length, which the decoder has already checked against the
/// maximum record size.
pub(crate) async fn read_more<R: AsyncRead + Unpin>(
    r: &mut R,
    dec: &RecordDecoder,
    buf: &mut BytesMut,
) -> io::Result<usize> {
    buf.reserve(dec.bytes_wanted(buf).max(READ_CHUNK));
    r.read_buf(buf).await
}

/// The pool and the record's length when the record being received is to be read
/// into a reused buffer ([`RecordDecoder::lone_fragment`], large enough).
pub(crate) fn reusable<'a>(
    dec: &RecordDecoder,
    buf: &BytesMut,
    reuse: Option<&'a RecordBuffers>,
) -> Option<(&'a RecordBuffers, usize)> {
    let len = dec.lone_fragment(buf).filter(|&l| l >= MIN_REUSED_RECORD)?;
    Some((reuse?, len))
}

/// Reads the rest of the record of `len` bytes that `dec` announced as a lone
/// fragment into a buffer of `pool`, which it returns to when the record is dropped.
pub(crate) async fn read_into_reused<R: AsyncRead + Unpin>(
    r: &mut R,
    dec: &mut RecordDecoder,
    buf: &mut BytesMut,
    pool: &RecordBuffers,
    len: usize,
) -> io::Result<Bytes> {
    let mut body = pool.take(len);
    dec.take_lone_fragment(buf, body.vec_mut());
    fill(r, &mut body, len).await?;
    Ok(body.freeze())
}

/// Reads from `r` into `body` until it holds `upto` bytes of the record, within the
/// capacity taken (the buffer never grows); an end of stream first is a truncated
/// record.
pub(crate) async fn fill<R: AsyncRead + Unpin>(
    r: &mut R,
    body: &mut RecordBuffer,
    upto: usize,
) -> io::Result<()> {
    use bytes::BufMut;
    while body.len() < upto {
        let rest = upto - body.len();
        if r.read_buf(&mut body.vec_mut().limit(rest)).await? == 0 {
            return Err(invalid_data(crate::RecordError::TruncatedRecord {
                buffered: body.len(),
            }));
        }
    }
    Ok(())
}

pub(crate) fn invalid_data(e: crate::RecordError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Writes `msg` as one record of fragments of at most `max_fragment` bytes, with
/// vectored writes: DDP-eligible data is written from its own buffers, not copied.
/// Data left in files ([`xdr::FileRange`]) is read first ([`read_range`]); the
/// server's writer sends it by `sendfile` instead.
pub async fn write_record<W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &XdrStream,
    max_fragment: usize,
) -> io::Result<()> {
    if msg.has_file_data() {
        let msg = msg.clone().materialize(read_range)?;
        return write_all_vectored(w, frame(msg.gather(), max_fragment)).await;
    }
    write_all_vectored(w, frame(msg.gather(), max_fragment)).await
}

/// Drops the first `n` bytes of `pieces` (what a vectored write took).
pub(crate) fn consume(pieces: &mut VecDeque<Bytes>, mut n: usize) {
    while n > 0 {
        let Some(front) = pieces.front_mut() else {
            break;
        };
        if front.len() <= n {
            n -= front.len();
            pieces.pop_front();
        } else {
            front.advance(n);
            n = 0;
        }
    }
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    pieces: Vec<Bytes>,
) -> io::Result<()> {
    let mut pieces: VecDeque<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
    while !pieces.is_empty() {
        let slices: Vec<IoSlice<'_>> = pieces.iter().take(64).map(|p| IoSlice::new(p)).collect();
        let n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        consume(&mut pieces, n);
    }
    w.flush().await
}

/// ONC RPC over TCP with record marking: the first client transport.
#[derive(Debug, Clone)]
pub struct TcpTransport {
    /// Server address.
    pub addr: SocketAddr,
    /// Largest reply record accepted.
    pub max_record: usize,
    /// Largest fragment sent.
    pub max_fragment: usize,
}

impl TcpTransport {
    /// A transport to `addr` with the default limits.
    pub fn new(addr: SocketAddr) -> Self {
        TcpTransport {
            addr,
            max_record: DEFAULT_MAX_RECORD,
            max_fragment: DEFAULT_MAX_FRAGMENT,
        }
    }
}

/// Sending half of a TCP connection.
#[derive(Debug)]
pub struct TcpSender {
    w: OwnedWriteHalf,
    max_fragment: usize,
}

/// Receiving half of a TCP connection.
#[derive(Debug)]
pub struct TcpReceiver {
    r: OwnedReadHalf,
    dec: RecordDecoder,
    buf: BytesMut,
    /// Large replies (READ data) are read into buffers reused once the caller has
    /// dropped them: kept for the connection's life, bounded by the default.
    reuse: RecordBuffers,
}

impl Transport for TcpTransport {
    type Sender = TcpSender;
    type Receiver = TcpReceiver;

    async fn connect(&self) -> io::Result<(TcpSender, TcpReceiver)> {
        let stream = TcpStream::connect(self.addr).await?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        Ok((
            TcpSender {
                w,
                max_fragment: self.max_fragment,
            },
            TcpReceiver {
                r,
                dec: RecordDecoder::new(self.max_record),
                buf: BytesMut::new(),
                reuse: RecordBuffers::default(),
            },
        ))
    }
}

impl RecordSender for TcpSender {
    async fn send(&mut self, msg: &XdrStream) -> io::Result<()> {
        write_record(&mut self.w, msg, self.max_fragment).await
    }
}

impl RecordReceiver for TcpReceiver {
    async fn recv(&mut self) -> io::Result<Option<Incoming>> {
        let record =
            read_record(&mut self.r, &mut self.dec, &mut self.buf, Some(&self.reuse)).await?;
        Ok(record.map(Incoming::Message))
    }
}

/// Shuts down the write side (sends FIN) after the last reply.
pub(crate) async fn close_write<W: AsyncWrite + Unpin>(w: &mut W) {
    let _ = w.shutdown().await;
}
