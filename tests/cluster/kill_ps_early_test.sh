#!/usr/bin/env bash
# A ps task lost while the job starts is recovered (issue 16, defect 5: every worker
# failed with "ps shard 1 is lost and has not been replaced"). Twice, 2 ps and 3
# workers with --restart-failed and checkpoints every 300 steps: kill -9 of ps:1 the
# moment launch reports its pid (before the chief has dialed it), and kill -9 of ps:1
# once the first step is applied (before any periodic checkpoint: the run's start
# checkpoint is what it rolls back to). Each job completes, and the ps tasks' ledgers
# hold every step of the data exactly once: 3 pipelines of 13334, 13333 and 13333
# examples, 667 batches of 20 each (the last ones short), 2001 steps per epoch, 4002.
. "$(dirname "$0")/lib.sh"
export EXAMPLE_ARGS="--epochs 2 --examples 40000"
M="$WORK/m.jsonl"
for when in start first_step; do
  rm -rf "$WORK/run" "$WORK/ck" "$M"
  timeout 170 "$AT" launch --example linear --ps 2 --workers 3 --restart-failed --dir "$WORK/run" --timeout $((150 * SCALE)) \
    --checkpoint-dir "$WORK/ck" --checkpoint-every 300 -- $EXAMPLE_ARGS --metrics "$M" --verbose 2 >"$WORK/out" 2>&1 &
  L=$!
  if [ $when = start ]; then
    wait_line "$WORK/out" "launch: ps:1 is pid" 30
  else
    wait_steps "$M" 1 60
    grep -q "ckpt-000000000300" "$WORK/out" && fail "a periodic checkpoint came before the kill"
  fi
  kill -9 "$(pid_of "$WORK/out" ps:1)"
  wait $L; rc=$?
  echo "== killed ps:1 at $when"
  grep -v "epoch\|data plane" "$WORK/out" | tail -25
  [ $rc -eq 0 ] || fail "$when: launch exited with $rc"
  grep -q "launch: ps:1 killed by signal 9" "$WORK/out" || fail "$when: the kill was not seen"
  if [ $when = first_step ]; then
    grep -q "\[chief:0\] ps shard 1 lost" "$WORK/out" || fail "$when: the chief did not see the loss"
    grep -q '"event":"ps_restored"' "$M" || fail "$when: no ps_restored event"
  fi
  grep -qF "[chief:0] chief:0 done: 4002 steps" "$WORK/out" || fail "$when: the chief did not end at 4002 steps"
  ledger_exact 4002 "$WORK/run/cluster.json"
  final_digests "$WORK/out" "$WORK/ck" worker:0 worker:1 worker:2
done
echo "PASS"
