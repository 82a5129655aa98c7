#!/usr/bin/env bash
# kill -9 of a worker process mid-training: the chief notices (the TCP connection
# closes), re-queues the worker's steps, `launch --restart-failed` starts it again and it
# rejoins under generation 2; the job completes with the exact step count. The ps
# tasks' ledgers, checked against the data, show every step applied exactly once, and
# both workers' final pulls equal the final checkpoint's values.
. "$(dirname "$0")/lib.sh"
M="$WORK/m.jsonl"
launch_linear --checkpoint-dir "$WORK/ck"
wait_steps "$M" 800 60
kill -9 "$(pid_of "$WORK/out" worker:0)"
wait $L; rc=$?
cat "$WORK/out"
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -q "launch: worker:0 killed by signal 9" "$WORK/out" || fail "the kill was not seen"
grep -q "\[chief:0\] worker 0 (generation 1) lost: remote_link_unreachable" "$WORK/out" || fail "no loss reported"
grep -q "\[chief:0\] worker 0 joined (generation 2)" "$WORK/out" || fail "the restarted worker did not rejoin"
# 40000 examples / batch 20 = 2000 steps per epoch, 2 epochs, each exactly once.
grep -qF "[chief:0] chief:0 done: 4000 steps" "$WORK/out" || fail "not exactly 4000 steps"
[ "$(grep -c '"event":"step"' "$M")" -eq 4000 ] || fail "the metrics do not hold 4000 applied steps"
grep -q '"event":"steps_requeued"' "$M" || fail "no steps_requeued event"
same_histories "$WORK/out" worker:0 worker:1
ledger_exact 4000 "$WORK/run/cluster.json"
final_digests "$WORK/out" "$WORK/ck" worker:0 worker:1
echo "PASS"
