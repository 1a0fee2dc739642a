# sourced by the guest scripts: tracing setup and state dumps for the stall hunt
TR=/sys/kernel/tracing
SS() { /share/sslib/ld-linux-x86-64.so.2 --library-path /share/sslib /share/sslib/ss "$@"; }

# trace_setup ROLE: tracefs + debugfs, big ring, rpcrdma/sunrpc/rdma/tcp events
trace_setup() {
  mount -t tracefs nodev $TR 2>/dev/null
  mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
  # /share/trace.level: 0 = none, 1 = light (rpcrdma + cm + tcp events, no rdma_core/sunrpc), 2 = full
  TL=$(cat /share/trace.level 2>/dev/null || echo 2)
  [ "$TL" = 0 ] && { echo "trace off"; return 0; }
  echo 0 > $TR/tracing_on
  echo ${TRACE_KB:-24576} > $TR/buffer_size_kb
  echo > $TR/trace
  ls $TR/events/rpcrdma > /share/results/rpcrdma-events.txt 2>&1
  echo 1 > $TR/events/rpcrdma/enable
  echo 1 > $TR/events/rdma_cma/enable
  [ "$TL" -ge 2 ] && echo 1 > $TR/events/rdma_core/enable
  # rdma_core cq_poll fires per poll: too chatty? keep; it shows CQs being serviced
  for e in tcp/tcp_retransmit_skb tcp/tcp_send_reset tcp/tcp_receive_reset \
           skb/kfree_skb sock/sock_exceed_buf_limit; do
    [ -d $TR/events/$e ] && echo 1 > $TR/events/$e/enable
  done
  cat $TR/events/skb/kfree_skb/format > /share/results/kfree_skb-format.txt 2>&1
  if [ "$TL" -lt 2 ]; then :
  elif [ "$1" = client ]; then
    for e in rpc_task_begin rpc_task_end rpc_timeout_status rpc_call_status rpc_retry_refresh_status \
             xprt_transmit xprt_retransmit xprt_lookup_rqst xprt_timer xprt_disconnect_auto \
             xprt_disconnect_done xprt_disconnect_force xprt_reserve_cong xprt_release_cong \
             xprt_get_cong xprt_put_cong xprt_reserve xprt_ping rpc_connect_status rpc_stats_latency \
             xprt_create xprt_connect xprt_destroy rpc_xdr_sendto rpc_task_sleep rpc_task_wakeup; do
      [ -d $TR/events/sunrpc/$e ] && echo 1 > $TR/events/sunrpc/$e/enable
    done
    echo 1 > $TR/events/nfs/nfs_initiate_write/enable 2>/dev/null
    echo 1 > $TR/events/nfs/nfs_writeback_done/enable 2>/dev/null
    echo 1 > $TR/events/nfs/nfs_initiate_read/enable 2>/dev/null
    echo 1 > $TR/events/nfs/nfs_readpage_done/enable 2>/dev/null
  else
    # knfsd side: svc transport events
    for e in $TR/events/sunrpc/svc_xprt_* $TR/events/sunrpc/svc_process $TR/events/sunrpc/svc_send \
             $TR/events/sunrpc/svc_drop $TR/events/sunrpc/svc_defer $TR/events/sunrpc/svc_stats_latency; do
      [ -d $e ] && echo 1 > $e/enable
    done
  fi
  echo 1 > $TR/tracing_on
  echo "trace on: $(cat $TR/buffer_size_kb) KB/cpu, $(grep -c . $TR/set_event) events"
}

# dump_state DIR: everything we can see, quickly; trace last (slow)
dump_state() {
  # local: the callers' loops count dumps in $n (a process name left in it broke the server's loop)
  local d c h f p n st t
  d=$1; mkdir -p $d
  ( date; cat /proc/uptime ) > $d/when.txt
  cat /proc/self/mountstats > $d/mountstats.txt 2>&1
  { for c in "res show qp" "-d res show qp" "-dd res show qp" "res show cq" "-d res show cq" "res show mr" \
             "res show cm_id" "res show pd" "res show ctx" "stat show" "link show" "-d stat show"; do
      echo "### rdma $c"; timeout 10 rdma $c 2>&1; done; } > $d/rdma.txt
  for h in /sys/class/infiniband/*/ports/1/hw_counters /sys/class/infiniband/*/ports/1/counters; do
    [ -d $h ] && for f in $h/*; do echo "$f $(cat $f)"; done
  done > $d/ib-counters.txt 2>&1
  { echo "### ss -tnimoe"; SS -tanimoe 2>&1; echo "### /proc/net/tcp"; cat /proc/net/tcp; echo "### snmp"; cat /proc/net/snmp;
    echo "### netstat"; cat /proc/net/netstat; echo "### softnet_stat"; cat /proc/net/softnet_stat;
    echo "### dev"; cat /proc/net/dev; ip -s link show eth1; } > $d/net.txt 2>&1
  for f in /proc/net/rpc/*; do [ -f $f ] && { echo "### $f"; cat $f; }; done > $d/proc-net-rpc.txt 2>&1
  { for f in /sys/kernel/debug/sunrpc/rpc_clnt/*/* /sys/kernel/debug/sunrpc/rpc_xprt/*/*; do
      echo "### $f"; cat $f; done; } > $d/debugfs-sunrpc.txt 2>&1
  # kernel threads and our processes: where are they blocked?
  { for p in /proc/[0-9]*; do
      n=$(cat $p/comm 2>/dev/null)
      case "$n" in siw*|kworker*|nfsd*|rpciod*|xprtiod*|ib*|dd|md5sum|svc*|rdma*|rpc*)
        st=$(awk '{print $3}' $p/stat 2>/dev/null)
        [ "$st" = "S" ] && [ "${n#kworker}" != "$n" ] && continue
        echo "=== ${p#/proc/} $n state=$st wchan=$(cat $p/wchan 2>/dev/null)"; cat $p/stack 2>/dev/null;;
      esac
    done; } > $d/stacks.txt 2>&1
  if [ -n "${NFSD_PID:-}" ] && [ -d /proc/$NFSD_PID ]; then
    { cat /proc/$NFSD_PID/status; for t in /proc/$NFSD_PID/task/*; do
        echo "=== task ${t##*/} $(cat $t/comm) state=$(awk '{print $3}' $t/stat) wchan=$(cat $t/wchan)"
        cat $t/stack 2>/dev/null; done; ls -l /proc/$NFSD_PID/fd; } > $d/nfsd-proc.txt 2>&1
    timeout 4 strace -f -tt -p $NFSD_PID -o $d/nfsd-strace.txt 2>/dev/null
    cp /share/results/nfsd.log $d/nfsd.log.snapshot 2>/dev/null
  fi
  { ip -s -s link show eth1; echo "### ping peer"; ping -c 3 -W 2 ${PEER:-192.168.77.1} 2>&1; ip -s -s link show eth1; ip neigh; } > $d/link.txt 2>&1
  cat /proc/interrupts > $d/interrupts.txt 2>&1
  dmesg > $d/dmesg.txt 2>&1
  cat /proc/meminfo > $d/meminfo.txt
  if [ -d $TR/events ]; then
    cat $TR/per_cpu/cpu0/stats > $d/trace-stats.txt 2>&1
    cp $TR/trace $d/trace.txt 2>&1
  fi
  echo "dumped $d at $(cut -d' ' -f1 /proc/uptime)"
}
