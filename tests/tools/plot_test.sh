#!/usr/bin/env bash
# actortrain plot against a recorded run: a 2-epoch fashion_mnist run that loses a worker
# and a ps shard writes its metrics; the command must write every figure as a PNG, and
# the data it plotted must be the metrics' own numbers (checked here independently with
# python). A line cut short is skipped and counted; a run killed in its first epoch and
# two runs without an accuracy metric appended to one file are plotted (each run from its
# own data, figures without data left out, saying why); a malformed file is refused
# naming the line; bad flags exit with 2.
#   ACTORTRAIN=build/tools/actortrain EXAMPLE=build/examples/survive_faults bash plot_test.sh
. "$(dirname "$0")/lib.sh"
command -v gnuplot >/dev/null || { echo "FAIL: gnuplot is not installed (tools/setup installs gnuplot-nox)"; exit 1; }

M="$tmp/m.jsonl"
timeout 120 "$EXAMPLE" --epochs 2 --verbose 0 --metrics "$M" --checkpoint-dir "$tmp/ck" --checkpoint-every 200 \
  --kill-worker-at 300 --kill-ps-at 500 >"$tmp/run" 2>&1 || { cat "$tmp/run"; echo "FAIL: the recorded run failed"; exit 1; }
# The run killed mid-write: half a line at the end.
cp "$M" "$tmp/cut.jsonl"
printf '{"epoch":1,"event":"step","examples":128,"lo' >>"$tmp/cut.jsonl"

