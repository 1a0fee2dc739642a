#!/bin/bash
# User-space instructions per NFSv4.1 call of nfsd, by the COMPOUNDs the Linux client
# sends (docs/bench/README.md, "Per-call instructions, NFSv4.1").
#
#   instructions41.sh NFSD_BINARY OUTDIR [N] [KINDS...]   (as root; default N 300)
#
# KINDS (default: create openfh lookup access listplus remove) are the driver's
# (`crates/nfsd/tests/nfs4_percall.rs`, its module docs): per file, create is
# open(O_CREAT)+close, openfh open(O_RDONLY)+close of a file whose handle the client
# has, lookup a stat, access an ACCESS+GETATTR of the directory, listplus one listing
# of the N files with readdirplus attributes, remove an unlink. For each kind it
# starts NFSD_BINARY under valgrind's callgrind, instrumentation off, on a fresh
# export over TCP (port 32049, no rpcbind, NLM or RDMA; more options in $NFSD_ARGS),
# makes N files (create) unless the kind is create, and counts instructions only
# while the driver runs its N iterations of the kind; it prints instructions per
# iteration (each of which is one to three COMPOUNDs; listplus: per entry listed).
# valgrind's counts are exact and do not depend on load.
set -e
BIN=$1; OUT=$2; N=${3:-300}; shift 3 || shift $#
KINDS=${*:-create openfh lookup access listplus remove}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$HERE/../../..
DRIVER=$(cd "$ROOT" && cargo test -q -p nfsd --test nfs4_percall --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "nfs4_percall"][0])')
mkdir -p "$OUT"
drive() { # kind export -> the driver's output
  NFSD_ADDR=127.0.0.1:32049 NFSD_EXPORT=$2 N=$N WHAT=$1 "$DRIVER" --ignored --nocapture 2>&1
}
for kind in $KINDS; do
  exp=$(mktemp -d /tmp/instr41-export.XXXX); chmod 777 "$exp"
  state=$(mktemp -d /tmp/instr41-state.XXXX)
  # shellcheck disable=SC2086 # NFSD_ARGS: several options
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$kind.cg" \
    "$BIN" --nfs-port 32049 --mount-port 32048 --rpcbind off --no-nlm --no-rdma $NFSD_ARGS \
    --state-dir "$state" "$exp" >"$OUT/nfsd-$kind.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do ss -ltn | grep -q ':32049 ' && break; sleep 0.5; done
  [ "$kind" = create ] || drive create "$exp" >/dev/null
  drive "$kind" "$exp" >"$OUT/$kind.out" &
  dpid=$!
  # The driver says "ready" once its own set-up calls are done, then waits 2 s.
  for _ in $(seq 600); do grep -q '^ready' "$OUT/$kind.out" && break; sleep 0.1; done
  grep -q '^ready' "$OUT/$kind.out" || { echo "the $kind driver did not start:"; cat "$OUT/$kind.out"; kill $pid; exit 1; }
  callgrind_control -i on "$pid" >/dev/null 2>&1
  wait $dpid || { echo "the $kind run failed:"; cat "$OUT/$kind.out"; kill $pid; exit 1; }
  callgrind_control -i off "$pid" >/dev/null 2>&1
  kill $pid; wait $pid 2>/dev/null || true
  rm -rf "$exp" "$state"
  ir=$(callgrind_annotate "$OUT/$kind.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  per=$N
  [ "$kind" = listplus ] && per=$((N * N))
  printf '%-9s %12s instructions, %8d per %s\n' "$kind" "$ir" $((ir / per)) \
    "$([ "$kind" = listplus ] && echo entry || echo file)"
done | tee "$OUT/per-file.txt"
