#!/usr/bin/env bash
# Nothing a peer sends can crash, bloat or steer a node (issue 18's attack test). A job
# of a chief, 2 ps and 2 workers trains twice, plain and then TLS: once left alone, once
# under attack. Under attack, every TCP socket each node process listens on (found in
# /proc, not taken from the cluster file) gets, from a stranger: 64 KiB of random bytes,
# an HTTP request, 200 KB of 0xff, BASP client handshakes announcing 256 MiB and 4 GiB,
# a data-plane greeting with a wrong token, and 1,000 connections held open at once
# (each node must still take a member's connection while they are). A member (who
# proves the job's secret, or holds the job's certificate, as a compromised task could)
# also sends the two BASP headers to every guard, and member_attacker sends ps 0's data
# plane frames announcing 1 GiB and a shrinking shared-memory region (with TLS inside a
# TLS session with the job's certificate, as members speak to it; the TLS server gets
# the stranger's attacks too). Then: no node died; each node's
# peak resident memory (VmHWM, the last value read while it ran) is within its peak in
# the run left alone plus 256 MiB; and the ps tasks' ledgers hold every step exactly once.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ATTACKER=${MEMBER_ATTACKER:?set MEMBER_ATTACKER to the member_attacker binary}
TASKS="chief:0 ps:0 ps:1 worker:0 worker:1"
export EXAMPLE_ARGS="--epochs 2 --examples 400000"
"$SRC/tools/make-certs" "$WORK/certs" node >/dev/null || fail "make-certs failed"
TLS_FLAGS="--tls-cert $WORK/certs/node.pem --tls-key $WORK/certs/node.key --tls-ca $WORK/certs/ca.pem"

# Reads each task's VmHWM while the launch runs; writes $WORK/peak.<run>.<task> (kB).
watch_peaks() {
  local run=$1 t p v
  while kill -0 "$L" 2>/dev/null; do
    for t in $TASKS; do
      p=$(pid_of "$WORK/out" "$t")
      [ -n "$p" ] || continue
      v=$(awk '/VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null)
      [ -n "$v" ] && echo "$v" >"$WORK/peak.$run.$t"
    done
    sleep 0.2
  done
}

# One job to its end; $1 names the run, $2 is "attack" or "alone", the rest go to launch.
run_job() {
  local run=$1 what=$2 t p
  shift 2
  rm -rf "$WORK/run" "$WORK/m.jsonl"
  launch_linear "$@"
  watch_peaks "$run" &
  local W=$!
  wait_steps "$WORK/m.jsonl" 500 90
  if [ "$what" = attack ]; then
    local pids=""
    for t in $TASKS; do
      p=$(pid_of "$WORK/out" "$t")
      [ -n "$p" ] || fail "$run: no pid for $t"
      pids="$pids $t=$p"
    done
    local proof="tls:$WORK/certs"
    [ "$run" = plain ] && proof="$WORK/run/secret"
    python3 "$SRC/tests/cluster/attack.py" "$proof" $pids || fail "$run: an attack was not refused (above)"
    timeout 60 "$ATTACKER" "$WORK/run/cluster.json" || fail "$run: a member's data-plane attack was not refused"
    for t in $TASKS; do
      p=$(pid_of "$WORK/out" "$t")
      kill -0 "$p" 2>/dev/null || fail "$run: $t (pid $p) died under attack"
    done
  fi
  wait "$L"; local rc=$?
  wait "$W"
  grep -v "epoch\|steps -" "$WORK/out" | tail -12
  [ $rc -eq 0 ] || fail "$run/$what: launch exited with $rc"
  grep -c "restarted\|killed by signal" "$WORK/out" | grep -qx 0 || fail "$run/$what: a task was restarted or killed"
  grep -qF "[chief:0] chief:0 done: 40000 steps" "$WORK/out" || fail "$run/$what: not exactly 40000 steps"
  ledger_exact 40000 "$WORK/run/cluster.json"
}

for run in plain tls; do
  flags=""
  [ $run = tls ] && flags=$TLS_FLAGS
  # shellcheck disable=SC2086
  run_job "$run.alone" alone $flags
  # shellcheck disable=SC2086
  run_job "$run" attack $flags
  for t in $TASKS; do
    a=$(cat "$WORK/peak.$run.alone.$t" 2>/dev/null || echo 0)
    b=$(cat "$WORK/peak.$run.$t" 2>/dev/null || echo 0)
    echo "$run: $t peak resident memory $a kB alone, $b kB under attack"
    [ "$a" -gt 0 ] && [ "$b" -gt 0 ] || fail "$run: no peak memory read for $t"
    [ "$b" -le $(( a + 262144 )) ] || fail "$run: $t's peak grew by more than 256 MiB under attack ($a -> $b kB)"
  done
done
echo "PASS"
