//! `nfsd`: serve local directories over NFSv3 (TCP and RPC-over-RDMA), MOUNT v3
//! (TCP), and the NLM v4 / NSM lock manager (TCP; NSM on UDP too).
//!
//! ```text
//! nfsd [OPTIONS] <DIR>...
//! nfsd /srv/export                         # NFS on tcp 2049 and rdma 20049, MOUNT on 20048
//! nfsd --rdma-port 30049 /srv/export       # NFS/RDMA on another port
//! nfsd --rdma-version 1 /srv/export        # RPC-over-RDMA Version One only
//! nfsd --bind 192.0.2.1 --rdma-provider verbs /srv/export  # on that address's RDMA NIC
//! nfsd --no-rdma --nfs-port 12049 --mount-port 12048 --read-only /srv/a /srv/b
//! nfsd --exports /etc/exports              # per-client access (exports(5)); SIGHUP reloads
//! nfsd --state-dir /var/lib/nfsd-rs /srv/export   # handle key and lock manager state
//! nfsd --grace-period 15 /srv/export       # NLM: reclaims only for 15 s after a restart
//! nfsd --no-nlm /srv/export                # no locking: clients mount with nolock
//! nfsd --max-memory 2G /srv/export         # one memory budget (default: 1/4 of RAM)
//! ```
//! Locking (NLM v4 and NSM on port 4045) is on by default; see docs/locking.md.
//! Clients find MOUNT (and NFS over TCP) through the host's rpcbind, or, when none
//! runs, through our own portmapper on port 111 (`--rpcbind auto`, the default):
//! `mount -t nfs host:/srv/export /mnt` (TCP), or over RDMA `mount -t nfs -o
//! vers=3,proto=rdma,port=20049 host:/srv/export /mnt` (an RDMA NIC or rxe/siw on
//! both sides with verbs; with the userspace iWARP provider, Linux siw on the client).

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// `println!` that never panics: nfsd's status lines go to standard output, which a
/// supervisor or a pipe may have closed (the default `println!` panics on EPIPE,
/// and a server must not stop because nobody reads its log).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

use clap::{CommandFactory, Parser, ValueEnum};
use nfsd::nlm::locks::Limits;
use nfsd::nlm::NlmConfig;
use nfsd::rdma::{Provider, RdmaOptions};
use nfsd::server::{export_lines, Bound, Config, RpcbindMode};
use nfsd::{ExportLine, ExportOptions, HandleConfig, HandleKey, NfsServer, Squash};
use rpcrdma_transport::RdmaConfig;

