#!/bin/bash
# jitter.sh PIDFILE... : emulate a heavily loaded host: repeatedly SIGSTOP the given qemus
# for a random 50..MAXMS ms every ~PERIOD ms (env JMAX, JPERIOD), until killed.
MAXMS=${JMAX:-600}; PERIOD=${JPERIOD:-1000}
pids=(); for f in "$@"; do for i in $(seq 1 60); do [ -s $f ] && break; sleep 1; done; pids+=($(cat $f)); done
trap 'kill -CONT ${pids[@]} 2>/dev/null; exit 0' TERM INT
while :; do
  p=${pids[$((RANDOM % ${#pids[@]}))]}
  ms=$((50 + RANDOM % MAXMS))
  kill -STOP $p 2>/dev/null || exit 0
  sleep $(printf '0.%03d' $ms) 2>/dev/null || sleep 1
  kill -CONT $p
  sleep $(printf '0.%03d' $((RANDOM % PERIOD))) 2>/dev/null
done
