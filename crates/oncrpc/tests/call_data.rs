//! A call's bulk data item received apart, into pipes (`oncrpc::tcp::call_data`):
//! hand-made call records over loopback TCP, sent whole and in pieces, against a
//! service that names its item and echoes what it got.
#![cfg(feature = "tokio")]

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use oncrpc::server::{Server, ServerConfig, TcpStats};
use oncrpc::service::DataItem;
use oncrpc::tcp::Pipes;
use oncrpc::{Dispatcher, Request, Service, ServiceError, ServiceResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use xdr::Encoder;

const PROG: u32 = 0x2000_0203;

/// Procedure 1 takes `tag: u32, data: opaque<> (DDP-eligible), trailer: u32` and
/// answers `apart: bool, in_pipes: bool, tag, trailer, data`: whether the data came
/// apart from the call, and then whether in pipes (or read into memory).
struct Sink;

impl Service for Sink {
    fn call_data_item(&self, _vers: u32, proc_: u32, args: &[u8]) -> Option<DataItem> {
        let len = args.get(4..8)?;
        (proc_ == 1).then(|| DataItem {
            offset: 8,
            len: u32::from_be_bytes(len.try_into().unwrap()) as usize,
        })
    }

    async fn call(&self, mut req: Request) -> ServiceResult {
        if req.proc_ != 1 {
            return Err(ServiceError::ProcUnavail);
        }
        let tag = req.args.u32()?;
        let inline = req.args.ddp_opaque(u32::MAX)?;
        let trailer = req.args.u32()?;
        req.args.finish()?;
        let (apart, in_pipes, data) = match req.data.take() {
            Some(d) => {
                assert!(inline.is_empty(), "data both inline and apart");
                (true, d.spliced(), d.into_vec().expect("reading the pipes"))
            }
            None => (false, false, inline.to_vec()),
        };
        let mut enc = Encoder::new();
        enc.bool(apart)
            .bool(in_pipes)
            .u32(tag)
            .u32(trailer)
            .opaque(&data);
        Ok(enc.finish())
    }
}

async fn start(config: ServerConfig) -> SocketAddr {
    let mut d = Dispatcher::new();
    d.register(PROG, [1], Arc::new(Sink)).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(Server::new(d, config).serve(listener, std::future::pending()));
    addr
}

/// The record of call `xid`: RPC header (AUTH_NONE), then the arguments.
fn record(xid: u32, tag: u32, data: &[u8], trailer: u32) -> Vec<u8> {
    let mut enc = Encoder::new();
    for w in [xid, 0, 2, PROG, 1, 1, 0, 0, 0, 0] {
        enc.u32(w);
    }
    enc.u32(tag).opaque(data).u32(trailer);
    let body = enc.finish().to_bytes();
    let mut rec = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
    rec.extend_from_slice(&body);
    rec
}

/// The reply's `(apart, in_pipes, tag, trailer, data)`.
async fn reply(s: &mut TcpStream, xid: u32) -> (bool, bool, u32, u32, Vec<u8>) {
    let mut mark = [0; 4];
    s.read_exact(&mut mark).await.unwrap();
    let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.unwrap();
    let word = |i: usize| u32::from_be_bytes(body[4 * i..4 * i + 4].try_into().unwrap());
    // xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE (flavor, length), SUCCESS.
    assert_eq!(
        (word(0), word(1), word(2), word(5)),
        (xid, 1, 0, 0),
        "not a success"
    );
    let n = word(10) as usize;
    let data = body[44..44 + n].to_vec();
    (word(6) == 1, word(7) == 1, word(8), word(9), data)
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Sends `rec` in pieces of `piece` bytes (all at once for 0), a short pause
/// between them.
async fn send(s: &mut TcpStream, rec: &[u8], piece: usize) {
    if piece == 0 {
        return s.write_all(rec).await.unwrap();
    }
    for p in rec.chunks(piece) {
        s.write_all(p).await.unwrap();
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

#[tokio::test]
async fn large_items_come_apart_whole_and_in_pieces_and_small_ones_inline() {
    let stats = Arc::new(TcpStats::default());
    let addr = start(ServerConfig {
        stats: stats.clone(),
        ..ServerConfig::default()
    })
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    // (data length, piece size, whether it comes apart): odd lengths test that the
    // XDR padding after the data is dropped with it; pieces, data that came partly
    // with the header's read, and segments too small to fill a pipe's pages well.
    let cases = [
        (1024 * 1024, 0, true),
        (1024 * 1024 - 3, 0, true),
        (200 * 1024 + 1, 0, true),
        (300 * 1024 + 2, 61 * 1024, true),
        (256 * 1024, 1000, true),
        (64 * 1024 - 1, 0, false),
        (1000, 0, false),
        (1024 * 1024 + 1, 0, false),
    ];
    let mut in_pipes = 0;
    for (i, &(len, piece, comes_apart)) in cases.iter().enumerate() {
        let xid = 100 + i as u32;
        let d = data(len, i as u8);
        let rec = record(xid, 7 + i as u32, &d, 0xdead_0000 + i as u32);
        send(&mut s, &rec, piece).await;
        let (apart, piped, tag, trailer, got) = reply(&mut s, xid).await;
        assert_eq!(
            (tag, trailer),
            (7 + i as u32, 0xdead_0000 + i as u32),
            "case {i}"
        );
        assert!(got == d, "case {i}: data differs");
        assert_eq!(apart, comes_apart, "case {i}: apart");
        // Sent at once, an item fits the pipes; in small pieces it may not.
        if comes_apart && piece == 0 {
            assert!(piped, "case {i}: in pipes");
        }
        in_pipes += usize::from(piped);
    }
    assert_eq!(stats.spliced_calls.load(Ordering::Relaxed), in_pipes as u64);
}

/// Calls sent back to back, each large, so that one read takes the end of one and
/// the start of the next.
#[tokio::test]
async fn back_to_back_calls_each_get_their_own_data() {
    let pipes = Pipes::default();
    let addr = start(ServerConfig {
        call_data: Some(pipes.clone()),
        ..ServerConfig::default()
    })
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut all = Vec::new();
    let mut sent = Vec::new();
    for i in 0..12u32 {
        let d = data(128 * 1024 + 4096 * i as usize + i as usize, i as u8);
        all.extend_from_slice(&record(i, i, &d, !i));
        sent.push(d);
    }
    let (mut rd, mut wr) = s.split();
    let writer = async { wr.write_all(&all).await.unwrap() };
    let reader = async {
        let mut got = Vec::new();
        for _ in 0..sent.len() {
            let mut mark = [0; 4];
            rd.read_exact(&mut mark).await.unwrap();
            let mut body = vec![0; (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize];
            rd.read_exact(&mut body).await.unwrap();
            got.push(body);
        }
        got
    };
    let ((), replies) = tokio::join!(writer, reader);
    for body in replies {
        let word = |i: usize| u32::from_be_bytes(body[4 * i..4 * i + 4].try_into().unwrap());
        let i = word(0);
        assert_eq!((word(8), word(9)), (i, !i));
        assert_eq!((word(6), word(7)), (1, 1), "call {i}: apart, in pipes");
        let n = word(10) as usize;
        assert!(
            body[44..44 + n] == sent[i as usize][..],
            "call {i}: data differs"
        );
    }
    s.shutdown().await.unwrap();
    // The pipes, written and empty, wait for the next calls; once no call took one
    // for a while, they are closed.
    assert!(pipes.idle_count() > 0, "no pipe kept for reuse");
    assert_eq!(
        pipes.open_count(),
        pipes.idle_count(),
        "a pipe outlived its call"
    );
    pipes.release_if_unused_for(Duration::ZERO);
    assert_eq!((pipes.idle_count(), pipes.open_count()), (0, 0));
}

/// Without pipes (`call_data: None`), the same calls are read whole.
#[tokio::test]
async fn without_pipes_items_stay_in_the_call() {
    let addr = start(ServerConfig {
        call_data: None,
        ..ServerConfig::default()
    })
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let d = data(1024 * 1024, 9);
    send(&mut s, &record(1, 2, &d, 3), 0).await;
    let (apart, _, _, _, got) = reply(&mut s, 1).await;
    assert!(!apart);
    assert!(got == d);
}

/// An item whose announced length runs past the record is not taken apart: the call
/// decodes as usual, and fails (GARBAGE_ARGS), the connection still served.
#[tokio::test]
async fn an_item_longer_than_its_record_is_garbage_args() {
    let addr = start(ServerConfig::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let d = data(300 * 1024, 1);
    let mut rec = record(5, 1, &d, 2);
    // Announce 600 KiB of data in a record that has 300.
    rec[48..52].copy_from_slice(&(600u32 * 1024).to_be_bytes());
    send(&mut s, &rec, 0).await;
    let mut mark = [0; 4];
    s.read_exact(&mut mark).await.unwrap();
    let mut body = vec![0; (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize];
    s.read_exact(&mut body).await.unwrap();
    // xid, REPLY, MSG_ACCEPTED, verifier, GARBAGE_ARGS (4).
    assert_eq!(&body[20..24], &4u32.to_be_bytes());
    let d = data(200 * 1024, 2);
    send(&mut s, &record(6, 1, &d, 2), 0).await;
    let (apart, piped, _, _, got) = reply(&mut s, 6).await;
    assert!(apart && piped && got == d);
}
