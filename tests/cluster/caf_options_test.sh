#!/usr/bin/env bash
# A run_node program keeps CAF's own options: --caf.NAME=VALUE reaches CAF's
# configuration and wins over the cluster's settings (the process runs as many scheduler
# threads as --caf.scheduler.max-threads says, counted in /proc), and an option CAF does
# not know, or a value it cannot read, exits 2 naming it before anything starts.
. "$(dirname "$0")/lib.sh"

# 1. Refused by name, exit 2.
read -r P0 P1 <<<"$(free_ports 2 | tr '\n' ' ')"
cluster="{\"cluster\": {\"worker\": [\"localhost:$P0\", \"localhost:$P1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}"
for bad in --caf.scheduler.bogus=1 --caf.scheduler.max-threads=many; do
  TF_CONFIG="$cluster" timeout 30 "$AT" node --example linear --secret "$SECRET" "$bad" >"$WORK/out" 2>&1
  rc=$?
  cat "$WORK/out"
  [ $rc -eq 2 ] || fail "$bad: exit $rc, not 2"
  grep -q -- "$bad" "$WORK/out" || fail "$bad: the error does not name it"
done

# 2. Honoured: worker 0 of a two-worker cluster waits for worker 1, which never comes;
# once it listens, its threads are counted, with CAF told 1 and then 5 scheduler
# threads (and --threads 3, which CAF's option overrides). Everything else is the same,
# so the counts differ by exactly 4.
threads_with() {
  read -r Q0 Q1 <<<"$(free_ports 2 | tr '\n' ' ')"
  local c="{\"cluster\": {\"worker\": [\"localhost:$Q0\", \"localhost:$Q1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}"
  TF_CONFIG="$c" timeout 60 "$AT" node --example linear --secret "$SECRET" --threads 3 "--caf.scheduler.max-threads=$1" \
    >"$WORK/node$1" 2>&1 &
  local t=$! pid="" i
  for i in $(seq 300); do  # at most 30 s for the node to listen
    pid=$(pgrep -P $t -f "actortrain node" | head -1)
    [ -n "$pid" ] && ss -ltnH "sport = :$Q0" | grep -q LISTEN && break
    sleep 0.1
  done
  ss -ltnH "sport = :$Q0" | grep -q LISTEN || { cat "$WORK/node$1" >&2; fail "worker 0 never listened on $Q0"; }
  ls "/proc/$pid/task" | wc -l
  kill $t 2>/dev/null
  wait $t 2>/dev/null
}
one=$(threads_with 1)
five=$(threads_with 5)
echo "threads with 1 scheduler thread: $one, with 5: $five"
[ $((five - one)) -eq 4 ] || fail "--caf.scheduler.max-threads=5 gave $five threads against $one with =1 (not 4 more)"
echo "PASS"
