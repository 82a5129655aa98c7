#!/usr/bin/env bash
# Partitions between hosts: four network namespaces on a bridge (netns.sh), a chief, a
# ps and 2 workers with TLS, sync, checkpoints in a directory every host sees. Mid-run,
# nftables rules in one host drop its packets for longer than timeouts.connection_ms,
# then are removed. $1 picks the partition:
#   worker  worker 1's host is cut off from everyone: the chief loses it and re-queues
#           its steps; when the partition heals the same process rejoins as generation 2
#   ps      the ps host is cut off from everyone: the chief pauses, and when the same
#           process is reachable again rolls every shard back to the last checkpoint
#   zombie  the ps host is cut off from the chief only, and the workers still reach it:
#           a zombie ps. Async, so the workers' pushes are applied as they come: what
#           they made it apply after the chief's last checkpoint is taken back when the
#           chief rolls it back, and pushes of steps from before the roll-back are fenced
#           out (the ps task's own counts say how many; the ledger holds none twice)
# Every case: the run ends within its bound with every step exactly once by the ps
# ledger. Sync, a ps rolled back ends with the fault-free run's history (same seed); a
# worker's absence makes some sync rounds smaller, so there (and async) the accuracy is
# within 0.01 of the fault-free run's (async: 0.03, its spread between runs of a seed).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns.sh"
need_command nft nftables
case "$1" in worker | ps | zombie) ;; *) fail "usage: $0 worker|ps|zombie" ;; esac
netns_setup 4
"$(dirname "$0")/../../tools/make-certs" "$WORK/certs" >/dev/null || fail "make-certs"
addr() { printf '"%s:7000"' "${HOST_IP[$1]}"; }
CONNECTION_MS=1500
MODE=sync
[ "$1" = zombie ] && MODE=async
cluster="\"cluster\": {\"chief\": [$(addr 0)], \"ps\": [$(addr 1)], \"worker\": [$(addr 2), $(addr 3)]},
  \"consistency\": \"$MODE\",
  \"timeouts\": {\"heartbeat_ms\": 250, \"connection_ms\": $CONNECTION_MS, \"request_ms\": 30000, \"connect_ms\": 30000},
  \"tls\": {\"certificate\": \"$WORK/certs/node.pem\", \"key\": \"$WORK/certs/node.key\", \"ca\": \"$WORK/certs/ca.pem\"}"
ARGS=(--epochs 3 --limit 60000 --seed 3)
NAMES=(chief ps worker:0 worker:1)
# Starts one run's four tasks; $1 names it ($WORK/$1.<host>), with checkpoints in $WORK/ck.$1.
start() {
  local h t
  PIDS=()
  for h in 0 1 2 3; do
    case $h in 0) t='"chief", "index": 0' ;; 1) t='"ps", "index": 0' ;; 2) t='"worker", "index": 0' ;; 3) t='"worker", "index": 1' ;; esac
    local extra=()
    [ $h -eq 1 ] && extra=(--ledger "$WORK/ledger.$1.json")
    local job=("${ARGS[@]}")
    [ $h -eq 0 ] && job+=(--metrics "$WORK/m.$1.jsonl")
    TF_CONFIG="{$cluster, \"checkpoint\": {\"dir\": \"$WORK/ck.$1\", \"every_steps\": 40}, \"task\": {\"type\": $t}}" \
      on_host $h timeout 150 "$AT" node --example fashion_mnist "${extra[@]}" -- "${job[@]}" >"$WORK/$1.$h" 2>&1 &
    PIDS+=($!)
  done
}
finish() {
  local h
  for h in 0 1 2 3; do
    wait "${PIDS[$h]}"
    local rc=$?
    [ $rc -eq 0 ] || { tail -n 8 "$WORK/$1".*; fail "$1: ${NAMES[$h]} exited with $rc"; }
  done
}
# nftables rules in host $1 dropping what it sends and receives on eth0 (from and to
# address $2 only, when given).
cut_off() {
  local match=""
  [ -n "${2:-}" ] && match="ip saddr $2"
  local out_match=""
  [ -n "${2:-}" ] && out_match="ip daddr $2"
  on_host "$1" nft -f - <<NFT || fail "nft: cannot add the partition"
table inet partition {
  chain in { type filter hook input priority 0; policy accept; iifname "eth0" $match counter drop; }
  chain out { type filter hook output priority 0; policy accept; oifname "eth0" $out_match counter drop; }
}
NFT
}
# Packets the partition of host $1 dropped.
dropped() { on_host "$1" nft list table inet partition | grep -oE 'packets [0-9]+' | awk '{s += $2} END {print s + 0}'; }
heal() { on_host "$1" nft delete table inet partition || fail "nft: cannot remove the partition"; }