/// Serve local directories over NFS versions 3 and 4.1 (TCP and RPC-over-RDMA),
/// MOUNT version 3 and the NLM/NSM lock manager.
///
/// Settings come from the command line and, before it, from the configuration file
/// (/etc/nfsd-rs.conf when it exists, or --config FILE): one `NAME = VALUE` per line,
/// NAME a long option below without its dashes, flags `true` or `false`; the
/// command line wins. Without directories or --exports, /etc/exports is served if it
/// exists.
#[derive(Debug, Parser)]
#[command(name = "nfsd", version, args_override_self = true)]
struct Cli {
    /// Directories to export to every client (each is mounted by its absolute path):
    /// a shortcut for the exports file line `DIR *(rw,root_squash,insecure)`, changed
    /// by --read-only, --squash, --anon-uid, --anon-gid and --nfsd-only.
    #[arg(conflicts_with = "exports_file")]
    exports: Vec<PathBuf>,
    /// Configuration file read before the command line (module docs above); by
    /// default /etc/nfsd-rs.conf if it exists. A file named here must exist.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Write the man pages (nfsd-rs.8 and nfsd-rs.conf.5) into DIR and exit.
    #[arg(long, value_name = "DIR", exclusive = true, hide = true)]
    generate_man_pages: Option<PathBuf>,
    /// Exports file in the /etc/exports syntax (exports(5); see docs/exports.md):
    /// per-client host/network lists, ro/rw, squashing, secure ports. Reloaded on
    /// SIGHUP.
    #[arg(long = "exports", value_name = "FILE")]
    exports_file: Option<PathBuf>,
    /// Export the directories read-only (every modifying call gets NFS3ERR_ROFS).
    #[arg(long, conflicts_with = "exports_file")]
    read_only: bool,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    bind: IpAddr,
    /// NFS port (TCP). Ports >= 1024 need no privilege.
    #[arg(long, default_value_t = 2049)]
    nfs_port: u16,
    /// NFS/RDMA port (RFC 8267 §5).
    #[arg(long, default_value_t = nfs3::ulb::NFS_RDMA_PORT)]
    rdma_port: u16,
    /// RDMA provider: auto (rdma-core verbs when the --bind address is on an RDMA
    /// device, or, for 0.0.0.0, when the host has one; else the userspace iWARP
    /// provider; the startup output says which and why), verbs (RoCE, InfiniBand,
    /// iWARP NICs, rxe, siw through libibverbs/librdmacm; fail without one), iwarp
    /// (our userspace iWARP over TCP sockets: any host; Linux siw and iWARP NICs
    /// are its peers).
    #[arg(long, value_enum, default_value_t = ProviderArg::Auto)]
    rdma_provider: ProviderArg,
    /// Do not serve NFS over RDMA.
    #[arg(long, conflicts_with_all = [
        "rdma_port", "rdma_provider", "rdma_crc", "rdma_max_ulpdu", "rdma_version",
        "rdma_handshake_timeout", "rdma_handshakes_per_source", "rdma_max_handshakes",
        "rdma_read_timeout", "rdma_credits", "rdma_initial_credits",
        "rdma_stall_timeout",
    ])]
    no_rdma: bool,
    /// Highest RPC-over-RDMA version accepted: 2 serves Version One and Version Two
    /// clients (each answered in its own version; Version Two clients may use
    /// responder-provided Read chunks); 1 answers Version Two with ERR_VERS.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=2))]
    rdma_version: u32,
    /// Ask RDMA peers for MPA CRC32c (RFC 5044; off unless asked, as Linux siw).
    /// Userspace iWARP provider only, as the --rdma-max-ulpdu and --rdma-handshake-*
    /// options (a verbs device runs MPA in its driver or hardware).
    #[arg(long)]
    rdma_crc: bool,
    /// Largest ULPDU per FPDU on RDMA connections (RFC 5044 MULPDU; default 65516).
    /// A value that fits one TCP segment (e.g. 1400) keeps tshark's MPA dissector,
    /// which assumes FPDU alignment, in step with the stream.
    #[arg(long, value_parser = clap::value_parser!(u16).range(64..))]
    rdma_max_ulpdu: Option<u16>,
    /// Seconds an RDMA peer has, after its TCP connect, to send its MPA Request
    /// (an honest one sends it at once; Linux siw waits 5 s for it). Decimals allowed.
    #[arg(long, value_name = "SECS", default_value_t = 5.0,
          value_parser = parse_timeout)]
    rdma_handshake_timeout: f64,
    /// RDMA handshakes in progress (TCP connected, no MPA Request yet) from one source
    /// address (IPv6: one /64); one more closes that source's oldest.
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..))]
    rdma_handshakes_per_source: u32,
    /// RDMA handshakes in progress in all; one more closes the oldest of the source
    /// with the most. Never stops accepting. Lowered to a quarter of the open file
    /// limit if that is smaller.
    #[arg(long, value_name = "N", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..))]
    rdma_max_handshakes: u32,
    /// Most RPC-over-RDMA credits (Calls in service at once) granted to one
    /// connection, each with a 4 KiB Receive and Send buffer (RFC 8166 §3.3.1).
    #[arg(long, value_name = "N", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    rdma_credits: u32,
    /// Credits granted to a new RDMA connection: the grant doubles, up to
    /// --rdma-credits, whenever the client keeps more than half of it in use and
    /// --max-memory has room for the buffers, and never shrinks. Small, so that an idle
    /// connection holds little memory (at 8: 32 KiB of Receive buffers charged, 8 KiB of
    /// Send buffers until its replies need more, and 24 KiB of state).
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    rdma_initial_credits: u32,
    /// The server's memory budget (bytes; K, M, G suffixes), one for everything it
    /// charges: each RDMA connection's Receive buffers (4 KiB per credit granted), Send
    /// buffers (as its replies need them) and state (24 KiB): 64 KiB for a new
    /// connection, about 1 MiB at 128 credits; each TCP connection's read buffer (64 KiB) and the call records it
    /// receives; the data of NFS WRITEs pulled by RDMA Read; READ reply buffers.
    /// Connections never take the last 16 MiB (RDMA) or 4 MiB (TCP), kept for one
    /// whole WRITE. At least 32 MiB. Past it a new RDMA connection is rejected, a new
    /// TCP connection closed, a WRITE waits in line until earlier ones are answered, a
    /// READ is answered NFS3ERR_JUKEBOX (the client retries); nothing charged is
    /// allocated past it.
    /// Default: a quarter of the machine's memory (MemTotal), from 256 MiB to 16 GiB.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    max_memory: Option<u64>,
    /// Deprecated: the name --max-memory had when only WRITE data pulled by RDMA Read
    /// was budgeted. Now sets --max-memory (which also counts connections' buffers
    /// and READ buffers), and says so at startup.
    #[arg(long, value_name = "BYTES", value_parser = parse_size,
          conflicts_with = "max_memory")]
    rdma_max_read_memory: Option<u64>,
    /// Seconds an RDMA peer has to answer the RDMA Reads of a WRITE's data; after that
    /// its connection is closed and what the WRITE held is released. Decimals allowed.
    #[arg(long, value_name = "SECS", default_value_t = 30.0,
          value_parser = parse_timeout)]
    rdma_read_timeout: f64,
    /// Seconds an NFS/RDMA connection with calls in service or work requests posted may
    /// go without progress: after half of it nfsd logs a warning naming what the
    /// connection waits for; after all of it a connection stuck on its own work
    /// requests (Sends, RDMA Reads the provider never completed) is closed, so that
    /// the client reconnects and retransmits. 0 turns the watchdog off. SIGUSR1 prints
    /// every connection's state. Decimals allowed.
    #[arg(long, value_name = "SECS", default_value_t = 60.0,
          value_parser = parse_timeout_or_zero)]
    rdma_stall_timeout: f64,
    /// MOUNT port (TCP); the same as --nfs-port serves both on one port.
    #[arg(long, default_value_t = 20048)]
    mount_port: u16,
    /// rpcbind: auto (register with the host's rpcbind if one answers on
    /// 127.0.0.1:111, else serve our own portmapper; the startup output says which),
    /// register (the host's, or fail), serve (our own minimal portmapper), off.
    #[arg(long, value_enum, default_value_t = RpcbindArg::Auto)]
    rpcbind: RpcbindArg,
    /// Port of our own portmapper (--rpcbind serve, or auto without rpcbind).
    #[arg(long, default_value_t = 111)]
    portmap_port: u16,
    /// Identity mapping of AUTH_SYS callers of the directories: root (uid/gid 0
    /// become anonymous), none, all (everyone is anonymous).
    #[arg(long, value_enum, default_value_t = SquashArg::Root, conflicts_with = "exports_file")]
    squash: SquashArg,
    /// Anonymous uid of the directories.
    #[arg(long, default_value_t = 65534, conflicts_with = "exports_file")]
    anon_uid: u32,
    /// Anonymous gid of the directories.
    #[arg(long, default_value_t = 65534, conflicts_with = "exports_file")]
    anon_gid: u32,
    /// Declare that the directories change only through this server, never by local
    /// processes or another server (the exports option nfsd_only): NFSv4.1 then reports
    /// each change of a directory as atomic, which spares a Linux client a lookup or
    /// access check after each file it creates or removes. Without it, a change made
    /// beside the server could hide from a client's directory cache.
    #[arg(long, conflicts_with = "exports_file")]
    nfsd_only: bool,
    /// Directory of the state kept across restarts: the key that authenticates file
    /// handles (fh.key, mode 0600), so that clients' handles stay valid after a
    /// restart, the lock manager's NSM state number and the clients to notify
    /// after a restart (nsm/), and (without --no-nfs4) the NFSv4.1 clients that may
    /// reclaim their opens and locks after a restart (nfs4-clients). Created if
    /// missing.
    #[arg(long, value_name = "DIR", default_value = nfsd::handle_key::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// Run every NFS call's file-system work on the blocking thread pool. By default
    /// GETATTR, LOOKUP, ACCESS, CREATE, REMOVE and READ over TCP (whose data leaves by
    /// sendfile from the socket's writer), and NFSv4.1 COMPOUNDs of such operations only
    /// (with OPEN, CLOSE and the filehandle operations), run on the async worker threads (over
    /// NFS/RDMA on a verbs device: on the device thread, or on a delegate thread of
    /// its CPU that it waits for when they act as the caller), which saves a thread
    /// hand-off per call but stalls that thread while such a call blocks: use this for
    /// exports on file systems whose metadata calls may hang (network file systems),
    /// or for NFS/RDMA metadata calls of many clients in parallel.
    #[arg(long)]
    no_inline_metadata: bool,
    /// Serve NFS version 3 only. By default NFS version 4.1 is served beside it on
    /// the NFS ports (a Linux mount without `vers=` settles on it): sessions, the
    /// pseudo root, lookups, attributes, directory changes, OPEN with share
    /// reservations, READ, WRITE, COMMIT and byte-range locks (shared with NLM's),
    /// and a grace period after a restart in which the clients recorded in
    /// --state-dir reclaim them; no delegations yet. With this flag such a mount
    /// settles on NFSv3.
    #[arg(long)]
    no_nfs4: bool,
    /// NFSv4.1's ID-mapping domain: file owners and groups that have a name in this
    /// machine's user and group database are sent as `name@DOMAIN`, and clients may
    /// set them so (others as numbers), as with knfsd and the `Domain` of
    /// /etc/idmapd.conf, which the clients must share. By default owners and groups
    /// are numeric ids both ways, as knfsd answers AUTH_SYS clients by default.
    #[arg(long, value_name = "DOMAIN", conflicts_with = "no_nfs4")]
    idmap_domain: Option<String>,
    /// Serve the server's counters over HTTP at http://ADDR:PORT/metrics in the
    /// Prometheus text format: per-procedure calls, errors and service times (NFS,
    /// MOUNT, NLM, NSM), the duplicate request cache, the memory budget, TCP and
    /// NFS/RDMA connections, bytes and transport counters. A bare PORT listens on
    /// 127.0.0.1 only. Off by default. `nfs stats ADDR:PORT` prints them.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = parse_metrics_addr)]
    metrics: Option<std::net::SocketAddr>,
    /// How log events are written to standard error: `text` (one line each, no
    /// colours unless a terminal: what journald stores) or `json` (one object per
    /// line, for log collectors). The level is set with RUST_LOG (default warn).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// How READ data leaves over TCP: `sendfile` (the default: from the page cache,
    /// no copy by the server) or `copy` (the file is mapped and the kernel copies the
    /// data into the socket once: measured faster for clients on the same host,
    /// slower in the emulated lab guest; docs/bench/README.md "READ over TCP: sendfile
    /// or one copy").
    #[arg(long, value_enum, default_value_t = TcpReadData::Sendfile)]
    tcp_read_data: TcpReadData,
    /// How WRITE data of 64 KiB to 1 MiB comes in over TCP: `splice` (the default:
    /// from the socket into pipes, then into the file, one copy by the kernel) or
    /// `copy` (read into memory with the call, then written: two copies);
    /// docs/bench/README.md "WRITE data spliced".
    #[arg(long, value_enum, default_value_t = TcpWriteData::Splice)]
    tcp_write_data: TcpWriteData,
    /// Entries of the duplicate request cache, which answers a retransmitted
    /// non-idempotent NFS or NLM call (REMOVE, RENAME, WRITE, UNLOCK, ...) with the
    /// first call's reply instead of running it again, over TCP and RDMA. 1 KiB each
    /// (at most an eighth of --max-memory) is reserved from --max-memory. 0 turns it
    /// off. Default: knfsd's for this machine's memory (32768 for 1 GiB, 131072 for
    /// 16 GiB, at most 262144).
    #[arg(long, value_name = "N")]
    drc_entries: Option<usize>,
    /// Serve no lock manager (NLM/NSM): clients must then mount with `nolock`.
    #[arg(long, conflicts_with_all = ["nlm_port", "grace_period", "client_portmap_port"])]
    no_nlm: bool,
    /// Port of the lock manager: NLM v4 and NSM (status monitor) on TCP, NSM on UDP
    /// (clients find it through the portmapper; 0 takes any free port).
    #[arg(long, default_value_t = nfsd::nlm::DEFAULT_PORT)]
    nlm_port: u16,
    /// Seconds after a restart during which only lock reclaims are granted (when
    /// clients held locks before it; they are sent SM_NOTIFY and reclaim).
    #[arg(long, value_name = "SECS", default_value_t = 90,
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    grace_period: u64,
    /// Port of the clients' portmappers, asked for their lock manager (GRANTED
    /// callbacks) and status monitor (SM_NOTIFY after a restart). 111 unless the
    /// clients sit behind NAT port forwarding.
    #[arg(long, default_value_t = 111)]
    client_portmap_port: u16,
    /// Locks plus blocked lock requests one client host may hold; one more is
    /// refused with NLM4_DENIED_NOLOCKS.
    #[arg(long, value_name = "N", default_value_t = 65_536,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_locks_per_client: u64,
    /// Locks plus blocked lock requests in all.
    #[arg(long, value_name = "N", default_value_t = 1 << 20,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_locks: u64,
}

