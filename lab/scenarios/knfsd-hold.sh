#!/bin/sh
# Scenario building block: start knfsd with its RDMA listener, tell the host
# it is ready (/share/ready), then hold until the host creates /share/done
# (or LAB_HOLD_SECS pass). Host-side tests drive the guest's knfsd through
# the hostfwd ports meanwhile: host 127.0.0.1:20049 -> guest :20049 (RDMA),
# 127.0.0.1:20048 -> guest :20048 (MOUNT over TCP).
. /share/lib.sh

step rdma_up lab_rdma_up
step knfsd_up lab_knfsd_up
# knfsd's counters before and after the host's work: in a shared boot they
# also hold earlier scenarios' calls, so a test checks the difference.
record nfsd_rpc_before "$(grep '^rpc' /proc/net/rpc/nfsd)"
record nfsd_proc3_before "$(grep '^proc3' /proc/net/rpc/nfsd)"
lab_ready
step wait_for_host lab_wait_for done "${LAB_HOLD_SECS:-120}"
# Evidence for the host test: what knfsd saw while the host drove it.
record nfsd_rpc "$(grep '^rpc' /proc/net/rpc/nfsd)"
record nfsd_proc3 "$(grep '^proc3' /proc/net/rpc/nfsd)"
