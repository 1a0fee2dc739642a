#!/bin/sh
# client guest: as client-dd.sh (mount, write then read back 3 x MIB MiB with md5), plus
# kernel tracing, a watchdog that detects a stall (a dd/md5 step older than STALL_S, or
# "not responding") and dumps state at once, +DUMP2_S and +DUMP3_S later. Dump requests
# for the server guest go through the host: /share/results/dumpreq.N (run.sh relays).
. /share/common.sh
. /share/diag.sh
STALL_S=$(cat /share/stall.s 2>/dev/null || echo 40)
net_up 192.168.77.2; rdma_up $(cat /share/rdma.kind 2>/dev/null || echo siw)
OPTS=$(cat /share/mount.opts 2>/dev/null || echo vers=3,proto=rdma,port=20049,nolock)
MIB=$(cat /share/dd.mib 2>/dev/null || echo 30)
PAR=$(cat /share/par 2>/dev/null || echo 1)   # concurrent dd writers / readers per phase
[ -f /share/stress.sh ] && . /share/stress.sh
trace_setup client
mkdir -p /mnt/d
wait_port 192.168.77.1 2049 120 || echo "server port 2049 not reachable"
sleep 2
if ! timeout 90 mount -t nfs -o $OPTS 192.168.77.1:/srv/export /mnt/d; then
  echo "MOUNT_FAIL rc=$? opts=$OPTS"; dump_state /share/results/mountfail; t DONE; exit 1
fi
echo "MOUNT_OK $(grep ' /mnt/d ' /proc/mounts)"
grep -A3 'xprt:' /proc/self/mountstats | head -3
echo "PAR=$PAR MIB=$MIB"
dd if=/dev/urandom of=/tmp/src bs=1M count=$MIB 2>/dev/null; a=$(md5sum < /tmp/src)
echo "idle 0" > /tmp/phase
(
  for i in 1 2 3; do
    t0=$(cut -d' ' -f1 /proc/uptime); echo "write$i $t0" > /tmp/phase; touch /share/results/phase.write$i
    if [ $PAR = 1 ]; then
      timeout 1000 dd if=/tmp/src of=/mnt/d/f$i bs=1M conv=fsync 2>/dev/null; w=$?
    else # PAR concurrent writers, then PAR concurrent readers (more RPCs and MRs in flight)
      pids=; for j in $(seq 1 $PAR); do timeout 1000 dd if=/tmp/src of=/mnt/d/f${i}_$j bs=1M conv=fsync 2>/dev/null & pids="$pids $!"; done
      w=0; for p in $pids; do wait $p || w=$?; done
    fi
    t1=$(cut -d' ' -f1 /proc/uptime); echo "read$i $t1" > /tmp/phase; touch /share/results/phase.read$i
    echo 3 > /proc/sys/vm/drop_caches
    if [ $PAR = 1 ]; then
      b=$(timeout 1000 md5sum < /mnt/d/f$i); r=$?
      [ "$a" = "$b" ] && ok=match || ok=MISMATCH
    else
      pids=; for j in $(seq 1 $PAR); do timeout 1000 md5sum < /mnt/d/f${i}_$j > /tmp/md5.$j & pids="$pids $!"; done
      r=0; for p in $pids; do wait $p || r=$?; done
      ok=match; for j in $(seq 1 $PAR); do [ "$a" = "$(cat /tmp/md5.$j)" ] || ok=MISMATCH; done
    fi
    t2=$(cut -d' ' -f1 /proc/uptime)
    echo "DD $i write rc=$w $(echo $t0 $t1 | awk '{printf "%.1f", $2-$1}')s read rc=$r $(echo $t1 $t2 | awk '{printf "%.1f", $2-$1}')s $ok"
  done
  echo "done 0" > /tmp/phase
) &
WL=$!
stalled=0
while kill -0 $WL 2>/dev/null; do
  sleep 2
  set -- $(cat /tmp/phase); ph=$1; since=$2; now=$(cut -d' ' -f1 /proc/uptime)
  age=$(echo $since $now | awk '{printf "%d", $2-$1}')
  [ "$ph" = done ] && break
  nr=$(dmesg | grep -c 'not responding')
  if [ "$ph" != idle ] && { [ $age -ge $STALL_S ] || [ $nr -gt 0 ]; }; then
    stalled=1; echo "STALL phase=$ph age=${age}s not_responding=$nr at $now"
    touch /share/results/dumpreq.1; dump_state /share/results/dump1
    sleep ${DUMP2_S:-60}
    touch /share/results/dumpreq.2; dump_state /share/results/dump2
    sleep ${DUMP3_S:-60}
    set -- $(cat /tmp/phase)
    echo "after dumps: phase now $1 (stalled at $ph)"
    touch /share/results/dumpreq.3; dump_state /share/results/dump3
    break
  fi
done
if [ $stalled = 1 ]; then
  echo 0 > $TR/tracing_on
  kill $WL 2>/dev/null; pkill -f 'dd if=/tmp/src' ; pkill md5sum
  umount -f /mnt/d 2>/dev/null || umount -l /mnt/d
  echo "RESULT STALL"
else
  wait $WL
  echo 0 > $TR/tracing_on
  cat /proc/self/mountstats > /share/results/mountstats-end.txt
  cp $TR/trace /share/results/trace-end.txt 2>/dev/null
  grep -A3 'xprt:' /proc/self/mountstats | head -3
  timeout 30 umount /mnt/d || umount -l /mnt/d
  echo "RESULT OK"
fi
dmesg | grep -iE "rpcrdma|not responding|nfs:|siw|rxe" | tail -20
t DONE
