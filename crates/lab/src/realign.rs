//! Re-cutting an iWARP capture so that every TCP segment carries exactly one MPA
//! frame, for tshark.
//!
//! RFC 5044 lets FPDUs sit anywhere in the TCP stream (its receivers find them by
//! the ULPDU length; alignment with TCP segments is only an optimisation of
//! "MPA-aware TCP", §8). tshark 4.0's MPA dissector, however, only finds an FPDU at
//! the start of a TCP segment (or right after another FPDU in the same segment):
//! once an FPDU straddles a segment boundary it loses the stream and decodes file
//! data as random FPDUs ("Terminate", bad CRC fields). Linux siw sizes and sends
//! FPDUs to match segments; a userspace sender cannot, and qemu's slirp re-segments
//! the host's stream towards the guest anyway.
//!
//! [`realign`] reassembles each direction of every TCP connection on the given
//! ports (by sequence number; retransmitted bytes are taken once) and writes a
//! new capture in which each MPA Request/Reply and each FPDU (2-byte ULPDU length,
//! ULPDU, pad to 4, 4-byte CRC field) is one segment with its true stream sequence
//! number, and every other packet is copied unchanged. Only the 16-bit length is
//! read to cut; everything inside (DDP/RDMAP headers, pad, CRC field,
//! RPC-over-RDMA) is left for tshark to judge. A wrong length would make the next
//! "FPDU" garbage, which tshark then reports. Bytes left over at the end of a
//! stream go out as one last segment, undecodable, so they are reported too.
//!
//! Limits: pcap (not pcapng) in either byte order, Ethernet + IPv4 + TCP; an FPDU
//! must fit one IPv4 packet (ULPDU up to 65,487 bytes). Markers are not supported
//! (Linux siw rejects them too).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::LabError;

/// What [`realign`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RealignReport {
    /// Packets read.
    pub packets_in: usize,
    /// Packets written.
    pub packets_out: usize,
    /// MPA frames (Request/Reply and FPDUs) written one per segment.
    pub mpa_units: usize,
    /// Payload bytes on the iWARP ports that were seen again (retransmissions).
    pub retransmitted_bytes: u64,
    /// Streams that ended with bytes that do not form a whole MPA frame.
    pub incomplete_streams: usize,
}

fn err(msg: impl Into<String>) -> LabError {
    LabError::Tshark(format!("realign: {}", msg.into()))
}

/// Reads the pcap at `input`, writes the realigned capture to `output`.
pub fn realign(input: &Path, output: &Path, ports: &[u16]) -> Result<RealignReport, LabError> {
    let data = std::fs::read(input).map_err(|e| err(format!("{}: {e}", input.display())))?;
    let (out, report) = realign_bytes(&data, ports)?;
    std::fs::write(output, out).map_err(|e| err(format!("{}: {e}", output.display())))?;
    Ok(report)
}

/// Byte order of a pcap file.
#[derive(Clone, Copy)]
struct Order(bool); // true = big-endian

