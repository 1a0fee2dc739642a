//! `--metrics`: the server's counters over HTTP in the Prometheus text exposition
//! format (version 0.0.4: `# HELP`, `# TYPE`, one `name{labels} value` line per
//! sample), for Prometheus and anything that scrapes it, and for `nfs stats`.
//!
//! What is exported ([`render`]):
//! - per procedure of every program served (NFSv3, NFSv4 NULL and COMPOUND, MOUNT,
//!   NLM, NSM), over TCP and RDMA together: calls, errors (replies other than
//!   SUCCESS) and a service-time histogram (`oncrpc::metrics`);
//! - per NFSv4 operation inside the COMPOUNDs: operations run and, of them, those
//!   that failed (any status but NFS4_OK; the COMPOUND's time is the call's);
//! - the duplicate request cache: hits, misses, drops of duplicates in service,
//!   evictions, entries and bytes;
//! - the memory budget (`--max-memory`): limit, charge, peak, charges refused, READs
//!   and READDIRs refused;
//! - TCP: connections accepted and open, call records and replies with their bytes;
//! - NFS/RDMA: connections accepted and open, connections refused for memory, and
//!   every transport counter of `rpcrdma::stats::Counter` summed over connections
//!   (Sends, Receives, RDMA Reads and Writes and their bytes, registrations,
//!   invalidations, credits, errors...), gauges over the open ones.
//!
//! The HTTP side answers `GET /metrics` (and `GET /`) with the page, `HEAD` with its
//! headers, anything else 404 or 405, one request per connection. A request head
//! must arrive whole within [`REQUEST_TIMEOUT`] and fit [`MAX_REQUEST`] bytes. It is
//! hand-written (about 60 lines) rather than an HTTP crate: one fixed page, no
//! request body, no keep-alive; the page's format is checked by the Prometheus
//! project's own parser in the tests.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use oncrpc::metrics::{ProcedureRow, BUCKETS_MICROS};
use oncrpc::TcpStats;
use rpcrdma_transport::{Counter, StatsRegistry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::nfs::NfsServer;

/// Longest request head read.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Time a scraper has to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the counters come from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The NFS server: call metrics, reply cache, memory budget.
    pub nfs: Arc<NfsServer>,
    /// The TCP servers' counters (NFS, MOUNT, NLM share one).
    pub tcp: Arc<TcpStats>,
    /// The NFS/RDMA transport's, if RDMA is served.
    pub rdma: Option<StatsRegistry>,
}

/// The name of an ONC RPC program nfsd serves, for the `program` label.
fn program_name(prog: u32) -> String {
    match prog {
        nfs3::NFS_PROGRAM => "nfs".into(),
        nfs3::MOUNT_PROGRAM => "mount".into(),
        crate::nlm::xdr::NLM_PROGRAM => "nlm".into(),
        crate::nlm::xdr::NSM_PROGRAM => "nsm".into(),
        other => other.to_string(),
    }
}

/// A page being written: each metric's `# HELP` and `# TYPE` once, then samples.
struct Page(String);

impl Page {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, value: u64) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {value}");
        }
    }

    /// A counter with one sample per row: `labels` and `value` of each.
    fn counter<R>(
        &mut self,
        name: &str,
        help: &str,
        rows: &[R],
        labels: impl Fn(&R) -> String,
        value: impl Fn(&R) -> u64,
    ) {
        self.header(name, "counter", help);
        for r in rows {
            self.sample(name, &labels(r), value(r));
        }
    }

    /// A metric with one sample and no labels.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: u64) {
        self.header(name, kind, help);
        self.sample(name, "", value);
    }
}

/// A row's procedure (or operation) label: its name, else its number, else `other`.
fn row_name(r: &ProcedureRow) -> String {
    match (r.name, r.proc_) {
        (Some(n), _) => n.to_string(),
        (None, Some(p)) => p.to_string(),
        (None, None) => "other".to_string(),
    }
}

fn procedure_labels(r: &ProcedureRow) -> String {
    let procedure = row_name(r);
    format!(
        "program=\"{}\",version=\"{}\",procedure=\"{procedure}\"",
        program_name(r.prog),
        r.vers
    )
}

