# Real cluster engines for the tests, started and stopped by the test itself within
# bounded time, everything under $WORK (sourced after lib.sh):
#   slurm_start   a single-node Slurm (munged, slurmctld, slurmd) with a slurm.conf of
#                 its own on free ports; exports SLURM_CONF; stopped at exit
#   MPIRUN        Open MPI's mpirun with the flags a root, 2-core machine needs
# tools/setup installs both (slurm-wlm, munge, openmpi-bin).

# Stops the daemon whose pid file is $1: TERM, then KILL after 10 s.
stop_daemon() {
  local pid i
  pid=$(cat "$1" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
}

slurm_start() {
  need_command slurmctld slurm-wlm
  need_command munged munge
  local d=$WORK/slurm host ports
  host=$(hostname -s)
  mkdir -p "$d/munge" "$d/state" "$d/spool"
  chmod 755 "$d/munge"
  head -c 1024 /dev/urandom >"$d/munge.key"
  chmod 400 "$d/munge.key"
  munged --force --key-file="$d/munge.key" --socket="$d/munge/munge.sock" --pid-file="$d/munge/munged.pid" \
    --log-file="$d/munge/munged.log" --seed-file="$d/munge/seed" || fail "munged did not start"
  AT_CLEANUP+=("stop_daemon '$d/munge/munged.pid'")
  read -r P_CTLD P_SLURMD <<<"$(free_ports 2 | tr '\n' ' ')"
  cat >"$d/slurm.conf" <<CONF
ClusterName=actortrain
SlurmctldHost=$host
SlurmctldPort=$P_CTLD
SlurmdPort=$P_SLURMD
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmUser=root
SlurmdUser=root
MailProg=/bin/true
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=actortrain Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF=$d/slurm.conf
  slurmctld -c -f "$SLURM_CONF" || fail "slurmctld did not start: $(tail -5 "$d/slurmctld.log")"
  AT_CLEANUP+=("stop_daemon '$d/slurmctld.pid'")
  slurmd -c -f "$SLURM_CONF" || fail "slurmd did not start: $(tail -5 "$d/slurmd.log")"
  AT_CLEANUP+=("stop_daemon '$d/slurmd.pid'")
  local i state=""
  for i in $(seq 100); do
    state=$(timeout 5 sinfo -h -N -o %T 2>/dev/null)
    [ "$state" = idle ] && return 0
    sleep 0.1
  done
  fail "the Slurm node is '$state', not idle, 10 s after start: $(tail -5 "$d/slurmd.log")"
}

# rtc ^hwloc: Open MPI 4.1's orted shares its hwloc topology through shared memory
# mapped at a fixed address, and crashed there once in CI (a segfault in
# hwloc_shmem_topology_write starting the daemons across namespaces); the tasks are not
# bound (--bind-to none), so that component has nothing to do.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca rtc ^hwloc)

# The pids of the actortrain processes whose environment has $1=$2 (a rank under srun
# or mpirun), one per line; with $3, only those whose command line holds it (one
# launch's --port-base: the tasks of an earlier run or another test are not taken).
rank_pid() {
  local q
  for q in $(if [ -n "${3:-}" ]; then pgrep -f -- "$3"; else pgrep -x actortrain; fi); do
    [ "$(cat /proc/$q/comm 2>/dev/null)" = actortrain ] || continue
    tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | grep -qx "$1=$2" && echo "$q"
  done
}

# Evidence an engine's sync run ($1: its output; $2...: the ledger files its ps ranks
# wrote) holds the same job as launch's ($LAUNCH_OUT), from what the ps shards hold, not
# from what the chief says: `actortrain ledger check` finds every step of the run
# exactly once on every partition, as many as launch's ps tasks applied, and each worker
# pulled from the ps shards at the end the parameters launch's workers pulled (the
# digest; sync with one seed is deterministic). Job flags in $JOB_ARGS.
same_job_as_launch() {
  local out=$1 steps d want got
  shift
  steps=$(grep -oE "\[ps:0\] ps:0 done: [0-9]+ steps" "$LAUNCH_OUT" | awk '{print $4}')
  [ -n "$steps" ] || fail "launch's ps:0 reported no steps"
  "$AT" ledger check --example fashion_mnist --workers 2 --consistency sync "$@" -- $JOB_ARGS >"$WORK/check" 2>&1 ||
    { cat "$WORK/check"; fail "ledger check failed on $*"; }
  grep -qF ": $steps step(s) on every one of" "$WORK/check" ||
    { cat "$WORK/check"; fail "the ps ledgers do not hold launch's $steps steps"; }
  want=$(grep -oE "worker:[01] final parameters: digest [0-9a-f]+" "$LAUNCH_OUT" | sort)
  got=$(grep -oE "worker:[01] final parameters: digest [0-9a-f]+" "$out" | sort)
  [ "$(echo "$want" | wc -l)" -eq 2 ] && [ "$got" = "$want" ] ||
    fail "the workers' final parameters differ from launch's: $got / $want"
  echo "the ps ledgers hold $steps steps exactly once; the workers' final parameters are launch's"
}
