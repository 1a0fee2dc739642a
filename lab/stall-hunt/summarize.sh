#!/bin/bash
# summarize.sh RUNDIR: the key facts of a stalled run (client and server dumps), for classification.
R=${1:?run dir}
echo "== $R"; grep -E "^STALL|^after dumps|^RESULT|^DD" $R/c/share/guest.log
cat $R/run.log
for d in dump1 dump2 dump3; do
  for g in c s; do
    D=$R/$g/share/results/$d; [ -d $D ] || continue
    echo "---- $g $d ($(tail -1 $D/when.txt 2>/dev/null | cut -d' ' -f1) s uptime)"
    [ $g = c ] && grep -E "xprt:" $D/mountstats.txt | head -1
    echo "  ss (RDMA port 20049; Recv-Q Send-Q):"; grep -A2 -E ":20049 " $D/net.txt | grep -vE "LISTEN|^--" | head -8 | sed 's/^/    /'
    echo "  qp/cm_id:"; grep -E "^(link|dev) .*(lqpn|cm-idn)" $D/rdma.txt | sed 's/^/    /' | head -6
    echo "  ping: $(grep -E 'packets transmitted' $D/link.txt)"
    echo "  eth1: $(grep -A1 -E '^ +RX:' $D/link.txt | head -2 | tail -1 | xargs) rx / $(grep -A1 -E '^ +TX:' $D/link.txt | head -2 | tail -1 | xargs) tx"
    [ -f $D/debugfs-sunrpc.txt ] && grep -A3 "rpc_clnt/.*/tasks" $D/debugfs-sunrpc.txt | head -8 | sed 's/^/    /'
    [ -f $D/trace.txt ] && { echo "  trace tail:"; grep -v '^#' $D/trace.txt | grep -vE "kfree_skb.*(NOT_SPECIFIED|TCP_OLD_DATA)" | tail -12 | cut -c1-220 | sed 's/^/    /'; }
  done
done
for g in c s; do [ -f $R/$g/eth1.pcap ] && { echo "---- capture tail ($g side, filter-dump)"; python3 $(dirname $0)/pcaptail.py $R/$g/eth1.pcap --tail 25; }; done
