#!/usr/bin/env bash
# The grid cells of scripts/h200/grid_ncu.py replayed from CUDA graphs
# (scripts/h200/grid_timeline.py, PyTorch's profiler): the kernels as the grid times them, with the gaps between them.
# Carry .whl/flashmla and .device/sglang-py.txz; the summary (grid_timeline.json) lands in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps .whl/flashmla/*.whl || exit 1
mkdir -p /tmp/sgl && tar xf .device/sglang-py.txz -C /tmp/sgl
export PYTHONPATH=/tmp/sgl:$PWD PYTHONUNBUFFERED=1
python3 -m scripts.h200.grid_timeline /tmp/grid_timeline.json || exit 1
python3 -m scripts.h200.grid_timeline --summarize /tmp/grid_timeline.json > "$OUT/grid_timeline.json" || exit 1
gzip -c /tmp/grid_timeline.json > "$OUT/grid_timeline_trace.json.gz"
python3 -c "
import json; d = json.load(open('$OUT/grid_timeline.json'))
for r in d['ranges']:
    print(r['range'], '| span %.1f sum %.1f idle %.1f gap %.1f per call %.1f' % (r['median_span_us'], r['median_kernels_sum_us'], r['median_idle_in_span_us'], r['median_gap_to_next_us'] or 0, r['per_call_us']), r['kernel_median_us'])"
