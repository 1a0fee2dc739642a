//! The server's reply writer: batches of whole records onto one TCP connection, with
//! DDP data left in files ([`xdr::FileRange`], NFS READ data) sent from the page cache
//! by `sendfile(2)` instead of from memory.
//!
//! Why: a READ reply written with `writev` from a buffer costs the server two copies
//! of every byte (page cache -> buffer by `pread`, buffer -> socket by `writev`);
//! `sendfile` hands the socket references to the page-cache pages, so the server
//! copies none (on loopback the receiver's `recv` is then the only copy). Measured
//! against `pread` + `writev`, `splice` through a pipe, and `MSG_ZEROCOPY` in
//! ARCHITECTURE.md ("nfs3 and nfsd", READ over TCP).
//!
//! The rules, all here:
//! - **Atomicity.** One task per connection owns the write half and writes each reply
//!   whole before the next, so no reply is interleaved inside another's record; a
//!   batch is the replies already queued when the writer wakes, in queue order.
//! - **Framing.** A record is framed before anything is sent ([`frame_pieces`]): its
//!   fragment lengths come from the lengths fixed at encoding, including each file
//!   range's. Bytes in memory up to a file range go out in one `sendmsg` with
//!   `MSG_MORE` (so the header does not leave as a packet of its own), then the range
//!   by `sendfile`; bytes after it (XDR padding, the next replies) in the next
//!   `sendmsg`. A batch of replies without file data is one `sendmsg`.
//! - **Short files.** If the file shrank after the reply was encoded, `sendfile` ends
//!   early (returns 0); the rest of the announced range is sent as zeros, so the
//!   record stays well framed (the client reads zeros, as from a hole).
//! - **Fallback.** If `sendfile` refuses the file (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`:
//!   a file system without splice support), the rest of the range is read into memory
//!   and written: one copy, as before. Any other error (the socket's, or the file's
//!   `EIO` after the header went out) closes the connection: a record cannot be
//!   taken back.
//! - **Non-blocking socket.** Every system call runs under tokio's
//!   [`TcpStream::async_io`]: on `EAGAIN` the task waits for the socket to be writable
//!   and retries, resuming where the partial write stopped.
//!
//! No `unsafe`: `sendmsg` and `sendfile` are rustix's safe wrappers.

use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;

use bytes::{Buf, Bytes, BytesMut};
use rustix::net::{SendAncillaryBuffer, SendFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;
use xdr::{FileRange, Piece, XdrStream};

use crate::record::frame_pieces;

/// At most this many buffers per `sendmsg` (Linux's `UIO_MAXIOV` is 1024).
const MAX_IOV: usize = 256;

/// Zeros for padding a range whose file shrank.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Writes `replies` to `sock` in order, each as one whole record of fragments of at
/// most `max_fragment` bytes. Returns when every byte was handed to the kernel.
pub(crate) async fn write_replies(
    sock: &TcpStream,
    replies: &[XdrStream],
    max_fragment: usize,
) -> io::Result<()> {
    let mut pieces = Vec::new();
    for reply in replies {
        pieces.extend(frame_pieces(reply.pieces(), max_fragment));
    }
    let mut rest = &pieces[..];
    while let Some(first) = rest.first() {
        match first {
            Piece::File(range) => {
                send_range(sock, range, rest.len() > 1).await?;
                rest = &rest[1..];
            }
            Piece::Bytes(_) => {
                let run = rest
                    .iter()
                    .position(|p| matches!(p, Piece::File(_)))
                    .unwrap_or(rest.len());
                let bytes = rest[..run].iter().map(|p| match p {
                    Piece::Bytes(b) => b.clone(),
                    Piece::File(_) => unreachable!("the run stops before a file piece"),
                });
                send_bytes(sock, bytes.collect(), run < rest.len()).await?;
                rest = &rest[run..];
            }
        }
    }
    Ok(())
}

/// Sends `pieces` whole, by `sendmsg`. With `more`, tells the kernel that more data
/// follows at once (`MSG_MORE`), so a short header is not pushed as its own segment.
async fn send_bytes(sock: &TcpStream, pieces: Vec<Bytes>, more: bool) -> io::Result<()> {
    let flags = if more {
        SendFlags::MORE | SendFlags::NOSIGNAL
    } else {
        SendFlags::NOSIGNAL
    };
    let mut pieces: std::collections::VecDeque<Bytes> =
        pieces.into_iter().filter(|p| !p.is_empty()).collect();
    while !pieces.is_empty() {
        let mut n = sock
            .async_io(Interest::WRITABLE, || {
                let slices: Vec<IoSlice<'_>> = pieces
                    .iter()
                    .take(MAX_IOV)
                    .map(|p| IoSlice::new(p))
                    .collect();
                rustix::net::sendmsg(sock, &slices, &mut SendAncillaryBuffer::default(), flags)
                    .map_err(io::Error::from)
            })
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
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
    Ok(())
}

/// Sends the file range by `sendfile` (see the module rules for short files and the
/// fallback). `more`: more of this batch follows.
async fn send_range(sock: &TcpStream, range: &FileRange, more: bool) -> io::Result<()> {
    let end = range.offset + range.len as u64;
    let mut at = range.offset;
    while at < end {
        let want = (end - at) as usize;
        let sent = sock
            .async_io(Interest::WRITABLE, || {
                rustix::fs::sendfile(sock, &*range.file, Some(&mut at), want)
                    .map_err(io::Error::from)
            })
            .await;
        match sent {
            Ok(0) => {
                tracing::debug!(
                    missing = end - at,
                    "file shorter than its READ reply: sending zeros"
                );
                return send_zeros(sock, (end - at) as usize, more).await;
            }
            Ok(_) => {} // `at` moved on
            Err(e) if sendfile_unsupported(&e) => {
                tracing::debug!(error = %e, "sendfile refused: copying the range");
                let rest = FileRange {
                    file: range.file.clone(),
                    offset: at,
                    len: want,
                };
                return send_bytes(sock, vec![read_range(&rest)?], more).await;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn sendfile_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == rustix::io::Errno::INVAL.raw_os_error()
            || code == rustix::io::Errno::NOSYS.raw_os_error()
            || code == rustix::io::Errno::OPNOTSUPP.raw_os_error()
    )
}

async fn send_zeros(sock: &TcpStream, mut len: usize, more: bool) -> io::Result<()> {
    while len > 0 {
        let n = len.min(ZEROS.len());
        len -= n;
        send_bytes(sock, vec![Bytes::from_static(&ZEROS[..n])], more || len > 0).await?;
    }
    Ok(())
}

/// Reads a file range into memory (the copy the `sendfile` path avoids): exactly
/// `range.len` bytes, zeros past the file's end if it shrank. For senders that cannot
/// send from the file ([`XdrStream::materialize`]).
pub fn read_range(range: &FileRange) -> io::Result<Bytes> {
    let mut buf = BytesMut::zeroed(range.len);
    let mut filled = 0;
    while filled < range.len {
        match range
            .file
            .read_at(&mut buf[filled..], range.offset + filled as u64)
        {
            Ok(0) => break, // shrank: the rest stays zero
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(buf.freeze())
}