start clean
finish clean
total=$(grep -oE "^chief:0 done: [0-9]+" "$WORK/clean.0" | awk '{print $3}')
[ -n "$total" ] || fail "the fault-free run did not finish"

start cut
wait_steps "$WORK/m.cut.jsonl" $((total / 4)) 60
case "$1" in
  worker) victim=3; cut_off 3 ;;
  ps) victim=1; cut_off 1 ;;
  zombie) victim=1; cut_off 1 "${HOST_IP[0]}" ;;
esac
cut_at=$(date +%s%N)
# Longer than the connection timeout on both ends, then healed.
case "$1" in
  worker) wait_line "$WORK/cut.0" "worker 1 \(generation 1\) lost" 20 ;;
  *) wait_line "$WORK/cut.0" "ps shard 0 lost" 20 ;;
esac
sleep 2
n=$(dropped "$victim")
heal "$victim"
echo "partition held $(( ($(date +%s%N) - cut_at) / 1000000 )) ms; it dropped $n packets"
[ "$n" -gt 0 ] || fail "the partition dropped nothing"
finish cut
grep -vE "^epoch" "$WORK/cut.0" | tail -n 12
grep -E "rejoin|lost" "$WORK/cut.3" "$WORK/cut.2" "$WORK/cut.1" | head -n 8
case "$1" in
  worker)
    grep -qE "worker 1 \(generation 1\) lost" "$WORK/cut.0" || fail "the chief did not lose worker 1"
    grep -q "steps_requeued" "$WORK/m.cut.jsonl" || fail "worker 1's steps were not re-queued"
    grep -qF "worker 1 joined (generation 2)" "$WORK/cut.0" || fail "worker 1 did not rejoin as generation 2"
    grep -q "rejoining" "$WORK/cut.3" || fail "worker 1's process did not say it rejoins"
    ;;
  ps | zombie)
    grep -qE "ps shard 0 is back" "$WORK/cut.0" || fail "the chief did not take the ps shard back"
    grep -qF "every ps shard rolled back to the checkpoint of step" "$WORK/cut.0" || fail "no roll-back to the last checkpoint"
    counts=$(grep -E "Z INFO  ps:0: [0-9]+ step\(s\) in its state" "$WORK/cut.1") || fail "the ps task did not give its counts"
    echo "$counts"
    undone=$(echo "$counts" | grep -oE "[0-9]+ undone" | awk '{print $1}')
    [ "$1" = ps ] || [ "$undone" -gt 0 ] || fail "the roll-back took back none of the zombie's applies"
    ;;
esac
if [ "$1" != ps ]; then
  # Sync rounds are made of the live workers' steps: while worker 1 was out, rounds were
  # smaller, so the values differ a little from the fault-free run's.
  a=$(epochs "$WORK/clean.0" | tail -1 | grep -oE "val_accuracy [0-9.]+" | awk '{print $2}')
  b=$(epochs "$WORK/cut.0" | tail -1 | grep -oE "val_accuracy [0-9.]+" | awk '{print $2}')
  tol=0.01
  [ "$1" = zombie ] && tol=0.03
  python3 -c "import sys; sys.exit(abs($a - $b) > $tol)" ||
    fail "val_accuracy $b after the partition, $a without: more than $tol apart"
  echo "val_accuracy $b, and $a without the partition"
else
  # Rolled back to a checkpoint and redone: exactly the fault-free run.
  [ "$(epochs "$WORK/clean.0")" = "$(epochs "$WORK/cut.0")" ] ||
    { epochs "$WORK/clean.0"; epochs "$WORK/cut.0"; fail "the history after the partition differs from the one without (sync, same seed)"; }
fi
steps=$(grep -oE "^chief:0 done: [0-9]+" "$WORK/cut.0" | awk '{print $3}')
[ "$steps" = "$total" ] || fail "$steps steps, not $total"
"$AT" ledger check --example fashion_mnist --workers 2 --consistency $MODE "$WORK/ledger.cut.json" -- "${ARGS[@]}" \
  >"$WORK/check" 2>&1 || { cat "$WORK/check"; fail "ledger check failed after the partition"; }
grep -qF ": $steps step(s) on every one of" "$WORK/check" || { cat "$WORK/check"; fail "the ledger does not hold $steps steps"; }
echo "$1 partitioned ($MODE): $steps steps exactly once by the ps ledger"
echo "PASS"
