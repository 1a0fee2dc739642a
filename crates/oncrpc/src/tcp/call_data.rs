//! A call's bulk data received apart from the call: from the socket into pipes, and
//! from the pipes into a file, without passing through the server's memory.
//!
//! Why: a 1 MiB WRITE over TCP was copied twice on the server, from the socket into
//! the call's buffer (`recvmsg`) and from there into the page cache (`pwrite`). With
//! `splice(2)` the socket's pages go into a pipe by reference and the pipe's pages
//! into the file with one copy: one copy per written byte instead of two. In the lab's
//! qemu guest, where each copy is emulated, that cut the server's CPU per GiB written
//! (docs/bench/README.md, "WRITE data spliced").
//!
//! Which bytes are the bulk data is the upper layer's to say: the service names its
//! call's DDP-eligible argument from the call's first bytes
//! ([`crate::Service::call_data_item`], the byte-stream counterpart of RPC-over-RDMA's
//! Read chunk). The reader then reads the call's header into memory, splices the
//! item's data into pipes ([`CallData`]), and reads the rest; the call is handed up
//! with the data taken out and its length word kept, decoded by
//! [`xdr::Decoder::with_item_elided`], and the service writes the data from the
//! pipes ([`CallData::write_to`]).
//!
//! A pipe holds as many socket buffers as it has pages (256 for 1 MiB, the most a
//! process without CAP_SYS_RESOURCE may ask: `/proc/sys/fs/pipe-max-size`), however
//! little each holds: on loopback a 1 MiB WRITE filled a 1 MiB pipe after 0.6 MB in some calls.
//! An item goes on into another pipe when one fills, up to [`MAX_PIPES_PER_ITEM`].
//!
//! What is read into memory instead, and why that is still correct:
//! - items smaller than [`MIN_SPLICED`] (a system call or two more would cost more
//!   than the copy saves) or larger than [`MAX_SPLICED`]: read with the call;
//! - an item that no pipe could be had for (at most [`MAX_OPEN_PIPES`] are open), or
//!   that fills [`MAX_PIPES_PER_ITEM`] (a peer sending tiny segments: through qemu's
//!   user-mode network, 450 bytes per page of pipe): read into memory, and still
//!   handed up apart from the call ([`CallData::spliced`] false);
//! - a file system that cannot take a splice ([`CallData::write_to`] reads the pipes
//!   into memory and writes that).
//!
//! Bounds: pipes exist only for calls in service (their data is the call's, charged
//! with the call record as before), and at most [`MAX_IDLE_PIPES`] empty ones are
//! kept for reuse, closed once none was taken for a while
//! ([`Pipes::release_if_unused_for`]).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};

use crate::service::DataItem;

/// Items smaller than this are read with the call.
pub const MIN_SPLICED: usize = 64 * 1024;

/// Items larger than this are read with the call: a WRITE's data at the largest
/// `wsize` nfsd offers.
pub const MAX_SPLICED: usize = 1024 * 1024;

/// Each pipe's capacity.
pub const PIPE_BYTES: usize = 1024 * 1024;

/// Most pipes one item may fill before it is read into memory instead.
pub const MAX_PIPES_PER_ITEM: usize = 16;

/// Most pipes open at once in one pool, in use or idle: two descriptors each, so
/// that a peer sending tiny segments (many pipes per item) cannot take the server's
/// descriptors from its files and connections. Past it, items are read into memory.
pub const MAX_OPEN_PIPES: usize = 64;

/// Empty pipes kept for the next calls.
pub const MAX_IDLE_PIPES: usize = 16;

/// A pool of empty pipes of [`PIPE_BYTES`]. Clones share the pool.
#[derive(Debug, Clone, Default)]
pub struct Pipes {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    idle: Mutex<Idle>,
    /// Pipes open now ([`MAX_OPEN_PIPES`]).
    open: AtomicUsize,
}

#[derive(Debug, Default)]
struct Idle {
    pipes: Vec<Pipe>,
    /// When a pipe was last taken.
    last_taken: Option<Instant>,
}

