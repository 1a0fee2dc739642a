# Per-call system calls (strace -c) and clock reads (clk.so) of a measure.sh run,
# less the run that only mounted ("base").
import os
import sys

d, n = sys.argv[1], int(sys.argv[2])
KINDS = ['create', 'getattr', 'lookup', 'lookup-noent', 'access', 'remove', 'null']
CLOCKS = {0: 'REALTIME', 1: 'MONOTONIC', 4: 'MONOTONIC_RAW', 5: 'REALTIME_COARSE',
          6: 'MONOTONIC_COARSE', 7: 'BOOTTIME'}


def calls(f):
    r = {}
    for line in open(os.path.join(d, f)):
        p = line.split()
        if len(p) >= 5 and p[0][0].isdigit() and p[-1] != 'total':
            r[p[-1]] = int(p[3])
    return r


def clk(f):
    return [int(x) for x in open(os.path.join(d, f)).read().split()]


base = calls('base.strace')
b0, b1 = clk('base.clk0'), clk('base.clk1')
for k in KINDS:
    per = {s: (v - base.get(s, 0)) / n for s, v in calls(k + '.strace').items()}
    per = {s: v for s, v in per.items() if v >= 0.05}
    c0, c1 = clk(k + '.clk0'), clk(k + '.clk1')
    cl = {CLOCKS.get(i, str(i)): ((c1[i] - c0[i]) - (b1[i] - b0[i])) / n for i in range(15)}
    cl = {s: v for s, v in cl.items() if abs(v) >= 0.05}
    print(f"{k:13s} syscalls {sum(per.values()):5.1f}: "
          + ', '.join(f"{s} {v:.1f}" for s, v in sorted(per.items(), key=lambda x: -x[1]))
          + f" | clock_gettime {sum(cl.values()):4.1f}")
