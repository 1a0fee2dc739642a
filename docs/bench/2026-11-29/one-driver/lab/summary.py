#!/usr/bin/env python3
"""Lab A/B (labab.sh): ours/knfsd read and write ratios per run of each nfsd binary,
and their medians. Usage: summary.py DIR (holding before-N/ and after-N/ lab reports)."""
import glob, re, statistics as st, sys
d = sys.argv[1]
for v in ['before', 'after']:
    reads, writes, rc, wc = [], [], [], []
    for f in sorted(glob.glob(f'{d}/{v}-*/*.txt') + glob.glob(f'{d}/{v}-*.txt')):
        t = open(f).read()
        m = re.search(r"^ours/knfsd \(median of interleaved pairs\): throughput ([\d.]+)x.*?CPU per GiB ([\d.]+)x", t, re.M)
        w = re.search(r"^writes ours/knfsd \(median of interleaved pairs\): throughput ([\d.]+)x, guest CPU per GiB ([\d.]+)x", t, re.M)
        reads.append(float(m.group(1))); rc.append(float(m.group(2)))
        writes.append(float(w.group(1))); wc.append(float(w.group(2)))
    print(f"{v}: reads ours/knfsd {reads} (median {st.median(reads):.2f}x at {st.median(rc):.2f}x CPU); "
          f"writes {writes} (median {st.median(writes):.2f}x at {st.median(wc):.2f}x CPU)")
