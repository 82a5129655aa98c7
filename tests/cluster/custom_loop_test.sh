#!/usr/bin/env bash
# The distributed-dataset loop (TensorFlow's custom training loop) embedded and across
# processes: the example prints 'Epoch N, Loss: X' per pass, the loss falling to the noise
# floor, and
# says exactly once from the ps shards' ledgers; the registered linear job with --loop
# runs the same loop on a chief, 2 ps and 2 worker processes, and the ledger checker,
# reading the ps tasks' ledger files and the job's own dataset, says exactly once for
# every batch of both passes (200 steps).
. "$(dirname "$0")/lib.sh"
LOOP=${CUSTOM_LOOP:?set CUSTOM_LOOP to the custom_loop example}

timeout 120 "$LOOP" --epochs 3 >"$WORK/embedded.out" 2>&1 || { cat "$WORK/embedded.out"; fail "custom_loop failed"; }
cat "$WORK/embedded.out"
[ "$(grep -cE '^Epoch [1-3], Loss: [0-9]+\.[0-9]{4}$' "$WORK/embedded.out")" = 3 ] || fail "not three epoch lines"
python3 - "$WORK/embedded.out" <<'PY' || fail "the loss did not fall to the noise floor"
import re, sys
l = [float(m) for m in re.findall(r'^Epoch \d+, Loss: ([0-9.]+)$', open(sys.argv[1]).read(), re.M)]
# the planted model's noise has variance 0.01: the loss falls to it and stays there
sys.exit(0 if len(l) == 3 and l[0] > 2 * l[2] and l[2] < 0.02 else 1)
PY
grep -qE '^ledger check: exactly once, 300 steps$' "$WORK/embedded.out" || fail "the example's ledger check"

ARGS="--epochs 2 --examples 4000 --loop --clip-norm 5"
timeout 150 "$AT" launch --example linear --ps 2 --workers 2 --dir "$WORK/procs" --timeout $((120 * SCALE)) \
  -- $ARGS >"$WORK/procs.out" 2>&1 || { cat "$WORK/procs.out"; fail "launch with --loop failed"; }
grep -E 'Epoch [12], Loss' "$WORK/procs.out"
[ "$(grep -cE '^\[chief:0\] .*Epoch [12], Loss: [0-9.]+$' "$WORK/procs.out")" = 2 ] || { cat "$WORK/procs.out"; fail "the chief printed no two epoch lines"; }
grep -qF "[chief:0] chief:0 done: 400 steps" "$WORK/procs.out" || { cat "$WORK/procs.out"; fail "not 400 steps"; }
"$AT" ledger check --example linear --cluster "$WORK/procs/cluster.json" "$WORK/procs/ledgers" -- $ARGS \
  >"$WORK/check" 2>&1 || { cat "$WORK/check"; fail "ledger check of the loop failed"; }
grep -q "ledger check: exactly once" "$WORK/check" || { cat "$WORK/check"; fail "not exactly once"; }
echo "custom loop: embedded and across processes, exactly once"