timeout 120 "$ACTORTRAIN" plot "$tmp/cut.jsonl" --out "$tmp/fig" >"$tmp/out" 2>&1
status=$?
cat "$tmp/out"
[ $status -eq 0 ] || fail "plot exited with $status"
grep -q "skipped 1 partial line(s)" "$tmp/out" || fail "the cut line was not counted"
grep -q "2 epochs, 2 failures, 2 recoveries" "$tmp/out" || fail "not 2 epochs, 2 failures (worker, ps), 2 recoveries"
for f in epochs steps throughput staleness timeline; do
  [ -s "$tmp/fig/$f.png" ] || { fail "$f.png missing"; continue; }
  [ "$(head -c 8 "$tmp/fig/$f.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$f.png is not a PNG"
  [ -s "$tmp/fig/$f.dat" ] && [ -s "$tmp/fig/$f.gp" ] || fail "$f: no data or script beside the PNG"
done

# The plotted numbers are the metrics' numbers.
python3 - "$M" "$tmp/fig" <<'PY' || fail "the plotted data differ from the metrics (above)"
import collections, json, math, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
fig = sys.argv[2]
def rows(name):
    return [l.split() for l in open(f"{fig}/{name}.dat") if not l.startswith("#")]
def close(a, b):
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-6 * max(1.0, abs(b))
bad = []
epochs = [e for e in events if e["event"] == "epoch"]
er = rows("epochs")
if len(er) != len(epochs): bad.append(f"epochs: {len(er)} rows for {len(epochs)} epochs")
for r, e in zip(er, epochs):
    v = e["values"]
    want = [e["epoch"] + 1, v["loss"], v["accuracy"], v["val_loss"], v["val_accuracy"]]
    if not all(close(float(x), y) for x, y in zip(r, want)): bad.append(f"epochs row {r} != {want}")
steps = [e for e in events if e["event"] == "step"]
sr = rows("steps")
if len(sr) != len(steps): bad.append(f"steps: {len(sr)} rows for {len(steps)} steps")
if any(not close(float(r[2]), s["loss"]) for r, s in zip(sr, steps)): bad.append("steps: a loss differs")
hist = collections.Counter(s["staleness"] for s in steps)
st = {int(r[0]): int(r[1]) for r in rows("staleness")}
if st != dict(hist): bad.append(f"staleness {st} != {dict(hist)}")
# Throughput: samples/s x bin width adds up to each worker's examples.
head = open(f"{fig}/throughput.dat").readline().split()
width = float(head[3])
workers = [int(w) for w in head[head.index("worker") + 1:]]
tr = rows("throughput")
t0, t1 = min(s["time"] for s in steps), max(s["time"] for s in steps)
if not close(len(tr) * width, t1 - t0): bad.append(f"throughput: {len(tr)} bins of {width} s do not tile {t0}..{t1}")
for k, w in enumerate(workers):
    total = sum(float(r[k + 1]) * width for r in tr)
    want = sum(s["examples"] for s in steps if s["worker"] == w)
    if abs(total - want) > 1e-3 * want: bad.append(f"throughput: worker {w} adds up to {total}, not {want}")
# The time line marks the failures and recoveries at their times.
marks = [l.split() for l in open(f"{fig}/timeline_events.dat") if not l.startswith("#")]
for kind, cls in (("worker_lost", "failure"), ("ps_lost", "failure"), ("ps_restored", "recovery")):
    times = [e["time"] for e in events if e["event"] == kind]
    got = [float(m[0]) for m in marks if m[1] == cls and m[3].startswith(kind)]
    if not times or len(got) != len(times) or not all(close(a, b) for a, b in zip(got, times)):
        bad.append(f"timeline: {kind} at {times}, marked at {got}")
restored = [e for e in events if e["event"] == "ps_restored"][0]
mark = [m for m in marks if m[3].startswith("ps_restored")][0]
if int(mark[2]) != restored["step"]: bad.append(f"timeline: the restore does not roll back to step {restored['step']}")
for b in bad: print(b)
sys.exit(1 if bad else 0)
PY

# The recorded run ended with its run_done line, and every line carries its run's id.
python3 - "$M" <<'PY' || fail "run_done or the run ids are missing (above)"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ids = {e.get("id") for e in events if e.get("run", 0) > 0}
if len(ids) != 1 or None in ids: print(f"ids: {ids}"); sys.exit(1)
if events[-1]["event"] != "run_done" or events[-1]["failed"]: print(f"last line: {events[-1]}"); sys.exit(1)
if any("wall" not in e for e in events): print("a line without wall-clock time"); sys.exit(1)
PY

# A run killed in its first epoch (the file cut before its first epoch ended): no epochs
# figure (an older one in the directory is removed), every other figure from its steps.
awk '/"event":"epoch"/ {exit} {print}' "$M" >"$tmp/first.jsonl"
mkdir -p "$tmp/fk" && cp "$tmp/fig/epochs.png" "$tmp/fk/epochs.png"
"$ACTORTRAIN" plot "$tmp/first.jsonl" --out "$tmp/fk" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "a run killed in its first epoch: plot failed"; }
cat "$tmp/out"
grep -q "epochs: not drawn: no epoch ended in this run" "$tmp/out" || fail "the missing epochs figure was not explained"
[ ! -e "$tmp/fk/epochs.png" ] || fail "an older epochs.png was left beside the new figures"
grep -q "no run_done line: killed, or still running" "$tmp/out" || fail "the killed run was not said to be unfinished"
[ "$(grep -vc '^#' "$tmp/fk/steps.dat")" -eq "$(grep -c '"event":"step"' "$tmp/first.jsonl")" ] ||
  fail "a run killed in its first epoch: steps.dat does not hold its steps"
for f in steps throughput staleness timeline; do [ -s "$tmp/fk/$f.png" ] || fail "killed run: $f.png missing"; done

# Two runs of a job without an accuracy metric appended to one file: told apart by their
# ids, each drawn in a directory of its own with the loss panel only, from its own data.
L="$tmp/lin.jsonl"
for k in 1 2; do
  timeout 120 "$ACTORTRAIN" launch --example linear --ps 1 --workers 2 --dir "$tmp/lin$k" -- --epochs $k \
    --examples 2000 --verbose 0 --metrics "$L" >"$tmp/lin$k.out" 2>&1 || { cat "$tmp/lin$k.out"; fail "linear run $k failed"; }
