#!/usr/bin/env bash
# A cluster across hosts that are not loopback: five network namespaces on a bridge
# (netns.sh), one task each, joined over real interfaces with TLS, the cluster given as
# Kubeflow writes TF_CONFIG: Kubernetes service names on port 2222, resolved through
# each host's /etc/hosts. Worker 1 starts before its host can resolve the ps names (as a
# pod starts before its peers' records exist) and must find them by retrying. Checked:
# the job completes with the history `actortrain launch` gives on loopback (sync, same
# seed), the ps tasks' ledgers hold every step exactly once, the tensors took the data
# plane inside TLS (never shared memory between namespaces), and they crossed the veths
# (each worker's eth0 carried at least a pull and a push of the model per step). Then the
# same job with --wire-floats bf16: exactly once, within 0.01 of loopback's accuracy,
# and under 0.7 of the float32 run's bytes on each worker's link.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns.sh"
netns_setup 5
"$(dirname "$0")/../../tools/make-certs" "$WORK/certs" >/dev/null || fail "make-certs"
names=(myjob-chief-0 myjob-ps-0 myjob-ps-1 myjob-worker-0 myjob-worker-1)
for h in 0 1 2 3; do
  for i in 0 1 2 3 4; do host_names $h "${HOST_IP[$i]} ${names[$i]}.default.svc"; done
done
# Worker 1's host knows only itself and the chief for now.
host_names 4 "${HOST_IP[4]} ${names[4]}.default.svc"
host_names 4 "${HOST_IP[0]} ${names[0]}.default.svc"
svc() { printf '"%s.default.svc:2222"' "$1"; }
cluster="\"cluster\": {\"chief\": [$(svc myjob-chief-0)], \"ps\": [$(svc myjob-ps-0), $(svc myjob-ps-1)],
  \"worker\": [$(svc myjob-worker-0), $(svc myjob-worker-1)]}"
extra="\"environment\": \"cloud\", \"consistency\": \"sync\", \"timeouts\": {\"connect_ms\": 30000},
  \"tls\": {\"certificate\": \"$WORK/certs/node.pem\", \"key\": \"$WORK/certs/node.key\", \"ca\": \"$WORK/certs/ca.pem\"}"
ARGS=(--epochs 2 --limit 6000 --seed 3)
run_task() {  # host, type, index
  local ledger=()
  [ "$2" = ps ] && ledger=(--ledger "$WORK/ledger.$3.json")
  TF_CONFIG="{$cluster, \"task\": {\"type\": \"$2\", \"index\": $3}, $extra}" \
    on_host "$1" timeout 120 "$AT" node --example fashion_mnist "${ledger[@]}" -- "${ARGS[@]}" >"$WORK/$2$3" 2>&1
}
before=(); for h in 0 1 2 3 4; do before+=("$(veth_bytes $h)"); done
run_task 4 worker 1 & W1=$!
wait_line "$WORK/worker1" "^task worker:1 of chief 1, ps 2, worker 2 at myjob-worker-1.default.svc:2222" 20
run_task 0 chief 0 & C=$!
run_task 1 ps 0 & P0=$!
run_task 2 ps 1 & P1=$!
run_task 3 worker 0 & W0=$!
sleep 2
on_host 4 getent hosts myjob-ps-0.default.svc >/dev/null && fail "worker 1's host resolved the ps names too early"
host_names 4 "${HOST_IP[1]} ${names[1]}.default.svc"
host_names 4 "${HOST_IP[2]} ${names[2]}.default.svc"
host_names 4 "${HOST_IP[3]} ${names[3]}.default.svc"
for p in $C $P0 $P1 $W0 $W1; do wait $p || { tail -n +1 "$WORK"/chief0 "$WORK"/ps* "$WORK"/worker*; fail "a task failed"; }; done
cat "$WORK/chief0" "$WORK/worker1"
grep -q "tensors in shared memory" "$WORK"/worker* && fail "a worker used shared memory across hosts"
# The tensors took the data plane, inside TLS, to each ps host by name.
for w in 0 1; do
  for p in 0 1; do
    grep -q "ps shard $p: data plane: connected to myjob-ps-$p.default.svc:[0-9]* (TLS)" "$WORK/worker$w" ||
      fail "worker $w did not reach ps $p's data plane over TLS"
  done
done

