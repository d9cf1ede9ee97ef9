#!/usr/bin/env bash
# The investigation against a real sglang 0.5.17 server on the GPU machine (issue #34), longer than one
# 10-minute command: `start` installs the agent's wheels (.whl/r1, .whl/r2 and .whl/mpl: .whl/agent in two halves, see README.md) and starts
# `python -m agent investigate dsv4-scaled-sglang-h100 --decide auto` in a session of its own (setsid: it
# outlives the command), with .carry/site (the server and client groups, installed by carry.py) on PYTHONPATH;
# `poll SECONDS` waits up to SECONDS for it to end, prints its log's tail, and once it has ended packs the run
# into $OUT/run.tgz (at every poll: the run so far) and says when it has ended. Each call must start within 30 s of the last one's end, or the
# machine goes back and the run with it.
set -uo pipefail
RUNS=/tmp/real-runs
LOG=$RUNS/investigate.log
RUN_ID=${RUN_ID:-dsv4-scaled-sglang-h100}

case "${1:-}" in
start)
  python3 -m pip install -q --no-index --find-links .whl/r1 --find-links .whl/r2 --find-links .whl/mpl langgraph langgraph-checkpoint-sqlite gitpython \
    pydantic msgspec matplotlib==3.11.2 jinja2==3.1.6 || exit 1
  mkdir -p "$RUNS"
  # JIT caches from an earlier machine (`caches` below, carried as .carry/jit/jit.tgz): a fresh machine's first
  # launch compiled for 318 s without them (attempt 8); whether the same image reuses them is untried
  if [ -f .carry/jit/jit.tgz ]; then tar xzf .carry/jit/jit.tgz -C ~ && echo "JIT caches unpacked into ~"; fi
  target=dsv4-scaled-sglang-h100
  if [ -n "${LEVERS:-}" ]; then
    # the device budget left for fewer levers (attempt 8): the target with only these, said in its description
    target=$RUNS/dsv4-scaled-sglang-h100.yaml
    LEVERS=$LEVERS python3 - "$target" <<'PY' || exit 1
import os, sys, yaml
spec = yaml.safe_load(open("agent/targets/dsv4-scaled-sglang-h100.yaml"))
keep = [] if os.environ["LEVERS"] == "none" else os.environ["LEVERS"].split(",")
left = [lever["name"] for lever in spec["levers"] if lever["name"] not in keep]
spec["levers"] = [lever for lever in spec["levers"] if lever["name"] in keep]
assert [lever["name"] for lever in spec["levers"]] == keep, keep
spec["description"] += (f" Levers swept: {', '.join(keep) or 'none'}; {', '.join(left)} left out for the device time "
                        "this session had (benchmarks/results/real-sglang-20261207 has one round of each).")
yaml.safe_dump(spec, open(sys.argv[1], "w"), sort_keys=False)
PY
  fi
  PYTHONPATH=.carry/site:$PWD PYTHONUNBUFFERED=1 setsid nohup python3 -m agent investigate "$target" \
    --runs-dir "$RUNS" --run-id "$RUN_ID" --decide auto -v >"$LOG" 2>&1 </dev/null &
  echo $! >"$RUNS/pid"
  sleep 5
  tail -n 20 "$LOG"
  ;;
poll)
  pid=$(cat "$RUNS/pid") || exit 1
  end=$((SECONDS + ${2:-500}))
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
  tail -n 40 "$LOG"
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
  # the run so far comes back at every poll: a machine taken back mid-run still leaves its journal here
  cp "$LOG" "$OUT/"
  tar czf "$OUT/run.tgz" -C "$RUNS" "$RUN_ID" 2>/dev/null
  # and the tool call in flight: the box tool's folder (server and client logs, results so far), traces left out
  (cd /tmp && tar czf "$OUT/box.tgz" --exclude='*.trace.json.gz' box-* 2>/dev/null)
  if kill -0 "$pid" 2>/dev/null; then echo "RUNNING"; exit 0; fi
  PYTHONPATH=.carry/site:$PWD python3 -m agent runs --runs-dir "$RUNS" || true
  echo "ENDED"
  ;;
caches)
  # The JIT caches a fresh machine's first launch fills (attempt 7: 313.7 s of the decode graph's capture): what
  # they hold and, packed, what a later session would carry to skip that compile.
  for d in ~/.deep_gemm ~/.cache/deep_gemm ~/.tilelang ~/.cache/tilelang ~/.cache/flashinfer ~/.triton/cache \
    ~/.cache/tvm-ffi ~/.cache/sglang ~/.cache/torch_extensions; do [ -d "$d" ] && du -sh "$d"; done
  (cd ~ && tar czf "$OUT/jit.tgz" --ignore-failed-read .deep_gemm .cache/deep_gemm .tilelang .cache/tilelang \
    .cache/flashinfer .triton/cache .cache/tvm-ffi .cache/sglang .cache/torch_extensions 2>/dev/null)
  ls -la "$OUT/jit.tgz"
  ;;
*)
  echo "usage: $0 start | poll SECONDS | caches" >&2
  exit 2
  ;;
esac