/// A pipe of a pool, counted in its `open` until closed.
#[derive(Debug)]
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    pool: Arc<Shared>,
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.pool.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pipes {
    fn take(&self) -> io::Result<Pipe> {
        let kept = {
            let mut idle = self.idle();
            idle.last_taken = Some(Instant::now());
            idle.pipes.pop()
        };
        if let Some(p) = kept {
            return Ok(p);
        }
        let open = &self.shared.open;
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_OPEN_PIPES {
            open.fetch_sub(1, Ordering::Relaxed);
            return Err(io::Error::other("all the pipes the pool may open are open"));
        }
        // Counted from here: dropped, it is uncounted.
        let counted = |read, write| Pipe {
            read,
            write,
            pool: self.shared.clone(),
        };
        // Non-blocking, so that a full pipe is an answer (EAGAIN), never a wait: an
        // item's data only ever goes in before it comes out.
        let (read, write) = match pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK) {
            Ok(ends) => ends,
            Err(e) => {
                open.fetch_sub(1, Ordering::Relaxed);
                return Err(e.into());
            }
        };
        let pipe = counted(read, write);
        fcntl_setpipe_size(&pipe.write, PIPE_BYTES)?;
        Ok(pipe)
    }

    /// Keeps `pipe`, which must be empty, unless enough are kept.
    fn give_back(&self, pipe: Pipe) {
        let mut idle = self.idle();
        if idle.pipes.len() < MAX_IDLE_PIPES {
            idle.pipes.push(pipe);
        }
    }

    /// Closes the idle pipes if none was taken for `quiet` (run every few seconds,
    /// as [`crate::tcp::RecordBuffers::release_if_unused_for`]): a server whose
    /// clients left keeps no descriptors for them.
    pub fn release_if_unused_for(&self, quiet: Duration) {
        let mut idle = self.idle();
        if idle.last_taken.map_or(true, |t| t.elapsed() >= quiet) {
            idle.pipes = Vec::new();
        }
    }

    /// Empty pipes kept now.
    pub fn idle_count(&self) -> usize {
        self.idle().pipes.len()
    }

    /// Pipes open now, in use or idle.
    pub fn open_count(&self) -> usize {
        self.shared.open.load(Ordering::Relaxed)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Idle> {
        // Each update is one push, one pop or one clear: a poisoned lock is usable.
        self.shared.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A call's bulk data item received apart: `len` bytes, which belonged at offset
/// [`CallData::offset`] of the call record; in pipes, or in memory when they could
/// not take it (module documentation). Dropped unwritten, its pipes are closed.
#[derive(Debug)]
pub struct CallData(Box<Received>);

/// What [`CallData`] holds, boxed: the calls that have none (nearly all) carry one
/// pointer's worth of `None` through the futures that serve them.
#[derive(Debug)]
struct Received {
    source: Source,
    offset: usize,
    len: usize,
}

#[derive(Debug)]
enum Source {
    /// The data, in order: each pipe and the bytes it holds.
    Pipes(Vec<(Pipe, usize)>, Pipes),
    Memory(Vec<u8>),
}

impl CallData {
    /// Bytes of data.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// True for an item of no bytes (never made: see [`MIN_SPLICED`]).
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Offset in the call record where the data began: where
    /// [`xdr::Decoder::with_item_elided`] finds its length word ending.
    pub fn offset(&self) -> usize {
        self.0.offset
    }

    /// True when the data is in pipes (false: read into memory).
    pub fn spliced(&self) -> bool {
        matches!(self.0.source, Source::Pipes(..))
    }

    /// Writes the data to `file` at `offset`: from the pipes by `splice` (their
    /// pages copied once into the page cache), or by `pwrite`. A file that takes no
    /// splice (`EINVAL`) is written from memory instead. On error, part of the data
    /// may have been written, as with `pwrite`.
    pub fn write_to(self, file: BorrowedFd<'_>, offset: u64) -> io::Result<()> {
        let (parts, pool) = match self.0.source {
            Source::Memory(data) => return write_all_at(file, &data, offset),
            Source::Pipes(parts, pool) => (parts, pool),
        };
        let mut at = offset;
        for (pipe, held) in parts {
            let mut done = 0;
            while done < held {
                let mut to = at.saturating_add(done as u64);
                match splice(
                    &pipe.read,
                    None,
                    file,
                    Some(&mut to),
                    held - done,
                    SpliceFlags::MOVE,
                ) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => done += n,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(rustix::io::Errno::INVAL) if done == 0 => {
                        let data = drain(&pipe.read, held)?;
                        write_all_at(file, &data, at)?;
                        done = held;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            at = at.saturating_add(held as u64);
            pool.give_back(pipe);
        }
        Ok(())
    }

    /// The data in memory (read out of the pipes: one copy).
    pub fn into_vec(self) -> io::Result<Vec<u8>> {
        let Received { source, len, .. } = *self.0;
        match source {
            Source::Memory(data) => Ok(data),
            Source::Pipes(parts, pool) => drain_all(parts, &pool, len),
        }
    }
}

/// Reads exactly `len` bytes out of a pipe that holds them.
fn drain(read: &OwnedFd, len: usize) -> io::Result<Vec<u8>> {
    let mut data = Vec::with_capacity(len);
    drain_into(read, len, &mut data)?;
    Ok(data)
}

fn drain_into(read: &OwnedFd, len: usize, data: &mut Vec<u8>) -> io::Result<()> {
    let end = data.len() + len;
    data.resize(end, 0);
    let mut got = end - len;
    while got < end {
        match rustix::io::read(read, &mut data[got..end]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The data of `parts`, in order, in memory; the emptied pipes go back to `pool`.
fn drain_all(parts: Vec<(Pipe, usize)>, pool: &Pipes, len: usize) -> io::Result<Vec<u8>> {
    let mut data = Vec::with_capacity(len);
    for (pipe, held) in parts {
        drain_into(&pipe.read, held, &mut data)?;
        pool.give_back(pipe);
    }
    Ok(data)
}

fn write_all_at(file: BorrowedFd<'_>, data: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match rustix::io::pwrite(file, &data[done..], offset.saturating_add(done as u64)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Moves the call record's bulk data item (`item.len` bytes, the first of them
/// `first`, already read) from `socket` into pipes of `pool`; into memory if no
/// pipe can be had or the item fills [`MAX_PIPES_PER_ITEM`] (module documentation).
/// Either way the call goes up without the item, so that which calls come that way
/// depends on their bytes alone (the duplicate request cache keys on them:
/// [`crate::drc::CallKey`]).
pub(crate) async fn receive(
    socket: &tokio::net::TcpStream,
    pool: &Pipes,
    first: &[u8],
    item: DataItem,
) -> io::Result<CallData> {
    let mut parts: Vec<(Pipe, usize)> = Vec::new();
    let mut moved = 0;
    let mut want_pipe = true;
    let fd = socket.as_fd();
    while moved < item.len {
        if want_pipe {
            let pipe = match pool.take() {
                Ok(pipe) if parts.len() < MAX_PIPES_PER_ITEM => pipe,
                taken => {
                    match taken {
                        Err(e) => {
                            tracing::debug!(error = %e, "no pipe for a call's data; into memory")
                        }
                        Ok(_) => tracing::debug!(moved, "the item filled its pipes; into memory"),
                    }
                    return read_to_memory(socket, parts, pool, first, moved, item).await;
                }
            };
            parts.push((pipe, 0));
            want_pipe = false;
        }
        let (pipe, held) = parts.last_mut().expect("a pipe was pushed");
        let filled = if moved < first.len() {
            // COPY: the item's first bytes, which came with the call's header (at
            // most what one read got), into the pipe.
            match rustix::io::write(&pipe.write, &first[moved..]) {
                Ok(n) => Some(n),
                Err(rustix::io::Errno::AGAIN) => None,
                Err(e) => return Err(e.into()),
            }
        } else {
            socket.readable().await?;
            let spliced = socket.try_io(tokio::io::Interest::READABLE, || {
                match splice(
                    fd,
                    None,
                    &pipe.write,
                    None,
                    item.len - moved,
                    SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
                ) {
                    Ok(n) => Ok(Some(n)),
                    // EAGAIN with bytes waiting in the socket: the pipe is full.
                    Err(rustix::io::Errno::AGAIN) if rustix::io::ioctl_fionread(fd)? > 0 => {
                        Ok(None)
                    }
                    Err(e) => Err(io::Error::from(e)),
                }
            });
            match spliced {
                Ok(Some(0)) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        match filled {
            Some(n) => {
                *held += n;
                moved += n;
            }
            // Full: go on in another pipe. One that took nothing means segments too
            // small for any pipe.
            None if *held > 0 => want_pipe = true,
            None => {
                tracing::debug!(
                    moved,
                    pipes = parts.len(),
                    "a fresh pipe took nothing; into memory"
                );
                return read_to_memory(socket, parts, pool, first, moved, item).await;
            }
        }
    }
    Ok(CallData(Box::new(Received {
        source: Source::Pipes(parts, pool.clone()),
        offset: item.offset,
        len: item.len,
    })))
}

/// Reads the rest of the item into memory: what `parts` hold (`moved` bytes, the
/// first of them from `first`), then from `socket`.
async fn read_to_memory(
    socket: &tokio::net::TcpStream,
    parts: Vec<(Pipe, usize)>,
    pool: &Pipes,
    first: &[u8],
    moved: usize,
    item: DataItem,
) -> io::Result<CallData> {
    use bytes::BufMut;
    // COPY: what the pipes took, back into memory.
    let mut data = drain_all(parts, pool, item.len)?;
    data.extend_from_slice(&first[moved.min(first.len())..]);
    while data.len() < item.len {
        socket.readable().await?;
        let rest = item.len - data.len();
        match socket.try_read_buf(&mut (&mut data).limit(rest)) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(CallData(Box::new(Received {
        source: Source::Memory(data),
        offset: item.offset,
        len: item.len,
    })))
}
