#!/usr/bin/env bash
# kill -9 of the chief while a worker waits to be admitted (the coordinator admits
# workers in id order, so worker 1 waits for worker 0): the waiting worker learns of the
# loss at once and rejoins the restarted chief, instead of waiting out its request's
# whole timeout for an answer that cannot come (bench faults measured 90 s, with worker 2
# held behind it in the id order). The run then completes with both workers.
. "$(dirname "$0")/lib.sh"
read -r PC P0 W0 W1 <<<"$(free_ports 4 | tr '\n' ' ')"
M="$WORK/m.jsonl"
# request_ms: the rejoin window, and what a registration could wait before the fix.
cat >"$WORK/c.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$PC"], "ps": ["127.0.0.1:$P0"], "worker": ["127.0.0.1:$W0", "127.0.0.1:$W1"]},
 "secret": "$SECRET", "timeouts": {"connect_ms": 30000, "request_ms": 30000}}
JSON
args=(-- --epochs 1 --examples 8000 --metrics "$M")
node() { timeout 120 "$AT" node --example linear --cluster "$WORK/c.json" --task "$@" "${args[@]}"; }
node ps:0 --ledger "$WORK/ps0.json" >"$WORK/ps0" 2>&1 & p0=$!
# Not under `timeout` (kill -9 must reach the process itself); the trap ends it if need be.
"$AT" node --example linear --cluster "$WORK/c.json" --task chief:0 "${args[@]}" >"$WORK/chief1" 2>&1 &
c1=$!
node worker:1 >"$WORK/w1" 2>&1 & w1=$!
wait_line "$WORK/w1" "registering with chief:0" 60
kill -9 $c1
wait $c1 2>/dev/null
# Within 10 s, against the 30 s + 30 s its registration could wait for an answer.
wait_line "$WORK/w1" "lost the coordinator \(chief:0 at [^)]*\) while waiting to be admitted; rejoining" 10
node chief:0 >"$WORK/chief2" 2>&1 & c2=$!
node worker:0 >"$WORK/w0" 2>&1 & w0=$!
wait $c2; rc=$?
wait $w0; r0=$?
wait $w1; r1=$?
wait $p0; q0=$?
for f in chief1 chief2 w0 w1 ps0; do echo "== $f"; grep -v "^epoch" "$WORK/$f" | tail -6; done
[ $rc -eq 0 ] || fail "the restarted chief exited with $rc"
[ $r0 -eq 0 ] && [ $r1 -eq 0 ] || fail "workers exited with $r0 and $r1"
[ $q0 -eq 0 ] || fail "the ps task exited with $q0"
grep -q '"event":"worker_joined".*"worker":1' "$M" || fail "worker 1 never joined the restarted chief"
steps=$(grep -oE "chief:0 done: [0-9]+ steps" "$WORK/chief2" | awk '{print $3}')
[ -n "$steps" ] && [ "$steps" -gt 0 ] || fail "the restarted chief did not say how many steps it ran"
EXAMPLE_ARGS="--epochs 1 --examples 8000" ledger_exact "$steps" "$WORK/c.json" "$WORK/ps0.json"
echo "PASS"
