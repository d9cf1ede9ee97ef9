#!/usr/bin/env bash
# The sm_120 family's tile candidates timed on the Hopper proxy (scripts/h200/sm120_tune.py), after filling
# Triton's cache from one process per candidate side by side. CANDIDATES: scripts/sm120_candidates.py's JSON.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DISABLE_MMA_V3=1 PERF_INVESTIGATOR_SPLITK_ARCH=120
CANDIDATES=${CANDIDATES:-benchmarks/results/sm120-20261205/candidates_triton39.json}
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/tune_nvidia-smi.csv"
names=$(python3 -c "import json,sys; print(' '.join(r['name'] for r in json.load(open('$CANDIDATES'))['candidates'] if r['clean']))")
for n in $names; do timeout 240 python3 -m scripts.h200.sm120_tune "$CANDIDATES" /dev/null --warm "$n" > /dev/null 2>&1 & done
wait
timeout 300 python3 -m scripts.h200.sm120_tune "$CANDIDATES" "$OUT/tune.jsonl"
