#!/usr/bin/env bash
# Packet loss between hosts: four network namespaces on a bridge (netns.sh), a chief, a
# ps and 2 workers with TLS, and an nftables rule in every host dropping 5% of the
# packets it sends on eth0 (numgen random), on every link, each way. With `delay`, every
# link also delays each byte 20 ms each way: every host's outgoing TCP connections are
# redirected (nftables) to a delaying proxy in that host (delay_proxy.py; this kernel has
# no netem). The job must finish within its bound, with every step exactly once by the
# ps ledgers, and the slowdown against the same job without the faults, in the same
# run, is printed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns.sh"
need_command nft nftables
case "${1:-loss}" in loss | delay) ;; *) fail "usage: $0 [loss|delay]" ;; esac
netns_setup 4
"$(dirname "$0")/../../tools/make-certs" "$WORK/certs" >/dev/null || fail "make-certs"
addr() { printf '"%s:7000"' "${HOST_IP[$1]}"; }
cluster="\"cluster\": {\"chief\": [$(addr 0)], \"ps\": [$(addr 1)], \"worker\": [$(addr 2), $(addr 3)]},
  \"consistency\": \"sync\", \"timeouts\": {\"connect_ms\": 30000},
  \"tls\": {\"certificate\": \"$WORK/certs/node.pem\", \"key\": \"$WORK/certs/node.key\", \"ca\": \"$WORK/certs/ca.pem\"}"
ARGS=(--epochs 1 --limit 6000 --seed 3)
# One run; $1 names it. Prints its wall time in ms.
run() {
  local pids=() h t start
  start=$(date +%s%N)
  for h in 0 1 2 3; do
    case $h in 0) t='"chief", "index": 0' ;; 1) t='"ps", "index": 0' ;; 2) t='"worker", "index": 0' ;; 3) t='"worker", "index": 1' ;; esac
    local ledger=()
    [ $h -eq 1 ] && ledger=(--ledger "$WORK/ledger.$1.json")
    TF_CONFIG="{$cluster, \"task\": {\"type\": $t}}" \
      on_host $h timeout 150 "$AT" node --example fashion_mnist "${ledger[@]}" -- "${ARGS[@]}" >"$WORK/$1.$h" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || { tail -n 5 "$WORK/$1".*; fail "$1: a task failed"; }
  done
  echo $(( ($(date +%s%N) - start) / 1000000 ))
}
clean=$(run clean)
for h in 0 1 2 3; do
  # Smaller packets for the rule to see (the stack may still hand it segments bundled
  # for offload: one dropped packet can be several wire segments, a burstier loss than
  # 5% of segments; the retransmissions below count what it cost).
  ip -n "${HOST_NS[$h]}" link set eth0 gso_max_segs 1 gso_max_size 1500 || fail "cannot turn segmentation offload off"
  on_host $h nft -f - <<'NFT' || fail "nft: cannot add the loss rule"
table inet loss {
  chain out {
    type filter hook output priority 0; policy accept;
    oifname "eth0" meta l4proto tcp numgen random mod 100 < 5 drop
  }
}
NFT
done
before=$(on_host 2 nft list ruleset | grep -c "numgen random mod 100 < 5 drop")
[ "$before" -eq 1 ] || fail "the loss rule is not in place"
faults="5% loss"
if [ "${1:-loss}" = delay ]; then
  faults="5% loss and 20 ms delay"
  PROXY_PORT=7999
  for h in 0 1 2 3; do
    rm -f "$WORK/proxy.$h.ready"
    on_host $h python3 "$(dirname "$0")/delay_proxy.py" --port $PROXY_PORT --delay-ms 20 --mark 42 \
      --ready "$WORK/proxy.$h.ready" >"$WORK/proxy.$h" 2>&1 &
    wait_line "$WORK/proxy.$h.ready" ready 10
    # Every connection this host opens to another host goes through its proxy (whose own
    # connections carry mark 42 and pass).
    on_host $h nft -f - <<NFT || fail "nft: cannot add the redirection to the proxy"
table ip delay {
  chain out {
    type nat hook output priority -100; policy accept;
    meta mark 42 return
    ip daddr ${HOST_IP[$h]} return
    ip daddr $NET.0/24 meta l4proto tcp counter redirect to :$PROXY_PORT
  }
}
NFT
  done
fi
lossy=$(run lossy)
cat "$WORK/lossy.0"
# The rule dropped packets: the kernel's own count of TCP retransmissions in a worker's host.
retrans=$(on_host 2 awk '/^Tcp:/ {n++} n==2 {print $13; exit}' /proc/net/snmp)
echo "worker 0's host retransmitted $retrans TCP segments"
[ "${retrans:-0}" -gt 0 ] || fail "no TCP segment was retransmitted: the loss rule dropped nothing"
if [ "${1:-loss}" = delay ]; then
  # Connections each host opened through its proxy (the redirection's own counter).
  for h in 0 2 3; do
    n=$(on_host $h nft list table ip delay | grep -oE "packets [0-9]+" | awk '{print $2}')
    echo "host $h: ${n:-0} connection(s) through its delaying proxy"
    [ "${n:-0}" -gt 0 ] || fail "host $h opened no connection through its proxy"
  done
fi
[ "$(grep -E '^epoch 1/1:' "$WORK/clean.0")" = "$(grep -E '^epoch 1/1:' "$WORK/lossy.0")" ] ||
  fail "the history under loss differs from the one without (sync, same seed)"
steps=$(grep -oE "^chief:0 done: [0-9]+" "$WORK/lossy.0" | awk '{print $3}')
"$AT" ledger check --example fashion_mnist --workers 2 --consistency sync "$WORK/ledger.lossy.json" -- "${ARGS[@]}" \
  >"$WORK/check" 2>&1 || { cat "$WORK/check"; fail "ledger check failed under loss"; }
grep -qF ": $steps step(s) on every one of" "$WORK/check" || { cat "$WORK/check"; fail "the ledger does not hold $steps steps"; }
echo "$faults on every link: $steps steps exactly once, ${lossy} ms against ${clean} ms without ($(python3 -c "print(f'{$lossy / $clean:.2f}')")x)"
echo "PASS"
