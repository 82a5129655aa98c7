# Shared by the tests of clusters of processes: free loopback ports, failing with a
# message, and a scratch directory removed on exit. Every process a test starts runs
# under `timeout`, so a test ends by itself even when a task hangs.
set -u
AT=${ACTORTRAIN:?set ACTORTRAIN to the actortrain binary}
WORK=$(mktemp -d /tmp/actortrain-cluster-test.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# N distinct free ports on 127.0.0.1, one per line.
free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
PY
}

# The "epoch ..." lines of a task's output.
epochs() { grep -E '^(\[[a-z]+:[0-9]+\] )?epoch [0-9]+/' "$1" | sed -E 's/^\[[a-z]+:[0-9]+\] //'; }
