//! The NFSv4 binding: sizing, Write chunk pairing and DDP-eligibility (RFC 8267 §5).

use super::*;
use crate::compound::{Compound4Args, Compound4Res};
use crate::fh::{GetAttr4Args, PutFh4Args};
use crate::io::{Read4Args, Read4ResOk, StableHow4, Write4Args};
use crate::session::{Sequence4Args, Sequence4ResOk};
use crate::{Bitmap4, DdpData, NfsFh4, Res4, StateId4, Utf8Str, NFSPROC4_NULL};
use oncrpc::message::{CallHeader, ReplyHeader, Xid};
use oncrpc::{AcceptStat, OpaqueAuth, ReplyBody};
use xdr::{Encode, Encoder};

fn id(proc_num: u32) -> ProcId {
    ProcId {
        prog: NFS4_PROGRAM,
        vers: NFS_V4,
        proc_num,
    }
}

fn call(ops: Vec<NfsArgop4>) -> XdrStream {
    let mut enc = Encoder::new();
    CallHeader::new(
        Xid(7),
        NFS4_PROGRAM,
        NFS_V4,
        NFSPROC4_COMPOUND,
        OpaqueAuth::none(),
    )
    .encode(&mut enc);
    Compound4Args {
        tag: "t".into(),
        minorversion: 1,
        argarray: ops,
    }
    .encode(&mut enc);
    enc.finish()
}

fn seq() -> NfsArgop4 {
    NfsArgop4::Sequence(Sequence4Args {
        sa_sessionid: [1; 16],
        sa_sequenceid: 1,
        sa_slotid: 0,
        sa_highest_slotid: 0,
        sa_cachethis: false,
    })
}

fn putfh() -> NfsArgop4 {
    NfsArgop4::PutFh(PutFh4Args {
        object: NfsFh4(Bytes::from_static(&[1; 32])),
    })
}

fn read(count: u32) -> NfsArgop4 {
    NfsArgop4::Read(Read4Args {
        stateid: StateId4::ANONYMOUS,
        offset: 0,
        count,
    })
}

#[test]
fn binds_nfs4_every_minor_version_not_nfs3() {
    let b = Nfs4Binding::default();
    assert!(b.binds(NFS4_PROGRAM, 4));
    assert!(!b.binds(NFS4_PROGRAM, 3));
    assert!(!b.binds(100_005, 4));
}

#[test]
fn s5_4_1_each_read_gets_a_write_chunk_of_its_count_in_order() {
    let b = Nfs4Binding::default();
    let s = b.reply_sizing(
        id(NFSPROC4_COMPOUND),
        &call(vec![seq(), putfh(), read(65536), read(3)]),
    );
    assert_eq!(s.ddp_results, vec![65536, 3]);
    // Header, COMPOUND4res header with tag "t", SEQUENCE, PUTFH, two READs.
    let want = RPC_REPLY_HEADER_MAX + 4 + 8 + 4 + 44 + 8 + (16 + 65536) + (16 + 4);
    assert_eq!(s.max_reply as usize, want);
}

#[test]
fn s5_2_2_unbounded_results_are_sized_by_ca_maxresponsesize() {
    let b = Nfs4Binding {
        max_response: 300_000,
    };
    let getattr = NfsArgop4::GetAttr(GetAttr4Args {
        attr_request: Bitmap4::from_bits(&[0, 1, 4]),
    });
    let s = b.reply_sizing(id(NFSPROC4_COMPOUND), &call(vec![seq(), putfh(), getattr]));
    assert_eq!(s.max_reply, 300_000);
    assert!(s.ddp_results.is_empty());
    // And it caps what the operations would allow.
    let s = b.reply_sizing(id(NFSPROC4_COMPOUND), &call(vec![seq(), read(1 << 20)]));
    assert_eq!(s.max_reply, 300_000);
    assert_eq!(s.ddp_results, vec![1 << 20]);
}

#[test]
fn a_compound_with_write_data_sizes_past_it() {
    let w = NfsArgop4::Write(Write4Args {
        stateid: StateId4::ANONYMOUS,
        offset: 0,
        stable: StableHow4::FILE_SYNC4,
        data: DdpData(Bytes::from(vec![1; 5000])),
    });
    let c = call(vec![seq(), putfh(), w, read(10)]);
    assert_eq!(c.ddp.len(), 1, "WRITE data is a DDP item");
    let s = Nfs4Binding::default().reply_sizing(id(NFSPROC4_COMPOUND), &c);
    assert_eq!(s.ddp_results, vec![10]);
}

#[test]
fn null_and_garbage_calls_are_sized_without_panicking() {
    let b = Nfs4Binding::default();
    let s = b.reply_sizing(id(NFSPROC4_NULL), &XdrStream::inline_only(Bytes::new()));
    assert_eq!(s.max_reply as usize, RPC_REPLY_HEADER_MAX);
    let full = call(vec![seq(), read(1)]).to_bytes();
    for n in 0..full.len() {
        let s = b.reply_sizing(
            id(NFSPROC4_COMPOUND),
            &XdrStream::inline_only(full.slice(..n)),
        );
        assert!(s.max_reply <= b.max_response, "{n}");
    }
}

