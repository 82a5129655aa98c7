#!/usr/bin/env bash
# `actortrain status` against a running cluster of processes: it prints each worker's
# state, generation, steps, step rate and staleness, each ps shard's partitions and
# versions, the last checkpoint; after kill -9 of a worker, the loss, the re-queued steps
# (when it held any) and the rejoin as generation 2 are among the recent events. A cluster that is not
# running is an error naming the address; a bad flag exits with 2.
. "$(dirname "$0")/lib.sh"
M="$WORK/m.jsonl"
EXAMPLE_ARGS="--epochs 12 --examples 40000" launch_linear --checkpoint-dir "$WORK/ck" --checkpoint-every 500
wait_steps "$M" 1200 60
status() { timeout 30 "$AT" status --cluster "$WORK/run/cluster.json" >"$WORK/status" 2>&1; }
status || fail "status exited with $?: $(cat "$WORK/status")"
cat "$WORK/status"
grep -q "^chief:0 at 127.0.0.1:" "$WORK/status" || fail "no coordinator line"
grep -qE "^run 1: training, epoch [0-9]+, [0-9]+ steps applied" "$WORK/status" || fail "no run line"
for w in 0 1; do
  grep -qE "^  worker $w  (busy|idle)  generation 1  [0-9]+ steps  [0-9.]+ steps/s  staleness [0-9.]+$" "$WORK/status" ||
    fail "no line for worker $w"
done
grep -qE "^  ps 0  [0-9]+ steps in its state" "$WORK/status" || fail "no line for ps 0"
grep -qE "^    dense/kernel part 0  rows \[0, 5\) x 1  20 B  version [0-9]+$" "$WORK/status" || fail "no partition of ps 0"
grep -qE "^    dense/bias part 0  rows \[0, 1\) x 1  4 B  version [0-9]+$" "$WORK/status" || fail "no partition of ps 1"
grep -qE "^last checkpoint: step [0-9]+, [0-9.]+ s ago, $WORK/ck/ckpt-" "$WORK/status" || fail "no checkpoint line"
kill -9 "$(pid_of "$WORK/out" worker:1)"
wait_line "$WORK/out" '\[chief:0\] worker 1 joined \(generation 2\)' 60
status || fail "status after the kill exited with $?"
cat "$WORK/status"
grep -qE "worker 1 \(generation 1\) lost" "$WORK/status" || fail "the loss is not among the recent events"
# A worker lost while it holds no steps (during a checkpoint's or the epoch gate's
# quiescence) has nothing to re-queue: the status must show the re-queue whenever the
# chief's event stream had one for worker 1 before its rejoin.
requeued=$(grep -n '"event":"steps_requeued"' "$M" | grep '"worker":1[,}]' | head -1 | cut -d: -f1)
rejoined=$(grep -n '"event":"worker_joined"' "$M" | grep '"worker":1[,}]' | grep '"generation":2[,}]' | head -1 | cut -d: -f1)
[ -n "$rejoined" ] || fail "no rejoin of worker 1 in the event stream"
if [ -n "$requeued" ] && [ "$requeued" -lt "$rejoined" ]; then
  grep -qE "step\(s\) of worker 1 re-queued" "$WORK/status" || fail "the re-queue is not among the recent events"
else
  echo "note: worker 1 held no steps when it was lost (nothing re-queued)"
fi
grep -q "worker 1 rejoined as generation 2" "$WORK/status" || fail "the rejoin is not among the recent events"
grep -qE "^  worker 1  (busy|idle)  generation 2" "$WORK/status" || fail "worker 1 is not at generation 2"
wait $L; rc=$?
[ $rc -eq 0 ] || fail "launch exited with $rc"
# Nobody there any more: said at once (the connection is refused), not after connect_ms
# (the cluster file's default, 10 s; the bound here is 5 s).
timeout 5 "$AT" status --cluster "$WORK/run/cluster.json" >"$WORK/gone" 2>&1
[ $? -eq 1 ] || fail "status of a stopped cluster did not exit with 1 at once: $(cat "$WORK/gone")"
grep -qE "nothing listens at 127.0.0.1:[0-9]+ \(chief:0's address\): is the cluster running\?" "$WORK/gone" ||
  fail "no address in: $(cat "$WORK/gone")"
# A bad flag value is blamed on the flag, not on the cluster file launch writes from it.
"$AT" launch --example linear --consistency bogus --dir "$WORK/bogus" >"$WORK/bad" 2>&1
[ $? -eq 2 ] || fail "launch --consistency bogus did not exit with 2"
grep -q "^actortrain: error: --consistency: unknown consistency 'bogus'" "$WORK/bad" || fail "not blamed on the flag: $(cat "$WORK/bad")"
"$AT" status --bogus >"$WORK/bad" 2>&1
[ $? -eq 2 ] || fail "a bad flag did not exit with 2"
echo "PASS"
