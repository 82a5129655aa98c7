#!/usr/bin/env bash
# `actortrain launch`: a chief, 2 ps tasks and 2 worker tasks on 127.0.0.1 train the
# planted linear model; every task ends with status 0 and prints the same history. Each
# worker moves its tensors on the data plane to each ps task (each ps task counts what
# reached it that way); with --no-data-plane the
# same job runs with tensors over BASP.
. "$(dirname "$0")/lib.sh"
timeout 120 "$AT" launch --example linear --ps 2 --workers 2 --dir "$WORK/run" --timeout $((100 * SCALE)) -- --epochs 3 >"$WORK/out" 2>&1
rc=$?
cat "$WORK/out"
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -q "launch: every task succeeded" "$WORK/out" || fail "no success line"
for t in chief:0 worker:0 worker:1; do
  grep -F "[$t] epoch" "$WORK/out" | sed -E 's/^\[[a-z]+:[0-9]+\] //' >"$WORK/$t"
  [ "$(wc -l <"$WORK/$t")" -eq 3 ] || fail "$t printed $(wc -l <"$WORK/$t") epoch lines, not 3"
  cmp -s "$WORK/chief:0" "$WORK/$t" || fail "$t's history differs from the chief's"
  grep -qF "[$t] $t done: 300 steps" "$WORK/out" || fail "$t did not report 300 steps"
done
grep -qF "[ps:1] ps:1 done" "$WORK/out" || fail "ps:1 did not stop cleanly"
n=$(grep -c "\[worker:[01]\] .*ps shard [01]: data plane: connected to 127.0.0.1:" "$WORK/out")
[ "$n" -eq 4 ] || fail "$n data-plane connections, not 4 (2 workers x 2 ps)"
# Used, not only connected, by the ps side's own count: each of the 300 steps pulls from
# and pushes to each shard, and most of those 600 requests take the data plane (the
# first steps may go over BASP while it connects).
for p in 0 1; do
  served=$(sed -n "s/^\[ps:$p\] .*data plane: \([0-9]*\) request(s) served$/\1/p" "$WORK/out")
  [ -n "$served" ] && [ "$served" -ge 300 ] || fail "ps:$p served ${served:-no} data-plane request(s), not >= 300"
done
timeout 120 "$AT" launch --example linear --ps 2 --workers 2 --no-data-plane --timeout $((100 * SCALE)) -- --epochs 3 >"$WORK/basp" 2>&1
[ $? -eq 0 ] || fail "--no-data-plane: $(tail -5 "$WORK/basp")"
grep -qF "[chief:0] chief:0 done: 300 steps" "$WORK/basp" || fail "--no-data-plane: not 300 steps"
! grep -q "data plane" "$WORK/basp" || fail "--no-data-plane still used the data plane"
# The cluster file launch wrote is a valid one: a node refuses an out-of-range task.
"$AT" node --example linear --cluster "$WORK/run/cluster.json" --task worker:7 >"$WORK/bad" 2>&1
[ $? -eq 2 ] || fail "--task worker:7 did not exit with 2"
grep -q "the cluster has 2 worker task(s)" "$WORK/bad" || fail "no range message: $(cat "$WORK/bad")"
echo "PASS"
