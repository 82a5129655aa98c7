#!/usr/bin/env bash
# A custom training step across processes (cluster_spec::train_step, here the registered
# jobs' --clip-norm): every task's job carries the function, the workers run it, and the
# ps shards' ledgers say each step was applied exactly once; clipping to a tiny norm
# really slows the descent (the history's loss stays far above the unclipped run's); a
# task whose job has another step is refused by the job fingerprint, naming it.
. "$(dirname "$0")/lib.sh"
ARGS="--epochs 1 --examples 4000"
run() {  # $1: name; the rest: the job's flags
  local name=$1; shift
  timeout 120 "$AT" launch --example linear --ps 2 --workers 2 --dir "$WORK/$name" --timeout $((100 * SCALE)) \
    -- $ARGS "$@" >"$WORK/$name.out" 2>&1 || { cat "$WORK/$name.out"; fail "launch ($name) failed"; }
  grep -qF "[chief:0] chief:0 done: 200 steps" "$WORK/$name.out" || { cat "$WORK/$name.out"; fail "$name: not 200 steps"; }
}
loss() { grep -oE '^\[chief:0\] epoch 1/1: .*' "$WORK/$1.out" | grep -oE ' loss [0-9.e+-]+' | awk '{print $2}'; }

run plain
run clipped --clip-norm 0.01
"$AT" ledger check --example linear --cluster "$WORK/clipped/cluster.json" "$WORK/clipped/ledgers" -- $ARGS --clip-norm 0.01 \
  >"$WORK/check" 2>&1 || { cat "$WORK/check"; fail "ledger check of the clipped run failed"; }
grep -q "ledger check: exactly once" "$WORK/check" || { cat "$WORK/check"; fail "not exactly once"; }
lp=$(loss plain); lc=$(loss clipped)
echo "loss after one epoch: plain $lp, clipped to norm 0.01: $lc"
[ -n "$lp" ] && [ -n "$lc" ] || fail "no loss in the histories"
python3 -c "import sys; sys.exit(0 if float('$lc') > 10 * float('$lp') else 1)" ||
  fail "the clipped run's loss $lc is not far above the plain run's $lp: the step did not run"

# Another step on one worker: refused by the fingerprint, naming the train step.
read -r P0 P1 <<<"$(free_ports 2 | tr '\n' ' ')"
cat >"$WORK/c.json" <<JSON
{"cluster": {"worker": ["127.0.0.1:$P0", "127.0.0.1:$P1"]},
 "secret": "$SECRET", "timeouts": {"connect_ms": 4000, "heartbeat_ms": 200, "connection_ms": 2000}}
JSON
timeout 60 "$AT" node --example linear --cluster "$WORK/c.json" --task worker:0 -- --clip-norm 1 >"$WORK/a" 2>&1 &
a=$!
timeout 60 "$AT" node --example linear --cluster "$WORK/c.json" --task worker:1 -- --clip-norm 2 >"$WORK/b" 2>&1
rb=$?
wait $a
cat "$WORK/b"
[ $rb -eq 1 ] || fail "the worker with another step exited with $rb, not 1"
grep -q "belongs to another job" "$WORK/b" || fail "no fingerprint message"
grep -q "train step 'clip_by_global_norm(1)' here, 'clip_by_global_norm(2)' there" "$WORK/b" ||
  grep -q "train step 'clip_by_global_norm(2)' here, 'clip_by_global_norm(1)' there" "$WORK/b" ||
  fail "the message does not name the train steps"
echo "PASS"
