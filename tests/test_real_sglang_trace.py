"""The real sglang 0.5.17 server's recordings (issue #34; tests/data/real-sglang-0517-h100, from an H100 on
2026-12-07, its README says how): its decode trace read by tools.trace, and the stand-in's trace names held to it.
The stand-in's /generate fields and profile answer are held to the same recording in tests/test_sglang_standin.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tools.engines.sglang_standin import profiling
from tools.trace import summarize
from tools.trace.categories import categorizer
from tools.trace.steps import UNNUMBERED, numbered

DATA = Path(__file__).resolve().parent / "data" / "real-sglang-0517-h100"
TRACE = next(DATA.glob("*-DECODE.trace.json.gz"))
SMOKE = json.loads((DATA / "smoke.json").read_text())


def test_the_real_decode_traces_steps_are_sglangs_step_spans():
    summary = summarize([TRACE])
    merged = summary.merged
    assert summary.kind == "gpu"
    # three decode steps at batch 4 (the smoke's profile: num_steps 3 under 4 requests), each a step[DECODE bs=4]
    # span on the host and on every stream its CUDA graph forked to, and no ProfilerStep#N in the file
    assert merged.steps == 3 and [w.step for w in merged.step_windows] == [0, 1, 2]
    assert merged.cuda_graph.launches == 3 and merged.cuda_graph.launches_with_kernels == 3
    # the windows hold the steps' kernels: in them and outside them is all the kernel time
    inside = math.fsum(w.kernel_time_us for w in merged.step_windows)
    assert math.isclose(inside + merged.outside_steps_us, merged.kernel_time_us, rel_tol=1e-9)
    assert merged.outside_steps_us < 0.1 * merged.kernel_time_us
    assert merged.in_step_window_us < merged.window_us


def test_numbered_makes_one_step_of_a_steps_streams_and_keeps_the_profilers_numbers():
    spans = [(UNNUMBERED, 10.0, 5.0), (UNNUMBERED, 0.0, 4.0), (UNNUMBERED, 1.0, 2.0), (UNNUMBERED, 10.5, 1.0)]
    assert numbered(spans) == [(0, 0.0, 4.0), (0, 1.0, 2.0), (1, 10.0, 5.0), (1, 10.5, 1.0)]
    assert numbered([(3, 0.0, 1.0), (UNNUMBERED, 5.0, 1.0)]) == [(3, 0.0, 1.0)]
    assert numbered([]) == []


def test_the_real_servers_kernels_fall_in_their_categories():
    merged = summarize([TRACE]).merged
    names = {k.name for k in merged.kernels}
    category = categorizer()

    def of(fragment: str) -> str:
        return category(next(n for n in names if fragment in n))

    assert of("flashinfer::norm::RMSNormKernel") == "elementwise/reduce"  # "flash" alone read it as attention
    assert of("flash_fwd_splitkv_mla_fp8_sparse_kernel") == "attention"  # FlashMLA's sparse FP8 decode
    assert of("flash_fwd_mla_combine_kernel") == "attention"
    for fragment in ("mhc_pre_big_fuse_with_norm_tilelang_kernel", "mhc_post_tilelang_kernel", "_hc_head_kernel",
                     "per_token_group_quant_flat_kernel"):
        assert of(fragment) == "elementwise/reduce", fragment
    assert of("deep_gemm::sm90_fp8_gemm_1d2d_impl") == "gemm/moe"
    assert merged.categories["other"] < 0.02 * merged.kernel_time_us


def test_the_standin_names_its_traces_as_the_real_server_did():
    traces = SMOKE["profile"]["traces"]
    assert {t["stage"] for t in traces} == {"DECODE", "EXTEND"}
    for trace in traces:
        name = Path(trace["name"]).name
        assert profiling.trace_name(trace["profile_id"], None, trace["tp"], 1, trace["stage"].lower()) == name


def test_the_real_servers_long_kernel_names_are_named_by_meaning():
    from tools.trace.kernel_names import kernel_names

    meanings = {entry["meaning"] for entry in kernel_names([TRACE]).values()}
    assert {"FlashMLA sparse decode (fp8 KV cache)", "FlashMLA split-KV combine", "DeepGEMM GEMM (fp8)",
            "DeepGEMM indexer logits (fp8, paged MQA)", "DeepGEMM hyper-connection pre-norm GEMM (tf32)",
            "activation FP8 group quantization", "FlashInfer RMSNorm"} <= meanings


def test_a_binary_kernels_launch_configuration_comes_from_the_trace():
    from tools.trace.launches import LaunchConfig, launch_configs

    kernels = summarize([TRACE]).merged.kernels
    kernel = next(k.name for k in kernels if "flash_fwd_splitkv_mla_fp8_sparse_kernel" in k.name)
    (config,) = launch_configs(TRACE, kernel)
    # FlashMLA's sparse decode (a binary in sgl_kernel: no source to read its grid from) as CUPTI recorded it:
    # one CTA of 384 threads on each of the H100's 132 SMs, once per layer (4) a step (3)
    assert (config.grid, config.block, config.registers_per_thread, config.shared_memory_bytes) == (
        (1, 1, 132), (384, 1, 1), 168, 208896)
    assert config.launches == 12 and config.median_us > 0
    assert launch_configs(TRACE, "no such kernel") == [] and isinstance(config, LaunchConfig)


def test_the_grid_step_reads_a_binary_kernels_launches_from_the_profiles_trace():
    from types import SimpleNamespace

    from agent.steps.grid import launch_text, launches_from_trace

    kernel = next(k.name for k in summarize([TRACE]).merged.kernels if "flash_fwd_mla_combine_kernel" in k.name)
    session = SimpleNamespace(artifact_path=lambda ref: DATA / ref["path"])
    profile = SimpleNamespace(artifacts={"trace": TRACE.name})
    (launch,) = launches_from_trace(session, profile, kernel)
    assert (launch["grid"], launch["block"], launch["launches"]) == ([4, 1, 8], [256, 1, 1], 12)
    assert launch_text(launch).startswith("grid 4 x 1 x 8 of 256 x 1 x 1 threads, 48 registers a thread, 5,120 B")
    # a host range (the stand-in's dominant) or a profile without a trace: nothing, so the finding is as before
    assert launches_from_trace(session, profile, "standin:scheduler_overhead") == []
    assert launches_from_trace(session, SimpleNamespace(artifacts={}), kernel) == []
    assert launches_from_trace(session, SimpleNamespace(artifacts={"trace": "missing.json.gz"}), kernel) == []


def test_a_client_that_timed_no_streamed_token_fails_the_run_not_its_tpot():
    """The real server with --skip-tokenizer-init streamed ids without text: SGLang's client then timed no TTFT and
    no ITL, and its 'TPOT' was each request's whole latency over 127 tokens. The run fails (no_stream); a stand-in
    run whose client timed its stream passes the same check."""
    import pytest

    from tools.engines.sglang import client
    from tools.engines.sglang.server import RunFailed

    real = json.loads((DATA / "client-skip-tokenizer-init.jsonl").read_text().splitlines()[-1])
    assert real["completed"] == 32 and real["median_tpot_ms"] > 0 and real["median_ttft_ms"] == 0
    # the client's TPOT is the whole latency over the tokens after the first: the prefill is inside it
    assert real["median_tpot_ms"] == pytest.approx(real["median_e2e_latency_ms"] / 127, rel=0.02)
    with pytest.raises(RunFailed) as failed:
        client.unstreamed(real)
    assert failed.value.kind == "no_stream" and "32 completed requests" in str(failed.value)
    streamed = Path(__file__).resolve().parent / "data" / "sglang-pd-standin-run" / "artifacts"
    record = json.loads(next(streamed.glob("*/baseline_r1.jsonl")).read_text().splitlines()[-1])
    assert any(record["itls"]) and any(record["ttfts"])
    client.unstreamed(record)  # timed: no failure
