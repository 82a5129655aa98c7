#!/usr/bin/env bash
# SIGSTOP of a worker and of a ps process: with heartbeats on both ends the chief
# notices within the connection timeout (2 s here) although no TCP connection closes.
# The stopped worker's steps go to the other one; the stopped ps task, once continued,
# is dialed again (a stopped process does not wedge the chief's connection attempts)
# and the shards roll back. The job completes with the exact step count.
. "$(dirname "$0")/lib.sh"
M="$WORK/m.jsonl"
launch_linear --heartbeat-ms 200 --connection-ms 2000 --checkpoint-dir "$WORK/ck" --checkpoint-every 500
wait_steps "$M" 800 60
W=$(pid_of "$WORK/out" worker:1)
kill -STOP "$W"
start=$(date +%s%N)
wait_line "$WORK/out" '\[chief:0\] worker 1 \(generation 1\) lost' 20
took=$(( ($(date +%s%N) - start) / 1000000 ))
echo "stopped worker noticed after $took ms"
[ $took -le 6000 ] || fail "the stopped worker was noticed after $took ms (connection timeout 2000 ms)"
kill -CONT "$W"  # it finds itself dropped and exits; launch restarts it
n=$(grep -c '"event":"step"' "$M")
wait_steps "$M" $(( n + 300 )) 60
P=$(pid_of "$WORK/out" ps:1)
kill -STOP "$P"
# The chief starts dialing the task again before it logs the loss: that first attempt
# meets a stopped process (it accepts, never answers) and must not wedge the later ones.
wait_line "$WORK/out" '\[chief:0\] ps shard 1 lost' 20
kill -CONT "$P"
wait $L; rc=$?
cat "$WORK/out"
[ $rc -eq 0 ] || fail "launch exited with $rc"
grep -q "\[chief:0\] ps shard 1 is back at 127.0.0.1:" "$WORK/out" || fail "the continued ps task was not dialed again"
grep -qF "[chief:0] chief:0 done: 4000 steps" "$WORK/out" || fail "not exactly 4000 steps"
echo "PASS"
