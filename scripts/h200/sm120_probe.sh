#!/usr/bin/env bash
# A first look at the sm_120 plan on the H200 (issue 29): each cell timed by `python -m tools.kernels.splitk
# bench` twice, in processes of their own: the Hopper plan as shipped, and the sm_120 plan
# (PERF_INVESTIGATOR_SPLITK_ARCH=120) with Triton's wgmma lowering off (DISABLE_MMA_V3=1: the dots become
# the mma.sync sm_120 has). Then the sm_120 plan's check on the GPU. Results as JSON lines under $OUT.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
CELLS=${CELLS:-"1:512 4:2048 16:1024 16:2048 64:2048 128:512"}
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/nvidia-smi.csv"
for cell in $CELLS; do
  b=${cell%%:*}; k=${cell##*:}
  for form in one two; do
    extra=(); [ "$form" = two ] && extra=(--engine-call --extra-topk "$k" --sink)
    kk=$k; [ "$form" = two ] && kk=128
    timeout 120 python3 -m tools.kernels.splitk bench --batch "$b" --topk "$kk" --seed 1 --no-upstream "${extra[@]}" \
      | python3 -c "import json,sys; d=json.load(sys.stdin); d['plan']='hopper'; d['form']='$form'; print(json.dumps(d))" >> "$OUT/probe.jsonl"
    timeout 120 python3 -m tools.kernels.splitk bench --plan-arch 120 --batch "$b" \
      --topk "$kk" --seed 1 --no-upstream "${extra[@]}" \
      | python3 -c "import json,sys; d=json.load(sys.stdin); d['plan']='sm120'; d['form']='$form'; print(json.dumps(d))" >> "$OUT/probe.jsonl"
  done
done
python3 - "$OUT/probe.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    sass = {k: (v.get("HMMA"), v.get("HGMMA"), v.get("LDL")) for k, v in r.get("sass", {}).items() if isinstance(v, dict)}
    print(f"{r['form']:3s} {r['plan']:6s} B={r['shape']['batch']:4d} K={r['shape']['topk']:5d} {r['config_name']:14s} "
          f"{str(r.get('extra_config_name')):14s} splits={r['splits']} graph={r['rewrite_graph_us']:9.1f} us sass={sass}")
PY
timeout 200 python3 -m tools.kernels.splitk check --plan-arch 120 --batch 3 --topk 150 \
  --device cuda --no-upstream > "$OUT/check_sm120.json"; echo "check rc=$?"; head -c 1500 "$OUT/check_sm120.json"; echo
