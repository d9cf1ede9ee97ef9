#!/usr/bin/env bash
# Nsight Compute on the sm_120 family's kernels on the Hopper proxy (wgmma lowering off) and on the Hopper
# plan's kernels at the same cells (scripts/h200/sm120_ncu.py: 64x2048 and 4x1024, one cache, H = 64), issue 29.
# First each side is timed without the profiler (CUDA-graph replays, interleaved; this also fills Triton's
# on-disk cache, keyed by DISABLE_MMA_V3), then each is profiled in a process of its own: launch, occupancy,
# speed of light, compute (pipes), memory (tables: shared-memory bank conflicts), warp states, instruction
# statistics and the per-instruction stall sampling (SourceCounters). No carry needed. Everything lands in $OUT.
# SM120_NCU_EXTRA (scripts/h200/sm120_ncu.py): variants timed and profiled beside the plan's configs; SKIP_NCU=1:
# the timings only; NCU_SIDES: the sides profiled (default "proxy hopper").
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=/tmp/sm120_ncu; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/nvidia-smi.csv"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/nvidia-smi.csv"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ "${SKIP_NCU:-0}" != 1 ]; then  # a machine whose profiler cannot read the counters (gVisor) stops here
  timeout 60 "$NCU" --metrics gpu__time_duration.sum python3 -c "import torch; (torch.ones(8, device='cuda') + 1).sum().item()" \
    > $W/ncu_probe.txt 2>&1
  if ! grep -q "^ *gpu__time_duration.sum" $W/ncu_probe.txt; then cat $W/ncu_probe.txt; cp $W/ncu_probe.txt "$OUT/"; exit 3; fi
fi
PROXY=(env DISABLE_MMA_V3=1 PERF_INVESTIGATOR_SPLITK_ARCH=120)
HOPPER=(env -u DISABLE_MMA_V3 -u PERF_INVESTIGATOR_SPLITK_ARCH)
timeout 240 "${PROXY[@]}" python3 -m scripts.h200.sm120_ncu proxy $W --time 2>&1 | tee $W/time_proxy.log
timeout 120 "${HOPPER[@]}" python3 -m scripts.h200.sm120_ncu hopper $W --time 2>&1 | tee $W/time_hopper.log
if [ "${SKIP_NCU:-0}" != 1 ]; then
  "$NCU" --version | tee $W/ncu_version.txt
  SECTIONS=(--section LaunchStats --section Occupancy --section SpeedOfLight --section ComputeWorkloadAnalysis
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Chart --section MemoryWorkloadAnalysis_Tables
    --section SchedulerStats --section WarpStateStats --section InstructionStats --section SourceCounters)
  for side in ${NCU_SIDES:-proxy hopper}; do
    if [ $side = proxy ]; then E=("${PROXY[@]}"); else E=("${HOPPER[@]}"); fi
    timeout 240 "${E[@]}" "$NCU" --clock-control none --nvtx --nvtx-include "sm120_ncu/" -k regex:"_split|_combine" \
      "${SECTIONS[@]}" --import-source no -f -o "$W/$side" python3 -m scripts.h200.sm120_ncu $side $W 2>&1 \
      | tee $W/ncu_$side.log | grep -v "^==PROF==" | tail -30
    "$NCU" --import "$W/$side.ncu-rep" --page details > "$W/details_$side.txt"
    "$NCU" --import "$W/$side.ncu-rep" --page raw --csv > "$W/raw_$side.csv"
    "$NCU" --import "$W/$side.ncu-rep" --page source --csv --print-source sass > "$W/source_$side.csv" 2> "$W/source_$side.err"
    cp "$W/$side.ncu-rep" "$OUT/"
  done
  grep -E "^  [_a-zA-Z]|Duration|Registers Per|Achieved Occupancy|Theoretical Occ|Block Limit Reg|Warp Cycles Per Issued|Compute \(SM\) Thr|Memory Thr" \
    $W/details_proxy.txt $W/details_hopper.txt | head -120
fi
tar czf "$OUT/sm120_ncu_text.tgz" -C $W $(cd $W && ls | grep -v -E "ncu-rep$|^cubins_")
tar czf "$OUT/sm120_ncu_cubins.tgz" -C $W $(cd $W && ls -d cubins_* 2>/dev/null)
ls -la "$OUT"
