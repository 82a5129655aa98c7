#!/usr/bin/env bash
# The Fashion-MNIST job under a real Slurm (one node, started and stopped here):
# `srun -n 5` runs chief + 2 ps + 2 workers; each task finds its place in Slurm's
# variables (--resolver auto) and the roles in --jobs. Checked:
#  1. sync, TLS with one certificate per rank from a shared directory (each task picks
#     its own by SLURM_PROCID): the same per-epoch history and step count as
#     `actortrain launch` with the same seed;
#  2. async, plain (the step is on this host alone: loopback, the data plane): the same
#     step count as launch, and srun's median training accuracy of the last epoch over 5
#     runs within 0.01 of the range of launch's 5;
#  3. a worker killed: Slurm restarts nothing and keeps the other tasks; the job ends
#     with the other worker, every other task exits 0;
#  4. a ps killed: the survivors wait request_ms for a replacement, then exit 138 (restart
#     me); the same srun with --resume goes on from the last checkpoint and completes.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/engines.sh"
need_command srun slurm-wlm
slurm_start
export AT WORK
CERTS=$WORK/certs
"$(dirname "$0")/../../tools/make-certs" "$CERTS" rank0 rank1 rank2 rank3 rank4 >/dev/null || fail "make-certs"
JOB=(--example fashion_mnist)
ARGS=(--epochs 2 --limit 6000 --seed 3)

# The same job by `actortrain launch`, for comparison: $1 consistency, $2 output.
baseline() {
  timeout 120 "$AT" launch "${JOB[@]}" --ps 2 --workers 2 --consistency "$1" --dir "$WORK/launch-$1" -- "${ARGS[@]}" \
    >"$2" 2>&1 || { cat "$2"; fail "launch ($1) failed"; }
  grep -F "[chief:0] epoch" "$2" | sed -E 's/^\[chief:0\] //'
}
# srun's chief (rank 0) lines, without srun's "0: " label.
chief_epochs() { grep -E '^0: epoch [0-9]+/' "$1" | sed -E 's/^0: //'; }
steps_of() { grep -oE "^$2: chief:0 done: [0-9]+ steps" "$1" | awk '{print $4}'; }
# The last epoch's training accuracy (the mean over its 30,000 samples).
train_acc() { tail -1 | grep -oE ' accuracy [0-9.]+' | awk '{print $2}'; }

# 1. sync over TLS
PB=$(free_port_block 5)
# Registration gets 30 s instead of 10: ctest runs this beside the attack test on 2
# cores, and TLS handshakes under that load once took the workers past 10 s.
echo '{"consistency": "sync", "timeouts": {"connect_ms": 30000}}' >"$WORK/sync.json"
timeout 120 srun -l -n 5 bash -c 'exec "$AT" node --example fashion_mnist --jobs chief=1,ps=2,worker=2 \
    --port-base '"$PB"' --cluster "$WORK/sync.json" --tls-cert "$WORK/certs/rank$SLURM_PROCID.pem" \
    --tls-key "$WORK/certs/rank$SLURM_PROCID.key" --tls-ca "$WORK/certs/ca.pem" \
    --ledger "$WORK/ledger.sync.$SLURM_PROCID.json" -- '"${ARGS[*]}" >"$WORK/sync" 2>&1
rc=$?
cat "$WORK/sync"
[ $rc -eq 0 ] || fail "srun (sync, TLS) exited with $rc"
grep -q "^0: task chief:0 of chief 1, ps 2, worker 2 at 127.0.0.1:$PB (from Slurm (rank 0 of 5 on " "$WORK/sync" ||
  fail "rank 0 did not print where it runs"
grep -q "^4: task worker:1 of chief 1, ps 2, worker 2 at 127.0.0.1:$((PB + 4))" "$WORK/sync" || fail "rank 4 is not worker:1"
want=$(baseline sync "$WORK/launch-sync.out")
got=$(chief_epochs "$WORK/sync")
[ -n "$want" ] && [ "$got" = "$want" ] || fail "srun's history differs from launch's: srun:
$got
launch:
$want"
ls=$(grep -oE "\[chief:0\] chief:0 done: [0-9]+ steps" "$WORK/launch-sync.out" | awk '{print $4}')
[ "$(steps_of "$WORK/sync" 0)" = "$ls" ] || fail "srun applied $(steps_of "$WORK/sync" 0) steps, launch $ls"
LAUNCH_OUT="$WORK/launch-sync.out" JOB_ARGS="${ARGS[*]}" same_job_as_launch "$WORK/sync" "$WORK"/ledger.sync.*.json
echo "sync over TLS: the same history and $ls steps as launch"

