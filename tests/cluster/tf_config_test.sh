#!/usr/bin/env bash
# TensorFlow's MultiWorkerMirroredStrategy tutorial setting: two workers on localhost,
# no chief, no ps, TF_CONFIG verbatim (index 0 and 1). Worker 0 hosts the coordinator and
# the ps shards, the mode defaults to sync, and both tasks print the same per-epoch loss.
. "$(dirname "$0")/lib.sh"
read -r P0 P1 <<<"$(free_ports 2 | tr '\n' ' ')"
cluster="{\"cluster\": {\"worker\": [\"localhost:$P0\", \"localhost:$P1\"]}"
TF_CONFIG="$cluster, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
  timeout 120 "$AT" node --example linear --secret "$SECRET" -- --epochs 3 >"$WORK/w0" 2>&1 &
a=$!
TF_CONFIG="$cluster, \"task\": {\"type\": \"worker\", \"index\": 1}}" \
  timeout 120 "$AT" node --example linear --secret "$SECRET" -- --epochs 3 >"$WORK/w1" 2>&1 &
b=$!
wait $a; ra=$?
wait $b; rb=$?
cat "$WORK/w0" "$WORK/w1"
[ $ra -eq 0 ] || fail "worker 0 exited with $ra"
[ $rb -eq 0 ] || fail "worker 1 exited with $rb"
[ "$(epochs "$WORK/w0" | wc -l)" -eq 3 ] || fail "worker 0 did not print 3 epochs"
[ "$(epochs "$WORK/w0")" = "$(epochs "$WORK/w1")" ] || fail "the two workers' histories differ"
# Sync rounds of 2 batches of 20 over 2000 examples: 50 rounds, 100 steps per epoch.
grep -q "worker:1 done: 300 steps" "$WORK/w1" || fail "worker 1 did not see 300 steps"
# Planted linear model with noise 0.1: the loss ends near the noise variance.
last=$(epochs "$WORK/w0" | tail -1 | awk '{print $4}')
python3 -c "import sys; sys.exit(0 if float('$last') < 0.05 else 1)" || fail "final loss $last is not < 0.05"
echo "PASS"
