#!/usr/bin/env bash
# Variable groups with optimizers of their own, embedded and across processes: the
# example trains the wide-and-deep model; then the registered ctr job
# made wide and deep (--wide: a weight per bucket trained by Adagrad on the ps tasks, the
# rest by Adam) with a clipping custom step (--clip-norm), on a chief, 2 ps and 2 worker
# tasks. The ledger checker (the ps tasks' ledger files and the job's own dataset) says
# every step was applied exactly once; the final checkpoint, read back by `actortrain
# inspect`, holds the wide table's partitions with Adagrad's slot and the others with
# Adam's; a task whose job gives the wide part another optimizer is refused by the job
# fingerprint.
. "$(dirname "$0")/lib.sh"
CTR=${CTR_EXAMPLE:?set CTR_EXAMPLE to the ctr example}

# Embedded, with real threads: the example trains the wide-and-deep model with the
# clipping step and comes close to the optimum's AUC.
timeout 120 "$CTR" --wide "adagrad(0.05)" --clip-norm 5 --epochs 1 --rows 500000 --test-rows 20000 --verbose 0 \
  >"$WORK/embedded.out" 2>&1 || { cat "$WORK/embedded.out"; fail "examples/ctr --wide failed"; }
cat "$WORK/embedded.out"
grep -qF "wide part adagrad(0.05), clipped to 5" "$WORK/embedded.out" || fail "the example did not train wide and deep"
python3 - "$WORK/embedded.out" <<'PY' || fail "the wide-and-deep model's test AUC is not within 0.03 of the optimum"
import re, sys
m = re.search(r'^\s+1\s+([0-9.]+)\s+\(([0-9.]+)\)', open(sys.argv[1]).read(), re.M)
sys.exit(0 if m and float(m.group(1)) > float(m.group(2)) - 0.03 else 1)
PY
ARGS="--epochs 1 --rows 4000 --test-rows 500 --batch 100 --buckets 1024 --dim 4 --wide adagrad(0.1) --clip-norm 5"

timeout 150 "$AT" launch --example ctr --ps 2 --workers 2 --dir "$WORK/run" --checkpoint-dir "$WORK/ckpt" \
  --timeout $((120 * SCALE)) -- $ARGS >"$WORK/run.out" 2>&1 || { cat "$WORK/run.out"; fail "launch failed"; }
grep -qF "[chief:0] chief:0 done: 40 steps" "$WORK/run.out" || { cat "$WORK/run.out"; fail "not 40 steps"; }
"$AT" ledger check --example ctr --cluster "$WORK/run/cluster.json" "$WORK/run/ledgers" -- $ARGS \
  >"$WORK/check" 2>&1 || { cat "$WORK/check"; fail "ledger check failed"; }
grep -q "ledger check: exactly once" "$WORK/check" || { cat "$WORK/check"; fail "not exactly once"; }

"$AT" inspect "$WORK/ckpt" >"$WORK/inspect" 2>&1 || { cat "$WORK/inspect"; fail "inspect failed"; }
grep -F "wide: adagrad(learning_rate=0.1" "$WORK/inspect" >/dev/null || { cat "$WORK/inspect"; fail "no wide optimizer in the manifest"; }
python3 - "$WORK/inspect" <<'PY' || { cat "$WORK/inspect"; fail "the partitions' slots are not their optimizers'"; }
import re, sys
slots, cur = {}, None
for line in open(sys.argv[1]).read().splitlines():
    m = re.match(r'^  (\S+)\s+\[', line)  # a variable: "  NAME  [rows x cols] ..."
    if m:
        cur = m.group(1)
        slots[cur] = set()
        continue
    m = re.match(r'^    part \d+ .* slots (.+)$', line)
    if cur and m:
        slots[cur] |= {x.strip() for x in m.group(1).split(',')}
print({k: sorted(v) for k, v in slots.items()})
sys.exit(0 if slots.get('wide_embedding/embeddings') == {'accumulator'} and slots.get('dense/kernel') == {'m', 'v'} else 1)
PY

# A worker whose wide part has another optimizer does not join: the fingerprint names it.
read -r P0 P1 <<<"$(free_ports 2 | tr '\n' ' ')"
cat >"$WORK/c.json" <<JSON
{"cluster": {"worker": ["127.0.0.1:$P0", "127.0.0.1:$P1"]},
 "secret": "$SECRET", "timeouts": {"connect_ms": 4000, "heartbeat_ms": 200, "connection_ms": 2000}}
JSON
SMALL="--rows 400 --test-rows 100 --buckets 64 --dim 2"
timeout 60 "$AT" node --example ctr --cluster "$WORK/c.json" --task worker:0 -- $SMALL --wide "adagrad(0.1)" >"$WORK/a" 2>&1 &
a=$!
timeout 60 "$AT" node --example ctr --cluster "$WORK/c.json" --task worker:1 -- $SMALL --wide "sgd(0.1)" >"$WORK/b" 2>&1
rb=$?
wait $a
cat "$WORK/b"; grep -q "optimizer" "$WORK/a" "$WORK/b" || { cat "$WORK/a" "$WORK/b"; fail "the refusal does not name the optimizer"; }
[ $rb -ne 0 ] || { cat "$WORK/b"; fail "the worker with another wide optimizer succeeded"; }
echo "wide and deep across processes: exactly once, each partition with its optimizer's slots"
