#!/usr/bin/env python3
"""Frame-by-frame listing of an NFS/RDMA capture (siw: TCP port 20049 with MPA/DDP/RDMAP;
rxe: RoCEv2 UDP 4791), tolerant of snaplen-truncated frames, for finding where a flow stops.

usage: pcaptail.py PCAP [--port 20049] [--tail N] [--server 192.168.77.1]
Each line: frame, time, direction (C>S / S>C), TCP flags, rel seq, rel ack, window (scaled),
payload length, then the iWARP messages starting in this segment (RDMAP opcode, MSN/STag,
RPC-over-RDMA xid/credits/proc for Sends starting at MO 0). For RoCE: BTH opcode, QPN, PSN,
AETH syndrome/MSN.
"""
import struct, sys, argparse

RDMAP = {0: 'WRITE', 1: 'RREQ', 2: 'RRESP', 3: 'SEND', 4: 'SENDinv', 5: 'SENDse', 6: 'SENDseInv', 7: 'TERM'}
PROC = {0: 'MSG', 1: 'NOMSG', 2: 'MSGP', 3: 'DONE', 4: 'ERROR'}
ROCE_OP = {0x00: 'SEND_F', 0x01: 'SEND_M', 0x02: 'SEND_L', 0x04: 'SEND_O', 0x06: 'WRITE_F', 0x07: 'WRITE_M',
           0x08: 'WRITE_L', 0x0a: 'WRITE_O', 0x0c: 'RREQ', 0x0d: 'RRESP_F', 0x0e: 'RRESP_M', 0x0f: 'RRESP_L',
           0x10: 'RRESP_O', 0x11: 'ACK', 0x05: 'SEND_O_IMM', 0x03: 'SEND_L_IMM', 0x16: 'SEND_L_INV', 0x17: 'SEND_O_INV'}


