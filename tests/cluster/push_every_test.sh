#!/usr/bin/env bash
# Downpour with real processes: workers pull every 4 steps, move their copy by a local
# SGD step in between, and push the mean gradient of 4 steps once (tasks of 4 steps, on
# the data plane); kill -9 of a worker mid-training re-runs its groups whole, and the
# job still applies every one of its 4000 steps exactly once (the ps tasks' ledgers,
# checked against the data: each group's steps carry one batch digest each).
. "$(dirname "$0")/lib.sh"
M="$WORK/m.jsonl"
# Under a sanitizer the job is SCALE times longer, so the restarted worker (slower to
# start there) still rejoins before the job ends, as the test requires.
STEPS=$((4000 * SCALE))
export EXAMPLE_ARGS="--epochs 2 --examples $((40000 * SCALE)) --push-every 4 --pull-every 4 --local-lr 0.05"
launch_linear --checkpoint-dir "$WORK/ck"
wait_steps "$M" 800 60
kill -9 "$(pid_of "$WORK/out" worker:0)"
wait $L; rc=$?
cat "$WORK/out"
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -q "launch: worker:0 killed by signal 9" "$WORK/out" || fail "the kill was not seen"
grep -q "\[chief:0\] worker 0 joined (generation 2)" "$WORK/out" || fail "the restarted worker did not rejoin"
grep -qF "[chief:0] chief:0 done: $STEPS steps" "$WORK/out" || fail "not exactly $STEPS steps"
[ "$(grep -c '"event":"step"' "$M")" -eq "$STEPS" ] || fail "the metrics do not hold $STEPS applied steps"
same_histories "$WORK/out" worker:0 worker:1
ledger_exact "$STEPS" "$WORK/run/cluster.json"
final_digests "$WORK/out" "$WORK/ck" worker:0 worker:1
echo "PASS"
