#!/usr/bin/env bash
# The rewrite at every grid cell (benchmarks/sparse_mla_decode.py --grid, both forms and index patterns) twice,
# each in a process of its own: as the box plans it (on an H200/H100: the Hopper kernels) and as the sm_120
# plan (--plan-arch 120: the sm_120 family, Triton's wgmma lowering off), the two runs back to back on one GPU.
# FlashMLA and upstream are not timed here (--grid-impls rewrite). Writes $OUT/hopper and $OUT/sm120.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.csv"
B=${GRID_BUDGET_S:-110}
timeout $((B + 60)) python3 -m benchmarks.sparse_mla_decode --grid --grid-impls rewrite --grid-budget-s "$B" \
  --out "$OUT/hopper" 2> "$OUT/hopper_log.txt" | tail -n 2
timeout $((B + 60)) python3 -m benchmarks.sparse_mla_decode --grid --grid-impls rewrite --plan-arch 120 --grid-budget-s "$B" \
  --out "$OUT/sm120" 2> "$OUT/sm120_log.txt" | tail -n 2
rm -f "$OUT"/*/grid_partial.json
tail -n 2 "$OUT/hopper_log.txt" "$OUT/sm120_log.txt"
