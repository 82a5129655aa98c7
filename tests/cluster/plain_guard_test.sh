#!/usr/bin/env bash
# Plain BASP behind the node's guard (actors/src/net/basp_guard.hpp): while a cluster of
# processes trains (chief, 2 ps, 2 workers), every TCP socket each node process listens
# on — found in /proc, not taken from the cluster file — gets a BASP header announcing a
# 4 GiB payload, an HTTP request, random bytes and 200 KB of 0xff from a stranger (who
# does not know the job's secret): each is closed at the job's greeting, before CAF sees
# a byte (logged by the guard). A member (who proves the secret, as a compromised task
# of the job could) then sends the 4 GiB header to every guard: it is closed at the
# header (logged). Every node lives on with its memory small (without the guard that
# header made CAF reserve 4.7 GB, 2.1 GB of it resident); and the job still applies
# exactly every one of its steps.
. "$(dirname "$0")/lib.sh"
M="$WORK/m.jsonl"
export EXAMPLE_ARGS="--epochs 2 --examples 200000"
launch_linear
wait_steps "$M" 500 60
PIDS=""
for t in chief:0 ps:0 ps:1 worker:0 worker:1; do
  p=$(pid_of "$WORK/out" $t)
  [ -n "$p" ] || fail "no pid for $t"
  PIDS="$PIDS $t=$p"
done
# Every TCP socket each node process listens on (from /proc, not from what the nodes
# advertise) gets the hostile bytes; a BASP header announcing 4 GiB must close its
# connection wherever it lands (CAF's own BASP port would reserve it and wait).
PYTHONPATH="$(dirname "$0")" python3 - "$WORK/run/secret" $PIDS <<'PY'
import os, socket, sys, time
from peers import all_closed, basp_header, greets, job_key, listening_ports, member

key = job_key(sys.argv[1])

# A BASP client handshake announcing 4 GiB (32 bytes), padded to 64: a guard reads a
# whole answer's worth (64 bytes) and a data-plane port a greeting's (40), and each
# refuses it without waiting.
handshake_4g = basp_header(0xFFFFFFF0)
stranger_4g = handshake_4g + b"\0" * 32
attacked = members = 0
for arg in sys.argv[2:]:
    task, pid = arg.split("=")
    ports = listening_ports(pid)
    if not ports:
        sys.exit(f"{task} (pid {pid}) listens on no TCP socket")
    print(f"{task} (pid {pid}) listens on {ports}")
    for port in ports:
        for k, payload in enumerate((stranger_4g, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(65536),
                                     b"\xff" * 200000)):
            s = socket.create_connection(("127.0.0.1", port))
            try:
                s.sendall(payload)
            except OSError:
                pass  # closed while we wrote: refused
            if k > 0:
                time.sleep(0.1)
                s.close()
                continue
            closed = all_closed([s], 5)
            s.close()
            if not closed:
                sys.exit(f"{task} port {port}: the 4 GiB header did not close its connection")
            attacked += 1
        # A member: a guard greets first ("ATJOB1"); a data-plane port waits for its client.
        if greets(port):
            s = member(port, key)
            s.sendall(handshake_4g)
            if not all_closed([s], 5):
                sys.exit(f"{task} port {port}: a member's 4 GiB header did not close its connection")
            s.close()
            members += 1
print(f"attacked {attacked} listening sockets as a stranger, {members} guards as a member")
if members != len(sys.argv) - 2:
    sys.exit(f"{members} guards greeted a member, not one per node")
PY
[ $? -eq 0 ] || fail "a hostile connection was not closed, or a node stopped accepting"
for kv in $PIDS; do
  t=${kv%%=*}; p=${kv#*=}
  kill -0 "$p" 2>/dev/null || fail "$t (pid $p) died under the hostile bytes"
  peak=$(awk '/VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
  echo "$t peak resident memory after the hostile bytes: $peak kB"
  [ "${peak:-0}" -gt 0 ] && [ "${peak:-0}" -lt 1000000 ] || fail "$t's memory grew to $peak kB"
done
wait $L; rc=$?
cat "$WORK/out" | grep -v "epoch\|steps -" | tail -20
[ $rc -eq 0 ] || fail "launch exited with $rc"
for t in chief:0 ps:0 ps:1 worker:0 worker:1; do
  grep -qF "a BASP header announced 4294967280 bytes" <(grep -E "^\[$t\] .*$t: BASP guard: closed the connection from 127\.0\.0\.1:" "$WORK/out") ||
    fail "$t did not log the member's 4 GiB header"
  grep -qF "a wrong answer to the job's greeting" <(grep -E "^\[$t\] .*$t: BASP guard: closed " "$WORK/out") ||
    fail "$t did not log a stranger's wrong answer"
done
grep -qF "[chief:0] chief:0 done: 20000 steps" "$WORK/out" || fail "not exactly 20000 steps"
[ "$(grep -c '"event":"step"' "$M")" -eq 20000 ] || fail "the metrics do not hold 20000 applied steps"
ledger_exact 20000 "$WORK/run/cluster.json"
echo "PASS"
