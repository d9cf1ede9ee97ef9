#!/usr/bin/env bash
# The split-K kernel after a change to its modules: its GPU tests, then the benchmark's table and
# correctness matrix, written to $OUT (benchmarks/results' format) so the committed table can be held
# against it. Run from the repository root on the GPU machine with .whl/flashmla, .whl/pytest and
# .device/sglang-py.tgz carried (scripts/h200/README.md). Each part runs even if an earlier one fails;
# the exit status is the first failure's.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps .whl/flashmla/*.whl || echo "flash_mla did not install: its column will say so"
mkdir -p /tmp/sgl && tar xzf .device/sglang-py.tgz -C /tmp/sgl
export PYTHONPATH=/tmp/sgl:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps .whl/pytest/*.whl || echo "pytest did not install"
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.csv"
python3 -m pytest -q -p no:cacheprovider tests/test_sparse_mla_decode_gpu.py -rs 2>&1 | tee "$OUT/gpu_tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
python3 -m benchmarks.sparse_mla_decode --table --matrix --out "$OUT" 2>&1 | tail -40 | tee "$OUT/benchmark.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || [ "$status" -ne 0 ] || status=1
exit $status