def frames(path):
    with open(path, 'rb') as f:
        gh = f.read(24)
        magic = struct.unpack('<I', gh[:4])[0]
        e = '<' if magic in (0xa1b2c3d4, 0xa1b23c4d) else '>'
        nano = magic in (0xa1b23c4d, 0x4d3cb2a1)
        n = 0
        while True:
            h = f.read(16)
            if len(h) < 16:
                return
            ts, tf, incl, orig = struct.unpack(e + 'IIII', h)
            data = f.read(incl)
            n += 1
            yield n, ts + tf / (1e9 if nano else 1e6), data, orig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('pcap')
    ap.add_argument('--port', type=int, default=20049)
    ap.add_argument('--server', default='192.168.77.1')
    ap.add_argument('--tail', type=int, default=0)
    ap.add_argument('--all', action='store_true', help='also frames without payload')
    a = ap.parse_args()
    srv = bytes(int(x) for x in a.server.split('.'))
    out = []
    isn = {}        # (dir, conn) -> isn
    wscale = {}     # dir -> shift
    nextfpdu = {}   # (dir,conn) -> abs seq of next FPDU start
    t0 = None
    conns = {}
    for n, ts, d, orig in frames(a.pcap):
        if t0 is None:
            t0 = ts
        if len(d) < 34 or d[12:14] != b'\x08\x00':
            continue
        ihl = (d[14] & 15) * 4
        proto = d[23]
        src, dst = d[26:30], d[30:34]
        iplen = struct.unpack('>H', d[16:18])[0]
        l4 = 14 + ihl
        dirn = 'S>C' if src == srv else 'C>S'
        if proto == 17 and len(d) >= l4 + 8:
            sp, dp = struct.unpack('>HH', d[l4:l4 + 4])
            if dp != 4791:
                continue
            b = d[l4 + 8:]
            if len(b) < 12:
                continue
            op = b[0]
            qpn = int.from_bytes(b[5:8], 'big')
            ack = b[8] >> 7
            psn = int.from_bytes(b[9:12], 'big')
            s = f'{ROCE_OP.get(op, hex(op))} qp={qpn:#x} psn={psn}{" A" if ack else ""}'
            if op in (0x11, 0x0d, 0x0f, 0x10) and len(b) >= 16:
                syn = b[12]
                msn = int.from_bytes(b[13:16], 'big')
                kind = {0: 'ACK', 1: 'RNR', 3: 'NAK'}.get(syn >> 5, '?')
                s += f' aeth={kind}/{syn & 31:#x} msn={msn}'
            if op in (0x00, 0x04) and len(b) >= 12 + 8:
                xid, vers, cr, proc = struct.unpack('>IIII', b[12:28]) if len(b) >= 28 else (0, 0, 0, 0)
                s += f' rpcrdma xid={xid:#010x} cred={cr} {PROC.get(proc, proc)}'
            out.append(f'{n:7d} {ts - t0:10.6f} {dirn} udp len={iplen - ihl - 8:5d} {s}')
            continue
        if proto != 6 or len(d) < l4 + 20:
            continue
        sp, dp, seq, ackn, off, fl, win = struct.unpack('>HHIIBBH', d[l4:l4 + 16])
        if a.port not in (sp, dp):
            continue
        conn = (min(sp, dp), max(sp, dp))
        thl = (off >> 4) * 4
        plen = iplen - ihl - thl
        key = (dirn, conn)
        flags = ''.join(c for c, m in zip('FSRPAU', (1, 2, 4, 8, 16, 32)) if fl & m)
        if fl & 2:
            isn[key] = seq
            # options: window scale
            o = d[l4 + 20:l4 + thl]
            i = 0
            while i < len(o):
                k = o[i]
                if k == 0:
                    break
                if k == 1:
                    i += 1
                    continue
                if i + 1 >= len(o):
                    break
                ln = o[i + 1]
                if k == 3 and ln == 3:
                    wscale[key] = o[i + 2]
                i += max(ln, 2)
            conns[conn] = n
        other = ('S>C' if dirn == 'C>S' else 'C>S', conn)
        rs = (seq - isn.get(key, seq)) & 0xffffffff
        ra = (ackn - isn.get(other, ackn)) & 0xffffffff
        w = win << (wscale.get(key, 0) if not fl & 2 else 0)
        desc = []
        pay = d[l4 + thl:]
        if plen > 0:
            if pay[:4] == b'MPA ':
                desc.append(pay[:16].decode('latin1'))
                nextfpdu[key] = (seq + plen) & 0xffffffff
            else:
                nf = nextfpdu.get(key)
                update = True
                if nf is None:
                    nf = seq
                else:
                    ahead = (nf - seq) & 0xffffffff   # boundary offset into this segment
                    if ahead < 0x7fffffff and ahead >= plen:
                        if ((seq + plen - nf) & 0xffffffff) > 0x7fffffff and ahead > 65536 + plen:
                            desc.append('[old data: rexmit]'); nf = seq; update = False
                        else:
                            nf = None   # continuation of an FPDU begun earlier
                    elif ahead >= 0x7fffffff:
                        desc.append(f'[resync +{(seq - nf) & 0xffffffff}]'); nf = seq
                if nf is None:
                    desc.append('(cont)')
                    pos = plen
                else:
                    pos = (nf - seq) & 0xffffffff
                while pos < plen:
                    if pos + 4 > len(pay):
                        desc.append('[trunc]')
                        break
                    ulen = struct.unpack('>H', pay[pos:pos + 2])[0]
                    ddp, rdmap = pay[pos + 2], pay[pos + 3]
                    tagged, last = ddp >> 7, (ddp >> 6) & 1
                    op = rdmap & 15
                    fl_len = 2 + ulen
                    fl_len += (-fl_len) % 4 + 4  # pad + CRC
                    s = RDMAP.get(op, str(op)) + ('' if last else '+')
                    h = pay[pos + 4:]
                    if tagged and len(h) >= 12:
                        stag, to = struct.unpack('>IQ', h[:12])
                        s += f' stag={stag:#x} to={to:#x}'
                    elif not tagged and len(h) >= 16:
                        inv, qn, msn, mo = struct.unpack('>IIII', h[:16])
                        s += f' qn={qn} msn={msn} mo={mo}'
                        if op == 1 and len(h) >= 16 + 28:
                            sstag, sto, rsz, srcstag, srcto = struct.unpack('>IQIIQ', h[16:44])
                            s += f' rd sink={sstag:#x} sz={rsz} src={srcstag:#x}'
                        elif qn == 0 and mo == 0 and len(h) >= 32:
                            xid, vers, cr, proc = struct.unpack('>IIII', h[16:32])
                            s += f' xid={xid:#010x} v{vers} cred={cr} {PROC.get(proc, proc)}'
                            if len(h) >= 44:
                                rl, = struct.unpack('>I', h[32:36])
                                s += f' rl={rl}'
                    s += f' ulen={ulen}'
                    desc.append(s)
                    pos += fl_len
                if nf is not None and update:
                    nextfpdu[key] = (seq + pos) & 0xffffffff
        if plen == 0 and not a.all and not (fl & 7):
            continue
        out.append(f'{n:7d} {ts - t0:10.6f} {dirn} {sp}>{dp} {flags:4s} seq={rs} ack={ra} win={w} len={plen} ' + ' | '.join(desc))
    if a.tail:
        out = out[-a.tail:]
    print('\n'.join(out))


if __name__ == '__main__':
    main()
