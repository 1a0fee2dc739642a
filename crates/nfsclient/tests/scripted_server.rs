//! The I/O rules a well-behaved server never makes us exercise, against a scripted
//! NFS server (an `oncrpc` service holding one file in memory): a write verifier that
//! changes between WRITE and COMMIT (the server "restarted" and lost unstable data),
//! short WRITEs, short READs, and servers that never make progress.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nfsclient::nfs3::attr::ObjAttrFail;
use nfsclient::nfs3::io::{
    Commit3Args, Commit3ResOk, FileWcc, Read3Args, Read3ResOk, Write3Args, Write3ResOk,
};
use nfsclient::nfs3::{
    DdpData, NfsFh3, NfsProc3, NfsResult, StableHow, WccData, NFS_PROGRAM, NFS_V3,
};
use nfsclient::{Error, FileReader, FileWriter, IoOptions, NfsClient, ProtocolViolation};
use oncrpc::server::{Server, ServerConfig};
use oncrpc::{ClientConfig, Dispatcher, Request, Service, ServiceError, ServiceResult};
use xdr::{Bytes, Decode, Encode};

/// How the scripted server misbehaves.
#[derive(Debug, Default, Clone, Copy)]
struct Script {
    /// The first this-many COMMITs find the server "restarted": new verifier, and
    /// the data written UNSTABLE since the last good COMMIT is lost.
    restarts_at_commit: u32,
    /// WRITE stores at most this many bytes per call (0: all).
    write_limit: usize,
    /// READ returns at most this many bytes per call, without EOF (0: all).
    read_limit: usize,
    /// WRITE reports 0 bytes written.
    write_nothing: bool,
    /// READ returns 0 bytes and no EOF.
    read_nothing: bool,
    /// READ and WRITE take this long (to see how many the client keeps in flight).
    delay_ms: u64,
}

#[derive(Debug, Default)]
struct State {
    /// What survives a restart.
    stable: Vec<u8>,
    /// What the server currently has.
    file: Vec<u8>,
    verf: u64,
    commits: u32,
    writes: u32,
    bytes_received: usize,
}

struct Scripted {
    script: Script,
    state: Mutex<State>,
    /// READs and WRITEs being served now, and the most seen at once.
    in_service: AtomicUsize,
    max_in_service: AtomicUsize,
}

fn put(file: &mut Vec<u8>, off: usize, data: &[u8]) {
    if file.len() < off + data.len() {
        file.resize(off + data.len(), 0);
    }
    file[off..off + data.len()].copy_from_slice(data);
}

impl Service for Scripted {
    async fn call(&self, req: Request) -> ServiceResult {
        let io = matches!(NfsProc3(req.proc_), NfsProc3::READ | NfsProc3::WRITE);
        if io {
            let now = self.in_service.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_service.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(self.script.delay_ms)).await;
        }
        let out = self.serve(req);
        if io {
            self.in_service.fetch_sub(1, Ordering::SeqCst);
        }
        out
    }
}

impl Scripted {
    fn serve(&self, mut req: Request) -> ServiceResult {
        let mut st = self.state.lock().unwrap();
        let out = match NfsProc3(req.proc_) {
            NfsProc3::WRITE => {
                let a = Write3Args::decode(&mut req.args)?;
                st.writes += 1;
                st.bytes_received += a.data.0.len();
                let mut n = a.data.0.len();
                if self.script.write_limit > 0 {
                    n = n.min(self.script.write_limit);
                }
                if self.script.write_nothing {
                    n = 0;
                }
                put(&mut st.file, a.offset as usize, &a.data.0[..n]);
                if a.stable != StableHow::UNSTABLE {
                    st.stable = st.file.clone();
                }
                let res: NfsResult<Write3ResOk, FileWcc> = NfsResult::Ok(Write3ResOk {
                    file_wcc: WccData::default(),
                    count: n as u32,
                    committed: a.stable,
                    verf: st.verf.to_be_bytes(),
                });
                res.to_xdr()
            }
            NfsProc3::COMMIT => {
                let _ = Commit3Args::decode(&mut req.args)?;
                st.commits += 1;
                if st.commits <= self.script.restarts_at_commit {
                    // A restart just before this COMMIT: unstable data is gone.
                    st.verf += 1;
                    st.file = st.stable.clone();
                } else {
                    st.stable = st.file.clone();
                }
                let res: NfsResult<Commit3ResOk, FileWcc> = NfsResult::Ok(Commit3ResOk {
                    file_wcc: WccData::default(),
                    verf: st.verf.to_be_bytes(),
                });
                res.to_xdr()
            }
            NfsProc3::READ => {
                let a = Read3Args::decode(&mut req.args)?;
                let off = (a.offset as usize).min(st.file.len());
                let mut end = (off + a.count as usize).min(st.file.len());
                let mut eof = end == st.file.len();
                if self.script.read_limit > 0 && end - off > self.script.read_limit {
                    end = off + self.script.read_limit;
                    eof = false;
                }
                if self.script.read_nothing {
                    end = off;
                    eof = false;
                }
                let data = Bytes::copy_from_slice(&st.file[off..end]);
                let res: NfsResult<Read3ResOk, ObjAttrFail> = NfsResult::Ok(Read3ResOk {
                    file_attributes: None,
                    count: data.len() as u32,
                    eof,
                    data: DdpData(data),
                });
                res.to_xdr()
            }
            _ => return Err(ServiceError::ProcUnavail),
        };
        req.args.finish()?;
        Ok(out)
    }
}