/// A size in bytes, with an optional K, M or G suffix (powers of 1024), at least
/// twice the largest Call the transport accepts (32 MiB): room for one whole Call is
/// kept free of connections' buffers, and the rest must hold some connections.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let n = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{s:?}: a number of bytes, with an optional K, M or G suffix"))?;
    let call = RdmaConfig::default().max_message;
    let min = 2 * call;
    if n < min {
        return Err(format!(
            "at least {} MiB (room for the largest Call, {} MiB, and for connections)",
            min >> 20,
            call >> 20
        ));
    }
    Ok(n)
}

/// `--metrics`: `ADDR:PORT`, or a port on 127.0.0.1.
fn parse_metrics_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok((std::net::Ipv4Addr::LOCALHOST, port).into());
    }
    s.parse()
        .map_err(|_| format!("{s:?}: ADDR:PORT (e.g. 127.0.0.1:9750, [::1]:9750) or a port"))
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t > 0.0 && t <= 3600.0 => Ok(t),
        _ => Err("a number of seconds, over 0 and at most 3600".into()),
    }
}

/// [`parse_timeout`], or 0 (off).
fn parse_timeout_or_zero(s: &str) -> Result<f64, String> {
    match s.trim() {
        "0" => Ok(0.0),
        t => parse_timeout(t).map_err(|e| format!("{e}, or 0 (off)")),
    }
}

