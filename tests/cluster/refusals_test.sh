#!/usr/bin/env bash
# What a cluster of processes refuses, each with a message naming what is wrong: a task
# of another job (fingerprint), an unreachable coordinator (bounded retries, then the
# address), a bad cluster file (the field), bad flags (exit status 2). Exit statuses
# follow Kubeflow's ExitCode policy: another job's task is final (1); a peer that never
# came is worth a restart (138).
. "$(dirname "$0")/lib.sh"
read -r P0 P1 <<<"$(free_ports 2 | tr '\n' ' ')"
cat >"$WORK/c.json" <<JSON
{"cluster": {"worker": ["127.0.0.1:$P0", "127.0.0.1:$P1"]},
 "secret": "$SECRET", "timeouts": {"connect_ms": 4000, "heartbeat_ms": 200, "connection_ms": 2000}}
JSON

# 1. Another job: worker 1 builds a model with 6 inputs, worker 0 one with 5.
timeout 60 "$AT" node --example linear --cluster "$WORK/c.json" --task worker:0 >"$WORK/a" 2>&1 &
a=$!
timeout 60 "$AT" node --example linear --cluster "$WORK/c.json" --task worker:1 -- --features 6 >"$WORK/b" 2>&1
rb=$?
wait $a; ra=$?
cat "$WORK/a" "$WORK/b"
[ $rb -eq 1 ] || fail "the foreign worker exited with $rb, not 1"
grep -q "belongs to another job" "$WORK/b" || fail "no fingerprint message"
grep -q "model '" "$WORK/b" || fail "the message does not say the model differs"
grep -q "job 'linear(features=5" "$WORK/b" || fail "the message does not name the job"
[ $ra -eq 138 ] || fail "worker 0 exited with $ra, not 138 (its peer never registered: retry)"
grep -q "0 of 1 worker task(s) registered" "$WORK/a" || fail "worker 0 does not say who is missing"

# 2. Nobody listens at the coordinator's address: bounded retries, then its address.
start=$(date +%s)
timeout 60 "$AT" node --example linear --cluster "$WORK/c.json" --task worker:1 >"$WORK/u" 2>&1
ru=$?
took=$(( $(date +%s) - start ))
cat "$WORK/u"
[ $ru -eq 138 ] || fail "unreachable: exit status $ru, not 138 (retry)"
grep -q "cannot reach 127.0.0.1:$P0 within 4000 ms" "$WORK/u" || fail "unreachable: the address is not named"
[ $took -le 20 ] || fail "unreachable: took $took s"

# 3. Bad cluster files and flags: status 2, the field named.
echo '{"cluster": {"workers": ["127.0.0.1:1"]}}' >"$WORK/bad.json"
"$AT" node --example linear --cluster "$WORK/bad.json" --task worker:0 >"$WORK/f" 2>&1
[ $? -eq 2 ] || fail "bad file: status not 2"
grep -q "bad.json: cluster.workers: unknown task type 'workers'" "$WORK/f" || fail "bad file: $(cat "$WORK/f")"
echo '{"cluster": {"worker": ["10.1.2.3:7000"]}}' >"$WORK/far.json"
"$AT" node --example linear --cluster "$WORK/far.json" --task worker:0 >"$WORK/g" 2>&1
[ $? -eq 2 ] || fail "off-loopback without TLS: status not 2"
grep -q "is not a loopback address" "$WORK/g" || fail "off-loopback: $(cat "$WORK/g")"
"$AT" node --example linear --cluster "$WORK/c.json" --task worker:0 --no-such-flag >"$WORK/h" 2>&1
[ $? -eq 2 ] || fail "unknown flag: status not 2"
grep -q "unknown flag '--no-such-flag'" "$WORK/h" || fail "unknown flag: $(cat "$WORK/h")"
TF_CONFIG= "$AT" node --example linear >"$WORK/i" 2>&1
[ $? -eq 2 ] || fail "no cluster: status not 2"
grep -q "no cluster: give --cluster FILE, set TF_CONFIG, or start the tasks with srun or mpirun" "$WORK/i" || fail "no cluster: $(cat "$WORK/i")"
"$AT" launch --example nope >"$WORK/j" 2>&1
[ $? -eq 2 ] || fail "unknown example: status not 2"
grep -q "unknown job 'nope'" "$WORK/j" || fail "unknown example: $(cat "$WORK/j")"
echo "PASS"
