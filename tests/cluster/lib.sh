# Shared by the tests of clusters of processes: free loopback ports, failing with a
# message, and a scratch directory removed on exit. Every process a test starts runs
# under `timeout`, so a test ends by itself even when a task hangs.
set -u
AT=${ACTORTRAIN:?set ACTORTRAIN to the actortrain binary}
WORK=$(mktemp -d /tmp/actortrain-cluster-test.XXXXXX)
# Commands run at exit before the scratch directory goes (daemons a test started).
AT_CLEANUP=()
at_exit() {
  local c
  for c in "${AT_CLEANUP[@]}"; do eval "$c"; done
  kill $(jobs -p) 2>/dev/null
  rm -rf "$WORK"
}
trap at_exit EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# Fails unless command $1 exists; $2 names the package tools/setup installs it from.
need_command() {
  command -v "$1" >/dev/null || fail "$1 is missing: run tools/setup (it installs $2)"
}

# Under a sanitizer (tools/test --sanitize) every process is slower: `timeout N` runs
# tools/sanitizers/bin/timeout, which gives N x ACTORTRAIN_TIME_SCALE seconds, and the
# waits below scale their budgets alike. Nothing a test checks changes.
SCALE=${ACTORTRAIN_TIME_SCALE:-1}
[ "$SCALE" = 1 ] || PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../tools/sanitizers/bin" && pwd):$PATH"

# The job's secret for the cluster files a test writes by hand (plain clusters need one;
# `actortrain launch` makes its own).
SECRET="$WORK/secret"
(umask 077; head -c 32 /dev/urandom >"$SECRET")

# N distinct free ports on 127.0.0.1, one per line.
free_ports() {
  # Below the kernel's ephemeral range, as `actortrain launch` picks them: a port there
  # could be taken by an outgoing connection while its task is down, and a peer
  # redialing it could connect to itself.
  python3 - "$1" <<'PY'
import random, socket, sys
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except Exception:
    lo = 32768
socks, seen = [], set()
while len(socks) < int(sys.argv[1]):
    p = random.randint(10000, max(10001, lo - 1))
    if p in seen:
        continue
    seen.add(p)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        s.close()
        continue
    socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
PY
}

# The "epoch ..." lines of a task's output.
epochs() { grep -E '^(\[[a-z]+:[0-9]+\] )?epoch [0-9]+/' "$1" | sed -E 's/^\[[a-z]+:[0-9]+\] //'; }

# Waits until the metrics file $1 records at least $2 applied steps (at most $3 s);
# fails the test when it does not. Faults are injected at a step count, not at a time.
wait_steps() {
  local i n
  for i in $(seq 1 $(( $3 * 10 * SCALE ))); do
    n=$(grep -c '"event":"step"' "$1" 2>/dev/null); n=${n:-0}
    [ "$n" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "fewer than $2 steps in $1 after $3 s ($n)"
}

# Waits until file $1 holds a line matching $2 (at most $3 s).
wait_line() {
  local i
  for i in $(seq 1 $(( $3 * 10 * SCALE ))); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no line matching '$2' in $1 after $3 s"
}

# The pid of the actortrain process playing task $2 of cluster file $1 (not its
# `timeout` parent).
task_pid() {
  local q
  for q in $(pgrep -f -- "--cluster $1 --task $2"); do
    [ "$(cat /proc/$q/comm 2>/dev/null)" = actortrain ] && { echo "$q"; return; }
  done
}

# The newest pid `actortrain launch` reported for task $2 in its output $1.
pid_of() { grep -F "launch: $2 is pid" "$1" | tail -1 | awk '{print $5}'; }

# Every task of a finished launch printed the same history as the chief.
same_histories() {
  local out=$1; shift
  grep -F "[chief:0] epoch" "$out" | sed -E 's/^\[[a-z]+:[0-9]+\] //' >"$WORK/h.chief"
  [ -s "$WORK/h.chief" ] || fail "the chief printed no history"
  for t in "$@"; do
    grep -F "[$t] epoch" "$out" | sed -E 's/^\[[a-z]+:[0-9]+\] //' >"$WORK/h.$t"
    cmp -s "$WORK/h.chief" "$WORK/h.$t" || fail "$t's history differs from the chief's"
  done
}

# Exactly-once, judged by `actortrain ledger check` from what the ps tasks applied (the
# ledgers launch had them write to $WORK/run/ledgers; or the files/directories in $3...)
# against the linear example's own data ($EXAMPLE_ARGS): every step once on every
# partition with the batch the data defines at its position, every position of the
# epochs. $1: the steps the data defines (examples / batch 20 x epochs), $2: the cluster
# file. Nothing the chief printed enters it.
ledger_exact() {
  local steps=$1 cluster=$2; shift 2
  [ $# -gt 0 ] || set -- "$WORK/run/ledgers"
  "$AT" ledger check --example linear --cluster "$cluster" "$@" -- ${EXAMPLE_ARGS:---epochs 2 --examples 40000} \
    >"$WORK/ledger.out" 2>&1
  local rc=$?
  cat "$WORK/ledger.out"
  [ $rc -eq 0 ] || fail "ledger check exited with $rc"
  grep -qF ": $steps step(s) on every one of" "$WORK/ledger.out" || fail "the ledgers do not hold $steps steps on every partition"
}

# Each task in "$@" printed, as the digest of the parameters it pulled from the ps
# shards at the end, the digest of the values the newest checkpoint under $2 holds
# (`actortrain inspect --digest`, read from the files). $1: the output of the tasks.
final_digests() {
  local out=$1 ck=$2; shift 2
  local d
  d=$("$AT" inspect --digest "$ck" | awk '{print $1}')
  [ -n "$d" ] || fail "no digest of the checkpoint under $ck"
  for t in "$@"; do
    grep -qE "^(\[$t\] )?$t final parameters: digest $d " "$out" ||
      fail "$t's final parameters are not the checkpoint's ($d): $(grep -F "$t final parameters" "$out")"
  done
  echo "final parameters of $* = the checkpoint's: digest $d"
}

# Starts `actortrain launch` of the linear example in the background (2 ps, 2 workers,
# --restart-failed, 4000 steps), its output in $WORK/out and metrics in $WORK/m.jsonl;
# extra launch flags in "$@". Sets L to its pid.
launch_linear() {
  timeout 170 "$AT" launch --example linear --ps 2 --workers 2 --restart-failed --dir "$WORK/run" --timeout $((150 * SCALE)) "$@" \
    -- ${EXAMPLE_ARGS:---epochs 2 --examples 40000} --metrics "$WORK/m.jsonl" --verbose 2 >"$WORK/out" 2>&1 &
  L=$!
}

# The first of N consecutive free ports on 127.0.0.1 (a Slurm or MPI launch's
# --port-base: a host's k-th task listens at base + k).
free_port_block() {
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except Exception:
    lo = 32768
for _ in range(1000):
    base = random.randint(10000, max(10001, lo - n - 1))
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    break
PY
}
