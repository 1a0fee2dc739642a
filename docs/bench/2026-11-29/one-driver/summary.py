#!/usr/bin/env python3
"""Medians over the A/B pairs of ab.sh: usage summary.py DIR, where DIR holds
before-N/report.txt and after-N/report.txt (or before-N.txt and after-N.txt)."""
import glob
import re
import statistics as st
import sys

d = sys.argv[1]


def row(t, section, transport):
    m = re.search(section + r".*?\n" + transport +
                  r"\s+1 MiB\s+\d+\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", t, re.S)
    return float(m.group(1)), float(m.group(4))


for v in ['before', 'after']:
    files = sorted(glob.glob(f'{d}/{v}-*/report.txt') + glob.glob(f'{d}/{v}-*.txt'))
    rs = []
    for f in files:
        t = open(f).read()
        ratios = re.findall(r"1 MiB\s+\d+\s+([\d.]+)x\s+([\d.]+)x", t)
        rs.append((row(t, 'Sequential READ', 'rdma'), row(t, 'Sequential READ', 'tcp'),
                   row(t, 'Sequential WRITE', 'rdma'), row(t, 'Sequential WRITE', 'tcp'),
                   [float(a) for a, _ in ratios], [float(b) for _, b in ratios]))
    med = st.median
    print(f"{v}: {len(rs)} runs (medians; MB/s, CPU s/GiB client + server)")
    print(f"  READ  1 MiB x 4: rdma {med(r[0][0] for r in rs):.1f} MB/s at {med(r[0][1] for r in rs):.3f}, "
          f"tcp {med(r[1][0] for r in rs):.1f} at {med(r[1][1] for r in rs):.3f}; "
          f"RDMA/TCP {med(r[4][0] for r in rs):.2f}x at {med(r[5][0] for r in rs):.2f}x CPU")
    print(f"  WRITE 1 MiB x 8: rdma {med(r[2][0] for r in rs):.1f} MB/s at {med(r[2][1] for r in rs):.3f}, "
          f"tcp {med(r[3][0] for r in rs):.1f} at {med(r[3][1] for r in rs):.3f}; "
          f"RDMA/TCP {med(r[4][1] for r in rs):.2f}x at {med(r[5][1] for r in rs):.2f}x CPU")
