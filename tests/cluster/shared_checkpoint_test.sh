#!/usr/bin/env bash
# checkpoint.shared with real processes: every ps task writes its own partitions into
# the checkpoint directory and the chief commits the manifests (no tensor reaches the
# chief for a checkpoint). kill -9 of a ps mid-training: it comes back and every shard
# is restored from those checkpoints; the job completes, the ps tasks' ledgers hold
# every step of the data exactly once, `actortrain inspect` validates the newest
# checkpoint (every CRC and shape), and the workers' final pulls equal its values.
. "$(dirname "$0")/lib.sh"
M="$WORK/m.jsonl"
launch_linear --checkpoint-dir "$WORK/ck" --checkpoint-shared --checkpoint-every 500
wait_steps "$M" 1200 60
kill -9 "$(pid_of "$WORK/out" ps:1)"
wait $L; rc=$?
cat "$WORK/out"
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -q '"shared": true' "$WORK/run/cluster.json" || fail "the cluster file does not declare checkpoint.shared"
grep -q "launch: ps:1 killed by signal 9" "$WORK/out" || fail "the kill was not seen"
grep -q '"event":"ps_restored"' "$M" || fail "no ps_restored event"
grep -qF "[chief:0] chief:0 done: 4000 steps" "$WORK/out" || fail "not exactly 4000 steps"
n=$(grep -c '"event":"checkpoint"' "$M")
[ "$n" -ge 3 ] || fail "$n checkpoints committed, expected at least 3"
! grep '"event":"checkpoint"' "$M" | grep -Ev '"bytes_to_coordinator":0(\.0)?[,}]' | grep -q . ||
  fail "tensors went to the chief for a shared checkpoint: $(grep '"event":"checkpoint"' "$M" | head -2)"
"$AT" inspect "$WORK/ck" >"$WORK/inspect" 2>&1 || fail "inspect: $(cat "$WORK/inspect")"
cat "$WORK/inspect"
ls "$WORK/ck" | grep -q "^\.probe" && fail "a ps task left its probe file"
ledger_exact 4000 "$WORK/run/cluster.json"
final_digests "$WORK/out" "$WORK/ck" worker:0 worker:1
echo "PASS"
