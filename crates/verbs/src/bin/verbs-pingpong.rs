//! verbs-pingpong: the verbs provider end to end on a real RDMA device, through the
//! `rdma` API only (issue 14's proof, run in the lab guest over rxe0 and siw0).
//!
//! ```text
//! verbs-pingpong server ADDR:PORT     verbs-pingpong client ADDR:PORT
//! ```
//!
//! 1. The client connects with private data `pingpong-reject-me`; the server rejects
//!    with `go-away`, which the client must see as `ConnectError::Rejected`.
//! 2. Connection 1 (private data both ways): Send/Receive both ways; the client
//!    RDMA Reads the server's 64 KiB region (bytes checked), RDMA Writes another
//!    pattern into it (checked by the server); the client disconnects and both see
//!    `QpEvent::Disconnected` and their outstanding Receives flushed.
//! 3. Connection 2: the client's Send With Invalidate of a server region is seen by
//!    the server's Receive (`recv-invalidated`, or `recv-invalidated-unreported` on
//!    siw, whose libsiw never sets `IBV_WC_WITH_INV`), and the client's RDMA Write
//!    to that region afterwards fails (on iWARP, where Writes are unacknowledged,
//!    the responder's Terminate ends the connection); or, on devices that invalidate only
//!    fast-registered regions or memory windows (rxe on Linux 6.1 for `ibv_reg_mr`
//!    regions), the server's Receive fails (`invalidate-refused-by-device`). Either
//!    way the region keeps its bytes.
//!
//! Every step prints one line `ok <step> key=value...`; a failed check prints
//! `FAIL <step>: why` and the process exits 1.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rdma::{
    Access, Completion, ConnectError, ConnectParams, ConnectRequest, ConnectionManager, Listener,
    MemoryRegion, ProtectionDomain, QpEvent, QueuePair, QueuePairExt, RecvWr, RemoteAddr, Route,
    STag, SendOp, SendWr, WcOpcode, WcStatus,
};
use verbs::{VerbsCm, VerbsQp};

const T_LEN: usize = 65536;
const STEP: Duration = Duration::from_secs(15);
const NRECV: u64 = 8;

type R<T> = Result<T, String>;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 * 7 + seed as u32 * 13 % 251) as u8)
        .collect()
}

/// Private data as text, without the zero padding IB CM adds.
fn text(b: &[u8]) -> String {
    let end = b.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
    String::from_utf8_lossy(&b[..end]).into_owned()
}

struct Peer {
    qp: VerbsQp,
    pd: ProtectionDomain,
    bufs: HashMap<u64, MemoryRegion>,
    stash: VecDeque<Completion>,
    next: u64,
}

fn recv_bufs(pd: &ProtectionDomain) -> R<(HashMap<u64, MemoryRegion>, Vec<RecvWr>)> {
    let mut bufs = HashMap::new();
    let mut wrs = Vec::new();
    for i in 0..NRECV {
        let mr = pd
            .register(BytesMut::zeroed(4096), Access::LOCAL_WRITE)
            .map_err(|e| format!("register recv buffer: {e}"))?;
        wrs.push(RecvWr {
            wr_id: 1000 + i,
            sgl: vec![mr.clone().into()],
        });
        bufs.insert(1000 + i, mr);
    }
    Ok((bufs, wrs))
}

impl Peer {
    async fn completion(&mut self, what: &str) -> R<Completion> {
        match tokio::time::timeout(STEP, self.qp.completion()).await {
            Err(_) => Err(format!("{what}: no completion in {STEP:?}")),
            Ok(None) => Err(format!("{what}: the queue pair is dead")),
            Ok(Some(c)) => Ok(c),
        }
    }

    /// Waits for the completion of `wr_id`, keeping others.
    async fn wait(&mut self, wr_id: u64, what: &str) -> R<Completion> {
        if let Some(i) = self.stash.iter().position(|c| c.wr_id == wr_id) {
            return Ok(self.stash.remove(i).expect("index from position"));
        }
        loop {
            let c = self.completion(what).await?;
            if c.wr_id == wr_id {
                return Ok(c);
            }
            self.stash.push_back(c);
        }
    }

