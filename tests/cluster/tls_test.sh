#!/usr/bin/env bash
# Mutual TLS (run by the nodes' guards) with a per-cluster CA from tools/make-certs: a TLS cluster
# trains to the end, and while it runs these are refused and leave it running: a node
# whose certificate comes from another cluster's CA, a plain-BASP node, random bytes, an
# HTTP request, and a BASP header announcing a 4 GiB payload (with TLS it never reaches
# BASP: the node's memory stays small).
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
"$SRC/tools/make-certs" "$WORK/certs" node >/dev/null || fail "make-certs failed"
"$SRC/tools/make-certs" "$WORK/other" node >/dev/null || fail "make-certs (other CA) failed"
read -r PC P0 W0 W1 PX <<<"$(free_ports 5 | tr '\n' ' ')"
cluster="\"cluster\": {\"chief\": [\"127.0.0.1:$PC\"], \"ps\": [\"127.0.0.1:$P0\"],
                      \"worker\": [\"127.0.0.1:$W0\", \"127.0.0.1:$W1\"]}, \"timeouts\": {\"connect_ms\": 20000}"
cat >"$WORK/tls.json" <<JSON
{$cluster,
 "tls": {"certificate": "$WORK/certs/node.pem", "key": "$WORK/certs/node.key", "ca": "$WORK/certs/ca.pem"}}
JSON
M="$WORK/m.jsonl"
node() { timeout 120 "$AT" node --example linear --cluster "$@" -- --epochs 2 --examples 200000 --metrics "$M" --verbose 2; }
node "$WORK/tls.json" --task ps:0 >"$WORK/ps" 2>&1 & p=$!
node "$WORK/tls.json" --task worker:0 >"$WORK/w0" 2>&1 & a=$!
node "$WORK/tls.json" --task worker:1 >"$WORK/w1" 2>&1 & b=$!
node "$WORK/tls.json" --task chief:0 >"$WORK/chief" 2>&1 & c=$!
wait_steps "$M" 500 60
CHIEF=$(task_pid "$WORK/tls.json" chief:0)

# Another cluster's CA, and plain BASP: refused at the handshake, within the budget.
# The probes play a third worker (at a port of their own) with a short connect budget.
probe="${cluster/20000/3000}"
probe="${probe/\"127.0.0.1:$W1\"]/\"127.0.0.1:$W1\", \"127.0.0.1:$PX\"]}"
printf '{%s, "tls": {"certificate": "%s", "key": "%s", "ca": "%s"}}\n' "$probe" \
  "$WORK/other/node.pem" "$WORK/other/node.key" "$WORK/other/ca.pem" >"$WORK/foreign.json"
timeout 60 "$AT" node --example linear --cluster "$WORK/foreign.json" --task worker:2 >"$WORK/foreign" 2>&1
[ $? -eq 1 ] || fail "a node of another CA was not refused"
grep -q "cannot reach 127.0.0.1:$PC within 3000 ms: invalid_request: the TLS handshake failed: .*certificate" "$WORK/foreign" ||
  fail "foreign CA: $(cat "$WORK/foreign")"
echo "{$probe, \"secret\": \"$SECRET\"}" >"$WORK/plain.json"
timeout 60 "$AT" node --example linear --cluster "$WORK/plain.json" --task worker:2 >"$WORK/plain" 2>&1
# Exit 138 (restart me): silence is all a plain dialer sees of a TLS node, and a slow
# node looks the same; a refused certificate above is final (1).
[ $? -eq 138 ] || fail "a plain-BASP node was not refused with 138"
grep -q "cannot reach 127.0.0.1:$PC within 3000 ms: .*no job greeting within .* (a TLS node, or not an ActorTrain node?)" "$WORK/plain" ||
  fail "plain: $(cat "$WORK/plain")"

# Hostile bytes at the chief's and the ps task's ports.
python3 - "$PC" "$P0" <<'PY'
import os, socket, struct, sys, time
for port in map(int, sys.argv[1:]):
    for payload in (struct.pack(">BBBBIQQQ", 1, 0, 0, 0, 0xFFFFFFF0, 0, 0, 0),  # BASP client handshake, 4 GiB
                    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(65536)):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(payload)
        time.sleep(0.2)
        s.close()
PY
[ $? -eq 0 ] || fail "a node stopped accepting connections after hostile bytes"
[ -n "$CHIEF" ] || fail "the chief's process was not found"
peak=$(awk '/VmHWM/ {print $2}' "/proc/$CHIEF/status" 2>/dev/null || echo 0)
echo "chief peak resident memory after the hostile bytes: $peak kB"
[ "${peak:-0}" -gt 0 ] && [ "${peak:-0}" -lt 1000000 ] || fail "the chief's memory grew to $peak kB"

wait $c; rc=$?
wait $a; ra=$?
wait $b; rb=$?
wait $p; rp=$?
for f in chief w0 w1 ps; do echo "== $f"; grep -v "^epoch\|^checkpoint" "$WORK/$f" | tail -4; done
[ $rc -eq 0 ] && [ $ra -eq 0 ] && [ $rb -eq 0 ] && [ $rp -eq 0 ] || fail "exit statuses $rc $ra $rb $rp"
grep -qF "chief:0 done: 20000 steps" "$WORK/chief" || fail "the TLS run did not end at 20000 steps"
# The data plane runs inside TLS too; on one host (one network namespace) its floats go
# through shared memory.
for w in w0 w1; do
  [ "$(grep -c "data plane: connected to .* (TLS, tensors in shared memory)" "$WORK/$w")" -eq 1 ] ||
    fail "$w did not reach the shard's data plane with shared memory under TLS"
done
grep "^epoch" "$WORK/chief" >"$WORK/h"
grep "^epoch" "$WORK/w1" | cmp -s - "$WORK/h" || fail "worker 1's history differs"
echo "PASS"
