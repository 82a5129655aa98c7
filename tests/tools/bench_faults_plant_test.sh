#!/usr/bin/env bash
# bench faults' exactly-once verdict can fail: with a defect planted in the processes (a
# worker reports a step applied without pushing it; test-only) the ledger checker it runs
# finds violations in every run (the fault-free runs before and after the faulty one,
# and the faulty run), although the chief reports the usual step count. The bench keeps
# its directory as evidence; the test removes it.
out=$(ACTORTRAIN_PLANT_DEFECT=skip_step timeout 280 "$ACTORTRAIN" bench faults --epochs 2 --kill worker@3 2>&1)
rc=$?
echo "$out" | grep -v '^\['
dir=$(echo "$out" | sed -n 's/^logs, metrics, ledgers and checkpoints: //p')
[ -n "$dir" ] && [ "${dir#/tmp/actortrain-bench-faults-}" != "$dir" ] && rm -rf "$dir"
[ $rc -eq 0 ] || { echo "FAIL: bench faults exited with $rc"; exit 1; }
echo "$out" | grep -qE "^fault-free: .*ledger check: [1-9][0-9]* violation" || { echo "FAIL: no violation in the fault-free run"; exit 1; }
echo "$out" | grep -qE "^faulty: .*ledger check: [1-9][0-9]* violation" || { echo "FAIL: no violation in the faulty run"; exit 1; }
echo "$out" | grep -qE "^fault-free, after: .*ledger check: [1-9][0-9]* violation" || { echo "FAIL: no violation in the second fault-free run"; exit 1; }
echo "$out" | grep -qE "^goodput .*the mean of 2 fault-free runs" || { echo "FAIL: the goodput is not against both fault-free runs"; exit 1; }
echo "$out" | grep -qF "exactly once (NOT MET)" || { echo "FAIL: the goal line does not say NOT MET"; exit 1; }
[ -n "$dir" ] || { echo "FAIL: the evidence directory was not kept"; exit 1; }
echo PASS
