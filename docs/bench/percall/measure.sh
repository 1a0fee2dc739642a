#!/bin/bash
# Per-call system calls and clock reads of nfsd (docs/bench/README.md, "Per-call
# system calls (host, strace)").
#
#   measure.sh NFSD_BINARY OUTDIR [N]      (as root; N calls per kind, default 2000)
#
# Starts NFSD_BINARY on a fresh temporary export over TCP (ports 32049/32048, no
# rpcbind, NLM or RDMA; extra nfsd options in $NFSD_ARGS) with clk.so preloaded
# (counts clock_gettime per clock id: on the host those are vDSO calls strace cannot
# see), then for each kind of call runs the metacalls example (AUTH_SYS uid/gid 1000;
# in directory $SUBDIR of the export if set) under `strace -f -c -p`. per.py prints
# the counts per call, less a run that only mounts.
set -e
BIN=$1; OUT=$2; N=${3:-2000}
HERE=$(cd "$(dirname "$0")" && pwd)
MC=${MC:-$HERE/../../../target/release/examples/metacalls}
SO=${TMPDIR:-/tmp}/percall-clk.so
gcc -O2 -shared -fPIC -o "$SO" "$HERE/clk.c" -ldl
mkdir -p "$OUT"; rm -f "$OUT/clk.bin" "$OUT/timing.txt"
EXP=$(mktemp -d /tmp/percall-export.XXXX); chmod 777 "$EXP"
STATE=$(mktemp -d /tmp/percall-state.XXXX)
CLK_COUNT_FILE=$OUT/clk.bin LD_PRELOAD=$SO "$BIN" --nfs-port 32049 --mount-port 32048 \
  --rpcbind off --no-nlm --no-rdma $NFSD_ARGS --state-dir "$STATE" "$EXP" >"$OUT/nfsd.log" 2>&1 &
PID=$!
sleep 1.5
run() { # kind n tag
  python3 "$HERE/clk.py" "$OUT/clk.bin" >"$OUT/$3.clk0"
  strace -f -c -S calls -o "$OUT/$3.strace" -p $PID 2>/dev/null &
  local sp=$!
  sleep 1
  "$MC" 127.0.0.1 "$EXP" 32049 32048 "$1" "$2" 1000 $SUBDIR 2>>"$OUT/timing.txt"
  sleep 0.3
  kill -INT $sp; wait $sp || true
  python3 "$HERE/clk.py" "$OUT/clk.bin" >"$OUT/$3.clk1"
}
run null 0 base
for op in create getattr lookup lookup-noent access remove null; do run $op "$N" $op; done
kill $PID; wait $PID 2>/dev/null || true
rm -rf "$EXP" "$STATE"
python3 "$HERE/per.py" "$OUT" "$N"