    async fn post(&mut self, op: SendOp, sgl: Vec<rdma::LocalSge>, what: &str) -> R<Completion> {
        self.next += 1;
        let wr_id = self.next;
        self.qp
            .post_send(SendWr { wr_id, op, sgl })
            .map_err(|e| format!("{what}: post: {e}"))?;
        self.wait(wr_id, what).await
    }

    async fn send_op(&mut self, op: SendOp, msg: &str) -> R<()> {
        let mr = self
            .pd
            .register(BytesMut::from(msg.as_bytes()), Access::NONE)
            .map_err(|e| format!("register send: {e}"))?;
        let c = self.post(op, vec![mr.into()], "send").await?;
        if c.status != WcStatus::Success || c.opcode != WcOpcode::Send {
            return Err(format!("send {msg:?}: {c:?}"));
        }
        Ok(())
    }

    async fn send(&mut self, msg: &str) -> R<()> {
        self.send_op(SendOp::Send, msg).await
    }

    /// The next received message and its completion; the buffer is posted again.
    async fn recv(&mut self) -> R<(String, Completion)> {
        let c = loop {
            if let Some(i) = self.stash.iter().position(|c| c.opcode == WcOpcode::Recv) {
                break self.stash.remove(i).expect("index from position");
            }
            let c = self.completion("recv").await?;
            if c.opcode == WcOpcode::Recv {
                break c;
            }
            self.stash.push_back(c);
        };
        if c.status != WcStatus::Success {
            return Err(format!("recv: {c:?}"));
        }
        let mr = self
            .bufs
            .get(&c.wr_id)
            .ok_or_else(|| format!("recv: unknown wr_id {}", c.wr_id))?
            .clone();
        let msg = mr
            .read(0, c.byte_len)
            .ok_or_else(|| format!("recv: byte_len {} too long", c.byte_len))?;
        self.qp
            .post_recv(RecvWr {
                wr_id: c.wr_id,
                sgl: vec![mr.into()],
            })
            .map_err(|e| format!("repost recv: {e}"))?;
        Ok((String::from_utf8_lossy(&msg).into_owned(), c))
    }

    /// Waits for the disconnect event, then for the last completion; returns the
    /// event and how many completions were flushed.
    async fn closed(&mut self) -> R<(QpEvent, usize)> {
        let ev = tokio::time::timeout(STEP, self.qp.event())
            .await
            .map_err(|_| "no disconnect event".to_string())?
            .ok_or("events ended without a disconnect")?;
        let mut flushed = self
            .stash
            .iter()
            .filter(|c| c.status == WcStatus::Flushed)
            .count();
        loop {
            match tokio::time::timeout(STEP, self.qp.completion()).await {
                Err(_) => return Err("completions did not end after the disconnect".into()),
                Ok(None) => break,
                Ok(Some(c)) => flushed += usize::from(c.status == WcStatus::Flushed),
            }
        }
        Ok((ev, flushed))
    }
}

fn field<'a>(msg: &'a str, key: &str) -> R<&'a str> {
    msg.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .ok_or_else(|| format!("no {key}= in {msg:?}"))
}

fn number(msg: &str, key: &str) -> R<u32> {
    field(msg, key)?
        .parse()
        .map_err(|e| format!("{key} in {msg:?}: {e}"))
}