done
"$ACTORTRAIN" plot "$L" --out "$tmp/lf" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "two appended runs: plot failed"; }
cat "$tmp/out"
grep -q "2 runs, each drawn in its own directory" "$tmp/out" || fail "the two runs were not told apart"
[ "$(grep -c "no accuracy metric: the loss panel only" "$tmp/out")" -eq 2 ] || fail "the accuracy panel was not left out"
python3 - "$L" "$tmp/lf" <<'PY' || fail "the appended runs' figures do not hold their own data (above)"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
order = []
for e in events:
    if e.get("run", 0) > 0 and e["id"] not in order: order.append(e["id"])
bad = []
if len(order) != 2: bad.append(f"{len(order)} run ids, not 2")
for i, rid in enumerate(order, 1):
    mine = [e for e in events if e.get("id") == rid]
    steps = sum(e["event"] == "step" for e in mine)
    epochs = [e for e in mine if e["event"] == "epoch"]
    rows = lambda n: [l for l in open(f"{sys.argv[2]}/run-{i}/{n}.dat") if not l.startswith("#")]
    if len(rows("steps")) != steps: bad.append(f"run {i}: {len(rows('steps'))} step rows for {steps} steps")
    if len(rows("epochs")) != len(epochs) or len(epochs) != i: bad.append(f"run {i}: {len(rows('epochs'))} epoch rows, {len(epochs)} epochs")
    for r, e in zip(rows("epochs"), epochs):
        if abs(float(r.split()[1]) - e["values"]["loss"]) > 1e-6 * max(1, abs(e["values"]["loss"])): bad.append(f"run {i}: epoch loss {r}")
    if mine[-1]["event"] != "run_done" or mine[-1]["failed"]: bad.append(f"run {i} does not end with a run_done: {mine[-1]}")
for b in bad: print(b)
sys.exit(1 if bad else 0)
PY

# A malformed line in the middle is an error naming the file and line.
{ head -n 2 "$M"; echo 'not json at all'; tail -n 2 "$M"; } >"$tmp/bad.jsonl"
"$ACTORTRAIN" plot "$tmp/bad.jsonl" --out "$tmp/fig2" >"$tmp/out" 2>&1
status=$?
[ $status -eq 1 ] || fail "a malformed file: exit $status, not 1"
grep -q "bad.jsonl:3: not JSON: not json at all" "$tmp/out" || fail "a malformed file: $(cat "$tmp/out")"
echo '[1, 2]' >"$tmp/array.jsonl"
"$ACTORTRAIN" plot "$tmp/array.jsonl" --out "$tmp/fig2" >"$tmp/out" 2>&1
grep -q "array.jsonl:1: not a metrics event" "$tmp/out" || fail "a JSON array: $(cat "$tmp/out")"
: >"$tmp/empty.jsonl"
"$ACTORTRAIN" plot "$tmp/empty.jsonl" --out "$tmp/fig2" >"$tmp/out" 2>&1
grep -q "no metrics events in it" "$tmp/out" || fail "an empty file: $(cat "$tmp/out")"
"$ACTORTRAIN" plot "$tmp/missing.jsonl" --out "$tmp/fig2" >"$tmp/out" 2>&1
[ $? -eq 1 ] && grep -q "cannot read .*missing.jsonl" "$tmp/out" || fail "a missing file: $(cat "$tmp/out")"
"$ACTORTRAIN" plot "$M" >"$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q -- "--out DIR is required" "$tmp/out" || fail "no --out: $(cat "$tmp/out")"
"$ACTORTRAIN" plot "$M" --out "$tmp/fig3" --smooth 0 >"$tmp/out" 2>&1
[ $? -eq 2 ] || fail "--smooth 0 was accepted"

finish
