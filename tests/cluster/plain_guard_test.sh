#!/usr/bin/env bash
# Plain BASP behind the node's guard (actors/src/net/basp_guard.hpp): while a cluster of
# processes trains, a BASP header announcing a 4 GiB payload, an HTTP request and random
# bytes at the chief's and a ps task's ports are closed by the guard (logged), the
# chief's memory stays small (without the guard that header made CAF reserve 4.7 GB,
# 2.1 GB of it resident), and the job still applies every one of its steps.
. "$(dirname "$0")/lib.sh"
M="$WORK/m.jsonl"
export EXAMPLE_ARGS="--epochs 2 --examples 200000"
launch_linear
wait_steps "$M" 500 60
read -r PC P0 <<<"$(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["cluster"]
print(c["chief"][0].split(":")[1], c["ps"][0].split(":")[1])' "$WORK/run/cluster.json")"
CHIEF=$(pid_of "$WORK/out" chief:0)
[ -n "$PC" ] && [ -n "$P0" ] && [ -n "$CHIEF" ] || fail "no chief or ps port, or no chief pid ($PC $P0 $CHIEF)"
python3 - "$PC" "$P0" <<'PY'
import os, socket, struct, sys, time
for port in map(int, sys.argv[1:]):
    for k, payload in enumerate((struct.pack(">BBBBIQQQ", 1, 0, 0, 0, 0xFFFFFFF0, 0, 0, 0),  # handshake, 4 GiB
                                 b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(65536))):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(payload)
        if k > 0:
            time.sleep(0.2)
            s.close()
            continue
        # The node's handshake may come first; then the guard closes it (CAF itself would
        # wait for the announced payload, holding what it reserved).
        s.settimeout(5)
        closed = False
        try:
            while s.recv(65536):
                pass
            closed = True
        except ConnectionResetError:
            closed = True
        except socket.timeout:
            pass
        s.close()
        if not closed:
            sys.exit(f"port {port}: the 4 GiB header did not close its connection")
PY
[ $? -eq 0 ] || fail "a hostile connection was not closed, or a node stopped accepting"
peak=$(awk '/VmHWM/ {print $2}' "/proc/$CHIEF/status" 2>/dev/null || echo 0)
echo "chief peak resident memory after the hostile bytes: $peak kB"
[ "${peak:-0}" -gt 0 ] && [ "${peak:-0}" -lt 1000000 ] || fail "the chief's memory grew to $peak kB"
wait $L; rc=$?
cat "$WORK/out" | grep -v "epoch\|steps -" | tail -20
[ $rc -eq 0 ] || fail "launch exited with $rc"
for t in chief:0 ps:0; do
  grep -qF "[$t] $t: closed a BASP connection whose header announced 4294967280 bytes" "$WORK/out" ||
    fail "$t did not log the 4 GiB header"
done
grep -qF "[chief:0] chief:0 done: 20000 steps" "$WORK/out" || fail "not exactly 20000 steps"
[ "$(grep -c '"event":"step"' "$M")" -eq 20000 ] || fail "the metrics do not hold 20000 applied steps"
ledger_exact 20000 "$WORK/run/cluster.json"
echo "PASS"