impl Order {
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.0 {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }
    fn put(self, v: u32) -> [u8; 4] {
        if self.0 {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
}

/// One direction of one TCP connection.
#[derive(Default)]
struct Stream {
    /// Sequence number of the next byte expected; `None` until known.
    next: Option<u32>,
    /// Sequence number of `buf[0]`.
    base: u32,
    buf: Vec<u8>,
    /// Out-of-order segments by sequence number.
    ahead: BTreeMap<u32, Vec<u8>>,
    /// The MPA Request/Reply has been cut (FPDUs follow).
    fpdus: bool,
    /// Not MPA (or unsupported): copy this direction's packets unchanged.
    raw: bool,
}

impl Stream {
    /// Takes a segment's payload at `seq`; returns the retransmitted byte count.
    fn take(&mut self, seq: u32, payload: &[u8]) -> u64 {
        let next = *self.next.get_or_insert_with(|| {
            self.base = seq;
            seq
        });
        let off = seq.wrapping_sub(next) as i32;
        let mut dup = 0u64;
        if off > 0 {
            self.ahead.insert(seq, payload.to_vec());
            return 0;
        }
        let skip = (-off) as usize;
        if skip >= payload.len() {
            return payload.len() as u64;
        }
        dup += skip as u64;
        self.buf.extend_from_slice(&payload[skip..]);
        let mut next = next.wrapping_add((payload.len() - skip) as u32);
        while let Some((&s, _)) = self.ahead.iter().next() {
            let off = s.wrapping_sub(next) as i32;
            if off > 0 {
                break;
            }
            let p = self.ahead.remove(&s).unwrap_or_default();
            let skip = (-off) as usize;
            if skip < p.len() {
                self.buf.extend_from_slice(&p[skip..]);
                next = next.wrapping_add((p.len() - skip) as u32);
                dup += skip as u64;
            } else {
                dup += p.len() as u64;
            }
        }
        self.next = Some(next);
        dup
    }

    /// Length of the next whole MPA unit at the front of `buf`, if complete.
    fn unit_len(&mut self) -> Option<usize> {
        if !self.fpdus {
            if self.buf.len() < 20 {
                return None;
            }
            if &self.buf[..13] != b"MPA ID Req Fr" && &self.buf[..13] != b"MPA ID Rep Fr" {
                self.raw = true;
                return None;
            }
            if self.buf[16] & 0x80 != 0 {
                // Markers: not supported here.
                self.raw = true;
                return None;
            }
            let n = 20 + usize::from(u16::from_be_bytes([self.buf[18], self.buf[19]]));
            return (self.buf.len() >= n).then_some(n);
        }
        if self.buf.len() < 2 {
            return None;
        }
        let ulpdu = usize::from(u16::from_be_bytes([self.buf[0], self.buf[1]]));
        let n = (2 + ulpdu).div_ceil(4) * 4 + 4;
        (self.buf.len() >= n).then_some(n)
    }
}

/// Offsets of one Ethernet/IPv4/TCP packet.
struct Tcp {
    ip: usize,
    tcp: usize,
    payload: usize,
    end: usize,
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    seq: u32,
}

fn parse_tcp(p: &[u8]) -> Option<Tcp> {
    if p.len() < 14 + 20 || p[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = 14;
    let ihl = usize::from(p[ip] & 0x0f) * 4;
    if p[ip] >> 4 != 4 || p[ip + 9] != 6 || ihl < 20 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([p[ip + 2], p[ip + 3]]));
    let end = (ip + total).min(p.len());
    let tcp = ip + ihl;
    if end < tcp + 20 {
        return None;
    }
    let doff = usize::from(p[tcp + 12] >> 4) * 4;
    let payload = tcp + doff;
    if payload > end {
        return None;
    }
    let addr = |o: usize| [p[o], p[o + 1], p[o + 2], p[o + 3]];
    Some(Tcp {
        ip,
        tcp,
        payload,
        end,
        src: (addr(ip + 12), u16::from_be_bytes([p[tcp], p[tcp + 1]])),
        dst: (addr(ip + 16), u16::from_be_bytes([p[tcp + 2], p[tcp + 3]])),
        seq: u32::from_be_bytes([p[tcp + 4], p[tcp + 5], p[tcp + 6], p[tcp + 7]]),
    })
}

/// The packet `p` (headers of `t`) with `payload` at sequence number `seq`.
fn rebuild(p: &[u8], t: &Tcp, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = p[..t.payload].to_vec();
    out.extend_from_slice(payload);
    let total = (out.len() - t.ip).min(usize::from(u16::MAX)) as u16;
    out[t.ip + 2..t.ip + 4].copy_from_slice(&total.to_be_bytes());
    out[t.ip + 10..t.ip + 12].copy_from_slice(&[0, 0]);
    let mut sum = 0u32;
    for c in out[t.ip..t.tcp].chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    out[t.ip + 10..t.ip + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    out[t.tcp + 4..t.tcp + 8].copy_from_slice(&seq.to_be_bytes());
    // SYN/FIN/RST off (they stay on the original packets' own copies), PSH on.
    out[t.tcp + 13] = (out[t.tcp + 13] & !0x07) | 0x08;
    // TCP checksum left as zero ("not computed"); tshark does not check it by default.
    out[t.tcp + 16..t.tcp + 18].copy_from_slice(&[0, 0]);
    out
}

type Key = (([u8; 4], u16), ([u8; 4], u16));

fn realign_bytes(data: &[u8], ports: &[u16]) -> Result<(Vec<u8>, RealignReport), LabError> {
    if data.len() < 24 {
        return Err(err("not a pcap file (too short)"));
    }
    let magic = [data[0], data[1], data[2], data[3]];
    let order = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => Order(false),
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => Order(true),
        _ => return Err(err("not a pcap file (pcapng is not supported)")),
    };
    if order.u32(&data[20..24]) != 1 {
        return Err(err("link type is not Ethernet"));
    }
    let mut out = data[..24].to_vec();
    // Snap length: room for a whole FPDU per packet.
    out[16..20].copy_from_slice(&order.put(262_144));
    let mut report = RealignReport::default();
    let mut streams: HashMap<Key, Stream> = HashMap::new();
    let mut at = 24;
    let write = |out: &mut Vec<u8>, hdr: &[u8], pkt: &[u8], report: &mut RealignReport| {
        out.extend_from_slice(&hdr[..8]);
        out.extend_from_slice(&order.put(pkt.len() as u32));
        out.extend_from_slice(&order.put(pkt.len() as u32));
        out.extend_from_slice(pkt);
        report.packets_out += 1;
    };
    while at + 16 <= data.len() {
        let hdr = &data[at..at + 16];
        let incl = order.u32(&hdr[8..12]) as usize;
        let Some(p) = data.get(at + 16..at + 16 + incl) else {
            return Err(err(format!("truncated packet record at byte {at}")));
        };
        at += 16 + incl;
        report.packets_in += 1;
        let t = match parse_tcp(p) {
            Some(t) if ports.contains(&t.src.1) || ports.contains(&t.dst.1) => t,
            _ => {
                write(&mut out, hdr, p, &mut report);
                continue;
            }
        };
        let flags = p[t.tcp + 13];
        let s = streams.entry((t.src, t.dst)).or_default();
        if flags & 0x02 != 0 {
            // SYN: the stream starts after it.
            s.next = Some(t.seq.wrapping_add(1));
            s.base = t.seq.wrapping_add(1);
        }
        if s.raw || t.payload == t.end {
            if !s.raw && flags & 0x02 == 0 && s.next.is_some() {
                // A bare ACK (or FIN) names the next byte to send; in the copy that
                // is the first byte not yet cut, so tshark sees no gap.
                let mut q = p.to_vec();
                q[t.tcp + 4..t.tcp + 8].copy_from_slice(&s.base.to_be_bytes());
                write(&mut out, hdr, &q, &mut report);
            } else {
                write(&mut out, hdr, p, &mut report);
            }
            continue;
        }
        report.retransmitted_bytes += s.take(t.seq, &p[t.payload..t.end]);
        while let Some(n) = s.unit_len() {
            let unit: Vec<u8> = s.buf.drain(..n).collect();
            let seq = s.base;
            s.base = s.base.wrapping_add(n as u32);
            s.fpdus = true;
            report.mpa_units += 1;
            write(&mut out, hdr, &rebuild(p, &t, seq, &unit), &mut report);
        }
        if s.raw {
            // Not MPA after all: what was buffered goes out as it came.
            let rest = std::mem::take(&mut s.buf);
            let seq = s.base;
            s.base = s.base.wrapping_add(rest.len() as u32);
            write(&mut out, hdr, &rebuild(p, &t, seq, &rest), &mut report);
        }
    }
    for s in streams.values() {
        if !s.buf.is_empty() {
            report.incomplete_streams += 1;
        }
    }
    Ok((out, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(sport: u16, dport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 14];
        p[12] = 0x08;
        let total = (20 + 20 + payload.len()) as u16;
        p.extend_from_slice(&[
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 2, 2, 10, 0, 2, 15,
        ]);
        p[16..18].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    fn pcap(pkts: &[Vec<u8>]) -> Vec<u8> {
        let mut f = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        for p in pkts {
            f.extend_from_slice(&[0; 8]);
            f.extend_from_slice(&(p.len() as u32).to_le_bytes());
            f.extend_from_slice(&(p.len() as u32).to_le_bytes());
            f.extend_from_slice(p);
        }
        f
    }

    fn payloads(file: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut at = 24;
        let mut v = Vec::new();
        while at < file.len() {
            let n = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap()) as usize;
            let p = &file[at + 16..at + 16 + n];
            let t = parse_tcp(p).unwrap();
            v.push((t.seq, p[t.payload..t.end].to_vec()));
            at += 16 + n;
        }
        v
    }

    fn fpdu(ulpdu: &[u8]) -> Vec<u8> {
        let mut f = (ulpdu.len() as u16).to_be_bytes().to_vec();
        f.extend_from_slice(ulpdu);
        while !f.len().is_multiple_of(4) {
            f.push(0);
        }
        f.extend_from_slice(&[0; 4]);
        f
    }

    #[test]
    fn straddling_fpdus_become_one_segment_each_with_true_sequence_numbers() {
        let mut req = b"MPA ID Req Frame".to_vec();
        req.extend_from_slice(&[0x10, 2, 0, 4, 0, 1, 0, 1]);
        let (a, b) = (fpdu(&[1; 30]), fpdu(&[2; 7]));
        let mut stream = req.clone();
        stream.extend_from_slice(&a);
        stream.extend_from_slice(&b);
        // SYN at 99; data cut at odd places, one piece retransmitted, one out of order.
        let cut = [0usize, 10, 30, 50, stream.len()];
        let mut pkts = vec![packet(4000, 30049, 99, 0x02, &[])];
        let piece = |i: usize| {
            packet(
                4000,
                30049,
                100 + cut[i] as u32,
                0x18,
                &stream[cut[i]..cut[i + 1]],
            )
        };
        pkts.extend([piece(0), piece(2), piece(1), piece(1), piece(3)]);
        let (out, r) = realign_bytes(&pcap(&pkts), &[30049]).unwrap();
        let got = payloads(&out);
        let data: Vec<_> = got.iter().filter(|(_, p)| !p.is_empty()).cloned().collect();
        let want_b_seq = 100 + (req.len() + a.len()) as u32;
        assert_eq!(
            data,
            vec![
                (100, req.clone()),
                (100 + req.len() as u32, a),
                (want_b_seq, b)
            ]
        );
        assert_eq!(r.mpa_units, 3);
        assert_eq!(r.retransmitted_bytes, (cut[2] - cut[1]) as u64);
        assert_eq!(r.incomplete_streams, 0);
    }

    #[test]
    fn other_traffic_is_copied_unchanged() {
        let p = packet(111, 2049, 5, 0x18, b"not iwarp");
        let (out, r) = realign_bytes(&pcap(std::slice::from_ref(&p)), &[30049]).unwrap();
        assert_eq!(&out[24 + 16..], &p[..]);
        assert_eq!((r.packets_in, r.packets_out, r.mpa_units), (1, 1, 0));
    }
}
