//! The server's reply writer: batches of whole records onto one TCP connection, with
//! DDP data left in files ([`xdr::FileRange`], NFS READ data) sent from the page cache
//! instead of from memory the server filled: by `sendfile(2)`, or with
//! [`FileData::Copy`] by `sendmsg` from a read-only mapping of the file.
//!
//! Why: a READ reply written with `writev` from a buffer costs the server two copies
//! of every byte (page cache -> buffer by `pread`, buffer -> socket by `writev`).
//! `sendfile` hands the socket references to the page-cache pages, so the server
//! copies none; a receiver on the same host then copies out of the page cache.
//! `Copy` has the kernel copy once, page cache -> socket buffers, from a read-only
//! mapping of the file; a receiver on the same host then copies out of buffers just
//! written. Measured both ways in docs/bench/README.md ("READ over TCP: sendfile or
//! one copy"); the options weighed are in docs/design/nfsd.md ("READ over TCP").
//!
//! The rules, all here:
//! - **Atomicity.** The server's connection holds its write half under a lock, and
//!   whoever holds it writes each reply whole before the next, so no reply is
//!   interleaved inside another's record: the connection's own task for a call that
//!   finished as it was read, its writer task for the others. A batch is the replies
//!   already queued when the writer wakes, in queue order.
//! - **Framing.** A record is framed before anything is sent ([`frame_pieces`]): its
//!   fragment lengths come from the lengths fixed at encoding, including each file
//!   range's. A reply alone, all in memory and within one fragment (most replies),
//!   is its record mark and its bytes in one `sendmsg`, with nothing allocated
//!   ([`single_fragment_mark`]). A batch of replies without file data is one
//!   `sendmsg`. With
//!   `Sendfile`, bytes in memory up to a file range go out in one `sendmsg` with
//!   `MSG_MORE` (so the header does not leave as a packet of its own), then the range
//!   by `sendfile`, then the bytes after it (XDR padding, the next replies). With
//!   `Copy`, each range is mapped ([`super::mapped`], the crate's one `unsafe`
//!   module) and sent by a `sendmsg` of its own after the bytes before it (again with
//!   `MSG_MORE`): one `sendmsg` of header and data together measured slower.
//! - **Short files.** If the file shrank after the reply was encoded, `sendfile` ends
//!   early (returns 0); the rest of the announced range is sent as zeros, so the
//!   record stays well framed (the client reads zeros, as from a hole). A mapped page
//!   past the new end makes `sendmsg` fail with `EFAULT` (the kernel's copy faults; no
//!   signal reaches us); the first mapped range of that `sendmsg` then goes by
//!   `sendfile` from where it stood, with the same result.
//! - **Fallback.** A range that cannot be mapped (`mmap` refused) goes by `sendfile`.
//!   If `sendfile` refuses the file (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`: a file system
//!   without splice support), the rest of the range is read into memory and written:
//!   one copy, as before. Any other error (the socket's, or the file's `EIO` after the
//!   header went out) closes the connection: a record cannot be taken back.
//! - **Non-blocking socket.** Every system call runs under tokio's
//!   [`TcpStream::async_io`]: on `EAGAIN` the task waits for the socket to be writable
//!   and retries, resuming where the partial write stopped.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use bytes::{Buf, Bytes, BytesMut};
use rustix::net::{SendAncillaryBuffer, SendFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;
use xdr::{FileRange, Piece, XdrStream};

use super::consume;
use super::mapped::{send_chunks, Chunk, MappedRange};
use crate::record::{frame_pieces, single_fragment_mark};

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
    file_data: FileData,
) -> io::Result<()> {
    if let [reply] = replies {
        if let Some(mark) = single_record_in_memory(reply, max_fragment) {
            return send_record(sock, &mark, &reply.inline).await;
        }
    }
    let mut out = VecDeque::new();
    for reply in replies {
        for piece in frame_pieces(reply.pieces(), max_fragment) {
            match piece {
                Piece::Bytes(b) if b.is_empty() => {}
                Piece::Bytes(b) => out.push_back(Out::Bytes(b)),
                Piece::File(range) if range.len == 0 => {}
                Piece::File(range) if file_data == FileData::Sendfile => {
                    out.push_back(Out::File(range))
                }
                Piece::File(range) => out.push_back(match MappedRange::map(&range) {
                    Ok(map) => Out::Mapped {
                        map,
                        range,
                        sent: 0,
                    },
                    Err(e) => {
                        tracing::debug!(error = %e, "mmap refused: sending the range by sendfile");
                        Out::File(range)
                    }
                }),
            }
        }
    }
    while let Some(first) = out.front() {
        if let Out::File(range) = first {
            let range = range.clone();
            send_range(sock, &range, out.len() > 1).await?;
            out.pop_front();
            continue;
        }
        // The bytes up to the next file range in one `sendmsg`, with `MSG_MORE` if
        // anything follows; a mapped range in a `sendmsg` of its own. (One `sendmsg`
        // of header, data and what follows measured slower for nfs-cat: 2,190-2,330
        // against 2,460-2,610 MB/s, docs/bench/README.md.) The kernel may take less
        // than offered; the rest goes in the next.
        let run = match out.iter().position(|o| !matches!(o, Out::Bytes(_))) {
            Some(0) => 1,
            Some(i) => i,
            None => out.len(),
        };
        let flags = if run < out.len() {
            libc::MSG_MORE | libc::MSG_NOSIGNAL
        } else {
            libc::MSG_NOSIGNAL
        };
        let sent = sock
            .async_io(Interest::WRITABLE, || {
                let chunks = out.iter().take(run.min(MAX_IOV)).map(Out::chunk);
                send_chunks(sock.as_fd(), chunks, flags)
            })
            .await;
        match sent {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => consume_out(&mut out, n),
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                // A mapped page lies past the file's end now (it shrank after the reply
                // was encoded): the range goes by `sendfile` from where it stood, which
                // sends exactly what the file still holds and zeros for the rest.
                let Some(i) = out
                    .iter()
                    .take(run)
                    .position(|o| matches!(o, Out::Mapped { .. }))
                else {
                    return Err(e);
                };
                if let Out::Mapped { range, sent, .. } = &out[i] {
                    tracing::debug!("a mapped READ range faulted: sending it by sendfile");
                    out[i] = Out::File(FileRange {
                        file: range.file.clone(),
                        offset: range.offset + *sent as u64,
                        len: range.len - *sent,
                    });
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The record mark of `reply` if it is all in memory and fits in one fragment: the
/// common reply (every call's but READ's data and long directory listings), sent by
/// [`send_record`] with nothing allocated.
fn single_record_in_memory(reply: &XdrStream, max_fragment: usize) -> Option<[u8; 4]> {
    if !reply.ddp.is_empty() {
        return None;
    }
    single_fragment_mark(reply.inline.len(), max_fragment)
}

/// Sends the record `mark` + `body` whole, by `sendmsg`, resuming after a partial
/// write.
async fn send_record(sock: &TcpStream, mark: &[u8; 4], body: &[u8]) -> io::Result<()> {
    let total = mark.len() + body.len();
    let mut sent = 0;
    while sent < total {
        let n = sock
            .async_io(Interest::WRITABLE, || {
                let (m, b) = if sent < mark.len() {
                    (&mark[sent..], body)
                } else {
                    (&mark[..0], &body[sent - mark.len()..])
                };
                let slices = [IoSlice::new(m), IoSlice::new(b)];
                let flags = SendFlags::NOSIGNAL;
                rustix::net::sendmsg(sock, &slices, &mut SendAncillaryBuffer::default(), flags)
                    .map_err(io::Error::from)
            })
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        sent += n;
    }
    Ok(())
}

/// How the reply writer sends file ranges ([`xdr::FileRange`]: nfsd's READ data over
/// TCP). Measured both ways in docs/bench/README.md ("READ over TCP: sendfile or one
/// copy").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileData {
    /// `sendfile` from the page cache after the header: the server copies no byte;
    /// the socket takes references to page-cache pages, and a receiver on the same
    /// host copies out of them. The default.
    #[default]
    Sendfile,
    /// One copy: the range is mapped read-only and written by `sendmsg`, so the
    /// kernel copies it into the socket's buffers. On loopback (the receiver on the
    /// same host) it measured faster and cheaper than `sendfile`; in the TCG lab
    /// guest, where copies are emulated, slower. A range that cannot be mapped goes by
    /// `sendfile`.
    Copy,
}

/// What is left to send of a batch.
enum Out {
    /// Bytes in memory.
    Bytes(Bytes),
    /// A file range (`range`) mapped into memory (`map`), `sent` bytes of it already
    /// sent.
    Mapped {
        map: MappedRange,
        range: FileRange,
        sent: usize,
    },
    /// A file range sent by `sendfile` (with [`FileData::Sendfile`], or one that could
    /// not be mapped or faulted).
    File(FileRange),
}

impl Out {
    fn chunk(&self) -> Chunk<'_> {
        match self {
            Out::Bytes(b) => Chunk::Bytes(b),
            Out::Mapped { map, sent, .. } => Chunk::Mapped {
                range: map,
                from: *sent,
            },
            Out::File(_) => unreachable!("a run of chunks stops before a range sent by sendfile"),
        }
    }
}

/// Drops the first `n` bytes of `out` (bytes and mapped ranges only).
fn consume_out(out: &mut VecDeque<Out>, mut n: usize) {
    while n > 0 {
        let Some(front) = out.front_mut() else {
            break;
        };
        let left = match front {
            Out::Bytes(b) => b.len(),
            Out::Mapped { map, sent, .. } => map.len() - *sent,
            Out::File(_) => unreachable!("sendmsg stops before a range sent by sendfile"),
        };
        if left <= n {
            n -= left;
            out.pop_front();
        } else {
            match front {
                Out::Bytes(b) => b.advance(n),
                Out::Mapped { sent, .. } => *sent += n,
                Out::File(_) => unreachable!(),
            }
            n = 0;
        }
    }
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
        let n = sock
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
        consume(&mut pieces, n);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordDecoder;
    use crate::tcp::{read_record, temp_file};
    use std::sync::Arc;
    use xdr::Encoder;

    /// A reply: a word, the file range as a DDP item, a trailing word.
    fn reply(file: &Arc<std::fs::File>, offset: u64, len: usize) -> XdrStream {
        let mut enc = Encoder::new();
        enc.u32(0xAAAA_AAAA);
        enc.ddp_file(FileRange {
            file: file.clone(),
            offset,
            len,
        });
        enc.u32(0xBBBB_BBBB);
        enc.finish()
    }

    fn expected(data: &[u8], offset: usize, len: usize) -> Vec<u8> {
        let mut want = 0xAAAA_AAAAu32.to_be_bytes().to_vec();
        want.extend_from_slice(&(len as u32).to_be_bytes());
        let mut body = data.get(offset..).unwrap_or(&[]).to_vec();
        body.resize(len, 0); // past the end: zeros
        want.extend_from_slice(&body);
        want.resize(want.len() + xdr::pad_len(len), 0);
        want.extend_from_slice(&0xBBBB_BBBBu32.to_be_bytes());
        want
    }

    /// Sends `replies` in one batch over loopback and returns the records received.
    async fn round_trip(
        replies: Vec<XdrStream>,
        max_fragment: usize,
        file_data: FileData,
    ) -> Vec<Vec<u8>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let n = replies.len();
        let sender = tokio::spawn(async move {
            let (sock, _) = listener.accept().await.unwrap();
            write_replies(&sock, &replies, max_fragment, file_data)
                .await
                .unwrap();
        });
        let mut rd = TcpStream::connect(addr).await.unwrap();
        let mut dec = RecordDecoder::new(1 << 24);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        // Records of 128 KiB and more are read into reused buffers.
        let reuse = crate::tcp::RecordBuffers::default();
        for _ in 0..n {
            let rec = read_record(&mut rd, &mut dec, &mut buf, Some(&reuse))
                .await
                .unwrap();
            out.push(rec.expect("a record").to_vec());
        }
        sender.await.unwrap();
        out
    }

    #[tokio::test]
    async fn file_ranges_go_out_whole_in_order_with_other_replies() {
        let data: Vec<u8> = (0..300_001u32).map(|i| (i * 7) as u8).collect();
        let file = temp_file(&data);
        let inline = {
            let mut enc = Encoder::new();
            enc.u32(42);
            enc.finish()
        };
        let cases = [(0, 1), (3, 5), (1, 300_000), (0, 300_001), (299_999, 2)];
        let mut replies = vec![inline.clone()];
        for &(off, len) in &cases {
            replies.push(reply(&file, off as u64, len));
            replies.push(inline.clone());
        }
        // One fragment per record, and fragments of 1,000 bytes (file ranges cut).
        for (max_fragment, file_data) in [usize::MAX, 1000]
            .into_iter()
            .flat_map(|m| [(m, FileData::Sendfile), (m, FileData::Copy)])
        {
            let got = round_trip(replies.clone(), max_fragment, file_data).await;
            assert_eq!(got.len(), replies.len());
            for (i, rec) in got.iter().enumerate() {
                let want = if i % 2 == 0 {
                    42u32.to_be_bytes().to_vec()
                } else {
                    let (off, len) = cases[i / 2];
                    expected(&data, off, len)
                };
                assert!(
                    *rec == want,
                    "record {i} at max_fragment {max_fragment}, {file_data:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_reply_alone_in_memory_goes_out_whole_through_partial_writes() {
        // 8 MiB is more than loopback's socket buffers take at once, so the single
        // record's `sendmsg` returns short and resumes (mid-mark too, for the empty
        // reply's). Over the fragment limit, the same reply goes by the general path.
        let body: Vec<u8> = (0..8 << 20).map(|i: u32| (i % 251) as u8).collect();
        let big = XdrStream::inline_only(Bytes::from(body.clone()));
        for max_fragment in [usize::MAX, body.len(), 100_000] {
            let got = round_trip(vec![big.clone()], max_fragment, FileData::Sendfile).await;
            assert!(got[0] == body, "max_fragment {max_fragment}");
        }
        let empty = round_trip(vec![XdrStream::default()], 1, FileData::Sendfile).await;
        assert!(empty[0].is_empty());
    }

    #[tokio::test]
    async fn a_file_that_shrank_is_padded_with_zeros_to_the_announced_length() {
        let data = vec![7u8; 10_000];
        let file = temp_file(&data);
        let replies = vec![reply(&file, 9_000, 5_000), reply(&file, 20_000, 3)];
        // Copy: the mapped pages past the end fault (EFAULT) and the ranges go by
        // sendfile, which sends what the file holds and zeros for the rest.
        for file_data in [FileData::Sendfile, FileData::Copy] {
            let got = round_trip(replies.clone(), usize::MAX, file_data).await;
            assert!(got[0] == expected(&data, 9_000, 5_000), "{file_data:?}");
            assert!(got[1] == expected(&data, 20_000, 3), "{file_data:?}");
        }
    }

    #[test]
    fn read_range_reads_exactly_len_bytes() {
        let data = b"hello world".to_vec();
        let file = temp_file(&data);
        let r = |offset, len| {
            read_range(&FileRange {
                file: file.clone(),
                offset,
                len,
            })
            .unwrap()
        };
        assert_eq!(&r(6, 5)[..], b"world");
        assert_eq!(&r(9, 4)[..], b"ld\0\0");
        assert_eq!(&r(100, 2)[..], b"\0\0");
        assert!(r(0, 0).is_empty());
    }
}
