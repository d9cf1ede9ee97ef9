"""The split-K rewrite put in place by SGLang's own plugin framework (tools/engines/sglang/splitk_plugin.py).

The probe runs in a fresh ``TRITON_INTERPRET=1`` process (Triton reads it at import) with the launch
environment ``splitk_plugin.launch_env`` gives: SGLang's real ``load_plugins`` must find the entry point
through the shipped dist-info alone, and then both callers of ``flash_mla_sparse_decode_triton`` must reach
the split-K function: SGLang's own sm_120 dispatcher (``flash_mla_with_kvcache_sm120``) and the reference
engine's ``sglang-triton`` backend (what the stand-in's ranks run). A stand-in server launched with that
environment must serve its decode steps through it too (its log says so).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.engines.sglang import splitk_plugin

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, sys, torch
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from tools.engines.sglang import splitk_plugin
import sglang.kernels.ops.attention.flash_mla_sm120_triton as sm120_triton
from sglang.kernels.ops.attention.flash_mla_sm120 import flash_mla_with_kvcache_sm120
from tools.engines.reference.attention import load_backend
from tools.kernels import dsv4_cache
from tools.kernels.splitk.check import make_case, compare, verdict, OUT_NORM_REL_MAX_VS_UPSTREAM as OUT_MAX

case = make_case(2, 32, 4, "cpu", seed=3, extra=True, sink=True)
args = (case["q"], case["k_cache"], case["indices"], case["topk_length"], case["attn_sink"], dsv4_cache.HEAD_DIM,
        case["softmax_scale"], case["extra_k_cache"], case["extra_indices"], case["extra_topk_length"])
result = {"patched": sorted(HookRegistry._patched)}
original = getattr(sm120_triton.flash_mla_sparse_decode_triton, "__wrapped__", None)
result["wraps_upstream"] = original is not None and original.__module__ == sm120_triton.__name__
from tools.kernels import upstream
assert upstream.load() is sm120_triton  # SGLang's module, loaded: the interpreter's pinned autotune config
ref_out, ref_lse = original(*args)  # SGLang's own function, the one replaced: the drop-in must agree with it
before = splitk_plugin.calls
out, lse = flash_mla_with_kvcache_sm120(
    q=case["q"], k_cache=case["k_cache"], indices=case["indices"], topk_length=case["topk_length"],
    attn_sink=case["attn_sink"], head_dim_v=dsv4_cache.HEAD_DIM, softmax_scale=None,
    extra_k_cache=case["extra_k_cache"], extra_indices_in_kvcache=case["extra_indices"],
    extra_topk_length=case["extra_topk_length"])
result["dispatcher_calls"] = splitk_plugin.calls - before
result["dispatcher_vs_upstream"] = errs = compare(out, lse, ref_out, ref_lse)
errs["ok"] = verdict(errs, OUT_MAX)
before = splitk_plugin.calls
out, lse = load_backend("sglang-triton")(*args)
result["reference_calls"] = splitk_plugin.calls - before
result["reference_vs_upstream"] = errs = compare(out, lse, ref_out, ref_lse)
errs["ok"] = verdict(errs, OUT_MAX)
print(json.dumps(result))
"""


def _launch_env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_PLUGINS"}
    wanted = splitk_plugin.launch_env(REPO)
    wanted["PYTHONPATH"] = wanted["PYTHONPATH"].replace("$PYTHONPATH", env.get("PYTHONPATH", ""))
    return {**env, **wanted, "TRITON_INTERPRET": "1", **extra}


def test_the_launch_environment_names_this_repository_the_plugin_directory_and_the_triton_backend():
    env = splitk_plugin.launch_env("/opt/perf-investigator")
    assert env == {"SGLANG_SM120_FLASHMLA_BACKEND": "triton",
                   "PYTHONPATH": "/opt/perf-investigator:/opt/perf-investigator/tools/engines/sglang/plugin:$PYTHONPATH"}
    dist = splitk_plugin.PLUGIN_DIR / "perf_investigator_splitk-1.0.dist-info" / "entry_points.txt"
    assert f"[{splitk_plugin.GROUP}]\n{splitk_plugin.NAME} = {splitk_plugin.__name__}:register" in dist.read_text()


@pytest.fixture(scope="module")
def probe():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=_launch_env(), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_sglangs_own_plugin_loader_finds_the_entry_point_and_replaces_the_function(probe):
    result, stderr = probe
    assert splitk_plugin.TARGET in result["patched"]
    assert result["wraps_upstream"]  # SGLang's REPLACE wrapper, the original kept as __wrapped__


def test_sglangs_sm120_dispatcher_calls_the_split_k_function_and_it_decodes_right(probe):
    result, stderr = probe
    assert result["dispatcher_calls"] == 1
    assert result["dispatcher_vs_upstream"]["ok"], result["dispatcher_vs_upstream"]
    assert f"{splitk_plugin.ANNOUNCE} flash_mla_sparse_decode_triton served by {splitk_plugin.SPLITK}" in stderr


def test_the_reference_engines_sglang_triton_backend_calls_it_where_sglangs_plugins_are_loaded(probe):
    result, _ = probe
    assert result["reference_calls"] == 1
    assert result["reference_vs_upstream"]["ok"], result["reference_vs_upstream"]


def test_a_stand_in_launched_with_the_recommended_environment_decodes_through_the_split_k_function(tmp_path):
    """The stand-in's rank processes load SGLang's plugins as SGLang's scheduler processes do; with the launch
    environment ``agent recommend`` prints, each rank's decode calls the split-K function (its log line names
    the rank's pid), and the request is answered."""
    from test_sglang_standin import StandIn, post, server_info

    server = StandIn(tmp_path, ["--model-path", "/models/absent"], env=_launch_env())
    try:
        server.wait_up()
        status, body, _ = post(server.url + "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 2}})
        assert status == 200, body
        ranks = {r["pid"] for r in server_info(server)["standin"]["ranks"]}
        log = server.log()
        served = {int(pid) for pid in __import__("re").findall(
            rf"{splitk_plugin.ANNOUNCE} flash_mla_sparse_decode_triton served by {splitk_plugin.SPLITK} \(pid (\d+)\)", log)}
        assert served == ranks, log[-3000:]
        assert "attention sglang-triton" in log  # the stand-in's backend for SGLANG_SM120_FLASHMLA_BACKEND=triton
    finally:
        assert server.stop() == 0, server.log()[-2000:]