/// Raises the soft open file limit to the hard one: every connection and every
/// RDMA handshake in progress holds a descriptor, and the usual soft limit (1024)
/// is below what a server under a handshake flood needs (1,000 stalled peers and its
/// own clients). Returns the limit now in force (`None`: unlimited).
fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current == lim.maximum {
        return lim.current;
    }
    let raised = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => raised.current,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open file limit to its hard limit");
            lim.current
        }
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// One line of text per event.
    Text,
    /// One JSON object per line (timestamp, level, target, fields).
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ProviderArg {
    Auto,
    Verbs,
    Iwarp,
}

/// `--tcp-write-data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TcpWriteData {
    /// `splice` from the socket into pipes, and from them into the file.
    Splice,
    /// Read into memory with the call.
    Copy,
}

/// `--tcp-read-data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TcpReadData {
    /// `sendfile` from the page cache.
    Sendfile,
    /// One copy, from a mapping of the file.
    Copy,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RpcbindArg {
    Auto,
    Register,
    Serve,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SquashArg {
    Root,
    None,
    All,
}

/// Logs to standard error, one line per event: text (colours only on a terminal, so
/// journald and files get plain lines) or JSON objects for collectors. The level
/// comes from `RUST_LOG` (default `warn`).
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// The long options a configuration file may not set.
const NOT_IN_CONFIG: &[&str] = &["config", "generate-man-pages", "help", "version"];

/// The arguments to parse: the configuration file's settings
/// ([`nfsd::config_file`]) as options, then the command line's, which win (clap's
/// `args_override_self`). A file's `exports` gives way to directories or --exports
/// on the command line.
fn arguments() -> Result<Vec<OsString>, String> {
    let raw: Vec<OsString> = std::env::args_os().collect();
    // A first look at the command line, for --config and the exports (--help and
    // --version must not act yet: the file is read, and its errors shown, first).
    let on_line = Cli::command()
        .disable_help_flag(true)
        .disable_version_flag(true)
        .ignore_errors(true)
        .get_matches_from(&raw);
    if on_line.contains_id("generate_man_pages") {
        return Ok(raw);
    }
    let from_line =
        |id: &str| on_line.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    let path = match on_line.get_one::<PathBuf>("config") {
        Some(p) if from_line("config") => p.clone(),
        _ => {
            let default = PathBuf::from(nfsd::config_file::DEFAULT_PATH);
            if !default.exists() {
                return Ok(raw);
            }
            default
        }
    };
    let settings = nfsd::config_file::load(&path).map_err(|e| e.to_string())?;
    let exports_on_line = from_line("exports") || from_line("exports_file");
    let cmd = Cli::command();
    let mut args = vec![raw[0].clone()];
    for s in &settings {
        let arg = cmd
            .get_arguments()
            .find(|a| {
                a.get_long() == Some(s.name.as_str()) && !NOT_IN_CONFIG.contains(&s.name.as_str())
            })
            .ok_or_else(|| {
                format!(
                    "{}:{}: no setting {:?} (the long options of --help, without dashes)",
                    path.display(),
                    s.line,
                    s.name
                )
            })?;
        if s.name == "exports" && exports_on_line {
            continue;
        }
        if arg.get_action().takes_values() {
            args.push(format!("--{}={}", s.name, s.value).into());
        } else if nfsd::config_file::flag_value(s)
            .map_err(|e| format!("{}: {e}", path.display()))?
        {
            args.push(format!("--{}", s.name).into());
        }
    }
    args.extend(raw.into_iter().skip(1));
    Ok(args)
}

/// Writes `nfsd-rs.8` (the command line) and `nfsd-rs.conf.5` (the configuration
/// file) into `dir`, named as the Debian package installs the binary.
fn write_man_pages(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let cmd = Cli::command().name("nfsd-rs").bin_name("nfsd-rs");
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .render(&mut page)?;
    std::fs::write(dir.join("nfsd-rs.8"), page)?;
    std::fs::write(dir.join("nfsd-rs.conf.5"), config_man_page(&cmd))?;
    Ok(())
}

/// Escapes text for roff: backslashes, and a leading `.` or `'` (a request).
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    match t.chars().next() {
        Some('.' | '\'') => format!("\\&{t}"),
        _ => t,
    }
}

