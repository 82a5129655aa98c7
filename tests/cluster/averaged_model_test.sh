#!/usr/bin/env bash
# The main job averages its weights (use_ema): every read of the model gets the average.
# Across processes that means the workers' final pulls, the checkpoint's digest
# (`actortrain inspect --digest` reads the "average" slot) and the evaluator task (which
# restores the checkpoint into a one-process trainer) all see the same model as the
# chief's own evaluation after the last epoch.
. "$(dirname "$0")/lib.sh"
timeout 170 "$AT" launch --example fashion_mnist --ps 2 --workers 2 --evaluator --dir "$WORK/run" \
  --checkpoint-dir "$WORK/ck" --checkpoint-every 40 --timeout $((150 * SCALE)) \
  -- --limit 6000 --epochs 2 --verbose 2 >"$WORK/out" 2>&1
rc=$?
grep -v 'checkpoint at step [0-9]*: /' "$WORK/out"
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -q "use_ema=true" "$WORK/ck"/ckpt-*/manifest.json 2>/dev/null ||
  grep -rqs "use_ema=true" "$WORK/ck" || fail "the checkpoints do not record an averaging optimizer"
final_digests "$WORK/out" "$WORK/ck" worker:0 worker:1
# The chief's last val_accuracy, and the evaluator's of the final checkpoint.
chief=$(grep -o '\[chief:0\] Epoch 2/2 .*val_accuracy: [0-9.]*' "$WORK/out" | grep -o '[0-9.]*$')
[ -n "$chief" ] || fail "the chief printed no val_accuracy for epoch 2"
last=$(grep -o '"step":[0-9]*' "$WORK/ck/evaluator.jsonl" | tail -1 | cut -d: -f2)
steps=$(grep -o '\[chief:0\] chief:0 done: [0-9]* steps' "$WORK/out" | grep -o '[0-9]* steps' | cut -d' ' -f1)
[ "$last" = "$steps" ] || fail "the evaluator's last checkpoint is at step $last, the run ended at $steps"
ev=$(grep -o "evaluator: checkpoint at step $steps: .*val_accuracy [0-9.]*" "$WORK/out" | grep -o '[0-9.]*$')
[ -n "$ev" ] || fail "no evaluation of the final checkpoint"
python3 - "$chief" "$ev" <<'PY' || fail "the evaluator's val_accuracy $ev is not the chief's $chief"
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
sys.exit(0 if abs(a - b) < 5e-4 else 1)
PY
echo "chief val_accuracy $chief = evaluator's $ev of the checkpoint at step $steps"
echo "PASS"
