#!/usr/bin/env bash
# The benches' PyTorch baselines (tools/bench/pytorch_rpc_ps.py, pytorch_hogwild.py):
# two epochs with 2 trainers (and a server) must train (test accuracy well above
# chance), print their figures as JSON with a test accuracy per epoch taken at the
# epoch's update count (the last one the final model's), and refuse bad flags and a
# missing data directory with exit 2 naming what is wrong; a PyTorch on the reference
# BLAS is named as no fair baseline.
# Skipped (77) where Debian's python3-torch is not installed (tools/setup does not
# install it, as only the benchmark uses it) or runs on the reference BLAS.
source "$(dirname "$0")/lib.sh"
bench=$(dirname "$0")/../../tools/bench
script=$bench/pytorch_rpc_ps.py
if ! /usr/bin/python3 -c 'import torch.distributed.rpc' 2>/dev/null; then
  echo "SKIP: no python3-torch (apt-get install python3-torch libopenblas0-pthread)"
  exit 77
fi

# Which BLAS counts as unfair, read from a process's memory map.
/usr/bin/python3 - "$bench" "$tmp" <<'PY' || fail "blas_problem does not tell the reference BLAS from OpenBLAS"
import sys
sys.path.insert(0, sys.argv[1])
from fashion_mnist_torch import blas_problem
def maps(*libs):
    path = sys.argv[2] + "/maps"
    with open(path, "w") as f:
        for lib in libs:
            f.write(f"7f0000000000-7f0000001000 r-xp 00000000 08:01 42   {lib}\n")
    return path
ref = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0"
why = blas_problem(maps(ref, "/usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3.11.0"))
assert ref in why and "libopenblas0-pthread" in why, why
assert blas_problem(maps("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
                         "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so")) == ""
assert blas_problem(maps("/usr/lib/x86_64-linux-gnu/libc.so.6")) == ""  # no BLAS loaded: nothing to say
# The reference libblas beside OpenBLAS's LAPACK: the products are still the reference's.
why = blas_problem(maps(ref, "/usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack.so.3",
                        "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so"))
assert ref in why, why
PY
why=$(/usr/bin/python3 "$bench/fashion_mnist_torch.py" 2>"$tmp/err")
rc=$?
if ((rc == 3)); then
  echo "SKIP: $why"
  exit 77
fi
((rc == 0)) && [ -z "$why" ] || fail "fashion_mnist_torch.py as a program: exit $rc, $why $(tail -3 "$tmp/err")"

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
