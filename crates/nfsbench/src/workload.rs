//! The measured operations, each on a mounted export and bounded in bytes and time:
//! sequential READ of the test file, sequential WRITE of a fresh file (UNSTABLE +
//! COMMIT), and small-RPC rates (NULL, GETATTR) at a number of calls in flight.
//!
//! The client is this process (`nfsclient`); its CPU is `getrusage(RUSAGE_SELF)`, the
//! server's is read from `/proc/PID/stat` ([`crate::cpu::Meter`]). READ data is
//! dropped as it arrives (a slice of the reply buffer: no copy in the bench).

use std::time::{Duration, Instant};

use nfsclient::nfs3::{NfsFh3, StableHow};
use nfsclient::{IoOptions, Mount};
use xdr::Bytes;

use crate::cpu::{Measured, Meter};

/// Bytes moved (or calls made) and the time and CPU it took.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Bytes read or written, or RPCs completed.
    pub amount: u64,
    /// Time and CPU.
    pub m: Measured,
}

/// Limits of one measured run: it stops at whichever comes first.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Bytes to move at most.
    pub bytes: u64,
    /// Time to run at most.
    pub time: Duration,
}

/// Reads `fh` sequentially from offset 0 with `rsize`-byte READs, `depth` in flight.
pub async fn seq_read(
    mount: &Mount,
    fh: &NfsFh3,
    rsize: u32,
    depth: usize,
    budget: Budget,
    server_pid: Option<u32>,
) -> nfsclient::Result<Sample> {
    let mut m = mount.clone();
    m.set_io_options(IoOptions {
        rsize,
        depth,
        ..mount.io_options()
    });
    let meter = Meter::start(server_pid, false);
    let start = Instant::now();
    let mut reader = m.reader(fh, 0, Some(budget.bytes));
    let mut bytes = 0u64;
    while let Some((_, data)) = reader.next_chunk().await? {
        bytes += data.len() as u64;
        if start.elapsed() >= budget.time {
            break;
        }
    }
    drop(reader); // abandons READs past the budget
    Ok(Sample {
        amount: bytes,
        m: meter.stop(),
    })
}

/// Writes `fh` sequentially from offset 0 with `wsize`-byte UNSTABLE WRITEs, `depth`
/// in flight, then COMMITs (the COMMIT is inside the measured interval).
pub async fn seq_write(
    mount: &Mount,
    fh: &NfsFh3,
    wsize: u32,
    depth: usize,
    budget: Budget,
    server_pid: Option<u32>,
) -> nfsclient::Result<Sample> {
    let mut m = mount.clone();
    m.set_io_options(IoOptions {
        wsize,
        depth,
        ..mount.io_options()
    });
    // One source buffer, sliced without copying for every piece.
    const PIECE: usize = 8 << 20;
    let src = Bytes::from(pattern(PIECE));
    let meter = Meter::start(server_pid, false);
    let start = Instant::now();
    let mut w = m.writer(fh, StableHow::UNSTABLE);
    let mut off = 0u64;
    while off < budget.bytes && start.elapsed() < budget.time {
        let n = (budget.bytes - off).min(PIECE as u64) as usize;
        w.write(off, src.slice(..n)).await?;
        off += n as u64;
    }
    let written = w.finish().await?;
    Ok(Sample {
        amount: written,
        m: meter.stop(),
    })
}

/// Which small RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmallRpc {
    /// NFSPROC3_NULL.
    Null,
    /// NFSPROC3_GETATTR of the test file.
    Getattr,
}

impl SmallRpc {
    /// Lower-case procedure name.
    pub fn name(self) -> &'static str {
        match self {
            SmallRpc::Null => "null",
            SmallRpc::Getattr => "getattr",
        }
    }
}

/// Calls `proc` from `inflight` concurrent tasks for `time`; counts completed calls.
pub async fn rpc_rate(
    mount: &Mount,
    fh: &NfsFh3,
    proc: SmallRpc,
    inflight: usize,
    time: Duration,
    server_pid: Option<u32>,
) -> nfsclient::Result<Sample> {
    let meter = Meter::start(server_pid, false);
    let deadline = Instant::now() + time;
    let mut tasks: Vec<tokio::task::JoinHandle<nfsclient::Result<u64>>> =
        Vec::with_capacity(inflight);
    for _ in 0..inflight.max(1) {
        let nfs = mount.nfs().clone();
        let fh = fh.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                match proc {
                    SmallRpc::Null => nfs.null().await?,
                    SmallRpc::Getattr => {
                        nfs.getattr(&fh).await?;
                    }
                }
                n += 1;
            }
            Ok(n)
        }));
    }
    let mut calls = 0;
    for t in tasks {
        calls += t
            .await
            .map_err(|e| nfsclient::Error::Io(std::io::Error::other(e.to_string())))??;
    }
    Ok(Sample {
        amount: calls,
        m: meter.stop(),
    })
}

/// A recognisable, non-repeating-per-page byte pattern.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 12) as u8)
        .collect()
}