/// nfsd-rs.conf(5): the file's syntax and every setting, from the command line's
/// definitions (so the page and the options cannot drift apart).
fn config_man_page(cmd: &clap::Command) -> String {
    let mut p = String::new();
    p.push_str(".TH NFSD-RS.CONF 5 \"\" \"nfsd-rs\" \"File Formats\"\n");
    p.push_str(".SH NAME\nnfsd\\-rs.conf \\- configuration file of the nfsd\\-rs NFS server\n");
    p.push_str(".SH SYNOPSIS\n/etc/nfsd\\-rs.conf\n");
    p.push_str(".SH DESCRIPTION\n");
    p.push_str(&roff(
        "nfsd-rs reads this file, when it exists (or the file --config names), before its \
         command line, which wins over it. Each line is NAME = VALUE, where NAME is one of \
         the settings below: a long option of nfsd-rs(8) without its two dashes. A setting \
         without a value on the command line (a flag) takes true or false (also yes/no, \
         1/0, on/off). Blank lines and lines starting with # are skipped; the value is the \
         rest of the line, without quoting. An unknown name or a malformed line stops the \
         server with the file's name and line number. The exports setting gives way to \
         directories or --exports on the command line.",
    ));
    p.push_str("\n.SH EXAMPLE\n.nf\nexports = /etc/exports\nmax\\-memory = 2G\nmetrics = 127.0.0.1:9750\nno\\-nlm = true\n.fi\n");
    p.push_str(".SH SETTINGS\n");
    for a in cmd.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        if a.is_hide_set() || NOT_IN_CONFIG.contains(&long) {
            continue;
        }
        let value = if a.get_action().takes_values() {
            a.get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string())
                .unwrap_or_else(|| long.to_uppercase())
        } else {
            "true|false".to_string()
        };
        let help = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let default = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        p.push_str(&format!(
            ".TP\n\\fB{}\\fR = \\fI{}\\fR\n{}",
            roff(long),
            roff(&value),
            roff(&help)
        ));
        if !default.is_empty() {
            let stop = if help.ends_with('.') { "" } else { "." };
            p.push_str(&format!("{stop} Default: {}.", roff(&default)));
        }
        p.push('\n');
    }
    p.push_str(
        ".SH FILES\n/etc/nfsd\\-rs.conf, /etc/exports\n.SH SEE ALSO\nnfsd\\-rs(8), exports(5)\n",
    );
    p
}

