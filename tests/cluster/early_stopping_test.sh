#!/usr/bin/env bash
# The epoch gate with real processes: early stopping on the chief keeps the ps tasks'
# state of the best epoch (in their own memory, over BASP) and restores it at the end.
# "loss" in mode max is best at epoch 1 (the loss falls), so patience 2 stops the run
# after epoch 3; the job ends cleanly with 3 epochs in the history and the CSV log, and
# the ps tasks' ledgers hold those 3 epochs' steps exactly once.
. "$(dirname "$0")/lib.sh"
EXAMPLE_ARGS="--epochs 20 --examples 4000 --early-stopping 2 --monitor loss --monitor-mode max --csv-log $WORK/log.csv" \
  launch_linear
wait $L; rc=$?
cat "$WORK/out"
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -qF "[chief:0] training stopped after epoch 3; variables restored to epoch 1" "$WORK/out" ||
  fail "no 'training stopped after epoch 3; variables restored to epoch 1' line"
# Every task's summary holds the 3 epochs' history.
[ "$(grep -c '^\[chief:0\] epoch [0-9]/3: ' "$WORK/out")" -eq 3 ] || fail "the chief's history is not 3 epochs"
for w in 0 1; do
  diff <(grep "^\[chief:0\] epoch [0-9]/3: " "$WORK/out" | cut -d' ' -f2-) \
    <(grep "^\[worker:$w\] epoch [0-9]/3: " "$WORK/out" | cut -d' ' -f2-) >/dev/null || fail "worker:$w's history differs"
done
rows=$(tail -n +2 "$WORK/log.csv" | wc -l)
[ "$rows" -eq 3 ] || fail "$rows CSV rows, expected 3: $(cat "$WORK/log.csv")"
grep -qF "[chief:0] chief:0 done: 600 steps" "$WORK/out" || fail "not 600 steps (3 epochs of 200)"
# What the ps tasks applied: the 3 epochs the run had, each step once (restoring the
# best epoch's values takes back no step's record).
EXAMPLE_ARGS="--epochs 3 --examples 4000" ledger_exact 600 "$WORK/run/cluster.json"
echo "PASS"
