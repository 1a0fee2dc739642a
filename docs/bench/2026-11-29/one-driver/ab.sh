#!/bin/bash
# Alternating A/B of the host READ/WRITE 1 MiB cells over RDMA and TCP (issue 28: the
# one driver must not regress them by more than 5%). BEFORE and AFTER are two nfsbench
# binaries (release builds of the two commits); each pair runs them one after the
# other, the order swapped every other pair. Reports go to OUT/{before,after}-N/.
# Usage: BEFORE=/tmp/nfsbench-before AFTER=/tmp/nfsbench-after OUT=/tmp/ab FROM=1 TO=12 ab.sh
set -u
for i in $(seq "${FROM:-1}" "${TO:-12}"); do
  for v in before after; do
    [ $((i % 2)) = 0 ] && v=$([ $v = before ] && echo after || echo before)
    bin=$([ $v = before ] && echo "$BEFORE" || echo "$AFTER")
    echo "=== pair $i $v $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    "$bin" run --no-peers --quiet --dir /dev/shm/nfsbench --transports tcp,rdma \
      --read-sizes 1M --depths 4 --write-sizes 1M --write-depth 8 --rpc-inflight none --reps 3 \
      --out "$OUT/$v-$i" > "$OUT/$v-$i.log" 2>&1
    echo "exit $?"
  done
done
