#!/usr/bin/env bash
# Capture the GPU test fixtures on an H200 machine. Run from the repository root with the sglang
# sources unpacked on PYTHONPATH; writes everything under OUTDIR (default $OUT/fixtures).
# Needs 2 GPUs for the two-rank trace; the other captures use GPU 0.
set -uo pipefail
out=${1:-$OUT/fixtures}
mkdir -p "$out/traces" "$out/sparse"
S=scripts.h200.capture_fixtures
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
stage() { local name=$1; shift; local t0=$SECONDS; timeout 300 "$@"; echo "stage $name rc=$? $((SECONDS - t0))s" >&2; }
stage device python3 -m $S device > "$out/device.json"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem --format=csv > "$out/nvidia-smi.csv"
stage metadata python3 -m $S metadata > "$out/sparse/triton_metadata.json"
for spec in "1 512 4096 2" "16 512 4096 2" "64 2048 16384 1"; do
  set -- $spec
  stage trace-B$1 python3 -m $S trace --batch $1 --topk $2 --context $3 --layers $4 \
    --out "$out/traces/dsv4-like-B$1-topk$2.trace.json.gz" >> "$out/traces/runs.jsonl"
done
stage graph python3 -m $S graph --batch 16 --topk 512 --out "$out/traces/dsv4-like-B16-topk512-cudagraph.trace.json.gz" >> "$out/traces/runs.jsonl"
mkdir -p "$out/traces/tp2"
stage tp python3 -m torch.distributed.run --nproc_per_node 2 -m $S tp --batch 16 --topk 512 --out "$out/traces/tp2" >> "$out/traces/runs.jsonl"
for spec in "1 512 4096" "64 2048 16384"; do
  set -- $spec
  stage ncu-B$1 ncu --clock-control none --nvtx --nvtx-include "ncu_measure/" -k regex:_tiled_sparse_decode_kernel \
    --section LaunchStats --section Occupancy --section SpeedOfLight --csv --page details \
    --log-file "$out/sparse/ncu_B$1_topk$2.csv" \
    python3 -m $S ncu --batch $1 --topk $2 --context $3 >> "$out/sparse/ncu_runs.jsonl"
done
ls -laR "$out" >&2