timeout 120 "$AT" launch --example fashion_mnist --ps 2 --workers 2 --consistency sync --dir "$WORK/launch" -- "${ARGS[@]}" \
  >"$WORK/launch.out" 2>&1 || { cat "$WORK/launch.out"; fail "launch failed"; }
want=$(grep -F "[chief:0] epoch" "$WORK/launch.out" | sed -E 's/^\[chief:0\] //')
got=$(grep -E "^epoch [0-9]+/" "$WORK/chief0")
[ -n "$want" ] && [ "$got" = "$want" ] || fail "the namespaces' history differs from loopback's:
$got
launch:
$want"
steps=$(grep -oE "^chief:0 done: [0-9]+" "$WORK/chief0" | awk '{print $3}')
echo "{$cluster, $extra}" >"$WORK/cluster.json"
"$AT" ledger check --example fashion_mnist --workers 2 --consistency sync "$WORK"/ledger.*.json -- "${ARGS[@]}" \
  >"$WORK/check" 2>&1 || { cat "$WORK/check"; fail "ledger check failed"; }
cat "$WORK/check"
grep -qF ": $steps step(s) on every one of" "$WORK/check" || fail "the ledgers do not hold $steps steps"
# The model is 235,146 floats; a worker pulls and pushes all of it each of its steps
# (half of the sync steps each).
model=$((235146 * 4))
for h in 3 4; do
  moved=$(( $(veth_bytes $h) - ${before[$h]} ))
  need=$(( steps / 2 * 2 * model ))
  echo "host $h (worker) moved $moved bytes on eth0 (at least $need)"
  [ $moved -ge $need ] || fail "worker on host $h moved $moved bytes, less than $need"
  full[$h]=$moved
done

# Again with --wire-floats bf16: gradients and training pulls as bfloat16. The job ends
# with every step applied exactly once, within 0.01 of loopback's accuracy, and each
# worker's link carried well under the bytes the float32 run's did.
before=(); for h in 0 1 2 3 4; do before+=("$(veth_bytes $h)"); done
rm -f "$WORK"/ledger.*.json
run_bf16() { TF_CONFIG="{$cluster, \"task\": {\"type\": \"$2\", \"index\": $3}, $extra}" \
  on_host "$1" timeout 120 "$AT" node --example fashion_mnist --wire-floats bf16 ${4:+--ledger "$4"} -- "${ARGS[@]}" \
  >"$WORK/bf16.$2$3" 2>&1; }
run_bf16 0 chief 0 & C=$!
run_bf16 1 ps 0 "$WORK/ledger.0.json" & P0=$!
run_bf16 2 ps 1 "$WORK/ledger.1.json" & P1=$!
run_bf16 3 worker 0 & W0=$!
run_bf16 4 worker 1 & W1=$!
for p in $C $P0 $P1 $W0 $W1; do wait $p || { tail -n +1 "$WORK"/bf16.*; fail "a task failed with bf16"; }; done
steps=$(grep -oE "^chief:0 done: [0-9]+" "$WORK/bf16.chief0" | awk '{print $3}')
"$AT" ledger check --example fashion_mnist --workers 2 --consistency sync "$WORK"/ledger.*.json -- "${ARGS[@]}" \
  >"$WORK/check" 2>&1 || { cat "$WORK/check"; fail "ledger check failed with bf16"; }
grep -qF ": $steps step(s) on every one of" "$WORK/check" || fail "bf16: the ledgers do not hold $steps steps"
acc() { grep -oE "epoch ${ARGS[1]}/${ARGS[1]}: .*val_accuracy [0-9.]+" "$1" | grep -oE '[0-9.]+$' | head -1; }
a=$(acc "$WORK/bf16.chief0") b=$(acc "$WORK/launch.out")
echo "val_accuracy: bf16 across the namespaces $a, float32 on loopback $b"
python3 -c "import sys; sys.exit(0 if abs($a - $b) <= 0.01 else 1)" || fail "bf16: accuracy $a, not within 0.01 of $b"
for h in 3 4; do
  moved=$(( $(veth_bytes $h) - ${before[$h]} ))
  echo "host $h (worker) moved $moved bytes on eth0 with bf16, ${full[$h]} with float32"
  [ $((moved * 10)) -le $((full[$h] * 7)) ] || fail "bf16: worker on host $h moved $moved bytes, not under 0.7 of ${full[$h]}"
done
echo "PASS"