struct Running {
    service: Arc<Scripted>,
    nfs: NfsClient,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(script: Script, initial: &[u8]) -> Running {
    let service = Arc::new(Scripted {
        script,
        state: Mutex::new(State {
            stable: initial.to_vec(),
            file: initial.to_vec(),
            verf: 0x1000,
            ..State::default()
        }),
        in_service: AtomicUsize::new(0),
        max_in_service: AtomicUsize::new(0),
    });
    let mut d = Dispatcher::new();
    d.register(NFS_PROGRAM, [NFS_V3], service.clone()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        Server::new(d, ServerConfig::default()).serve(listener, async move {
            let _ = rx.await;
        }),
    );
    let nfs =
        NfsClient::connect(nfsclient::TransportKind::Tcp, addr, ClientConfig::default()).unwrap();
    Running {
        service,
        nfs,
        _stop: tx,
    }
}

fn fh() -> NfsFh3 {
    NfsFh3(Bytes::from_static(b"the-file"))
}

fn opts(wsize: u32, rsize: u32) -> IoOptions {
    IoOptions {
        rsize,
        wsize,
        depth: 4,
        ..IoOptions::default()
    }
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifier_change_at_commit_resends_the_lost_data() {
    let r = start(
        Script {
            restarts_at_commit: 1,
            ..Script::default()
        },
        b"",
    )
    .await;
    let payload = data(100_000);
    let mut w = FileWriter::new(r.nfs.clone(), fh(), StableHow::UNSTABLE, &opts(8192, 8192));
    w.write(0, Bytes::from(payload.clone())).await.unwrap();
    w.commit().await.unwrap();
    // RFC 1813 §3.3.21: the first COMMIT's verifier differs from the WRITEs' (the
    // server lost the data): every piece was written again and committed again.
    assert_eq!(w.resent(), 13);
    assert_eq!(w.written(), payload.len() as u64);
    assert_eq!(w.finish().await.unwrap(), payload.len() as u64);
    let st = r.service.state.lock().unwrap();
    assert_eq!(st.commits, 2);
    assert_eq!(st.bytes_received, 2 * payload.len());
    assert_eq!(
        st.stable, payload,
        "what survives a restart is the whole file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verifier_that_never_settles_is_an_error() {
    let r = start(
        Script {
            restarts_at_commit: u32::MAX,
            ..Script::default()
        },
        b"",
    )
    .await;
    let mut w = FileWriter::new(r.nfs.clone(), fh(), StableHow::UNSTABLE, &opts(4096, 4096));
    w.write(0, Bytes::from(data(10_000))).await.unwrap();
    let e = w.finish().await.unwrap_err();
    assert!(
        matches!(e, Error::VerifierUnstable { attempts: 4 }),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sync_writes_need_no_commit() {
    let r = start(Script::default(), b"").await;
    let payload = data(50_000);
    let mut w = FileWriter::new(
        r.nfs.clone(),
        fh(),
        StableHow::FILE_SYNC,
        &opts(16384, 4096),
    );
    w.write(0, Bytes::from(payload.clone())).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), 50_000);
    let st = r.service.state.lock().unwrap();
    assert_eq!((st.commits, st.writes), (0, 4));
    assert_eq!(st.stable, payload);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_writes_send_the_rest() {
    let r = start(
        Script {
            write_limit: 1000,
            ..Script::default()
        },
        b"",
    )
    .await;
    let payload = data(10_000);
    let mut w = FileWriter::new(r.nfs.clone(), fh(), StableHow::UNSTABLE, &opts(4096, 4096));
    w.write(0, Bytes::from(payload.clone())).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), 10_000);
    let st = r.service.state.lock().unwrap();
    // §3.3.7: each WRITE stored at most 1000 bytes and the client sent the
    // remainders: pieces of 4096, 4096 and 1808 bytes take 5 + 5 + 2 WRITEs.
    assert_eq!(st.writes, 12);
    assert_eq!(st.stable, payload);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_reads_ask_for_the_rest_in_order() {
    let payload = data(70_000);
    let r = start(
        Script {
            read_limit: 3000,
            ..Script::default()
        },
        &payload,
    )
    .await;
    let mut rd = FileReader::new(r.nfs.clone(), fh(), 0, None, &opts(4096, 16384));
    let mut got = Vec::new();
    while let Some((off, chunk)) = rd.next_chunk().await.unwrap() {
        assert_eq!(off, got.len() as u64, "pieces come in file order");
        assert!(chunk.len() <= 3000);
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, payload);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_make_no_progress_are_protocol_errors() {
    let r = start(
        Script {
            read_nothing: true,
            write_nothing: true,
            ..Script::default()
        },
        b"abc",
    )
    .await;
    let mut rd = FileReader::new(r.nfs.clone(), fh(), 0, None, &opts(4096, 4096));
    let e = rd.next_chunk().await.unwrap_err();
    assert!(
        matches!(e, Error::Protocol(ProtocolViolation::EmptyRead)),
        "{e:?}"
    );
    assert!(
        rd.next_chunk().await.unwrap().is_none(),
        "a failed reader stops"
    );
    let mut w = FileWriter::new(r.nfs.clone(), fh(), StableHow::UNSTABLE, &opts(4096, 4096));
    w.write(0, Bytes::from_static(b"xyz")).await.unwrap();
    let e = w.finish().await.unwrap_err();
    assert!(
        matches!(e, Error::Protocol(ProtocolViolation::EmptyWrite)),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_procedure_is_an_rpc_error_not_an_nfs_status() {
    let r = start(Script::default(), b"").await;
    let e = r.nfs.getattr(&fh()).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Rpc {
                what: "NFS GETATTR",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.status(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_are_pipelined_up_to_the_depth() {
    let payload = data(64 * 1024);
    let r = start(
        Script {
            delay_ms: 30,
            ..Script::default()
        },
        &payload,
    )
    .await;
    let io = IoOptions {
        rsize: 4096,
        wsize: 4096,
        depth: 6,
        ..IoOptions::default()
    };
    // 16 READs of 30 ms each, 6 at a time. (The length is given, so that no READ
    // past EOF is still being served when the WRITEs start.)
    let mut rd = FileReader::new(r.nfs.clone(), fh(), 0, Some(payload.len() as u64), &io);
    let mut got = Vec::new();
    while let Some((_, chunk)) = rd.next_chunk().await.unwrap() {
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, payload);
    assert_eq!(r.service.max_in_service.load(Ordering::SeqCst), 6);
    // 16 WRITEs, the same.
    r.service.max_in_service.store(0, Ordering::SeqCst);
    let mut w = FileWriter::new(r.nfs.clone(), fh(), StableHow::UNSTABLE, &io);
    w.write(0, Bytes::from(payload.clone())).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(r.service.max_in_service.load(Ordering::SeqCst), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_every_bounds_the_data_held_for_resending() {
    let r = start(Script::default(), b"").await;
    let io = IoOptions {
        rsize: 4096,
        wsize: 4096,
        depth: 4,
        commit_every: 16 * 1024,
    };
    let mut w = FileWriter::new(r.nfs.clone(), fh(), StableHow::UNSTABLE, &io);
    for i in 0..8u64 {
        w.write(i * 8192, Bytes::from(data(8192))).await.unwrap();
    }
    w.finish().await.unwrap();
    // 64 KiB through 4 WRITEs in flight: at least 48 KiB complete before `finish`,
    // so at least one COMMIT happens on the way (then the last one in `finish`),
    // and everything ends up stable.
    let st = r.service.state.lock().unwrap();
    assert!(st.commits >= 2, "{} COMMITs", st.commits);
    assert_eq!(st.stable.len(), 64 * 1024);
    assert_eq!(&st.stable[..8192], &data(8192)[..]);
}
