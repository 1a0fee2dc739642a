//! The commands: each mounts the target, does its work through the library, and
//! reports errors with the NFS status the server gave.

use std::path::Path;

use bytes::BytesMut;
use nfsclient::nfs3::{Ftype3, NfsFh3, NfsStat3, StableHow};
use nfsclient::{components, Mount, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::format::{mode_string, stat_text, time_string};
use crate::progress::bar;
use crate::{Command, Global};

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The NFS client failed (the message carries the nfsstat3).
    #[error("{target}: {source}")]
    Nfs {
        /// What was being worked on.
        target: String,
        /// The library's error.
        source: nfsclient::Error,
    },
    /// A local file failed.
    #[error("{path}: {source}")]
    Local {
        /// The local path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
}

impl CliError {
    /// What the user can do about it, when the error alone does not say.
    pub(crate) fn hint(&self) -> Option<&'static str> {
        match self {
            CliError::Nfs {
                source: nfsclient::Error::NoPortmapper { .. },
                ..
            } => Some(
                "the server runs no rpcbind to tell MOUNT's port: start rpcbind there (our \
                 nfsd serves its own portmapper when none runs), or give the port: \
                 --mount-port PORT (our nfsd: 20048; --portmap-port if the portmapper \
                 listens elsewhere)",
            ),
            _ => None,
        }
    }
}

type Result<T> = std::result::Result<T, CliError>;

trait Context<T> {
    fn on(self, target: &impl std::fmt::Display) -> Result<T>;
}

impl<T> Context<T> for nfsclient::Result<T> {
    fn on(self, target: &impl std::fmt::Display) -> Result<T> {
        self.map_err(|source| CliError::Nfs {
            target: target.to_string(),
            source,
        })
    }
}

fn io_on<T>(r: std::io::Result<T>, path: &str) -> Result<T> {
    r.map_err(|source| CliError::Local {
        path: path.to_string(),
        source,
    })
}

/// Mounts the target's export; returns the mount and the path inside it, which keeps
/// at least `keep` components (1 for commands acting on a directory entry).
async fn open(g: &Global, t: &Target, keep: usize) -> Result<(Mount, String)> {
    let opts = g.mount_options(t).map_err(CliError::Usage)?;
    match &g.export {
        Some(export) => {
            let exp: Vec<&str> = components(export).collect();
            let all: Vec<&str> = components(&t.path).collect();
            if !all.starts_with(&exp) {
                return Err(CliError::Usage(format!(
                    "{} is not inside the export {export}",
                    t.path
                )));
            }
            let m = Mount::mount(&t.host, export, &opts).await.on(t)?;
            Ok((m, all[exp.len()..].join("/")))
        }
        None => Mount::mount_longest(&t.host, &t.path, keep, &opts)
            .await
            .on(t),
    }
}

/// Runs one command.
pub(crate) async fn run(g: Global, cmd: Command) -> Result<()> {
    match cmd {
        Command::Ls { long, all, target } => ls(&g, &target, long, all).await,
        Command::Get { target, local } => get(&g, &target, local).await,
        Command::Put {
            local,
            target,
            sync,
        } => put(&g, &local, &target, sync).await,
        Command::Rm { dir, target } => {
            let (m, path) = open(&g, &target, 1).await?;
            m.remove_path(&path, dir).await.on(&target)
        }
        Command::Mkdir {
            parents,
            mode,
            target,
        } => {
            let (m, path) = open(&g, &target, 1).await?;
            m.mkdir_path(&path, mode, parents).await.on(&target)?;
            Ok(())
        }
        Command::Stat { target } => {
            let (m, path) = open(&g, &target, 0).await?;
            let (_, attrs) = m.lookup_path(&path).await.on(&target)?;
            print!("{}", stat_text(&target.to_string(), &attrs));
            Ok(())
        }
        Command::Cat { target } => get(&g, &target, Some("-".into())).await,
        Command::Stats { addr } => crate::stats::stats(&addr).await,
    }
}

