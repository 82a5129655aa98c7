#!/usr/bin/env bash
# The benches' PyTorch baselines (tools/bench/pytorch_rpc_ps.py, pytorch_hogwild.py):
# two epochs with 2 trainers (and a server) must train (test accuracy well above
# chance), print their figures as JSON with a test accuracy per epoch taken at the
# epoch's update count (the last one the final model's), and refuse bad flags and a
# missing data directory with exit 2 naming what is wrong.
# Skipped (77) where Debian's python3-torch is not installed: tools/setup does not
# install it, as only the benchmark uses it.
source "$(dirname "$0")/lib.sh"
bench=$(dirname "$0")/../../tools/bench
script=$bench/pytorch_rpc_ps.py
if ! /usr/bin/python3 -c 'import torch.distributed.rpc' 2>/dev/null; then
  echo "SKIP: no python3-torch (apt-get install python3-torch libopenblas0-pthread)"
  exit 77
fi

out=$(timeout 300 /usr/bin/python3 "$script" --epochs 2 --seed 3 2>"$tmp/err" | tail -1)
/usr/bin/python3 - "$out" <<'PY' || fail "rpc, two epochs: $out ($(tail -3 "$tmp/err"))"
import json, sys
j = json.loads(sys.argv[1])
assert j["epochs"] == 2 and j["trainers"] == 2 and j["threads"] == 1, j
assert j["samples_per_second"] > 0 and j["seconds"] > 0, j
assert abs(j["samples_per_second"] * j["seconds"] - 120000) < 1, j
assert j["accuracy"] > 0.7, j   # chance is 0.1; one epoch of Adam reaches ~0.8
assert j["updates"] == 2 * 2 * 235, j  # 30,000 images a trainer in batches of 128
assert 0 <= j["staleness"] <= 2, j  # two trainers: at most a few of the other's updates
at = j["accuracy_at"]
assert len(at) == 2 and 0 < at[0][0] < at[1][0] <= j["seconds"], at
assert at[0][1] > 0.7 and at[1][1] == j["accuracy"], at  # the last snapshot is the final model
PY

out=$(timeout 300 /usr/bin/python3 "$bench/pytorch_hogwild.py" --epochs 2 --seed 3 2>"$tmp/err" | tail -1)
/usr/bin/python3 - "$out" <<'PY' || fail "hogwild, two epochs: $out ($(tail -3 "$tmp/err"))"
import json, sys
j = json.loads(sys.argv[1])
assert j["epochs"] == 2 and j["trainers"] == 2 and j["threads"] == 1, j
assert abs(j["samples_per_second"] * j["seconds"] - 120000) < 1, j
assert j["updates"] == 2 * 2 * 235, j
assert j["accuracy"] > 0.7 and "staleness" not in j, j  # Hogwild has no versions to count
at = j["accuracy_at"]
assert len(at) == 2 and 0 < at[0][0] <= at[1][0] <= j["seconds"] and at[0][1] > 0.7, at
PY

/usr/bin/python3 "$script" --epochs 0 >/dev/null 2>"$tmp/err"
rc=$?
((rc == 2)) && grep -q -- "--epochs" "$tmp/err" || fail "--epochs 0: exit $rc, $(cat "$tmp/err")"
/usr/bin/python3 "$bench/pytorch_hogwild.py" --lr 0 >/dev/null 2>"$tmp/err"
rc=$?
((rc == 2)) && grep -q -- "--lr must be > 0" "$tmp/err" || fail "--lr 0: exit $rc, $(cat "$tmp/err")"
/usr/bin/python3 "$script" --data-dir "$tmp/none" >/dev/null 2>"$tmp/err"
rc=$?
((rc == 2)) && grep -q "$tmp/none/train-images-idx3-ubyte.gz: no such file" "$tmp/err" ||
  fail "missing data: exit $rc, $(cat "$tmp/err")"
finish
