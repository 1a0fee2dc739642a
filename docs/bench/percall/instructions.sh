#!/bin/bash
# User-space instructions per call of nfsd (docs/bench/README.md, "Per-call
# instructions (host, valgrind)").
#
#   instructions.sh NFSD_BINARY OUTDIR [N] [OPS...]   (as root; N calls, default 1000)
#
# For each OP (default: getattr lookup access create remove readdirplus) starts
# NFSD_BINARY under valgrind's callgrind, instrumentation off, on a fresh export over
# TCP (ports 32149/32148, no rpcbind, NLM or RDMA), makes 2,000 files in directory
# `meta` with the metacalls example (AUTH_SYS uid/gid 1000), then turns
# instrumentation on for one metacalls run of OP with N calls and one with 0 (mount
# and unmount only), and prints (instructions of the first - of the second) / N.
# With RDMA=1 the calls go over RPC-over-RDMA by the userspace iWARP provider (nfsd
# --rdma-provider iwarp on port 32150, metacalls with METACALLS_RDMA=1): the same
# server layers over the RDMA transport, with the provider's MPA/DDP work in user
# space besides (a verbs device does that part in the kernel or the NIC).
# valgrind does not emulate SHA extensions, AVX-512 and some others, as the lab's
# qemu TCG guest does not; counts are exact and do not depend on load.
set -e
BIN=$1; OUT=$2; N=${3:-1000}; shift 3 || shift $#
OPS=${*:-getattr lookup access create remove readdirplus}
HERE=$(cd "$(dirname "$0")" && pwd)
MC=${MC:-$HERE/../../../target/release/examples/metacalls}
mkdir -p "$OUT"
if [ "${RDMA:-0}" = 1 ]; then
  RDMA_ARGS="--rdma-provider iwarp --rdma-port 32150"; CALL_PORT=32150
else
  RDMA_ARGS="--no-rdma"; CALL_PORT=32149
fi
one() { # op n -> instructions
  local exp state pid
  exp=$(mktemp -d /tmp/instr-export.XXXX); chmod 777 "$exp"
  state=$(mktemp -d /tmp/instr-state.XXXX)
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$1-$2.cg" \
    "$BIN" --nfs-port 32149 --mount-port 32148 --rpcbind off --no-nlm $RDMA_ARGS \
    --state-dir "$state" "$exp" >"$OUT/nfsd-$1-$2.log" 2>&1 &
  pid=$!
  for _ in $(seq 60); do ss -ltn | grep -q ':32149 ' && break; sleep 0.5; done
  local pre=create n=2000
  [ "$1" = create ] && n=0
  "$MC" 127.0.0.1 "$exp" 32149 32148 $pre $n 1000 meta 2>>"$OUT/timing.txt"
  callgrind_control -i on $pid >/dev/null 2>&1
  METACALLS_RDMA=${RDMA:-0} "$MC" 127.0.0.1 "$exp" $CALL_PORT 32148 "$1" "$2" 1000 meta 2>>"$OUT/timing.txt"
  callgrind_control -d $pid >/dev/null 2>&1
  kill $pid; wait $pid 2>/dev/null || true
  rm -rf "$exp" "$state"
  callgrind_annotate "$OUT/$1-$2.cg.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
for op in $OPS; do
  a=$(one "$op" "$N"); b=$(one "$op" 0)
  echo "$op $(( (a - b) / N )) instructions per call ($a - $b over $N)"
done | tee "$OUT/per-call.txt"