# 2. async, plain. Asynchrony makes each run's accuracy its own, so five runs of each,
# alternated: the same step count every time, and srun's median accuracy within 0.01 of
# the range of launch's. The accuracy compared is the last epoch's training accuracy, a
# mean over its 30,000 samples (0.839-0.849 in 18 runs of either, some beside a busy
# core): val_accuracy is one moment's, on 7,500 images, and a late stale step moves it.
# Under ctest beside the attack test it spread from 0.826 to 0.854 and failed this
# check once in CI though both ran the same job.
echo "{\"secret\": \"$SECRET\", \"timeouts\": {\"connect_ms\": 30000}}" >"$WORK/async.json"
ASYNC=(--epochs 2 --limit 30000 --seed 3)
accs_srun="" accs_launch=""
for round in 1 2 3 4 5; do
  PB=$(free_port_block 5)
  timeout 120 srun -l -n 5 "$AT" node "${JOB[@]}" --jobs chief=1,ps=2,worker=2 --port-base "$PB" \
    --cluster "$WORK/async.json" -- "${ASYNC[@]}" >"$WORK/async" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$WORK/async"; fail "srun (async) exited with $rc"; }
  grep -q "tensors in shared memory" "$WORK/async" || fail "the async step did not use the data plane"
  timeout 120 "$AT" launch "${JOB[@]}" --ps 2 --workers 2 --dir "$WORK/launch-async" -- "${ASYNC[@]}" \
    >"$WORK/launch-async.out" 2>&1 || { cat "$WORK/launch-async.out"; fail "launch (async) failed"; }
  rm -rf "$WORK/launch-async"
  ls=$(grep -oE "\[chief:0\] chief:0 done: [0-9]+ steps" "$WORK/launch-async.out" | awk '{print $4}')
  [ "$(steps_of "$WORK/async" 0)" = "$ls" ] || fail "srun applied $(steps_of "$WORK/async" 0) steps, launch $ls"
  accs_srun="$accs_srun $(chief_epochs "$WORK/async" | train_acc)"
  accs_launch="$accs_launch $(grep -F "[chief:0] epoch" "$WORK/launch-async.out" | sed -E 's/^\[chief:0\] //' | train_acc)"
done
python3 - "$accs_srun" "$accs_launch" <<'PY' || fail "async accuracy: srun $accs_srun, launch $accs_launch"
import statistics, sys
s = [float(x) for x in sys.argv[1].split()]
l = [float(x) for x in sys.argv[2].split()]
m = statistics.median(s)
print(f"async: srun median accuracy {m:.4f} (runs {s}), launch's runs {l}")
sys.exit(0 if min(l) - 0.01 <= m <= max(l) + 0.01 else 1)
PY
echo "async: $ls steps as launch in each of 5 runs; accuracy srun$accs_srun, launch$accs_launch"

# 3. a worker killed: the job goes on with the other one.
# Long enough that the kill below lands mid-job: at 4 epochs (2 s of training on this
# machine beside other tests) the job once ended before the test's kill reached it.
LONG=(--epochs 10 --limit 30000 --seed 3)
PB=$(free_port_block 5)
timeout 150 srun -l -n 5 "$AT" node "${JOB[@]}" --jobs chief=1,ps=2,worker=2 --port-base "$PB" \
  --cluster "$WORK/async.json" -- "${LONG[@]}" --metrics "$WORK/w.jsonl" >"$WORK/kw" 2>&1 &
S=$!
wait_steps "$WORK/w.jsonl" 40 90
victim=$(rank_pid SLURM_PROCID 4 "--port-base $PB")
[ -n "$victim" ] || fail "no process of rank 4"
kill -9 $victim
wait $S
rc=$?
cat "$WORK/kw"
[ $rc -eq 137 ] || fail "srun exited with $rc, not 137 (its killed task's status)"
grep -q "^0: chief:0 done: [0-9]* steps" "$WORK/kw" || fail "the chief did not finish the job"
for r in 0 1 2 3; do
  grep -qE "^$r: (chief|ps|worker):[0-9] done:" "$WORK/kw" || fail "rank $r did not finish"
done
grep -qE "srun: error: .*task(s)? [0-3]" "$WORK/kw" && fail "srun reports a failed task besides the killed one"
echo "a worker killed: the other tasks finished the job"

# 4. a ps killed: no replacement comes; the survivors exit 138; --resume completes.
PB=$(free_port_block 5)
cat >"$WORK/ck.json" <<JSON
{"secret": "$SECRET", "checkpoint": {"dir": "$WORK/ck", "shared": true, "every_steps": 20},
 "timeouts": {"request_ms": 3000, "connect_ms": 20000}}
JSON
run_ck() {
  timeout 150 srun -l -n 5 "$AT" node "${JOB[@]}" --jobs chief=1,ps=2,worker=2 --port-base "$PB" \
    --cluster "$WORK/ck.json" "$@" -- "${LONG[@]}" --metrics "$WORK/p.jsonl"
}
run_ck >"$WORK/kp" 2>&1 &
S=$!
wait_steps "$WORK/p.jsonl" 60 90
victim=$(rank_pid SLURM_PROCID 1 "--port-base $PB")
[ -n "$victim" ] || fail "no process of rank 1"
start=$(date +%s)
kill -9 $victim
wait $S
rc=$?
took=$(( $(date +%s) - start ))
cat "$WORK/kp"
[ $rc -ne 0 ] || fail "srun succeeded without its ps"
for r in 0 2 3 4; do
  grep -qE "^$r: error: .*\(exit 138: restart this task\)" "$WORK/kp" || fail "rank $r did not exit 138"
done
[ $took -le $((30 * SCALE)) ] || fail "the survivors took $took s to give up"
ls "$WORK/ck" | grep -q . || fail "no checkpoint was written"
run_ck --resume >"$WORK/resumed" 2>&1
rc=$?
cat "$WORK/resumed"
[ $rc -eq 0 ] || fail "srun --resume exited with $rc"
grep -qE "^0: epoch 10/10:" "$WORK/resumed" || fail "the resumed job did not reach epoch 10"
echo "a ps killed: every survivor exited 138 within $took s; srun --resume completed the job"
echo "PASS"
