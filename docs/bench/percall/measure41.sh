#!/bin/bash
# Per-call system calls of nfsd for the Linux client's NFSv4.1 COMPOUNDs
# (docs/bench/README.md, "NFSv4.1 COMPOUNDs inline").
#
#   measure41.sh NFSD_BINARY OUTDIR [N]     (as root; N files per kind, default 500)
#
# Starts NFSD_BINARY on a fresh temporary export over TCP (port 32049, no rpcbind,
# NLM or RDMA; extra options in $NFSD_ARGS, e.g. --no-inline-metadata), then for each
# kind (create: OPEN+ACCESS+CLOSE COMPOUNDs per file; open: OPEN+CLOSE of it; lookup;
# access; remove) runs
# the driver test `nfs4_percall` (crates/nfsd/tests/nfs4_percall.rs) under
# `strace -f -c -p` and prints the system calls per file.
set -e
BIN=$1; OUT=$2; N=${3:-500}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$HERE/../../..
(cd "$ROOT" && cargo test -q -p nfsd --test nfs4_percall --no-run 2>/dev/null)
DRIVER=$(cd "$ROOT" && cargo test -q -p nfsd --test nfs4_percall --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "nfs4_percall"][0])')
mkdir -p "$OUT"
EXP=$(mktemp -d /tmp/percall41-export.XXXX); chmod 777 "$EXP"
STATE=$(mktemp -d /tmp/percall41-state.XXXX)
"$BIN" --nfs-port 32049 --mount-port 32048 --rpcbind off --no-nlm --no-rdma $NFSD_ARGS \
  --state-dir "$STATE" "$EXP" >"$OUT/nfsd.log" 2>&1 &
PID=$!
for _ in $(seq 50); do grep -q "^nfsd: ready" "$OUT/nfsd.log" && break; sleep 0.2; done
grep -q "^nfsd: ready" "$OUT/nfsd.log" || { echo "nfsd did not start:"; cat "$OUT/nfsd.log"; exit 1; }
for w in create open openfh lookup access remove; do
  # The driver's own set-up calls (a session; for openfh the files' handles) come
  # before its "ready", after which it waits 2 s: strace attaches then.
  NFSD_ADDR=127.0.0.1:32049 NFSD_EXPORT=$EXP N=$N WHAT=$w "$DRIVER" --ignored --nocapture >"$OUT/$w.out" 2>&1 &
  DP=$!
  for _ in $(seq 600); do grep -q '^ready' "$OUT/$w.out" && break; sleep 0.1; done
  strace -f -c -S calls -o "$OUT/$w.strace" -p $PID 2>/dev/null &
  SP=$!
  wait $DP || true
  grep -E "^$w " "$OUT/$w.out" || { echo "the $w run failed:"; cat "$OUT/$w.out"; kill $PID; exit 1; }
  sleep 0.5
  kill -INT $SP; wait $SP 2>/dev/null || true
done
kill $PID; wait $PID 2>/dev/null || true
rm -rf "$EXP" "$STATE"
for w in create open openfh lookup access remove; do
  printf '%-7s per file:' "$w"
  awk -v n="$N" '$4 ~ /^[0-9]+$/ && $NF != "total" {t += $4; if ($4 / n >= 0.05) printf " %s %.1f", $NF, $4 / n} END {printf "; total %.1f\n", t / n}' "$OUT/$w.strace"
done | tee "$OUT/per-file.txt"