fn main() -> std::process::ExitCode {
    let args = match arguments() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nfsd: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut cli = Cli::parse_from(args);
    if let Some(dir) = &cli.generate_man_pages {
        return match write_man_pages(dir) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nfsd: {}: {e}", dir.display());
                std::process::ExitCode::FAILURE
            }
        };
    }
    init_logging(cli.log_format);
    if cli.exports.is_empty() && cli.exports_file.is_none() {
        let default = PathBuf::from("/etc/exports");
        if !default.exists() {
            eprintln!(
                "nfsd: nothing to export: give directories, --exports FILE, or an \
                 /etc/exports (nfsd --help)"
            );
            return std::process::ExitCode::from(2);
        }
        cli.exports_file = Some(default);
    }
    let exports = match &cli.exports_file {
        Some(file) => match nfsd::exports::load(file) {
            Ok(lines) => lines,
            Err(e) => {
                eprintln!("nfsd: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
        None => {
            let options = ExportOptions {
                read_only: cli.read_only,
                squash: match cli.squash {
                    SquashArg::Root => Squash::Root,
                    SquashArg::None => Squash::None,
                    SquashArg::All => Squash::All,
                },
                anon_uid: cli.anon_uid,
                anon_gid: cli.anon_gid,
                // As before exports files: any source port.
                secure: false,
                nfsd_only: cli.nfsd_only,
            };
            let lines = cli.exports.iter().map(|p| ExportLine::everyone(p, options));
            lines.collect()
        }
    };
    let handles = match HandleKey::load_or_create(&cli.state_dir) {
        Ok(key) => HandleConfig::new(key),
        Err(e) => {
            eprintln!("nfsd: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if cli.rdma_max_read_memory.is_some() {
        say!(
            "nfsd: --rdma-max-read-memory is deprecated: it sets --max-memory, the one \
             budget for RDMA connections' buffers, WRITE data pulled by RDMA Read and READ \
             buffers"
        );
    }
    let max_memory = cli
        .max_memory
        .or(cli.rdma_max_read_memory)
        .unwrap_or_else(nfsd::memory::default_max_memory);
    let mut config = Config {
        max_memory,
        exports,
        handles,
        bind: cli.bind,
        nfs_port: cli.nfs_port,
        mount_port: cli.mount_port,
        rpcbind: match cli.rpcbind {
            RpcbindArg::Auto => RpcbindMode::Auto,
            RpcbindArg::Register => RpcbindMode::Register,
            RpcbindArg::Serve => RpcbindMode::Serve,
            RpcbindArg::Off => RpcbindMode::Off,
        },
        portmap_port: cli.portmap_port,
        inline_metadata: !cli.no_inline_metadata,
        drc_entries: cli.drc_entries,
        nfs4_id_domain: cli.idmap_domain.clone(),
        metrics: cli.metrics,
        tcp_read_data: match cli.tcp_read_data {
            TcpReadData::Sendfile => oncrpc::tcp::FileData::Sendfile,
            TcpReadData::Copy => oncrpc::tcp::FileData::Copy,
        },
        tcp_splice_writes: cli.tcp_write_data == TcpWriteData::Splice,
        nlm: (!cli.no_nlm).then(|| NlmConfig {
            port: cli.nlm_port,
            grace: std::time::Duration::from_secs(cli.grace_period),
            client_portmap_port: cli.client_portmap_port,
            limits: Limits {
                per_host: usize::try_from(cli.max_locks_per_client).unwrap_or(usize::MAX),
                total: usize::try_from(cli.max_locks).unwrap_or(usize::MAX),
            },
            ..NlmConfig::new(cli.state_dir.clone())
        }),
    };
    // Memory goes back after load (issue 16).
    nfsd::malloc::configure();
    // Modes from clients are applied exactly, as knfsd does.
    rustix::process::umask(rustix::fs::Mode::empty());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nfsd: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let open_files = raise_open_file_limit();
    let mut max_handshakes = cli.rdma_max_handshakes as usize;
    if let Some(n) = open_files {
        let fit = usize::try_from(n / 4).unwrap_or(usize::MAX).max(1);
        if !cli.no_rdma && fit < max_handshakes {
            say!(
                "nfsd: open file limit {n}: at most {fit} RDMA handshakes in progress \
                 (--rdma-max-handshakes {max_handshakes}); raise the hard limit (ulimit -Hn, \
                 systemd LimitNOFILE=) for more"
            );
            max_handshakes = fit;
        }
        // Directory descriptors kept open per export (nfsd::dir_cache): at most an
        // eighth of the limit, so that they never crowd out connections and files.
        let fit = usize::try_from(n / 8).unwrap_or(usize::MAX);
        config.handles.dir_descriptors = config.handles.dir_descriptors.min(fit);
    }
    let rdma = (!cli.no_rdma).then(|| RdmaOptions {
        handshake: iwarp::HandshakeLimits {
            request_timeout: std::time::Duration::from_secs_f64(cli.rdma_handshake_timeout),
            per_source: cli.rdma_handshakes_per_source as usize,
            max_pending: max_handshakes,
        },
        crc: cli.rdma_crc,
        max_ulpdu: cli.rdma_max_ulpdu.map(usize::from),
        transport: RdmaConfig {
            // The budget itself is the NFS server's (`Config::max_memory`), shared.
            max_memory,
            read_timeout: std::time::Duration::from_secs_f64(cli.rdma_read_timeout),
            stall_timeout: std::time::Duration::from_secs_f64(cli.rdma_stall_timeout),
            credits: cli.rdma_credits,
            initial_credits: cli.rdma_initial_credits.min(cli.rdma_credits),
            ..RdmaOptions::server_transport(cli.rdma_version == 2)
        },
        provider: match cli.rdma_provider {
            ProviderArg::Auto => Provider::Auto,
            ProviderArg::Verbs => Provider::Verbs,
            ProviderArg::Iwarp => Provider::Iwarp,
        },
        ..RdmaOptions::new((cli.bind, cli.rdma_port).into())
    });
    let nfs4 = (!cli.no_nfs4).then(|| cli.state_dir.clone());
    match runtime.block_on(run(config, rdma, cli.exports_file, nfs4)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nfsd: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(
    config: Config,
    rdma: Option<RdmaOptions>,
    exports_file: Option<PathBuf>,
    nfs4: Option<PathBuf>,
) -> std::io::Result<()> {
    let mut bound = Bound::new(&config).await?;
    if let Some(state_dir) = &nfs4 {
        bound.serve_nfs4_recoverable(state_dir)?;
    }
    if let Some(opts) = &rdma {
        bound.listen_rdma(opts).await?;
    }
    if let Some(file) = &exports_file {
        say!("nfsd: exports from {} (SIGHUP reloads it)", file.display());
    }
    for line in bound.describe() {
        say!("nfsd: {line}");
    }
    // RFC 1813 §3.3.7: new on every start; clients that see it change in a COMMIT
    // reply resend what they wrote UNSTABLE before (the lab's crash test reads it here).
    let verf: String = bound
        .server()
        .verifier
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    say!("nfsd: write verifier {verf}");
    // SIGHUP's and SIGUSR1's handlers are installed here, before "ready" and READY=1:
    // installed only when their tasks first ran, a reload sent the moment a supervisor
    // saw nfsd ready found the default action, which ends the process.
    use tokio::signal::unix::{signal, SignalKind};
    let hup = signal(SignalKind::hangup())?;
    let usr1 = signal(SignalKind::user_defined1())?;
    tokio::spawn(reload_on_sighup(hup, bound.server().clone(), exports_file));
    tokio::spawn(dump_on_sigusr1(
        usr1,
        bound.rdma_stats(),
        bound.server().reply_cache.clone(),
    ));
    tokio::spawn(nfsd::malloc::trim_when_idle());
    // The handlers are installed before "ready": a SIGTERM sent the moment a
    // supervisor (or a test) sees that line must find them, not the default action.
    let signals = ShutdownSignals::install();
    say!("nfsd: ready");
    nfsd::sd_notify::notify("READY=1\nSTATUS=serving");
    let shutdown = async {
        let name = signals.recv().await;
        nfsd::sd_notify::notify("STOPPING=1\nSTATUS=finishing calls in flight");
        say!("nfsd: {name}: shutting down, finishing calls in flight");
    };
    let reply_cache = bound.server().reply_cache.clone();
    bound.serve(shutdown).await?;
    if let Some(cache) = reply_cache {
        say!("nfsd: duplicate request cache: {}", cache.stats());
    }
    say!("nfsd: stopped");
    Ok(())
}

/// On each SIGHUP, reads the exports file again and serves it; a file that does not
/// load (or a directory that does not open) is reported and the exports in force stay.
async fn reload_on_sighup(
    mut hup: tokio::signal::unix::Signal,
    server: Arc<NfsServer>,
    file: Option<PathBuf>,
) {
    while hup.recv().await.is_some() {
        let Some(file) = &file else {
            say!("nfsd: SIGHUP: no exports file (--exports) to reload");
            continue;
        };
        // `systemctl status` shows "reloading" until READY=1.
        nfsd::sd_notify::notify("RELOADING=1\nSTATUS=reloading the exports");
        let reloaded = nfsd::exports::load(file)
            .map_err(std::io::Error::from)
            .and_then(|lines| server.reload(&lines));
        match reloaded {
            Ok(()) => {
                say!("nfsd: SIGHUP: exports reloaded from {}", file.display());
                for line in export_lines(&server) {
                    say!("nfsd: {line}");
                }
            }
            Err(e) => eprintln!("nfsd: SIGHUP: {e}; the exports in force stay"),
        }
        nfsd::sd_notify::notify("READY=1\nSTATUS=serving");
    }
}

/// On each SIGUSR1, prints the state of every NFS/RDMA connection (issue 31): its
/// counters, and what its task says it holds and waits for (credits, Receives posted,
/// work requests in flight, calls in service and their age, memory charged); then the
/// memory budget and the duplicate request cache's counters.
async fn dump_on_sigusr1(
    mut usr1: tokio::signal::unix::Signal,
    rdma: Option<rpcrdma_transport::StatsRegistry>,
    reply_cache: Option<Arc<oncrpc::drc::ReplyCache>>,
) {
    while usr1.recv().await.is_some() {
        let mut out = String::new();
        match &rdma {
            Some(rdma) => {
                // A connection task that does not answer within this is itself stuck.
                let live = rdma.live_states(std::time::Duration::from_secs(1)).await;
                out.push_str(&format!(
                    "nfsd: SIGUSR1: {} NFS/RDMA connection(s) open\n",
                    live.len()
                ));
                for conn in &live {
                    out.push_str(&format!("nfsd: {conn}\n"));
                }
                if let Some(memory) = rdma.memory() {
                    out.push_str(&format!("nfsd: {memory}\n"));
                }
            }
            None => out.push_str("nfsd: SIGUSR1: NFS/RDMA is not served\n"),
        }
        if let Some(cache) = &reply_cache {
            out.push_str(&format!(
                "nfsd: duplicate request cache: {}\n",
                cache.stats()
            ));
        }
        // One write, so that the dump is not interleaved with other output.
        print!("{out}");
    }
}

/// SIGINT and SIGTERM, caught from the moment they are installed.
struct ShutdownSignals {
    handlers: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl ShutdownSignals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => Some((int, term)),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("nfsd: cannot catch SIGINT/SIGTERM ({e}): they stop the server at once");
                None
            }
        };
        ShutdownSignals { handlers }
    }

    /// Waits for SIGINT or SIGTERM and names it.
    async fn recv(self) -> &'static str {
        let Some((mut int, mut term)) = self.handlers else {
            // Without signal handlers, run until killed.
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_suffixes_and_refuse_less_than_two_calls() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size(" 2g "), Ok(2 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("32768K"), Ok(32 << 20));
        assert_eq!(parse_size("33554432"), Ok(32 << 20));
        assert!(parse_size("1M").is_err(), "below one 16 MiB Call");
        assert!(parse_size("16M").is_err(), "no room for connections");
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999G").is_err(), "overflow");
        assert!(parse_size("").is_err());
        let d = nfsd::memory::default_max_memory();
        assert!((256 << 20..=16 << 30).contains(&d), "{d}");
    }
}
