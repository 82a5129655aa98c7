#!/usr/bin/env bash
# kill -9 of a ps process mid-training: the chief pauses, the restarted ps task (launch
# --restart-failed) is dialed again at its address, every shard rolls back to the newest
# checkpoint (written in the chief's directory), and the job completes. Judged from
# what the ps tasks applied: their ledgers (the restarted task's restored with its
# state, so the roll-back cut it back exactly as it cut back the values) hold every
# step of the data exactly once, and both workers' final pulls equal the final
# checkpoint's values. Tensors go on the data plane (the workers connect it to the new
# ps process too), or with the argument "basp" over BASP.
. "$(dirname "$0")/lib.sh"
MODE=${1:-data_plane}
M="$WORK/m.jsonl"
extra=()
[ "$MODE" = basp ] && extra=(--no-data-plane)
launch_linear --checkpoint-dir "$WORK/ck" --checkpoint-every 500 "${extra[@]}"
wait_steps "$M" 1200 60
kill -9 "$(pid_of "$WORK/out" ps:0)"
wait $L; rc=$?
cat "$WORK/out"
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -q "launch: ps:0 killed by signal 9" "$WORK/out" || fail "the kill was not seen"
grep -qF "[chief:0] ps shard 0 lost (remote_link_unreachable (the connection to its process was lost))" "$WORK/out" || fail "no loss reported"
grep -q "\[chief:0\] ps shard 0 is back at 127.0.0.1:" "$WORK/out" || fail "the ps task was not dialed again"
grep -q '"event":"ps_restored"' "$M" || fail "no ps_restored event"
grep -qF "[chief:0] chief:0 done: 4000 steps" "$WORK/out" || fail "not exactly 4000 steps"
grep -qF "[ps:0] ps:0 done" "$WORK/out" || fail "the restarted ps task was not stopped at the end"
ls "$WORK/ck" | grep -q ckpt- || fail "no checkpoint in the chief's directory"
for w in 0 1; do
  n=$(grep -c "\[worker:$w\] .*ps shard 0: data plane: connected to 127.0.0.1:" "$WORK/out")
  if [ "$MODE" = basp ]; then
    [ "$n" -eq 0 ] || fail "worker:$w opened a data plane although --no-data-plane"
  else
    [ "$n" -eq 2 ] || fail "worker:$w connected its data plane to ps shard 0 $n time(s), not twice"
    grep -q "\[worker:$w\] .*ps shard 1: data plane: connected to 127.0.0.1:" "$WORK/out" || fail "worker:$w: no data plane to ps 1"
  fi
done
same_histories "$WORK/out" worker:0 worker:1
ledger_exact 4000 "$WORK/run/cluster.json"
# The final checkpoint's manifest keeps the same ledgers.
ledger_exact 4000 "$WORK/run/cluster.json" "$WORK/ck"
final_digests "$WORK/out" "$WORK/ck" worker:0 worker:1
echo "PASS"