fn render_calls(page: &mut Page, rows: &[ProcedureRow]) {
    page.counter(
        "nfsd_rpc_calls_total",
        "RPC calls served, by program, version and procedure (TCP and RDMA).",
        rows,
        procedure_labels,
        |r| r.stats.calls,
    );
    page.counter(
        "nfsd_rpc_errors_total",
        "RPC calls answered other than SUCCESS (PROC_UNAVAIL, GARBAGE_ARGS, SYSTEM_ERR) or not at all.",
        rows,
        procedure_labels,
        |r| r.stats.errors,
    );
    let h = "nfsd_rpc_duration_seconds";
    page.header(
        h,
        "histogram",
        "Time from routing an RPC call to its encoded reply.",
    );
    for r in rows {
        let labels = procedure_labels(r);
        let mut cumulative = 0;
        for (i, n) in r.stats.buckets.iter().enumerate() {
            cumulative += n;
            let le = match BUCKETS_MICROS.get(i) {
                Some(us) => format!("{}", *us as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(page.0, "{h}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(
            page.0,
            "{h}_sum{{{labels}}} {}",
            r.stats.micros as f64 / 1e6
        );
        let _ = writeln!(page.0, "{h}_count{{{labels}}} {}", r.stats.calls);
    }
}

fn render_operations(page: &mut Page, rows: &[ProcedureRow]) {
    let label = |r: &ProcedureRow| format!("version=\"{}\",operation=\"{}\"", r.vers, row_name(r));
    page.counter(
        "nfsd_nfs4_operations_total",
        "NFSv4 operations run inside COMPOUNDs, by operation (TCP and RDMA).",
        rows,
        label,
        |r| r.stats.calls,
    );
    page.counter(
        "nfsd_nfs4_operation_errors_total",
        "NFSv4 operations that failed (a status other than NFS4_OK), by operation.",
        rows,
        label,
        |r| r.stats.errors,
    );
}

fn render_server(page: &mut Page, nfs: &NfsServer) {
    if let Some(cache) = &nfs.reply_cache {
        let s = cache.stats();
        page.single(
            "nfsd_reply_cache_hits_total",
            "counter",
            "Retransmitted calls answered from the duplicate request cache.",
            s.hits,
        );
        page.single(
            "nfsd_reply_cache_misses_total",
            "counter",
            "Calls of cached procedures not found in the cache (served, then kept).",
            s.misses,
        );
        page.single(
            "nfsd_reply_cache_in_progress_drops_total",
            "counter",
            "Retransmissions dropped while the first call was in service.",
            s.in_progress_drops,
        );
        page.single(
            "nfsd_reply_cache_evictions_total",
            "counter",
            "Replies evicted to stay within the cache's bound.",
            s.evictions,
        );
        page.single(
            "nfsd_reply_cache_entries",
            "gauge",
            "Replies kept.",
            s.entries as u64,
        );
        page.single(
            "nfsd_reply_cache_bytes",
            "gauge",
            "Bytes of replies kept.",
            s.bytes,
        );
    }
    let m = &nfs.memory;
    page.single(
        "nfsd_memory_limit_bytes",
        "gauge",
        "The memory budget (--max-memory).",
        m.limit(),
    );
    page.single(
        "nfsd_memory_charged_bytes",
        "gauge",
        "Bytes charged to the budget now.",
        m.used(),
    );
    page.single(
        "nfsd_memory_peak_bytes",
        "gauge",
        "Most bytes charged at once.",
        m.peak(),
    );
    page.single(
        "nfsd_memory_refused_total",
        "counter",
        "Charges the budget refused.",
        m.refused(),
    );
    page.single(
        "nfsd_memory_read_refusals_total",
        "counter",
        "READs and READDIRs answered NFS3ERR_JUKEBOX for want of memory.",
        nfs.memory_refusals.total(),
    );
}

fn render_tcp(page: &mut Page, t: &TcpStats) {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    page.single(
        "nfsd_tcp_connections_total",
        "counter",
        "TCP connections accepted (NFS, MOUNT, NLM).",
        get(&t.connections),
    );
    page.single(
        "nfsd_tcp_connections_open",
        "gauge",
        "TCP connections open.",
        get(&t.open),
    );
    page.single(
        "nfsd_tcp_calls_total",
        "counter",
        "Call records read over TCP.",
        get(&t.calls),
    );
    page.single(
        "nfsd_tcp_received_bytes_total",
        "counter",
        "Bytes of call records read over TCP.",
        get(&t.call_bytes),
    );
    page.single(
        "nfsd_tcp_spliced_calls_total",
        "counter",
        "Calls over TCP whose WRITE data went from the socket into pipes (--tcp-write-data splice).",
        get(&t.spliced_calls),
    );
    page.single(
        "nfsd_tcp_spliced_bytes_total",
        "counter",
        "Bytes of WRITE data received into pipes (also in nfsd_tcp_received_bytes_total).",
        get(&t.spliced_bytes),
    );
    page.single(
        "nfsd_tcp_unspliced_items_total",
        "counter",
        "Calls over TCP whose WRITE data was to go into pipes but was read into memory (pipes filled by tiny segments, or none to be had).",
        get(&t.unspliced_items),
    );
    page.single(
        "nfsd_tcp_replies_total",
        "counter",
        "Replies sent over TCP.",
        get(&t.replies),
    );
    page.single(
        "nfsd_tcp_sent_bytes_total",
        "counter",
        "Bytes of replies sent over TCP.",
        get(&t.reply_bytes),
    );
}

fn render_rdma(page: &mut Page, r: &StatsRegistry) {
    let (open, all) = r.connections();
    page.single(
        "nfsd_rdma_connections_total",
        "counter",
        "NFS/RDMA connections accepted.",
        all,
    );
    page.single(
        "nfsd_rdma_connections_open",
        "gauge",
        "NFS/RDMA connections open.",
        open,
    );
    if let Some(m) = r.memory() {
        page.single(
            "nfsd_rdma_connections_refused_total",
            "counter",
            "NFS/RDMA connections refused for want of memory.",
            m.connections_refused,
        );
    }
    for &c in Counter::ALL {
        let (name, kind) = if c.is_gauge() {
            (format!("nfsd_rdma_{}", c.name()), "gauge")
        } else {
            (format!("nfsd_rdma_{}_total", c.name()), "counter")
        };
        let help = if c.is_gauge() {
            "RPC-over-RDMA transport gauge `{}`, summed over open connections."
        } else {
            "RPC-over-RDMA transport counter `{}`, summed over connections."
        };
        page.single(&name, kind, &help.replace("{}", c.name()), r.total(c));
    }
}

/// The page: every counter of `src` (module docs).
pub fn render(src: &Sources) -> String {
    let mut page = Page(String::with_capacity(16 * 1024));
    render_calls(&mut page, &src.nfs.calls.snapshot());
    render_operations(&mut page, &src.nfs.calls.operation_snapshot());
    render_server(&mut page, &src.nfs);
    render_tcp(&mut page, &src.tcp);
    if let Some(r) = &src.rdma {
        render_rdma(&mut page, r);
    }
    page.0
}

/// Serves the page on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, src: Sources, shutdown: impl Future<Output = ()>) {
    let src = Arc::new(src);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let src = src.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &src)).await;
                    });
                }
                Err(e) => tracing::warn!(error = %e, "metrics: accept failed"),
            },
        }
    }
}

/// Reads one request head and answers it.
async fn answer(mut stream: TcpStream, src: &Sources) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_REQUEST {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    let (status, body) = match (method, path) {
        (b"GET" | b"HEAD", b"/metrics" | b"/") => ("200 OK", render(src)),
        (b"GET" | b"HEAD", _) => ("404 Not Found", "not found: the page is /metrics\n".into()),
        _ => ("405 Method Not Allowed", "only GET\n".into()),
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != b"HEAD" {
        reply.push_str(&body);
    }
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}
