#!/bin/bash
# Lab A/B of our nfsd before/after the one driver (issue 28): NFSv4.1 over siw, reads
# and writes against knfsd, alternating binaries: /tmp/nfsd-before and /tmp/nfsd-after
# are release builds of nfsd at the two commits (cargo build --release -p nfsd).
cd "$(dirname "$0")/../../../../.."
for i in 1 2 3; do
  for v in before after; do
    [ $((i % 2)) = 0 ] && v=$([ $v = before ] && echo after || echo before)
    echo "=== $i $v $(date +%T)"
    ./target/release/nfsbench lab --lab-dir lab --nfsd /tmp/nfsd-$v --nfs-version 4.1 --writes --mib 64 --reps 3 --out ${OUT:-/tmp/labab}/$v-$i > ${OUT:-/tmp/labab}/$v-$i.log 2>&1
    echo "exit $?"
  done
done
echo "done $(date +%T)"