/// `nfs ls`: like `ls`, the entries sorted by name, `.` and `..` only with `all`
/// (and then first, as `ls -a` shows them).
async fn ls(g: &Global, target: &Target, long: bool, all: bool) -> Result<()> {
    let (m, path) = open(g, target, 0).await?;
    let (fh, attrs) = m.lookup_path(&path).await.on(target)?;
    let mut out = String::new();
    if attrs.ftype != Ftype3::NF3DIR {
        let name = components(&path).last().unwrap_or(".").to_string();
        let name = with_link_target(&m, name, &fh, Some(&attrs), long).await;
        line(&mut out, &name, Some(&attrs), long);
        print!("{out}");
        return Ok(());
    }
    let mut entries = m.read_dir(&fh, long).collect_all().await.on(target)?;
    let dot_rank = |name: &[u8]| match name {
        b"." => 0,
        b".." => 1,
        _ => 2,
    };
    if !all {
        entries.retain(|e| dot_rank(&e.name) == 2);
    }
    entries.sort_by(|a, b| (dot_rank(&a.name), &a.name).cmp(&(dot_rank(&b.name), &b.name)));
    for e in &entries {
        let mut name = String::from_utf8_lossy(&e.name).into_owned();
        if let Some(h) = &e.handle {
            name = with_link_target(&m, name, h, e.attributes.as_ref(), long).await;
        }
        line(&mut out, &name, e.attributes.as_ref(), long);
    }
    print!("{out}");
    Ok(())
}

/// `ls -l` shows a symbolic link as `name -> target` (one READLINK).
async fn with_link_target(
    m: &Mount,
    name: String,
    fh: &NfsFh3,
    attrs: Option<&nfsclient::nfs3::Fattr3>,
    long: bool,
) -> String {
    if !long || attrs.map(|a| a.ftype) != Some(Ftype3::NF3LNK) {
        return name;
    }
    match m.nfs().readlink(fh).await {
        Ok(rl) => format!("{name} -> {}", String::from_utf8_lossy(&rl.data.0)),
        Err(_) => name,
    }
}

fn line(out: &mut String, name: &str, attrs: Option<&nfsclient::nfs3::Fattr3>, long: bool) {
    use std::fmt::Write;
    match (long, attrs) {
        (true, Some(a)) => {
            let mtime = time_string(a.mtime);
            let _ = writeln!(
                out,
                "{} {:>3} {:>5} {:>5} {:>12} {} {name}",
                mode_string(a),
                a.nlink,
                a.uid,
                a.gid,
                a.size,
                &mtime[..16]
            );
        }
        (true, None) => {
            let _ = writeln!(
                out,
                "?????????? {:>3} {:>5} {:>5} {:>12} {:16} {name}",
                "?", "?", "?", "?", "?"
            );
        }
        (false, _) => {
            let _ = writeln!(out, "{name}");
        }
    }
}

async fn get(g: &Global, target: &Target, local: Option<String>) -> Result<()> {
    let (m, path) = open(g, target, 0).await?;
    let (fh, attrs) = m.lookup_path(&path).await.on(target)?;
    if attrs.ftype == Ftype3::NF3DIR {
        return Err(CliError::Nfs {
            target: target.to_string(),
            source: nfsclient::Error::Nfs {
                proc: nfsclient::nfs3::NfsProc3::READ,
                status: NfsStat3::NFS3ERR_ISDIR,
            },
        });
    }
    let local = match local {
        Some(l) => l,
        None => components(&path)
            .last()
            .ok_or_else(|| CliError::Usage("no file name in the target; give a local name".into()))?
            .to_string(),
    };
    let to_stdout = local == "-";
    let pb = bar(attrs.size, g.quiet || to_stdout);
    let mut out: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = if to_stdout {
        Box::new(tokio::io::stdout())
    } else {
        Box::new(io_on(tokio::fs::File::create(&local).await, &local)?)
    };
    let started = std::time::Instant::now();
    let mut total = 0u64;
    let mut reader = m.reader(&fh, 0, None);
    while let Some((_, data)) = reader.next_chunk().await.on(target)? {
        // COPY: the reply slice into the local file's page cache (or the stdout pipe).
        io_on(out.write_all(&data).await, &local)?;
        pb.inc(data.len() as u64);
        total += data.len() as u64;
    }
    io_on(out.flush().await, &local)?;
    pb.finish_and_clear();
    if g.verbose {
        report(&m, "read", total, started.elapsed());
    }
    Ok(())
}

