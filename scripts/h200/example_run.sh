#!/usr/bin/env bash
# The dsv4-flash investigation on an H200, with this machine as the (local) box. Run from the
# repository root on the GPU machine with .whl/agent (the agent's missing dependencies and the pinned
# report renderers, see scripts/h200/README.md), .whl/flashmla (the sgl-flash-mla wheel) and
# .device/sglang-py.tgz (sglang 0.5.23's Python source) carried. AGENT_WHEELS and SGLANG_SOURCE name
# smaller stand-ins for those two (wheels the image lacks; the source xz-compressed) when the tree is near 64 MiB. Packs the run into $OUT/run.tgz.
set -uo pipefail
python3 -m pip install -q --no-index --find-links "${AGENT_WHEELS:-.whl/agent}" langgraph langgraph-checkpoint-sqlite gitpython \
  pydantic msgspec matplotlib==3.11.2 jinja2==3.1.6 || exit 1
python3 -m pip install -q --no-index --no-deps .whl/flashmla/*.whl || echo "flash_mla did not install: the what-if will say so"
mkdir -p /tmp/sgl && tar xf "${SGLANG_SOURCE:-.device/sglang-py.tgz}" -C /tmp/sgl
export PYTHONPATH=/tmp/sgl:$PWD PYTHONUNBUFFERED=1
git config --global user.email >/dev/null || true
runs=/tmp/runs
python3 -m agent investigate dsv4-flash --runs-dir "$runs" --decide auto --run-id "${RUN_ID:-dsv4-flash-h200}"
rc=$?
python3 -m agent runs --runs-dir "$runs"
tar czf "$OUT/run.tgz" -C "$runs" .
exit $rc
