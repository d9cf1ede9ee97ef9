#!/usr/bin/env bash
# The whole grid for the sm_120 issue, in two parts on one warm GPU machine (one device call each, back to back):
#   PART=hopper: the grid as the box plans it (the Hopper kernels) with FlashMLA and upstream, every impl;
#   PART=sm120:  the grid planned for sm_120 (--plan-arch 120: the sm_120 family, Triton's wgmma lowering off,
#                in a process of its own), then the correctness matrix under the same plan; each process
#                records the SASS mix of what it compiled and whether it is HMMA without HGMMA.
# Carry .whl/flashmla and .device/sglang-py.txz (scripts/h200/README.md). Writes $OUT/$PART/.
set -uo pipefail
PART=${PART:?PART=hopper or PART=sm120}
python3 -m pip install -q --no-index --no-deps .whl/flashmla/*.whl 2>/dev/null || echo "flash_mla did not install: its column will say so"
mkdir -p /tmp/sgl && tar xf .device/sglang-py.txz -C /tmp/sgl
export PYTHONPATH=/tmp/sgl:$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/$PART"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv | tee "$OUT/$PART/nvidia-smi.csv"
status=0
if [ "$PART" = hopper ]; then
  timeout "${GRID_LIMIT_S:-450}" python3 -m benchmarks.sparse_mla_decode --grid --grid-budget-s "${GRID_BUDGET_S:-400}" \
    --out "$OUT/hopper" 2>"$OUT/hopper/grid_log.txt" | tail -n 4 || status=1
else
  timeout "${GRID_LIMIT_S:-330}" python3 -m benchmarks.sparse_mla_decode --grid --grid-impls rewrite --plan-arch 120 \
    --grid-budget-s "${GRID_BUDGET_S:-290}" --out "$OUT/sm120" 2>"$OUT/sm120/grid_log.txt" | grep -v '^ ' | tail -n 4 || status=1
  timeout "${MATRIX_LIMIT_S:-220}" python3 -m benchmarks.sparse_mla_decode --matrix --plan-arch 120 --out "$OUT/sm120" \
    2>"$OUT/sm120/matrix_log.txt" | tail -n 3 || status=1
fi
rm -f "$OUT"/*/grid_partial.json
tail -n 2 "$OUT/$PART"/*_log.txt
exit $status
