#!/usr/bin/env bash
# bench cluster's PyTorch baseline (tools/bench/pytorch_rpc_ps.py): one epoch with 2
# trainers and a server must train (test accuracy well above chance) and print its
# figures as JSON; bad flags and a missing data directory exit 2 naming what is wrong.
# Skipped (77) where Debian's python3-torch is not installed: tools/setup does not
# install it, as only the benchmark uses it.
source "$(dirname "$0")/lib.sh"
script=$(dirname "$0")/../../tools/bench/pytorch_rpc_ps.py
if ! /usr/bin/python3 -c 'import torch.distributed.rpc' 2>/dev/null; then
  echo "SKIP: no python3-torch (apt-get install python3-torch libopenblas0-pthread)"
  exit 77
fi

out=$(timeout 300 /usr/bin/python3 "$script" --epochs 1 --seed 3 2>"$tmp/err" | tail -1)
/usr/bin/python3 - "$out" <<'PY' || fail "one epoch: $out ($(tail -3 "$tmp/err"))"
import json, sys
j = json.loads(sys.argv[1])
assert j["epochs"] == 1 and j["trainers"] == 2 and j["threads"] == 1, j
assert j["samples_per_second"] > 0 and j["seconds"] > 0, j
assert abs(j["samples_per_second"] * j["seconds"] - 60000) < 1, j
assert j["accuracy"] > 0.7, j   # chance is 0.1; one epoch of Adam reaches ~0.8
assert j["updates"] == 2 * 235, j  # 30,000 images a trainer in batches of 128
assert 0 <= j["staleness"] <= 2, j  # two trainers: at most a few of the other's updates
PY

/usr/bin/python3 "$script" --epochs 0 >/dev/null 2>"$tmp/err"
rc=$?
((rc == 2)) && grep -q -- "--epochs" "$tmp/err" || fail "--epochs 0: exit $rc, $(cat "$tmp/err")"
/usr/bin/python3 "$script" --data-dir "$tmp/none" >/dev/null 2>"$tmp/err"
rc=$?
((rc == 2)) && grep -q "$tmp/none/train-images-idx3-ubyte.gz: no such file" "$tmp/err" ||
  fail "missing data: exit $rc, $(cat "$tmp/err")"
finish
