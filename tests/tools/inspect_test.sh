#!/usr/bin/env bash
# actortrain inspect against real checkpoints: a one-epoch fashion_mnist run writes a few,
# then the command must print them truthfully and refuse corrupt or missing ones.
#   ACTORTRAIN=build/tools/actortrain EXAMPLE=build/examples/checkpoints bash inspect_test.sh
. "$(dirname "$0")/lib.sh"


# Runs inspect with the given arguments; leaves stdout, stderr and the exit status in
# $tmp/out, $tmp/err and $status.
inspect() {
  "$ACTORTRAIN" inspect "$@" >"$tmp/out" 2>"$tmp/err"
  status=$?
}

expect_status() {
  [[ $status == "$1" ]] || fail "$2: exit status $status, expected $1; stderr: $(cat "$tmp/err")"
}

expect_out() {
  grep -qE -- "$1" "$tmp/out" || fail "$2: stdout lacks /$1/"
}

expect_err() {
  grep -qE -- "$1" "$tmp/err" || fail "$2: stderr lacks /$1/ (got: $(cat "$tmp/err"))"
}

root=$tmp/ck
"$EXAMPLE" --epochs 1 --checkpoint-dir "$root" --checkpoint-every 200 --verbose 0 --data-dir "$data_dir" \
  >"$tmp/train.log" 2>&1 || { echo "FAIL: fashion_mnist: $(cat "$tmp/train.log")"; exit 1; }
newest=$(cd "$root" && ls -d ckpt-* | sort | tail -1)
[[ -n $newest ]] || { echo "FAIL: fashion_mnist wrote no checkpoint under $root"; exit 1; }
count=$(cd "$root" && ls -d ckpt-* | wc -l)
newest_step=$((10#${newest#ckpt-}))

# The same command again would start a second run over the first one's checkpoints: it
# is refused before training, naming --resume.
status=0
"$EXAMPLE" --epochs 1 --checkpoint-dir "$root" --verbose 0 --data-dir "$data_dir" >"$tmp/out" 2>"$tmp/err" || status=$?
expect_status 2 "the example re-run on its own checkpoints"
expect_err "add --resume" "the example re-run on its own checkpoints"

# The root: the newest in full, every committed one listed.
inspect "$root"
expect_status 0 "inspect ROOT"
expect_out "^step $newest_step\$" "inspect ROOT prints the newest's step"
# The coordinator records the shards' optimizer and its current hyperparameters.
expect_out "^optimizer: adam\(learning_rate=0.001" "inspect prints the checkpoint's optimizer"
expect_out "learning_rate 0.001" "inspect prints the hyperparameters"
expect_out "^checkpoint $root/$newest\$" "inspect ROOT names the newest"
expect_out "$count committed checkpoints" "inspect ROOT counts the checkpoints"
for var in "dense/kernel  \[784 x 256\]" "dense/bias  \[1 x 256\]" "dense_1/kernel  \[256 x 128\]" \
           "dense_1/bias  \[1 x 128\]" "dense_2/kernel  \[128 x 10\]" "dense_2/bias  \[1 x 10\]"; do
  expect_out "^  $var" "inspect ROOT lists $var"
done
expect_out "part 0  rows \[0, 784\)  iterations [0-9]+  slots average, m, v" "inspect ROOT prints partitions"
expect_out "values +min -?[0-9.e-]+  max -?[0-9.e-]+  mean -?[0-9.e-]+  l2 [0-9.e-]+  non-finite 0" \
  "inspect ROOT prints value statistics"
expect_out "^  run 1, epoch " "inspect ROOT prints the run state"
expect_out "^  pipeline 0: next [0-9]+, .*watermark [0-9]+" "inspect ROOT prints pipeline positions"
expect_out "^total: 6 variables, 235146 parameters, [0-9]+ bytes on disk" "inspect ROOT prints totals"

# Each directory on its own: the printed step is the directory's number.
for dir in "$root"/ckpt-*; do
  step=$((10#${dir##*/ckpt-}))
  inspect "$dir" --values 3
  expect_status 0 "inspect $dir"
  expect_out "^step $step\$" "inspect $dir prints step $step"
  expect_out "first 3 values: \[" "inspect --values 3 prints values"
done

inspect --all "$root"
expect_status 0 "inspect --all"
[[ $(grep -c '^step ' "$tmp/out") == "$count" ]] || fail "inspect --all printed $(grep -c '^step ' "$tmp/out") of $count"

# Flags: a bad value is a usage error (2).
inspect --values abc "$root"
expect_status 2 "--values abc"
expect_err "--values: 'abc' is not an integer" "--values abc"
inspect --help
expect_status 0 "--help"

# No committed checkpoint: a clear message, status 1.
mkdir "$tmp/empty"
inspect "$tmp/empty"
expect_status 1 "inspect EMPTY"
expect_err "no committed checkpoint" "inspect EMPTY"
inspect "$tmp/absent"
expect_status 1 "inspect ABSENT"
expect_err "no such file or directory" "inspect ABSENT"

# A truncated array: status 1 and the message names the file.
victim=$root/$newest/dense_1.kernel.part0.npy
truncate -s 100 "$victim"
inspect "$root"
expect_status 1 "inspect with $victim truncated"
expect_err "$victim" "the error names the truncated file"
[[ $(grep -c . "$tmp/err") == 1 ]] || fail "the error is not one line: $(cat "$tmp/err")"

echo "inspect_test: $count checkpoints, newest step $newest_step"
finish
