#!/usr/bin/env bash
# The sm_120 family's second design (flat S loop; P V whole, in halves or split over two programs) on the
# Hopper proxy, wgmma lowering off: the candidates that compile clean for sm_120 under Triton 3.9 and 3.6
# (scripts/sm120_candidates.py with SM120_FAMILY=2, candidates2_both.json) timed by scripts/h200/sm120_tune.py.
set -uo pipefail
CANDIDATES=${CANDIDATES:-benchmarks/results/sm120-20261207/candidates2_both.json} bash scripts/h200/sm120_tune.sh
# the box's own plan at the same cells, the baseline for the ratios (a process without the proxy's env)
env -u DISABLE_MMA_V3 -u PERF_INVESTIGATOR_SPLITK_ARCH PYTHONPATH=$PWD timeout 200 python3 -m scripts.h200.sm120_tune --hopper "$OUT/tune.jsonl"
