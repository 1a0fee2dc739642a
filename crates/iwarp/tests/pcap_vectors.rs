//! Byte-exact tests against real Linux 6.1 siw traffic (captures of the kernel client
//! and knfsd, copied next to the tests as `vectors/`): every TCP stream of both captures is
//! reassembled and cut into MPA frames and FPDUs by our parsers; every FPDU is
//! re-encoded by our emitters and must match the captured bytes exactly, CRC
//! included when CRC was negotiated.

use std::collections::BTreeMap;

use bytes::BytesMut;
use iwarp::wire::ddp::{DdpHeader, Opcode, ReadRequest, SegmentHeader};
use iwarp::wire::mpa::{self, FrameKind, IrdOrd, MpaFrame};

const CLIENT_PCAP: &[u8] = include_bytes!("vectors/linux-6.1-siw-nfs-client-knfsd.pcap");
const CRC_PCAP: &[u8] = include_bytes!("vectors/linux-6.1-siw-knfsd-crc.pcap");

type Flow = ([u8; 4], u16, [u8; 4], u16);

/// Directional TCP byte streams of an Ethernet/IPv4 pcap, in capture order of their
/// first byte; `complete` is false when a gap was seen.
fn tcp_streams(pcap: &[u8]) -> Vec<(Flow, Vec<u8>, bool)> {
    assert_eq!(&pcap[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "little-endian pcap");
    assert_eq!(
        u32::from_le_bytes(pcap[20..24].try_into().unwrap()),
        1,
        "Ethernet"
    );
    let mut order = Vec::new();
    let mut flows: BTreeMap<Flow, (Option<u32>, Vec<u8>, bool)> = BTreeMap::new();
    let mut off = 24;
    while off + 16 <= pcap.len() {
        let incl = u32::from_le_bytes(pcap[off + 8..off + 12].try_into().unwrap()) as usize;
        let pkt = &pcap[off + 16..off + 16 + incl];
        off += 16 + incl;
        if pkt.len() < 14 || pkt[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &pkt[14..];
        if ip[9] != 6 {
            continue;
        }
        let ihl = (ip[0] & 0x0f) as usize * 4;
        let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        let tcp = &ip[ihl..total];
        let doff = (tcp[12] >> 4) as usize * 4;
        let flags = tcp[13];
        let seq = u32::from_be_bytes(tcp[4..8].try_into().unwrap());
        let flow: Flow = (
            ip[12..16].try_into().unwrap(),
            u16::from_be_bytes([tcp[0], tcp[1]]),
            ip[16..20].try_into().unwrap(),
            u16::from_be_bytes([tcp[2], tcp[3]]),
        );
        let payload = &tcp[doff..];
        let e = flows.entry(flow).or_insert_with(|| {
            order.push(flow);
            (None, Vec::new(), true)
        });
        if flags & 0x02 != 0 {
            e.0 = Some(seq.wrapping_add(1));
            continue;
        }
        if payload.is_empty() {
            continue;
        }
        let next = e.0.get_or_insert(seq);
        let d = seq.wrapping_sub(*next) as i32;
        if d < 0 {
            // Retransmission: keep only new bytes.
            let skip = (-d) as usize;
            if skip < payload.len() {
                e.1.extend_from_slice(&payload[skip..]);
                *next = next.wrapping_add((payload.len() - skip) as u32);
            }
        } else if d > 0 {
            e.2 = false;
            *next = seq.wrapping_add(payload.len() as u32);
        } else if e.2 {
            e.1.extend_from_slice(payload);
            *next = next.wrapping_add(payload.len() as u32);
        }
    }
    order
        .into_iter()
        .filter_map(|f| flows.remove(&f).map(|(_, b, ok)| (f, b, ok)))
        .filter(|(_, b, _)| !b.is_empty())
        .collect()
}

#[derive(Default, Debug)]
struct Tally {
    mpa: usize,
    fpdus: usize,
    by_opcode: BTreeMap<u8, usize>,
    read_requests: Vec<ReadRequest>,
    crc_checked: usize,
}

/// Parses one stream; re-emits every FPDU and compares.
fn replay(stream: &[u8], crc: bool, complete: bool, t: &mut Tally) -> MpaFrame {
    let (frame, n) = MpaFrame::parse(stream).unwrap().expect("whole MPA frame");
    let mut emitted = Vec::new();
    frame.emit(&mut emitted);
    assert_eq!(emitted, stream[..n], "MPA frame re-encodes byte-exact");
    t.mpa += 1;
    let mut buf = BytesMut::from(&stream[n..]);
    let mut msn = [0u32; 3];
    loop {
        let before = buf.clone();
        let Some(f) = mpa::take_fpdu(&mut buf, crc).expect("FPDU parses, CRC good") else {
            break;
        };
        let raw = &before[..before.len() - buf.len()];
        let (h, hl) = SegmentHeader::parse(&f.ulpdu).expect("DDP/RDMAP header parses");
        // Re-encode header + payload + pad + CRC with our emitters.
        let mut ulpdu = Vec::new();
        h.emit(&mut ulpdu);
        ulpdu.extend_from_slice(&f.ulpdu[hl..]);
        let mut re = Vec::new();
        mpa::encode_fpdu(&ulpdu, crc, &mut re);
        assert_eq!(re, raw, "FPDU re-encodes byte-exact ({h:?})");
        if crc {
            t.crc_checked += 1;
        }
        t.fpdus += 1;
        *t.by_opcode.entry(h.opcode.0).or_default() += 1;
        if let DdpHeader::Untagged { qn, msn: m, mo, .. } = h.ddp {
            let q = qn as usize;
            assert!(q < 3, "queue {qn}");
            // RFC 5041 §5.1: MSN starts at 1 and grows by one per message.
            if mo == 0 {
                assert_eq!(m, msn[q] + 1, "MSN sequence on queue {qn}");
                msn[q] = m;
            } else {
                assert_eq!(m, msn[q], "continuation keeps the MSN");
            }
        }
        if h.opcode == Opcode::READ_REQUEST {
            t.read_requests
                .push(ReadRequest::parse(&f.ulpdu[hl..]).unwrap());
        }
    }
    if complete {
        assert!(
            buf.len() < 70_000,
            "stream ends with at most one partial FPDU"
        );
    }
    frame
}

fn replay_pcap(pcap: &[u8]) -> Tally {
    let streams = tcp_streams(pcap);
    let mut t = Tally::default();
    // Pair each request stream with its reply stream to learn CRC.
    for (flow, bytes, complete) in &streams {
        if bytes.len() < 20 || &bytes[..16] != mpa::REQ_KEY {
            continue;
        }
        let rev: Flow = (flow.2, flow.3, flow.0, flow.1);
        let (_, reply, rcomplete) = streams
            .iter()
            .find(|(f, _, _)| *f == rev)
            .expect("reply direction");
        let (req, _) = MpaFrame::parse(bytes).unwrap().unwrap();
        let (rep, _) = MpaFrame::parse(reply).unwrap().unwrap();
        assert_eq!(req.kind, FrameKind::Request);
        assert_eq!(rep.kind, FrameKind::Reply);
        let crc = (req.flags | rep.flags) & mpa::flags::CRC != 0;
        replay(bytes, crc, *complete, &mut t);
        replay(reply, crc, *rcomplete, &mut t);
    }
    t
}

#[test]
fn linux_client_and_knfsd_streams_parse_and_reencode_byte_exact() {
    let t = replay_pcap(CLIENT_PCAP);
    assert_eq!(t.mpa, 6, "three connections, Request + Reply each");
    let n = |op: Opcode| t.by_opcode.get(&op.0).copied().unwrap_or(0);
    assert!(n(Opcode::SEND) > 20, "{t:?}");
    assert!(n(Opcode::SEND_INVALIDATE) >= 2, "{t:?}");
    assert!(n(Opcode::RDMA_WRITE) >= 5, "{t:?}");
    assert!(n(Opcode::READ_REQUEST) >= 2, "{t:?}");
    assert!(n(Opcode::READ_RESPONSE) >= 2, "{t:?}");
    assert_eq!(n(Opcode::TERMINATE), 0);
    // The two 128 KiB NFS WRITEs are pulled with RDMA Read Requests.
    assert!(
        t.read_requests.iter().any(|r| r.size == 131_072),
        "{:?}",
        t.read_requests
    );
}

#[test]
fn knfsd_crc_streams_verify_every_crc_and_reencode_byte_exact() {
    let t = replay_pcap(CRC_PCAP);
    assert_eq!(t.mpa, 8, "four connections");
    assert!(t.crc_checked >= 8, "{t:?}");
    assert_eq!(t.crc_checked, t.fpdus);
}

/// Vector `fpdu_send_crc_null_reply_knfsd`: CRC32c 0xb2fd913c goes on the wire as
/// `3c 91 fd b2` (linux-6.1-siw.md, "MPA CRC").
#[test]
fn crc_field_is_little_endian_like_siw() {
    assert_eq!(mpa::crc_field(0xb2fd913c), [0x3c, 0x91, 0xfd, 0xb2]);
    assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
}

#[test]
fn mpa_vectors_from_json_parse() {
    let json = include_str!("vectors/linux-6.1-siw.json");
    let mut seen = 0;
    for obj in json.split("\"name\":").skip(1) {
        let field = |k: &str| {
            let i = obj.find(&format!("\"{k}\": \""))? + k.len() + 5;
            Some(&obj[i..i + obj[i..].find('"')?])
        };
        if field("layer") != Some("MPA") {
            continue;
        }
        let hex = field("hex").unwrap();
        let b: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let (f, n) = MpaFrame::parse(&b).unwrap().unwrap();
        assert_eq!(n, b.len());
        assert!(f.is_enhanced());
        let io = IrdOrd::parse(&f.private_data).unwrap();
        assert!(!io.peer_to_peer && !io.rtr_read && !io.rtr_write);
        seen += 1;
    }
    assert_eq!(seen, 4);
}
