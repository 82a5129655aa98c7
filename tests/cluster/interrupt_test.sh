#!/usr/bin/env bash
# Ctrl-C (SIGINT) to `actortrain launch` stops every task it started and exits non-zero
# within a bounded time; no process of the cluster is left behind.
. "$(dirname "$0")/lib.sh"
# Not under `timeout`: the signal must reach launch itself (the trap cleans up).
"$AT" launch --example linear --ps 2 --workers 2 --dir "$WORK/run" --timeout $((150 * SCALE)) \
  -- --epochs 50 --examples 40000 --metrics "$WORK/m.jsonl" --verbose 2 >"$WORK/out" 2>&1 &
L=$!
wait_steps "$WORK/m.jsonl" 300 60
pids=$(grep -o 'is pid [0-9]*' "$WORK/out" | awk '{print $3}')
[ "$(echo "$pids" | wc -w)" -eq 5 ] || fail "launch did not report 5 tasks"
start=$(date +%s)
kill -INT $L
wait $L; rc=$?
took=$(( $(date +%s) - start ))
cat "$WORK/out" | grep -v '\] epoch' | tail -5
[ $rc -eq 1 ] || fail "launch exited with $rc after SIGINT, not 1"
[ $took -le 15 ] || fail "launch took $took s to stop"
grep -q "launch: the job failed: stopped by a signal" "$WORK/out" || fail "no reason given"
for p in $pids; do
  kill -0 "$p" 2>/dev/null && fail "task process $p is still running"
done
echo "PASS"