fn write(len: usize) -> NfsArgop4 {
    NfsArgop4::Write(Write4Args {
        stateid: StateId4::ANONYMOUS,
        offset: 0,
        stable: StableHow4::FILE_SYNC4,
        data: DdpData(Bytes::from(vec![7; len])),
    })
}

/// RFC 8267 §5.1, §5.4.1 and rfc5666bis §8.1.1: each WRITE's data is found in the
/// reduced COMPOUND (what a responder receives: the data in Read chunks, the length
/// words inline) at its position in the whole stream: the encoder's own offset in
/// the reduced stream, plus the padded data of the earlier WRITEs (5 bytes: 8).
#[test]
fn s5_1_each_writes_data_is_found_at_its_position_in_the_whole_stream() {
    let b = Nfs4Binding::default();
    let c = call(vec![seq(), putfh(), write(5), read(10), write(8), read(1)]);
    assert_eq!(c.ddp.len(), 2);
    let (first, second) = (c.ddp[0].inline_offset, c.ddp[1].inline_offset);
    let want = vec![first as u32, (second + 8) as u32];
    assert_eq!(
        b.call_ddp_positions(id(NFSPROC4_COMPOUND), &c.inline),
        Some(want)
    );
    // The whole stream (data inline) puts them at the same places.
    let whole = c.to_bytes();
    assert_eq!(&whole[first..first + 5], &[7; 5]);
    assert_eq!(&whole[second + 8..second + 16], &[7; 8]);
    // No WRITE, no DDP-eligible argument; NULL and other procedures have none.
    let plain = call(vec![seq(), putfh(), read(10)]);
    assert_eq!(
        b.call_ddp_positions(id(NFSPROC4_COMPOUND), &plain.inline),
        Some(Vec::new())
    );
    assert_eq!(
        b.call_ddp_positions(id(NFSPROC4_NULL), &plain.inline),
        Some(Vec::new())
    );
    assert_eq!(b.call_ddp_positions(id(2), &c.inline), Some(Vec::new()));
    // Garbage never panics.
    for n in 0..c.inline.len() {
        let _ = b.call_ddp_positions(id(NFSPROC4_COMPOUND), &c.inline.slice(..n));
    }
}

fn reply_header(enc: &mut Encoder) -> usize {
    ReplyHeader {
        xid: Xid(7),
        body: ReplyBody::accepted(AcceptStat::SUCCESS),
    }
    .encode(enc);
    enc.inline_len()
}

#[test]
fn read_data_goes_back_after_each_reads_length_word() {
    let mut enc = Encoder::new();
    let header = reply_header(&mut enc);
    let read_ok = |eof| {
        NfsResop4::Read(Res4::Ok(Read4ResOk {
            eof,
            data: DdpData(Bytes::from_static(b"abcde")),
        }))
    };
    Compound4Res::new(
        Utf8Str::default(),
        vec![
            NfsResop4::Sequence(Res4::Ok(Sequence4ResOk {
                sr_sessionid: [1; 16],
                sr_sequenceid: 1,
                sr_slotid: 0,
                sr_highest_slotid: 0,
                sr_target_highest_slotid: 0,
                sr_status_flags: 0,
            })),
            NfsResop4::PutFh(NfsStat4::NFS4_OK),
            read_ok(false),
            read_ok(true),
        ],
    )
    .encode(&mut enc);
    // The reduced reply: the READ data were placed in Write chunks.
    let reply = enc.finish().inline;
    let offs = Nfs4Binding::default()
        .reply_ddp_offsets(id(NFSPROC4_COMPOUND), &reply)
        .unwrap();
    // status, tag, count; SEQUENCE (8 + 36); PUTFH (8); READ: opnum, status, eof, len.
    let first = header + 12 + 44 + 8 + 16;
    assert_eq!(offs, vec![first, first + 16]);
    // Cut anywhere inside the results: no offsets, no panic.
    for n in header..reply.len() {
        assert_eq!(
            Nfs4Binding::default().reply_ddp_offsets(id(NFSPROC4_COMPOUND), &reply.slice(..n)),
            None,
            "{n}"
        );
    }
}

#[test]
fn failed_reads_have_nothing_to_put_back() {
    let mut enc = Encoder::new();
    reply_header(&mut enc);
    Compound4Res::new(
        Utf8Str::default(),
        vec![NfsResop4::Read(Res4::Err(NfsStat4::NFS4ERR_OPENMODE))],
    )
    .encode(&mut enc);
    let reply = enc.finish().to_bytes();
    assert_eq!(
        Nfs4Binding::default().reply_ddp_offsets(id(NFSPROC4_COMPOUND), &reply),
        Some(vec![])
    );
}

/// ARCHITECTURE.md: the binding is written against the protocol core (`rpcrdma`), not
/// a transport.
#[test]
fn layering_the_binding_depends_on_the_core_only() {
    let manifest = include_str!("../../Cargo.toml");
    assert!(manifest.contains("rdma = [\"dep:rpcrdma\"]"), "{manifest}");
    assert!(!manifest.contains("rpcrdma-transport"), "{manifest}");
}
