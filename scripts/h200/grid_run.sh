#!/usr/bin/env bash
# The split-K kernel's grid table (benchmarks/sparse_mla_decode.py --grid) and its correctness matrix
# (--matrix, the clustered variant included), written to $OUT. Run from the repository root on the H200
# with .whl/flashmla and .device/sglang-py.txz carried; GIT_REVISION names the revision measured.
# The grid stops starting cells after GRID_BUDGET_S seconds (the rest are listed as skipped); each part
# runs under its own time limit, so a slow grid cannot take the matrix with it.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps .whl/flashmla/*.whl || echo "flash_mla did not install: its column will say so"
mkdir -p /tmp/sgl && tar xf .device/sglang-py.txz -C /tmp/sgl
export PYTHONPATH=/tmp/sgl:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv | tee "$OUT/nvidia-smi.csv"
status=0
timeout "${GRID_LIMIT_S:-380}" python3 -m benchmarks.sparse_mla_decode --grid --grid-budget-s "${GRID_BUDGET_S:-300}" \
  --out "$OUT" 2>"$OUT/grid_log.txt" | tee "$OUT/grid_summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
timeout "${MATRIX_LIMIT_S:-200}" python3 -m benchmarks.sparse_mla_decode --matrix --out "$OUT" 2>"$OUT/matrix_log.txt" \
  | tee "$OUT/matrix_summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || [ "$status" -ne 0 ] || status=1
tail -n 3 "$OUT/grid_log.txt" "$OUT/matrix_log.txt"
exit $status
