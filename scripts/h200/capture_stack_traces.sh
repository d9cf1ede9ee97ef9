#!/usr/bin/env bash
# The H200 traces with Python stacks for tests/test_trace_ops.py: the reference engine at the dsv4-flash
# GPU shapes, batch 16, sglang-triton, 3 profiled steps, CUDA graphs on, so that it writes the graph-replay
# trace and its eager twin. Run from the repository root on the GPU machine (kind nvidia-h200) with
# .whl/agent (for pydantic) and .device/sglang-py.tgz (sglang 0.5.23's Python source) carried, see
# scripts/h200/README.md. Writes OUTDIR (default $OUT/h200-traces-stacks); copy it to tests/data/.
set -uo pipefail
out=${1:-$OUT/h200-traces-stacks}
mkdir -p "$out"
python3 -c "import pydantic, yaml" 2>/dev/null || python3 -m pip install -q --no-index --find-links .whl/agent pydantic || exit 1
mkdir -p /tmp/sgl && tar xzf .device/sglang-py.tgz -C /tmp/sgl || exit 1
export PYTHONPATH=/tmp/sgl:$PWD PYTHONUNBUFFERED=1
timeout 540 python3 -m scripts.h200.capture_stack_traces "$out" || exit $?
nvidia-smi --query-gpu=name,driver_version --format=csv > "$out/nvidia-smi.csv"
cat > "$out/README.md" <<'TEXT'
# H200 traces with Python stacks

Recorded by `scripts/h200/capture_stack_traces.sh` on an `nvidia-h200` machine (`bench-result.json`
holds the spec, device and versions, `nvidia-smi.csv` the driver): the reference engine at the
dsv4-flash GPU shapes (4 layers, 32 experts, context 8192), batch 16, the sglang-triton backend
(SGLang 0.5.23's `flash_mla_sparse_decode_triton`), CUDA graphs on, 3 profiled steps, `with_stack=True`,
the attention call inside `record_function("op:sparse_decode")`.

| file | what |
| --- | --- |
| reference-B16-cudagraph.trace.json.gz | the setting as run: graph replays (kernels correlate to `cudaGraphLaunch`) |
| reference-B16-eager.trace.json.gz | the engine's eager twin of the same step, for attribution |
TEXT
ls -la "$out" >&2
