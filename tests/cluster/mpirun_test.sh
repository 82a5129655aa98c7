#!/usr/bin/env bash
# The Fashion-MNIST job under Open MPI's mpirun: `mpirun -np 5` runs chief + 2 ps + 2
# workers; each rank publishes its address in a rendezvous directory (--rendezvous) and
# takes its role from --jobs. Checked:
#  1. sync, TLS with one certificate per rank from a shared directory (each rank picks
#     its own by OMPI_COMM_WORLD_RANK): the same per-epoch history and step count as
#     `actortrain launch` with the same seed;
#  2. a worker killed, then a ps killed: mpirun aborts every rank (its default) and exits
#     non-zero within a bound; the same mpirun with --resume goes on from the last
#     checkpoint and completes the job;
#  3. the same sync job across five network namespaces (netns.sh), mpirun's rsh agent a
#     wrapper that enters the namespace of the host it is asked for: each rank publishes
#     its own interface's address, every task is at its host's address, TLS between
#     hosts, and the history is launch's.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/engines.sh"
. "$(dirname "$0")/netns.sh"
need_command mpirun openmpi-bin
export AT WORK
"$(dirname "$0")/../../tools/make-certs" "$WORK/certs" rank0 rank1 rank2 rank3 rank4 >/dev/null || fail "make-certs"
ARGS="--epochs 2 --limit 6000 --seed 3"

# Runs `mpirun -np 5` of the job with the node flags in $1 and the job's flags in $2;
# rank N's output goes to $WORK/$3.N (appended).
mpi_run() {
  local node_flags=$1 job_flags=$2 out=$3
  timeout 150 "${MPIRUN[@]}" -np 5 bash -c 'r=$OMPI_COMM_WORLD_RANK; exec "$AT" node --example fashion_mnist \
      --jobs chief=1,ps=2,worker=2 --rendezvous "$WORK/rendezvous" '"$node_flags"' -- '"$job_flags"' \
      >>"$WORK/'"$out"'.$r" 2>&1'
}
show() { local r; for r in 0 1 2 3 4; do sed "s/^/$r: /" "$WORK/$1.$r" 2>/dev/null; done; }
mkdir -p "$WORK/rendezvous"

# 1. sync over TLS
PB=$(free_port_block 5)
echo '{"consistency": "sync"}' >"$WORK/sync.json"
mpi_run "--port-base $PB --cluster $WORK/sync.json --tls-cert $WORK/certs/rank\$r.pem --tls-key $WORK/certs/rank\$r.key \
  --tls-ca $WORK/certs/ca.pem --ledger $WORK/ledger.sync.\$r.json" "$ARGS" sync
rc=$?
show sync
[ $rc -eq 0 ] || fail "mpirun (sync, TLS) exited with $rc"
grep -q "^task chief:0 of chief 1, ps 2, worker 2 at 127.0.0.1:$PB (from MPI (OMPI_COMM_WORLD_RANK 0 of 5))" \
  "$WORK/sync.0" || fail "rank 0 did not print where it runs"
grep -q "^task worker:1 of chief 1, ps 2, worker 2 at 127.0.0.1:$((PB + 4))" "$WORK/sync.4" || fail "rank 4 is not worker:1"
timeout 120 "$AT" launch --example fashion_mnist --ps 2 --workers 2 --consistency sync --dir "$WORK/launch" -- $ARGS \
  >"$WORK/launch.out" 2>&1 || { cat "$WORK/launch.out"; fail "launch failed"; }
want=$(grep -F "[chief:0] epoch" "$WORK/launch.out" | sed -E 's/^\[chief:0\] //')
got=$(grep -E "^epoch [0-9]+/" "$WORK/sync.0")
[ -n "$want" ] && [ "$got" = "$want" ] || fail "mpirun's history differs from launch's: mpirun:
$got
launch:
$want"
ls=$(grep -oE "\[chief:0\] chief:0 done: [0-9]+ steps" "$WORK/launch.out" | awk '{print $4}')
grep -q "^chief:0 done: $ls steps" "$WORK/sync.0" || fail "mpirun did not apply launch's $ls steps"
cat "$WORK"/sync.[0-4] >"$WORK/sync.all"
LAUNCH_OUT="$WORK/launch.out" JOB_ARGS="$ARGS" same_job_as_launch "$WORK/sync.all" "$WORK"/ledger.sync.*.json
echo "sync over TLS: the same history and $ls steps as launch"

# 2. a rank killed: mpirun aborts the others; --resume completes from the checkpoint.
# Long enough that the kill below lands mid-job (at 4 epochs the same check under srun
# once came after the job had ended).
LONG="--epochs 10 --limit 30000 --seed 3"
cat >"$WORK/ck.json" <<JSON
{"secret": "$SECRET", "checkpoint": {"dir": "$WORK/ck", "shared": true, "every_steps": 20},
 "timeouts": {"request_ms": 3000, "connect_ms": 20000}}
