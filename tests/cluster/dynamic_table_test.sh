#!/usr/bin/env bash
# Tables keyed by the raw id across processes: the registered ctr job with --dynamic on a
# chief, 2 ps and 2 worker tasks, its ids 64-bit hashes in [0, 2^40) (--id-bits 40),
# which travel raw from the chief's input pipelines to the workers and the shards. Each
# ps task creates the rows of the ids it holds (both hold some), the ledger checker
# (which draws the batches again and digests their ids) says every step was applied
# exactly once, and the model learns. With an admission threshold no id reaches, no row is created and the
# gradients are dropped, counted by each ps task. With a checkpoint directory the final
# checkpoint holds every row the ps tasks hold (`actortrain inspect`). kill -9 of a ps
# task rolls every shard back to the newest checkpoint, an increment over the one before
# (checkpoint_full_every), read back through its chain (its manifest on disk says it is
# one): still exactly once, and the final checkpoint again holds what the shards hold.
. "$(dirname "$0")/lib.sh"

ARGS="--epochs 2 --rows 4000 --test-rows 1000 --batch 100 --dim 4 --dynamic"
timeout 150 "$AT" launch --example ctr --ps 2 --workers 2 --dir "$WORK/run" --timeout $((120 * SCALE)) -- $ARGS \
  --id-bits 40 >"$WORK/run.out" 2>&1 || { cat "$WORK/run.out"; fail "launch failed"; }
grep -qF "[chief:0] chief:0 done: 80 steps" "$WORK/run.out" || { cat "$WORK/run.out"; fail "not 80 steps"; }
"$AT" ledger check --example ctr --cluster "$WORK/run/cluster.json" "$WORK/run/ledgers" -- $ARGS --id-bits 40 \
  >"$WORK/check" 2>&1 || { cat "$WORK/check"; fail "ledger check failed"; }
grep -q "ledger check: exactly once" "$WORK/check" || { cat "$WORK/check"; fail "not exactly once"; }
python3 - "$WORK/run.out" <<'PY' || { cat "$WORK/run.out"; fail "the ps tasks' tables are not as expected"; }
import re, sys
text = open(sys.argv[1]).read()
rows = {int(m.group(1)): int(m.group(2)) for m in
        re.finditer(r'ps:(\d): table embedding/embeddings partition \d+: (\d+) rows', text)}
print("rows per ps task:", rows)
# Both tasks hold rows; together at most the 3,600 category values, and most of them.
ok = sorted(rows) == [0, 1] and all(n > 0 for n in rows.values()) and 2000 < sum(rows.values()) <= 3600
sys.exit(0 if ok else 1)
PY

# Admission after more reads than the run makes: no row anywhere, every gradient dropped.
timeout 150 "$AT" launch --example ctr --ps 2 --workers 2 --dir "$WORK/run2" --timeout $((120 * SCALE)) -- $ARGS \
  --admit-after 100000 >"$WORK/run2.out" 2>&1 || { cat "$WORK/run2.out"; fail "launch with admission failed"; }
python3 - "$WORK/run2.out" <<'PY' || { cat "$WORK/run2.out"; fail "admission did not hold the rows back"; }
import re, sys
text = open(sys.argv[1]).read()
found = re.findall(r'table embedding/embeddings partition \d+: (\d+) rows, .* waiting (\d+), unadmitted reads (\d+), '
                   r'dropped gradients (\d+)', text)
print(found)
sys.exit(0 if len(found) == 2 and all(int(r) == 0 and int(w) > 0 and int(u) > 0 and int(d) > 0
                                      for r, w, u, d in found) else 1)
PY

# Checkpointed: the final checkpoint holds both ps tasks' rows, as many as they report.
timeout 150 "$AT" launch --example ctr --ps 2 --workers 2 --dir "$WORK/run3" --checkpoint-dir "$WORK/ckpt" \
  --timeout $((120 * SCALE)) -- $ARGS >"$WORK/run3.out" 2>&1 || { cat "$WORK/run3.out"; fail "launch with checkpoints failed"; }
