#!/usr/bin/env bash
# The evaluator task: a sidecar that evaluates each newly committed checkpoint and
# writes evaluator.jsonl beside them. The chief never waits for it: with the evaluator
# stopped (SIGSTOP) the job still ends; continued, it evaluates the last checkpoint and
# exits by itself.
. "$(dirname "$0")/lib.sh"
# Long enough (about 4 s) for the evaluator, which looks once a second, to see several.
EXAMPLE_ARGS="--epochs 8 --examples 40000" launch_linear --ps 1 --evaluator --checkpoint-dir "$WORK/ck" --checkpoint-every 500
wait_line "$WORK/out" '\[evaluator:0\] evaluator: checkpoint at step' 60
E=$(pid_of "$WORK/out" evaluator:0)
kill -STOP "$E"
wait_line "$WORK/out" '\[chief:0\] chief:0 done: 16000 steps' 90
kill -CONT "$E"
wait $L; rc=$?
cat "$WORK/out" | grep -v '\] epoch\|checkpoint at step [0-9]*: /'
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -q '\[evaluator:0\] evaluator: checkpoint at step 16000: val_loss 0.0' "$WORK/out" || fail "the last checkpoint was not evaluated"
grep -q '"step":16000' "$WORK/ck/evaluator.jsonl" || fail "evaluator.jsonl lacks step 16000"
[ "$(grep -c '"event":"evaluation"' "$WORK/ck/evaluator.jsonl")" -ge 2 ] || fail "fewer than 2 evaluations written"
echo "PASS"
