//! File ranges mapped into memory, and `sendmsg` over bytes and such ranges: how READ
//! data leaves over TCP, one copy from the page cache into the socket (the reply
//! writer's rules are in [`super::replies`]).
//!
//! This module holds the crate's only `unsafe` code. Its invariants:
//!
//! 1. **A mapping lives exactly as long as its [`MappedRange`].** It is created
//!    read-only and shared (`PROT_READ`, `MAP_SHARED`) over a range of an open file and
//!    unmapped once, when the `MappedRange` drops. Nothing else unmaps it, and nothing
//!    maps over it.
//! 2. **Our code never reads the mapped bytes.** No Rust reference to them is ever
//!    formed. They go to the kernel only, as an `iovec` of [`send_chunks`]. So another
//!    process writing or truncating the file cannot break Rust's aliasing rules. A page
//!    past a (since truncated) end of file cannot raise `SIGBUS` in this process either:
//!    the kernel's copy out of it fails, and `sendmsg` returns `EFAULT` or a short count.
//! 3. **Every `iovec` handed to `sendmsg` points into memory that outlives the call.**
//!    It is either a `&[u8]` borrowed for the call or a range inside a `MappedRange`
//!    borrowed for the call, bounded by that range's length.

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use xdr::FileRange;

/// A range of a file mapped read-only into this process (invariant 1). Its bytes are
/// never read by our code (invariant 2); see [`send_chunks`].
pub(crate) struct MappedRange {
    /// Start of the mapping: the range's offset rounded down to a page.
    base: NonNull<c_void>,
    /// Length of the mapping.
    map_len: usize,
    /// Where the range starts inside the mapping.
    lead: usize,
    /// The range's length.
    len: usize,
}

// SAFETY: the mapping is plain shared memory of the process, not tied to a thread; the
// struct only holds its address for `iovec`s and the final `munmap`.
unsafe impl Send for MappedRange {}
// SAFETY: as above; `&MappedRange` allows nothing but building `iovec`s.
unsafe impl Sync for MappedRange {}

impl MappedRange {
    /// Maps `range` (of a file open for reading). Fails where the file cannot be
    /// mapped (`ENODEV`: a file system without `mmap`; `EACCES`: not open for
    /// reading); the caller then sends it another way. A range past the end of the file
    /// maps (the kernel does not check); sending its pages past the end fails with
    /// `EFAULT`.
    pub(crate) fn map(range: &FileRange) -> io::Result<MappedRange> {
        assert!(range.len > 0, "an empty range is not mapped");
        let page = rustix::param::page_size() as u64;
        let start = range.offset - range.offset % page;
        let lead = (range.offset - start) as usize;
        let map_len = lead
            .checked_add(range.len)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let offset = libc::off_t::try_from(start)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a fresh mapping at an address of the kernel's choosing (null hint, no
        // MAP_FIXED), so no existing memory is replaced; the file descriptor is valid for
        // the call. The result is owned by the returned value (invariant 1).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                range.file.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(MappedRange {
            base,
            map_len,
            lead,
            len: range.len,
        })
    }

    /// The range's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `iovec` of the range's bytes from `from` on (`from <= len`).
    fn iovec_from(&self, from: usize) -> libc::iovec {
        assert!(from <= self.len);
        libc::iovec {
            // Inside the mapping: lead + from <= lead + len == map_len (invariant 3).
            iov_base: self
                .base
                .as_ptr()
                .cast::<u8>()
                .wrapping_add(self.lead + from)
                .cast(),
            iov_len: self.len - from,
        }
    }
}

impl Drop for MappedRange {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly the mapping `map` created, unmapped only
        // here (invariant 1); no reference into it exists (invariant 2).
        let r = unsafe { libc::munmap(self.base.as_ptr(), self.map_len) };
        debug_assert_eq!(r, 0, "munmap: {}", io::Error::last_os_error());
    }
}

/// One buffer of a [`send_chunks`]: bytes in memory, or a mapped range from an offset
/// on.
pub(crate) enum Chunk<'a> {
    /// Bytes in memory.
    Bytes(&'a [u8]),
    /// `range`'s bytes from `from` on.
    Mapped {
        /// The range.
        range: &'a MappedRange,
        /// Bytes of it already sent.
        from: usize,
    },
}

/// `sendmsg` of `chunks` in order on socket `sock` with `flags` (`MSG_*`): returns the
/// bytes the kernel took, which may be fewer than offered. `EFAULT` (with nothing
/// taken) means the first chunk is a mapped range whose next page lies past the file's
/// end now.
pub(crate) fn send_chunks<'a>(
    sock: BorrowedFd<'_>,
    chunks: impl IntoIterator<Item = Chunk<'a>>,
    flags: libc::c_int,
) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = chunks
        .into_iter()
        .map(|c| match c {
            Chunk::Bytes(b) => libc::iovec {
                iov_base: b.as_ptr() as *mut c_void,
                iov_len: b.len(),
            },
            Chunk::Mapped { range, from } => range.iovec_from(from),
        })
        .collect();
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` points at `iov`, whose entries point into memory borrowed for this
    // call (invariant 3); the kernel only reads it.
    let n = unsafe { libc::sendmsg(sock.as_fd().as_raw_fd(), &msg, flags) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::temp_file;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn bytes_and_a_mapped_range_go_out_in_one_sendmsg() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 13) as u8).collect();
        let file = temp_file(&data);
        // An offset inside a page: the mapping starts at the page, the range at 5,000.
        let map = MappedRange::map(&FileRange {
            file,
            offset: 5_000,
            len: 10_000,
        })
        .unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        let chunks = [
            Chunk::Bytes(b"head"),
            Chunk::Mapped {
                range: &map,
                from: 100,
            },
            Chunk::Bytes(b"tail"),
        ];
        let n = send_chunks(a.as_fd(), chunks, libc::MSG_NOSIGNAL).unwrap();
        assert_eq!(n, 4 + 9_900 + 4);
        let mut got = vec![0; n];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got[..4], b"head");
        assert!(got[4..4 + 9_900] == data[5_100..15_000]);
        assert_eq!(&got[4 + 9_900..], b"tail");
    }

    /// What the reply writer relies on: the kernel's copy out of a mapped page past the
    /// file's end fails with EFAULT (no SIGBUS for this process).
    #[test]
    fn a_mapped_page_past_the_end_of_file_is_efault_not_sigbus() {
        let page = rustix::param::page_size();
        let file = temp_file(&vec![1u8; 3 * page]);
        let map = MappedRange::map(&FileRange {
            file: file.clone(),
            offset: 2 * page as u64,
            len: page,
        })
        .unwrap();
        file.set_len(page as u64).unwrap(); // the mapped page is now past the end
        let (a, _b) = UnixStream::pair().unwrap();
        let chunks = [Chunk::Mapped {
            range: &map,
            from: 0,
        }];
        let e = send_chunks(a.as_fd(), chunks, libc::MSG_NOSIGNAL).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
    }
}