JSON
for victim_rank in 3 1; do  # worker:0, then ps:0
  PB=$(free_port_block 5)
  rm -f "$WORK/m.jsonl"
  mpi_run "--port-base $PB --cluster $WORK/ck.json" "$LONG --metrics $WORK/m.jsonl" "kill$victim_rank" &
  M=$!
  wait_steps "$WORK/m.jsonl" 60 90
  victim=$(rank_pid OMPI_COMM_WORLD_RANK $victim_rank)
  [ -n "$victim" ] || fail "no process of rank $victim_rank"
  start=$(date +%s)
  kill -9 $victim
  wait $M
  rc=$?
  took=$(( $(date +%s) - start ))
  show "kill$victim_rank"
  [ $rc -ne 0 ] || fail "mpirun succeeded with rank $victim_rank killed"
  [ $took -le $((20 * SCALE)) ] || fail "mpirun took $took s to end after rank $victim_rank was killed"
  # What mpirun ended (SIGTERM, then SIGKILL) is gone within its own grace.
  for i in $(seq 100); do [ -z "$(rank_pid WORK "$WORK")" ] && break; sleep 0.1; done
  [ -z "$(rank_pid WORK "$WORK")" ] || fail "ranks outlived mpirun by 10 s: $(rank_pid WORK "$WORK")"
  mpi_run "--port-base $PB --cluster $WORK/ck.json --resume" "$LONG" "resume$victim_rank"
  rc=$?
  show "resume$victim_rank"
  [ $rc -eq 0 ] || fail "mpirun --resume exited with $rc"
  grep -q "^epoch 10/10:" "$WORK/resume$victim_rank.0" || fail "the resumed job did not reach epoch 10"
  grep -qE "resum" "$WORK/resume$victim_rank.0" || fail "the chief did not say it resumed"
  echo "rank $victim_rank killed: mpirun ended every rank within $took s; mpirun --resume completed the job"
  rm -rf "$WORK/ck"
done

# 3. across hosts: mpirun runs in host 0 and reaches hosts n0..n4 through the wrapper.
netns_setup 5
cat >"$WORK/rsh" <<WRAP
#!/bin/sh
# mpirun's rsh agent: HOST COMMAND..., HOST being n<i>, run inside that host's namespace.
# The hosts share one /tmp and one host name, so each daemon gets a session directory
# of its own: in the shared /tmp/ompi.HOST.UID/ two daemons racing to create the same
# job directory made one fail ("mkdir ... File exists", orte_session_dir failed).
host=\$1; shift
mkdir -p "$WORK/ompi-\$host"
OMPI_MCA_orte_tmpdir_base="$WORK/ompi-\$host" exec ip netns exec $NS_PREFIX-h\${host#n} sh -c "\$*"
WRAP
chmod +x "$WORK/rsh"
PB=$(free_port_block 1)
timeout 150 ip netns exec "${HOST_NS[0]}" "${MPIRUN[@]}" --host n0,n1,n2,n3,n4 -np 5 --mca plm_rsh_agent "$WORK/rsh" \
  bash -c 'r=$OMPI_COMM_WORLD_RANK; exec "$AT" node --example fashion_mnist --jobs chief=1,ps=2,worker=2 \
    --rendezvous "$WORK/rendezvous" --port-base '"$PB"' --cluster "$WORK/sync.json" --tls-cert "$WORK/certs/rank$r.pem" \
    --tls-key "$WORK/certs/rank$r.key" --tls-ca "$WORK/certs/ca.pem" -- '"$ARGS"' >>"$WORK/hosts.$r" 2>&1'
rc=$?
show hosts
[ $rc -eq 0 ] || fail "mpirun across namespaces exited with $rc"
for r in 0 1 2 3 4; do
  grep -q " at ${HOST_IP[$r]}:$PB (from MPI (OMPI_COMM_WORLD_RANK $r of 5))" "$WORK/hosts.$r" ||
    fail "rank $r is not at its own host's address ${HOST_IP[$r]}:$PB"
done
got=$(grep -E "^epoch [0-9]+/" "$WORK/hosts.0")
[ "$got" = "$want" ] || fail "the history across namespaces differs from launch's:
$got
launch:
$want"
grep -q "^chief:0 done: $ls steps" "$WORK/hosts.0" || fail "across namespaces: not launch's $ls steps"
echo "across five namespaces: every rank at its own host's address, the same history and $ls steps as launch"
echo "PASS"
