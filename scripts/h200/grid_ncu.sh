#!/usr/bin/env bash
# Nsight Compute on a few grid cells (scripts/h200/grid_ncu.py): speed of light, occupancy, warp states
# (stall reasons), memory workload (L2 hit rate), launch and scheduler statistics, clocks left alone.
# Carry .whl/flashmla and .device/sglang-py.txz; the report, its details page and its raw metrics land in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps .whl/flashmla/*.whl || exit 1
mkdir -p /tmp/sgl && tar xf .device/sglang-py.txz -C /tmp/sgl
export PYTHONPATH=/tmp/sgl:$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
"$NCU" --version | tee "$OUT/ncu_version.txt"
"$NCU" --clock-control none --nvtx --nvtx-include "ncu_grid/" \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section LaunchStats --section SchedulerStats -f -o "$OUT/grid_ncu" \
  python3 -m scripts.h200.grid_ncu 2>&1 | tee "$OUT/grid_ncu_run.txt"
"$NCU" --import "$OUT/grid_ncu.ncu-rep" --page details > "$OUT/grid_ncu_details.txt"
"$NCU" --import "$OUT/grid_ncu.ncu-rep" --page raw --csv > "$OUT/grid_ncu_raw.csv"
grep -E "^  [_a-zA-Z]|Duration|Achieved Occupancy|L2 Hit Rate|Warp Cycles Per Issued" "$OUT/grid_ncu_details.txt" | head -150
