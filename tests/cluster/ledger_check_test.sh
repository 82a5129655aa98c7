#!/usr/bin/env bash
# `actortrain ledger check` can fail, and says why. A clean cluster run passes it; the
# same run with a defect planted in its processes (ACTORTRAIN_PLANT_DEFECT, test-only)
# does not, although the chief reports the usual step count: a worker that reports step
# 2 of pipeline 0 applied without pushing it (skip_step), and worker-side pipelines that
# serve other values at batch 2 (wrong_batch). Then the ledger files of the clean run,
# tampered with: one left out, a checksum changed, a step recorded twice, a foreign run
# added; and unreadable input (not JSON, a directory without ledgers, one file given
# twice) is refused with exit status 2, naming the file.
. "$(dirname "$0")/lib.sh"
export EXAMPLE_ARGS="--epochs 1 --examples 4000"
run() {  # $1: the run's name, its directory $WORK/$1; $2: the defect planted ("" none)
  ACTORTRAIN_PLANT_DEFECT=$2 timeout 120 "$AT" launch --example linear --ps 2 --workers 2 --dir "$WORK/$1" --timeout $((100 * SCALE)) \
    -- $EXAMPLE_ARGS >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "launch ($1) failed"; }
  grep -qF "[chief:0] chief:0 done: 200 steps" "$WORK/out" || { cat "$WORK/out"; fail "the chief ($1) did not say 200 steps"; }
}
check() {  # $1: the expected exit status, $2: a line the output must hold; the rest: ledger check's arguments
  local want=$1 line=$2; shift 2
  "$AT" ledger check --example linear "$@" -- $EXAMPLE_ARGS >"$WORK/check" 2>&1
  local rc=$?
  sed 's/^/    /' "$WORK/check"
  [ $rc -eq "$want" ] || fail "ledger check $* exited with $rc, not $want"
  grep -qF -- "$line" "$WORK/check" || fail "ledger check $*: no line '$line'"
}
echo "== clean run"
run run ""
check 0 "ledger check: exactly once" --cluster "$WORK/run/cluster.json" "$WORK/run/ledgers"

for defect in skip_step wrong_batch; do
  echo "== $defect planted"
  run $defect $defect
  grep -q "test-only defect $defect planted" "$WORK/out" || fail "the defect was not planted"
  case $defect in
    skip_step) want="pipeline 0: position(s) 2 never applied" ;;
    wrong_batch) want="pipeline 0: positions 0..99 were applied with batches other than the ones the data defines there" ;;
  esac
  check 1 "$want" --cluster "$WORK/$defect/cluster.json" "$WORK/$defect/ledgers"
done

L="$WORK/run/ledgers"
T="$WORK/tampered"
echo "== a ledger left out"
check 1 "variable dense/bias: no ledger of any of its partitions" --cluster "$WORK/run/cluster.json" "$L/ps-0.json"
echo "== a checksum changed"
mkdir -p "$T"
python3 - "$L/ps-0.json" "$T/ps-0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["partitions"][0]["ledger"]["segments"][0][4] ^= 1
json.dump(d, open(sys.argv[2], "w"))
PY
check 1 "were applied with batches other than the ones the data defines there" --cluster "$WORK/run/cluster.json" \
  "$T/ps-0.json" "$L/ps-1.json"
echo "== a step applied twice"
python3 - "$L/ps-0.json" "$T/ps-0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["partitions"][0]["ledger"]["segments"][0]
d["partitions"][0]["ledger"]["violations"].append([s[0], s[1], s[2], 12345])
json.dump(d, open(sys.argv[2], "w"))
PY
check 1 "applied again although its state held it" --cluster "$WORK/run/cluster.json" "$T/ps-0.json" "$L/ps-1.json"
echo "== a step of another run"
python3 - "$L/ps-0.json" "$T/ps-0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
segs = d["partitions"][0]["ledger"]["segments"]
segs.append([segs[-1][0] + 1, 0, 0, 1, 7])
json.dump(d, open(sys.argv[2], "w"))
PY
check 1 "run 2 of linear" --cluster "$WORK/run/cluster.json" "$T/ps-0.json" "$L/ps-1.json"
check 0 "another run: not checked" --cluster "$WORK/run/cluster.json" --run 1 "$T/ps-0.json" "$L/ps-1.json"
echo "== the wrong shape: 3 workers, not 2"
check 1 "violation:" --workers 3 "$L"

echo "== unreadable input"
echo '{"format": "actortrain.ledgers", "partitions": [' >"$T/broken.json"
check 2 "$T/broken.json: not JSON" --cluster "$WORK/run/cluster.json" "$T/broken.json"
mkdir -p "$T/empty"
check 2 "$T/empty: a directory with neither ledger files" --cluster "$WORK/run/cluster.json" "$T/empty"
check 2 "is in both" --cluster "$WORK/run/cluster.json" "$L" "$L/ps-0.json"
check 2 "no such file" --cluster "$WORK/run/cluster.json" "$WORK/nothing-here"
check 2 "which cluster?" "$L"
check 2 "unknown job 'nope'" --example nope --cluster "$WORK/run/cluster.json" "$L"
echo "PASS"