async fn server(addr: SocketAddr) -> R<()> {
    let cm = VerbsCm::new();
    let mut l = cm.listen(addr).await.map_err(|e| format!("listen: {e}"))?;
    println!("ok listen addr={:?}", l.local_addr());
    // 1. reject.
    let req = l.accept().await.map_err(|e| format!("accept: {e}"))?;
    let pd_text = text(&req.peer().private_data);
    if !pd_text.starts_with("pingpong-reject-me") {
        return Err(format!("first request's private data {pd_text:?}"));
    }
    req.reject(Bytes::from_static(b"go-away"))
        .await
        .map_err(|e| format!("reject: {e}"))?;
    println!("ok reject private={pd_text}");

    // 2. connection 1.
    let req = l.accept().await.map_err(|e| format!("accept: {e}"))?;
    let dev = req.device().clone();
    let peer = req.peer().clone();
    println!(
        "ok request device={} private={} ird={} ord={} from={:?}",
        dev.name(),
        text(&peer.private_data),
        peer.ird,
        peer.ord,
        peer.addr
    );
    if text(&peer.private_data) != "pingpong-client" {
        return Err(format!("private data {:?}", peer.private_data));
    }
    let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let (bufs, recvs) = recv_bufs(&pd)?;
    let t = pd
        .register(
            BytesMut::from(&pattern(1, T_LEN)[..]),
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .map_err(|e| format!("register t: {e}"))?;
    let params = ConnectParams {
        private_data: Bytes::from_static(b"pingpong-server"),
        ird: 16,
        ord: 16,
        recvs,
    };
    let qp = req
        .accept(&pd, params)
        .await
        .map_err(|e| format!("accept: {e}"))?;
    println!("ok established device={}", dev.name());
    let mut p = Peer {
        qp,
        pd: pd.clone(),
        bufs,
        stash: VecDeque::new(),
        next: 0,
    };
    let (m, _) = p.recv().await?;
    if m != "hello from client" {
        return Err(format!("first message {m:?}"));
    }
    println!("ok recv msg={m:?}");
    let rkey = t.rkey().ok_or("t has no rkey")?;
    let base = t.remote_offset(0);
    p.send(&format!("regions t={} base={base} tlen={T_LEN}", rkey.0))
        .await?;
    println!("ok send regions");
    let (m, _) = p.recv().await?;
    if m != "written" {
        return Err(format!("expected written, got {m:?}"));
    }
    if t.read(0, T_LEN).as_deref() != Some(&pattern(2, T_LEN)[..]) {
        return Err("the client's RDMA Write did not land in t".into());
    }
    println!("ok write-check bytes={T_LEN}");
    // Small Sends go inline where the device offers it (both messages above are).
    let inline = p.qp.inline_data();
    if inline.max > 0 && inline.posted < 1 {
        return Err(format!("no Send went inline: {inline:?}"));
    }
    println!("ok inline max={} posted={}", inline.max, inline.posted);
    p.send("done").await?;
    let (ev, flushed) = p.closed().await?;
    println!("ok closed event={ev:?} flushed={flushed}");
    drop(p);

    // 3. connection 2: Send With Invalidate.
    let req = l.accept().await.map_err(|e| format!("accept: {e}"))?;
    let pd = req
        .device()
        .alloc_pd()
        .map_err(|e| format!("alloc_pd: {e}"))?;
    let (bufs, recvs) = recv_bufs(&pd)?;
    let v = pd
        .register(
            BytesMut::zeroed(4096),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .map_err(|e| format!("register v: {e}"))?;
    let qp = req
        .accept(
            &pd,
            ConnectParams {
                private_data: Bytes::from_static(b"pingpong-server"),
                ird: 16,
                ord: 16,
                recvs,
            },
        )
        .await
        .map_err(|e| format!("accept 2: {e}"))?;
    let mut p = Peer {
        qp,
        pd,
        bufs,
        stash: VecDeque::new(),
        next: 0,
    };
    let vkey = v.rkey().ok_or("v has no rkey")?;
    p.send(&format!("v={} base={}", vkey.0, v.remote_offset(0)))
        .await?;
    match p.recv().await {
        Ok((m, c)) => {
            match c.invalidated {
                Some(k) if k == vkey => println!("ok recv-invalidated rkey={}", vkey.0),
                // libsiw's poll_cq sets no wc_flags (rdma-core providers/siw/siw.c,
                // copy_cqe), so the invalidated rkey is not reported; whether the
                // region was invalidated shows in the client's Write below.
                None => println!("ok recv-invalidated-unreported rkey={}", vkey.0),
                Some(k) => {
                    return Err(format!(
                        "Send With Invalidate {m:?}: invalidated {k:?}, expected {vkey:?}"
                    ))
                }
            }
            p.send("invalidated").await?;
            // The client's Write to v now fails, and the connection ends with it
            // (the responder's QP goes to the error state).
            match p.closed().await {
                Ok((ev, n)) => println!("info after-invalidate event={ev:?} flushed={n}"),
                Err(e) => println!("info after-invalidate {e}"),
            }
        }
        // A device that invalidates only fast-registered regions (rxe) fails the
        // Receive of a Send With Invalidate naming an ibv_reg_mr region.
        Err(e) => println!("ok invalidate-refused-by-device {e}"),
    }
    if v.read(0, 16).as_deref() != Some(&[0u8; 16][..]) {
        return Err("v was written after its invalidation".into());
    }
    println!("ok v-untouched");
    Ok(())
}

async fn client(addr: SocketAddr) -> R<()> {
    let cm = VerbsCm::new();
    // 1. reject.
    let route = cm
        .resolve(addr)
        .await
        .map_err(|e| format!("resolve: {e}"))?;
    let dev = route.device().clone();
    println!("ok resolve device={}", dev.name());
    let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let params = ConnectParams {
        private_data: Bytes::from_static(b"pingpong-reject-me"),
        ird: 16,
        ord: 16,
        recvs: Vec::new(),
    };
    match route.connect(&pd, params).await {
        Err(ConnectError::Rejected { private_data }) if text(&private_data) == "go-away" => {
            println!("ok rejected private={}", text(&private_data))
        }
        Err(e) => return Err(format!("reject: {e:?}")),
        Ok(_) => return Err("the connection to be rejected was accepted".into()),
    }

    // 2. connection 1.
    let route = cm
        .resolve(addr)
        .await
        .map_err(|e| format!("resolve: {e}"))?;
    let dev = route.device().clone();
    let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let (bufs, recvs) = recv_bufs(&pd)?;
    let params = ConnectParams {
        private_data: Bytes::from_static(b"pingpong-client"),
        ird: 16,
        ord: 16,
        recvs,
    };
    let qp = route
        .connect(&pd, params)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let peer = qp.peer().clone();
    println!(
        "ok established device={} private={} ird={} ord={}",
        dev.name(),
        text(&peer.private_data),
        peer.ird,
        peer.ord
    );
    if text(&peer.private_data) != "pingpong-server" {
        return Err(format!("server private data {:?}", peer.private_data));
    }
    let mut p = Peer {
        qp,
        pd: pd.clone(),
        bufs,
        stash: VecDeque::new(),
        next: 0,
    };
    p.send("hello from client").await?;
    let (m, _) = p.recv().await?;
    println!("ok recv msg={m:?}");
    let t = STag(number(&m, "t")?);
    let base: u64 = field(&m, "base")?
        .parse()
        .map_err(|e| format!("base in {m:?}: {e}"))?;
    let len = number(&m, "tlen")? as usize;
    let sink = pd
        .register(
            BytesMut::zeroed(len),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .map_err(|e| format!("register sink: {e}"))?;
    let c = p
        .post(
            SendOp::RdmaRead {
                remote: RemoteAddr {
                    stag: t,
                    offset: base,
                },
                sink: sink.clone().into(),
            },
            Vec::new(),
            "read",
        )
        .await?;
    if c.status != WcStatus::Success || c.opcode != WcOpcode::RdmaRead {
        return Err(format!("read: {c:?}"));
    }
    if sink.read(0, len).as_deref() != Some(&pattern(1, len)[..]) {
        return Err("RDMA Read brought other bytes".into());
    }
    println!("ok read-check bytes={len}");
    let src = pd
        .register(BytesMut::from(&pattern(2, len)[..]), Access::NONE)
        .map_err(|e| format!("register src: {e}"))?;
    let c = p
        .post(
            SendOp::RdmaWrite(RemoteAddr {
                stag: t,
                offset: base,
            }),
            vec![src.into()],
            "write",
        )
        .await?;
    if c.status != WcStatus::Success || c.opcode != WcOpcode::RdmaWrite {
        return Err(format!("write: {c:?}"));
    }
    println!("ok write bytes={len}");
    p.send("written").await?;
    let (m, _) = p.recv().await?;
    if m != "done" {
        return Err(format!("expected done, got {m:?}"));
    }
    p.qp.disconnect();
    let (ev, flushed) = p.closed().await?;
    println!("ok closed event={ev:?} flushed={flushed}");
    drop(p);

    // 3. connection 2: Send With Invalidate, then a Write to the region fails.
    let route = cm
        .resolve(addr)
        .await
        .map_err(|e| format!("resolve: {e}"))?;
    let pd = route
        .device()
        .alloc_pd()
        .map_err(|e| format!("alloc_pd: {e}"))?;
    let (bufs, recvs) = recv_bufs(&pd)?;
    let qp = route
        .connect(
            &pd,
            ConnectParams {
                private_data: Bytes::from_static(b"pingpong-client"),
                ird: 16,
                ord: 16,
                recvs,
            },
        )
        .await
        .map_err(|e| format!("connect 2: {e}"))?;
    let mut p = Peer {
        qp,
        pd: pd.clone(),
        bufs,
        stash: VecDeque::new(),
        next: 0,
    };
    let (m, _) = p.recv().await?;
    let v = STag(number(&m, "v")?);
    let vbase: u64 = field(&m, "base")?
        .parse()
        .map_err(|e| format!("base in {m:?}: {e}"))?;
    p.send_op(SendOp::SendWithInvalidate(v), "invalidate v")
        .await?;
    println!("ok send-with-invalidate rkey={}", v.0);
    let m = match p.recv().await {
        Ok((m, _)) => m,
        Err(e) => {
            println!("ok invalidate-refused-by-device {e}");
            return Ok(());
        }
    };
    if m != "invalidated" {
        return Err(format!("expected invalidated, got {m:?}"));
    }
    let src = pd
        .register(BytesMut::from(&[0xabu8; 16][..]), Access::NONE)
        .map_err(|e| format!("register src: {e}"))?;
    let c = p
        .post(
            SendOp::RdmaWrite(RemoteAddr {
                stag: v,
                offset: vbase,
            }),
            vec![src.into()],
            "write after invalidate",
        )
        .await?;
    if c.status != WcStatus::Success {
        println!("ok write-after-invalidate status={:?}", c.status);
        return Ok(());
    }
    // On iWARP an RDMA Write is not acknowledged: its completion says only that it
    // was sent. The responder's answer to a Write naming an invalid STag is a
    // Terminate (RFC 5041 DDP tagged buffer error), which ends the connection.
    let (ev, flushed) = p
        .closed()
        .await
        .map_err(|e| format!("the Write to an invalidated region was not refused: {e}"))?;
    println!("ok write-after-invalidate terminated event={ev:?} flushed={flushed}");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(addr)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: verbs-pingpong server|client ADDR:PORT");
        return ExitCode::from(2);
    };
    let addr: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{addr}: {e}");
            return ExitCode::from(2);
        }
    };
    let r = match mode.as_str() {
        "server" => server(addr).await,
        "client" => client(addr).await,
        _ => Err(format!("unknown mode {mode}")),
    };
    match r {
        Ok(()) => {
            println!("ok {mode} PASS");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAIL {mode}: {e}");
            ExitCode::FAILURE
        }
    }
}
