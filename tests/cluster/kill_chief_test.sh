#!/usr/bin/env bash
# kill -9 of the chief mid-training: the ps tasks live on, the workers dial the chief's
# address again (for request_ms; a supervisor restarts one that gave up), and a chief
# restarted with --resume
# continues the run from the newest checkpoint in its directory (rolling the living ps
# shards back to it, their ledgers with them). The run completes: the ps tasks' ledgers
# hold every step of the data exactly once, and each worker's final pull equals the
# final checkpoint's values.
. "$(dirname "$0")/lib.sh"
read -r PC P0 P1 W0 W1 <<<"$(free_ports 5 | tr '\n' ' ')"
M="$WORK/m.jsonl"
cat >"$WORK/c.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$PC"], "ps": ["127.0.0.1:$P0", "127.0.0.1:$P1"],
             "worker": ["127.0.0.1:$W0", "127.0.0.1:$W1"]},
 "secret": "$SECRET", "checkpoint": {"dir": "$WORK/ck", "every_steps": 500},
 "timeouts": {"connect_ms": 20000}}
JSON
node() { timeout 120 "$AT" node --example linear --cluster "$WORK/c.json" --task "$@" -- --epochs 2 --examples 40000 --metrics "$M" --verbose 2; }
# A worker restarted until it succeeds (at most 4 tries), as a supervisor would.
supervised() {
  local t
  for t in 1 2 3 4; do node "$1" && return 0; echo "$1: try $t failed; restarting"; done
  return 1
}
node ps:0 --ledger "$WORK/ps0.json" >"$WORK/ps0" 2>&1 & p0=$!
node ps:1 --ledger "$WORK/ps1.json" >"$WORK/ps1" 2>&1 & p1=$!
supervised worker:0 >"$WORK/w0" 2>&1 & w0=$!
supervised worker:1 >"$WORK/w1" 2>&1 & w1=$!
# Not under `timeout` (kill -9 must reach the process itself); the trap ends it if need be.
"$AT" node --example linear --cluster "$WORK/c.json" --task chief:0 -- --epochs 2 --examples 40000 --metrics "$M" \
  --verbose 2 >"$WORK/chief1" 2>&1 &
c1=$!
wait_steps "$M" 1200 60
kill -9 $c1
wait $c1 2>/dev/null
lost_at=$(grep -c '"event":"step"' "$M")
node chief:0 --resume >"$WORK/chief2" 2>&1; rc=$?
wait $w0; r0=$?
wait $w1; r1=$?
wait $p0; q0=$?
wait $p1; q1=$?
for f in chief1 chief2 w0 w1 ps0 ps1; do echo "== $f"; grep -v "^epoch" "$WORK/$f" | tail -6; done
[ $rc -eq 0 ] || fail "the resumed chief exited with $rc"
[ $r0 -eq 0 ] && [ $r1 -eq 0 ] || fail "workers exited with $r0 and $r1"
[ $q0 -eq 0 ] && [ $q1 -eq 0 ] || fail "ps tasks exited with $q0 and $q1"
grep -q "resuming the run" "$WORK/chief2" || fail "the second chief did not resume"
grep -qF "chief:0 done: 4000 steps" "$WORK/chief2" || fail "the resumed run did not end at 4000 steps"
grep "^epoch" "$WORK/chief2" >"$WORK/h.c"
[ "$(wc -l <"$WORK/h.c")" -eq 2 ] || fail "the resumed chief printed $(wc -l <"$WORK/h.c") epochs, not 2"
grep "^epoch" "$WORK/w0" | tail -2 | cmp -s - "$WORK/h.c" || fail "worker 0's history differs"
grep "^epoch" "$WORK/w1" | tail -2 | cmp -s - "$WORK/h.c" || fail "worker 1's history differs"
echo "chief killed after $lost_at applied steps"
ledger_exact 4000 "$WORK/c.json" "$WORK/ps0.json" "$WORK/ps1.json"
final_digests "$WORK/w0" "$WORK/ck" worker:0
final_digests "$WORK/w1" "$WORK/ck" worker:1

# A chief that never comes back: the ps tasks do not linger (request_ms here).
read -r QC Q0 QW <<<"$(free_ports 3 | tr '\n' ' ')"
cat >"$WORK/o.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$QC"], "ps": ["127.0.0.1:$Q0"], "worker": ["127.0.0.1:$QW"]},
 "secret": "$SECRET", "timeouts": {"connect_ms": 20000, "request_ms": 3000}}
JSON
rm -f "$WORK/o.jsonl"
onode() { timeout 60 "$AT" node --example linear --cluster "$WORK/o.json" --task "$@" -- --epochs 5 --examples 40000 --metrics "$WORK/o.jsonl"; }
onode ps:0 >"$WORK/ops" 2>&1 & q0=$!
onode worker:0 >"$WORK/ow" 2>&1 & qw=$!
"$AT" node --example linear --cluster "$WORK/o.json" --task chief:0 -- --epochs 5 --examples 40000 --metrics "$WORK/o.jsonl" \
  >"$WORK/oc" 2>&1 &
qc=$!
wait_steps "$WORK/o.jsonl" 300 60
kill -9 $qc
start=$(date +%s)
wait $q0; rq=$?
took=$(( $(date +%s) - start ))
cat "$WORK/ops"
[ $rq -eq 138 ] || fail "the orphaned ps task exited with $rq, not 138 (restart me)"
grep -q "no coordinator came back within 3 s" "$WORK/ops" || fail "the orphaned ps task did not say why it ended"
[ $took -le 15 ] || fail "the orphaned ps task lingered $took s"
wait $qw
echo "PASS"
