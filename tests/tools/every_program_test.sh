#!/usr/bin/env bash
# Every program of the project speaks the same command line (cli/flags.hpp): --help
# prints to stdout and exits 0, an unknown flag exits 2 naming it, and a value out of
# range exits 2 naming the flag and the range.
#   every_program_test.sh ACTORTRAIN EXAMPLES_DIR
set -u
AT=$1 EX=$2
bad=0
fail() { echo "FAIL: $*"; bad=1; }
check() {  # check NAME COMMAND...: --help and --no-such-flag
  local name=$1; shift
  local out rc
  out=$(timeout 60 "$@" --help 2>/dev/null); rc=$?
  [ $rc -eq 0 ] || fail "$name --help exited $rc"
  [ -n "$out" ] || fail "$name --help printed nothing on stdout"
  out=$(timeout 60 "$@" --no-such-flag 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || fail "$name --no-such-flag exited $rc, not 2"
  echo "$out" | grep -q -- "--no-such-flag" || fail "$name: the error does not name --no-such-flag: $out"
  echo "ok: $name"
}
for sub in "bench fashion-mnist" "bench consistency" "bench sparse" "bench transport" "bench cluster" soak node \
           launch inspect "ledger check" plot status "scale predict" "scale calibrate" "scale validate"; do
  # shellcheck disable=SC2086
  check "actortrain $sub" "$AT" $sub
done
for e in fashion_mnist_local linear_regression fashion_mnist embed_in_app linear_regression_cluster ctr \
         callbacks survive_faults checkpoints simulated_faults fashion_mnist_node; do
  check "$e" "$EX/$e"
done
# Out of range: the flag and the range are named.
range_case() {  # range_case TEXT COMMAND...
  local want=$1; shift
  local out rc
  out=$(timeout 60 "$@" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || fail "$* exited $rc, not 2"
  echo "$out" | grep -qF -- "$want" || fail "$*: '$out' does not say '$want'"
}
range_case "--workers: '0' is out of range (1 to 256)" "$AT" launch --example linear --workers 0
range_case "--checkpoint-keep needs --checkpoint-dir" "$AT" launch --example linear --checkpoint-keep 5
range_case "--threads: '0' is out of range (1 to 256)" "$EX/fashion_mnist_node" --threads 0
range_case "--plans: '0' is out of range (1 to 100000)" "$EX/simulated_faults" --plans 0
[ $bad -eq 0 ] && echo PASS
exit $bad
