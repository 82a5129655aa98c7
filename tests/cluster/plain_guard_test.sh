#!/usr/bin/env bash
# Plain BASP behind the node's guard (actors/src/net/basp_guard.hpp): while a cluster of
# processes trains (chief, 2 ps, 2 workers), every TCP socket each node process listens
# on — found in /proc, not taken from the cluster file — gets a BASP header announcing a
# 4 GiB payload, an HTTP request, random bytes and 200 KB of 0xff. The 4 GiB header's
# connection is closed wherever it lands (logged by the guard); every node lives on with
# its memory small (without the guard that header made CAF reserve 4.7 GB, 2.1 GB of it
# resident); and the job still applies exactly every one of its steps.
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
python3 - $PIDS <<'PY'
import os, socket, struct, sys, time

def listening_ports(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.add(int(f[1].split(":")[1], 16))
    return sorted(ports)

# A BASP client handshake announcing 4 GiB, and 8 bytes more: a data-plane port reads a
# whole greeting's worth (40 bytes) at once and refuses it without waiting.
handshake_4g = struct.pack(">BBBBIQQQ", 1, 0, 0, 0, 0xFFFFFFF0, 0, 0, 0) + b"\0" * 8
attacked = 0
for arg in sys.argv[1:]:
    task, pid = arg.split("=")
    ports = listening_ports(pid)
    if not ports:
        sys.exit(f"{task} (pid {pid}) listens on no TCP socket")
    print(f"{task} (pid {pid}) listens on {ports}")
    for port in ports:
        for k, payload in enumerate((handshake_4g, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(65536),
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
            s.settimeout(5)
            closed = False
            try:
                while s.recv(65536):
                    pass
                closed = True
            except (ConnectionResetError, BrokenPipeError):
                closed = True
            except socket.timeout:
                pass
            s.close()
            if not closed:
                sys.exit(f"{task} port {port}: the 4 GiB header did not close its connection")
            attacked += 1
print(f"attacked {attacked} listening sockets")
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
  grep -qF "a BASP header announced 4294967280 bytes" <(grep -F "[$t] $t: BASP guard: closed the connection from 127.0.0.1:" "$WORK/out") ||
    fail "$t did not log the 4 GiB header"
done
grep -qF "[chief:0] chief:0 done: 20000 steps" "$WORK/out" || fail "not exactly 20000 steps"
[ "$(grep -c '"event":"step"' "$M")" -eq 20000 ] || fail "the metrics do not hold 20000 applied steps"
ledger_exact 20000 "$WORK/run/cluster.json"
echo "PASS"
