#!/usr/bin/env bash
# Nsight Compute on the sm_120 family's kernels on the Hopper proxy (wgmma lowering off) and on the Hopper
# plan's kernels at the same cells (scripts/h200/sm120_ncu.py: 64x2048 and 4x1024, one cache, H = 64), issue 29.
# Each side is first timed without the profiler (CUDA-graph replays, interleaved; this also fills Triton's
# on-disk cache, keyed by DISABLE_MMA_V3), then profiled in a process of its own: launch, occupancy, speed of
# light, compute (pipes), memory (tables: shared-memory bank conflicts), warp states, instruction statistics
# and the per-instruction stall sampling (SourceCounters). No carry needed. Results land in $OUT as each side
# ends (what is there comes back if the call runs out of time).
# SM120_NCU_EXTRA (scripts/h200/sm120_ncu.py): variants checked, timed and profiled beside the plan's configs;
# SKIP_NCU=1: the timings only; NCU_SIDES: the sides profiled (default "proxy hopper"); TIME_SIDES: "proxy" leaves
# the Hopper plan untimed (its profiled duration stands).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=/tmp/sm120_ncu; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/nvidia-smi.csv"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/nvidia-smi.csv"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
pack() {  # the text results and the cubins so far, into $OUT
  tar czf "$OUT/sm120_ncu_text.tgz" -C $W $(cd $W && ls | grep -v -E "ncu-rep$|^cubins_")
  tar czf "$OUT/sm120_ncu_cubins.tgz" -C $W $(cd $W && ls -d cubins_* 2>/dev/null)
}
if [ "${SKIP_NCU:-0}" != 1 ]; then  # a machine whose profiler cannot read the counters (gVisor): timings only
  timeout 60 "$NCU" --metrics gpu__time_duration.sum python3 -c "import torch; (torch.ones(8, device='cuda') + 1).sum().item()" \
    > $W/ncu_probe.txt 2>&1
  "$NCU" --version | tee $W/ncu_version.txt
  if ! grep -q "^ *gpu__time_duration.sum" $W/ncu_probe.txt; then cat $W/ncu_probe.txt; SKIP_NCU=1; fi
fi
SECTIONS=(--section LaunchStats --section Occupancy --section SpeedOfLight --section ComputeWorkloadAnalysis
  --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Chart --section MemoryWorkloadAnalysis_Tables
  --section SchedulerStats --section WarpStateStats --section InstructionStats --section SourceCounters)
profile() {  # $1: side; the rest: its env
  local side=$1; shift
  if [ "${SKIP_NCU:-0}" = 1 ] || [[ " ${NCU_SIDES:-proxy hopper} " != *" $side "* ]]; then return; fi
  timeout 200 "$@" "$NCU" --clock-control none --cache-control none --nvtx --nvtx-include "sm120_ncu/" -k regex:"_split|_combine" \
    "${SECTIONS[@]}" --import-source no -f -o "$W/$side" python3 -m scripts.h200.sm120_ncu $side $W > $W/ncu_$side.log 2>&1
  grep -v "^==PROF==" $W/ncu_$side.log | tail -20
  "$NCU" --import "$W/$side.ncu-rep" --page details > "$W/details_$side.txt"
  "$NCU" --import "$W/$side.ncu-rep" --page raw --csv > "$W/raw_$side.csv"
  "$NCU" --import "$W/$side.ncu-rep" --page source --csv --print-source sass > "$W/source_$side.csv" 2> "$W/source_$side.err"
  cp "$W/$side.ncu-rep" "$OUT/"
  pack
  grep -E "^  [_a-zA-Z]|Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" $W/details_$side.txt | head -60
}
PROXY=(env DISABLE_MMA_V3=1 PERF_INVESTIGATOR_SPLITK_ARCH=120)
HOPPER=(env -u DISABLE_MMA_V3 -u PERF_INVESTIGATOR_SPLITK_ARCH -u SM120_NCU_EXTRA)
# the proxy timed (and compiled), then profiled; the Hopper plan profiled (compiling it), then timed
timeout 150 "${PROXY[@]}" python3 -m scripts.h200.sm120_ncu proxy $W --time 2>&1 | tee $W/time_proxy.log
pack
profile proxy "${PROXY[@]}"
profile hopper "${HOPPER[@]}"
if [[ " ${TIME_SIDES:-proxy hopper} " = *" hopper "* ]]; then
  timeout 90 "${HOPPER[@]}" python3 -m scripts.h200.sm120_ncu hopper $W --time 2>&1 | tee $W/time_hopper.log
  pack
fi
ls -la "$OUT"