"$AT" inspect "$WORK/ckpt" >"$WORK/inspect" 2>&1 || { cat "$WORK/inspect"; fail "inspect failed"; }
python3 - "$WORK/run3.out" "$WORK/inspect" <<'PY' || { cat "$WORK/run3.out" "$WORK/inspect"; fail "the checkpoint does not hold the shards' rows"; }
import re, sys
run, ins = open(sys.argv[1]).read(), open(sys.argv[2]).read()
held = sum(int(n) for n in re.findall(r'table embedding/embeddings partition \d+: (\d+) rows', run))
m = re.search(r'embedding/embeddings\s+\[0 x 4\] dynamic \(rows keyed by id\)\s+\d+ parameters\s+2 partitions', ins)
saved = sum(int(n) for n in re.findall(r'table\s+(\d+) rows by id', ins))
print("held", held, "saved", saved)
sys.exit(0 if m and held > 0 and saved == held else 1)
PY
# kill -9 of ps:1 mid-run: the restarted task and the other roll back to the newest
# checkpoint, an increment (its manifest names a base); still exactly once.
KARGS="--epochs 2 --rows 40000 --test-rows 1000 --batch 100 --dim 4 --dynamic --id-bits 40"
# Every checkpoint is kept (--checkpoint-keep), so the one the roll-back read is still on
# disk at the end to be looked at.
timeout 170 "$AT" launch --example ctr --ps 2 --workers 2 --restart-failed --dir "$WORK/run4" --checkpoint-dir "$WORK/ck4" \
  --checkpoint-every 100 --checkpoint-keep 1000 --timeout $((150 * SCALE)) -- $KARGS --metrics "$WORK/m4.jsonl" --verbose 2 >"$WORK/run4.out" 2>&1 &
L=$!
wait_steps "$WORK/m4.jsonl" 350 60
kill -9 "$(pid_of "$WORK/run4.out" ps:1)"
wait $L || { cat "$WORK/run4.out"; fail "launch with a ps killed failed"; }
grep -qF "[chief:0] chief:0 done: 800 steps" "$WORK/run4.out" || { cat "$WORK/run4.out"; fail "not 800 steps"; }
python3 - "$WORK/m4.jsonl" "$WORK/ck4" <<'PY' || { cat "$WORK/run4.out"; ls "$WORK/ck4"; fail "the roll-back did not read an incremental checkpoint"; }
import json, os, sys
events = [json.loads(line) for line in open(sys.argv[1])]
# The step of the checkpoint each roll-back restored (the chief's event), and what that
# checkpoint is, read from its manifest on disk, not from what the chief says it wrote.
restored = [e["step"] for e in events if e.get("event") == "ps_restored"]
manifests = {}
for d in os.listdir(sys.argv[2]):
    path = os.path.join(sys.argv[2], d, "manifest.json")
    if os.path.exists(path):
        m = json.load(open(path))
        manifests[m["step"]] = m
def bases(m):
    return {p["base"] for v in m["variables"] for p in v["partitions"] if "base" in p}
print("restored", restored, "increments on disk", sorted(s for s, m in manifests.items() if bases(m)))
# Each restored checkpoint is an increment (format 2, its table's partitions name a base
# that is on disk too).
ok = bool(restored) and all(s in manifests and manifests[s]["format_version"] == 2 and bases(manifests[s])
                            and all(b in manifests for b in bases(manifests[s])) for s in restored)
sys.exit(0 if ok else 1)
PY
"$AT" ledger check --example ctr --cluster "$WORK/run4/cluster.json" "$WORK/run4/ledgers" -- $KARGS \
  >"$WORK/check4" 2>&1 || { cat "$WORK/check4"; fail "ledger check after the roll-back failed"; }
grep -q "ledger check: exactly once" "$WORK/check4" || { cat "$WORK/check4"; fail "not exactly once after the roll-back"; }
"$AT" inspect "$WORK/ck4" >"$WORK/inspect4" 2>&1 || { cat "$WORK/inspect4"; fail "inspect failed"; }
python3 - "$WORK/run4.out" "$WORK/inspect4" <<'PY' || { cat "$WORK/inspect4"; fail "the final checkpoint does not hold the shards' rows"; }
import re, sys
run, ins = open(sys.argv[1]).read(), open(sys.argv[2]).read()
# The restarted ps:1 reports once, at the end; ps:0 too.
held = sum(int(n) for n in re.findall(r'table embedding/embeddings partition \d+: (\d+) rows', run))
saved = sum(int(n) for n in re.findall(r'table\s+(\d+) rows by id', ins))
print("held", held, "saved", saved)
sys.exit(0 if held > 0 and saved == held else 1)
PY
echo "dynamic tables across processes: rows on both ps tasks, exactly once, admission holds rows back, checkpointed, rolled back to an increment"