async fn put(g: &Global, local_path: &str, target: &Target, sync: bool) -> Result<()> {
    let mut file = io_on(tokio::fs::File::open(local_path).await, local_path)?;
    let meta = io_on(file.metadata().await, local_path)?;
    let (m, mut path) = open(g, target, 0).await?;
    // A target that is a directory (or the export root) receives the file by name.
    let is_dir = match m.lookup_path(&path).await {
        Ok((_, a)) => a.ftype == Ftype3::NF3DIR,
        Err(e) if e.is(NfsStat3::NFS3ERR_NOENT) => false,
        Err(e) => return Err(e).on(target),
    };
    if is_dir {
        let name = Path::new(local_path)
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| CliError::Usage(format!("{local_path} has no file name")))?;
        path = format!("{path}/{name}");
    }
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o7777
    };
    let fh: NfsFh3 = m.create_file(&path, mode, false).await.on(target)?;
    let stable = if sync {
        StableHow::FILE_SYNC
    } else {
        StableHow::UNSTABLE
    };
    let mut writer = m.writer(&fh, stable);
    let wsize = m.io_options().wsize as usize;
    let pb = bar(meta.len(), g.quiet);
    let started = std::time::Instant::now();
    let mut offset = 0u64;
    loop {
        let mut buf = BytesMut::with_capacity(wsize);
        // COPY: local page cache -> this buffer (the read syscall); the buffer is then
        // sent without another user-space copy.
        while buf.len() < wsize {
            let n = io_on(file.read_buf(&mut buf).await, local_path)?;
            if n == 0 {
                break;
            }
        }
        if buf.is_empty() {
            break;
        }
        let len = buf.len() as u64;
        writer.write(offset, buf.freeze()).await.on(target)?;
        offset += len;
        pb.inc(len);
    }
    let written = writer.finish().await.on(target)?;
    pb.finish_and_clear();
    if g.verbose {
        report(&m, "wrote", written, started.elapsed());
    }
    if written != offset {
        return Err(CliError::Usage(format!(
            "server acknowledged {written} of {offset} bytes"
        )));
    }
    Ok(())
}

/// `-v`: the transfer's size, time and rate, and what the RDMA transport did.
fn report(m: &Mount, what: &str, bytes: u64, took: std::time::Duration) {
    let secs = took.as_secs_f64().max(1e-9);
    let io = m.io_options();
    eprintln!(
        "nfs: {what} {bytes} bytes in {secs:.3} s ({:.1} MiB/s), rsize {} wsize {} depth {}",
        bytes as f64 / secs / (1024.0 * 1024.0),
        io.rsize,
        io.wsize,
        io.depth
    );
    if let Some(stats) = m.rdma_stats() {
        use nfsclient::Counter;
        let counters = [
            Counter::Calls,
            Counter::ReadChunks,
            Counter::WriteChunks,
            Counter::ReplyChunks,
            Counter::PulledReplies,
            Counter::ChunkBytesReceived,
            Counter::SendBytes,
            Counter::CreditWaits,
            Counter::VersionFallbacks,
        ];
        let mut line: Vec<String> = counters
            .iter()
            .map(|c| format!("{}={}", c.name(), stats.total(*c)))
            .collect();
        if let Some(latest) = stats.latest() {
            let version = Counter::Version;
            line.push(format!("{}={}", version.name(), latest.get(version)));
        }
        eprintln!("nfs: rdma {}", line.join(" "));
    }
}
