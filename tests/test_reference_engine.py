"""The reference engine as the agent uses it: real subprocesses of ``python -m tools.engines.reference``
at tiny shapes on the CPU (Triton under its interpreter), plus in-process checks of its parts."""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tools.engines.reference import attention, model, spec as spec_mod, work
from tools.kernels import dsv4_cache

REPO = Path(__file__).resolve().parents[1]
KERNEL = "_tiled_sparse_decode_kernel"

# Whole-model fields as a target file gives them; overrides shrink them for the CPU.
MODEL = {
    "hidden": 4096, "heads": 64, "nope_dim": 448, "rope_dim": 64, "q_lora_rank": 1024, "o_lora_rank": 1024,
    "index_topk": 512, "index_heads": 64, "index_head_dim": 128, "experts": 256, "experts_per_token": 6,
    "moe_intermediate": 2048, "shared_experts": 1, "layers": 4, "sliding_window": 128,
    "compress_ratios": [0, 4, 128, 4], "page_size": 256,
}
TINY = {
    "hidden": 256, "heads": 8, "q_lora_rank": 64, "o_lora_rank": 64, "index_topk": 64, "index_heads": 4,
    "index_head_dim": 64, "experts": 8, "experts_per_token": 2, "moe_intermediate": 128, "sliding_window": 64,
    "page_size": 128, "compress_ratios": [4, 128, 4, 128],
}


def tiny_spec(**changes) -> dict:
    """TP2 with 4 heads a rank padded to 8 for the kernel; one c4 and one c128 layer."""
    spec = {
        "device": "cpu", "model": MODEL, "tp": 2, "pad_heads_to": 8, "layers": 2, "experts": None,
        "attention": "torch", "batch_sizes": [1, 3], "context_len": 256, "steps": 3, "warmup": 1,
        "cuda_graph": False, "profile": None, "seed": 0, "overrides": TINY,
    }
    spec.update(changes)
    return spec


def run_engine(*args: str, python_flags: tuple[str, ...] = (), env: dict | None = None, timeout: int = 600):
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "tools.engines.reference", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env,
    )


def only_json(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, f"stdout must be exactly one JSON object, got {len(lines)} lines"
    return json.loads(lines[0])


def test_bench_json_contract_torch_backend(tmp_path):
    proc = run_engine("bench", "--spec", json.dumps(tiny_spec()), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = only_json(proc.stdout)
    assert out["ok"] is True and out["engine"] == "reference" and out["attention"] == "torch"
    assert out["device"] == {"type": "cpu", "name": out["device"]["name"], "sm_count": None, "capability": None}
    assert out["interpreter"] is False and out["trace"] is None and out["kernel_config"] is None
    assert "kernel_names" not in out  # no trace, no names (tests/test_kernel_names.py: the map of a GPU trace)
    shapes = out["shapes"]
    assert (shapes["heads_per_rank"], shapes["kernel_heads"]) == (4, 8)
    assert shapes["layer_ids"] == [0, 1] and shapes["layer_compress_ratios"] == [4, 128]
    assert (shapes["layers_run"], shapes["layers_model"], shapes["experts_run"]) == (2, 4, 8)
    assert shapes["moe_intermediate_per_rank"] == 64 and shapes["o_groups_per_rank"] == 4
    assert [r["batch"] for r in out["results"]] == [1, 3]
    for r in out["results"]:
        assert len(r["step_ms_samples"]) == 3 and all(s > 0 for s in r["step_ms_samples"])
        assert r["step_ms"] == statistics.median(r["step_ms_samples"])
        assert r["layer_ms"] == pytest.approx(r["step_ms"] / 2)
        assert r["tok_s"] == pytest.approx(r["batch"] * 1e3 / r["step_ms"])
        assert r["tok_s_projected"] == pytest.approx(r["batch"] * 1e3 / (r["layer_ms"] * 4))
    assert any("projection" in note for note in out["notes"])


def test_bench_upstream_kernel_on_interpreter_writes_trace(tmp_path):
    spec = tiny_spec(attention="sglang-triton", batch_sizes=[1], steps=1, warmup=0,
                     profile={"batch": 2, "steps": 2})
    proc = run_engine("bench", "--spec", json.dumps(spec), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = only_json(proc.stdout)
    assert out["interpreter"] is True
    assert any("interpreter" in note for note in out["notes"])
    assert set(out["kernel_config"]) == {"BLOCK_T", "num_warps", "num_stages"}
    assert out["trace"] == {"file": "reference_trace_b2.json.gz", "batch": 2, "steps": 2, "with_stack": True,
                            "operation_range": "op:sparse_decode", "eager_file": None}
    # the map of the trace's mangled and long templated names, read on the box: a CPU trace's host ranges have none
    assert out["kernel_names"] == {}
    with gzip.open(tmp_path / out["trace"]["file"], "rt") as fh:
        events = json.load(fh)["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "user_annotation"]
    steps = [e for e in ranges if e["name"].startswith("ProfilerStep#")]
    kernels = [e for e in ranges if e["name"] == KERNEL]
    calls = [e for e in ranges if e["name"] == "op:sparse_decode"]
    assert len(steps) == 2
    # Each c4 / c128 layer launches the kernel twice (window cache, then compressed cache).
    assert len(kernels) == 2 * 2 * 2
    assert len(calls) == 2 * 2  # one attention call a layer a step
    assert {e["name"] for e in ranges} - {e["name"] for e in steps} == {KERNEL, "op:sparse_decode"}
    for k in kernels:
        assert any(s["ts"] <= k["ts"] and k["ts"] + k["dur"] <= s["ts"] + s["dur"] for s in steps)
        assert any(c["ts"] <= k["ts"] and k["ts"] + k["dur"] <= c["ts"] + c["dur"] for c in calls)
    # Recorded with stacks, yet the interpreter's own Python stays out (it runs off the profiled thread).
    python = [e for e in events if e.get("cat") == "python_function"]
    assert python and not any("triton/runtime/interpreter" in e["name"] for e in python)
    # The work the bench reports for the profiled batch accounts for every launch the trace holds,
    # with the bytes and FLOPs of a hand calculation (tiny_spec: 8 kernel heads, window 64 tokens,
    # the c4 layer's top-k 64 of 256 // 4 compressed, the c128 layer's 256 // 128 = 2).
    work_b2 = next(w for w in out["attention_work"] if w["batch"] == 2)
    model_b2 = work_b2["kernels"][KERNEL]
    assert model_b2["calls_per_step"] * len(steps) == len(kernels)
    q_out = 2 * 2 * 8 * 512 * 2
    assert model_b2["bytes_per_step"] == 2 * (2 * 64 * 584 + q_out) + (2 * 64 * 584 + q_out) + (2 * 2 * 584 + q_out)
    assert model_b2["flops_per_step"] == 4 * 2 * 8 * 512 * (64 + 64 + 64 + 2)
    assert [w["batch"] for w in out["attention_work"]] == [1, 2]


@pytest.mark.parametrize("backend", ["sglang-triton", "splitk"])
def test_triton_backends_agree_with_torch_backend(backend):
    """Same cache, q, indices, lengths and sink through both backends and the float32 reference.

    KV is identical in all three (FP8 times a power-of-two scale is exact in bf16); scores and
    sums are float32 everywhere, so differences come from bf16 rounding of outputs: once on the
    torch path, up to three times on the Triton wrappers' paths (each cache's partial output, their
    merge, the sink), each at most 2^-8 of the value. Four such roundings: 2^-6 of the largest
    output. A wrong index, scale or mask gives errors of order 1.
    """
    spec = tiny_spec(attention=backend, batch_sizes=[2])
    proc = run_engine("check", "--spec", json.dumps(spec))
    assert proc.returncode == 0, proc.stderr
    out = only_json(proc.stdout)
    assert out["interpreter"] is True and out["shapes"]["kernel_heads"] == 8
    pairs = {(c["backend"], c["against"]): c for c in out["comparisons"]}
    assert set(pairs) == {(backend, "float32_reference"), ("torch", "float32_reference"), (backend, "torch")}
    for comparison in pairs.values():
        assert comparison["rel_to_max"] <= 2 ** -6, comparison
        assert comparison["lse_max_abs_err"] <= 1e-4, comparison


@pytest.mark.parametrize(
    "spec_text, expected",
    [
        (json.dumps(tiny_spec(colour="red")), "colour"),
        (json.dumps(tiny_spec(steps="many")), "steps"),
        (json.dumps(tiny_spec(attention="flash")), "attention"),
        (json.dumps(tiny_spec(overrides={**TINY, "head_count": 4})), "head_count"),
        (json.dumps(tiny_spec(overrides={**TINY, "compress_ratios": [4, 0]})), "compress_ratios"),
        (json.dumps(tiny_spec(tp=3)), "tp"),
        (json.dumps(tiny_spec(cuda_graph=True)), "cuda_graph"),
        ("{not json", "not JSON"),
        ("@/nonexistent/spec.json", "cannot read"),
    ],
)
def test_bad_spec_is_one_line_and_exit_2(spec_text, expected, tmp_path):
    proc = run_engine("bench", "--spec", spec_text, "--out", str(tmp_path))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and expected in proc.stderr
    out = only_json(proc.stdout)
    assert out["ok"] is False and out["kind"] == "bad_input" and expected in out["error"]


def test_missing_argument_is_exit_2():
    proc = run_engine("bench", "--out", "x")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "--spec" in proc.stderr


def test_sglang_missing_is_exit_2(tmp_path):
    """Stand-in for a box without sglang: a copy of this interpreter's site-packages made of
    symlinks, sglang left out, used in place of the real one (``python -S`` + PYTHONPATH)."""
    site = Path(torch.__file__).resolve().parents[1]
    view = tmp_path / "site-packages-without-sglang"
    view.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith("sglang"):
            (view / entry.name).symlink_to(entry)
    env = {**os.environ, "PYTHONPATH": f"{view}{os.pathsep}{REPO}"}
    spec = tiny_spec(attention="sglang-triton")
    proc = run_engine("bench", "--spec", json.dumps(spec), "--out", str(tmp_path / "out"), python_flags=("-S",), env=env)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "pip install --no-deps sglang==0.5.23" in proc.stderr
    out = only_json(proc.stdout)
    assert out["ok"] is False and out["kind"] == "missing_dependency"
    # The torch backend needs no sglang: the same view runs it.
    proc = run_engine("bench", "--spec", json.dumps(tiny_spec(batch_sizes=[1], steps=1)), "--out", str(tmp_path / "out"),
                      python_flags=("-S",), env=env)
    assert proc.returncode == 0, proc.stderr


def test_layer_selection_follows_the_models_ratio_mix():
    ratios = [0, 0] + [4, 128] * 20 + [0]  # 43 layers: 3 window-only, 20 c4, 20 c128
    assert spec_mod.select_layers(ratios, 2) == [2, 3]
    # Shares 0.70 / 4.65 / 4.65 of 10: floors 0 / 4 / 4, the two left go to the largest remainders.
    chosen = spec_mod.select_layers(ratios, 10)
    assert sorted(ratios[i] for i in chosen) == [0] + [4] * 5 + [128] * 4
    assert chosen == [0, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # each ratio's first layers, in model order
    assert spec_mod.select_layers(ratios, 43) == list(range(43))


def test_kernel_heads_follow_sglang_padding_rule():
    assert spec_mod.kernel_num_heads(64, 4, 64) == 64  # 16 a rank, padded to 64
    assert spec_mod.kernel_num_heads(64, 1, 64) == 64  # tp 1: no padding, all heads
    assert spec_mod.kernel_num_heads(8, 1, 64) == 8
    assert spec_mod.kernel_num_heads(256, 2, 64) == 256  # 128 a rank: more than 64, the kernel gets all
    assert spec_mod.kernel_num_heads(64, 4, None) == 16


def test_torch_backend_matches_float32_reference_in_process():
    gen = torch.Generator().manual_seed(3)
    cache = dsv4_cache.empty_cache(4, 64)
    dsv4_cache.write_tokens(cache, torch.arange(256), torch.randn(256, 512, generator=gen))
    extra = dsv4_cache.empty_cache(2, 32)
    dsv4_cache.write_tokens(extra, torch.arange(64), torch.randn(64, 512, generator=gen))
    q = torch.randn(3, 1, 4, 512, generator=gen).bfloat16()
    idx = torch.randint(0, 256, (3, 1, 64), generator=gen, dtype=torch.int32)
    idx[1, 0, 5] = -1
    extra_idx = torch.randint(0, 64, (3, 1, 64), generator=gen, dtype=torch.int32)
    lengths = torch.tensor([64, 10, 0], dtype=torch.int32)
    sink = torch.randn(4, generator=gen)
    args = (q, cache, idx, lengths, sink)
    out, _ = attention.torch_sparse_decode(*args, 512, 512 ** -0.5, extra, extra_idx, torch.tensor([64, 64, 3], dtype=torch.int32))
    ref, _ = dsv4_cache.reference_sparse_decode(*args, 512 ** -0.5, extra, extra_idx, torch.tensor([64, 64, 3], dtype=torch.int32))
    assert (out.float() - ref).abs().max() <= 2 ** -8 * ref.abs().max()
    # A row with no valid token at all gives zeros.
    empty, _ = attention.torch_sparse_decode(q, cache, idx, torch.zeros(3, dtype=torch.int32), sink, 512, None)
    assert empty.abs().max() == 0


def test_routed_experts_match_a_per_expert_loop():
    shapes = spec_mod.rank_shapes(spec_mod.BenchSpec.model_validate(tiny_spec()))
    gen = torch.Generator().manual_seed(1)
    weights = model.make_layer_weights(shapes, 0, gen, "cpu")
    x = model.random_tensor((5, shapes.hidden), gen, "cpu")
    got = model.moe_block(x, weights, shapes)

    h = model.rms_norm(x, weights.ffn_norm).float()
    ids, route_weights = model.route(h.bfloat16(), weights, shapes.experts_per_token)
    expected = x.float().clone()
    for t in range(x.shape[0]):
        for e, w in zip(ids[t].tolist(), route_weights[t].tolist()):
            gate, up = (weights.w13[e].float() @ h[t]).chunk(2)
            expected[t] += w * (weights.w2[e].float() @ (torch.nn.functional.silu(gate) * up))
        gate, up = (weights.shared_w13.float() @ h[t]).chunk(2)
        expected[t] += weights.shared_w2.float() @ (torch.nn.functional.silu(gate) * up)
    assert torch.allclose(got.float(), expected, atol=0.05 * expected.abs().max().item(), rtol=0)


def test_work_model_matches_hand_computation_and_the_calls_the_engine_makes():
    """The bytes/FLOPs model against a hand calculation for a small spec, and its tokens against the
    valid indices of every attention call the engine really makes in a decode step."""
    shapes = spec_mod.rank_shapes(spec_mod.BenchSpec.model_validate(tiny_spec()))
    batch = 3
    got = work.attention_work(shapes, batch, "sglang-triton")
    # by hand: B=3, H=8 (4 a rank padded to 8), window 64 tokens, c4 top-k min(64, 256 // 4) = 64,
    # c128 256 // 128 = 2; a token 584 bytes, q and out bf16 [3, 8, 512] each
    q_out = 2 * 3 * 8 * 512 * 2
    hand = [("window", 64), ("c4", 64), ("window", 64), ("c128", 2)]
    assert [(c["cache"], c["tokens"]) for c in got["calls"]] == hand
    assert [c["bytes"] for c in got["calls"]] == [3 * n * 584 + q_out for _, n in hand]
    assert [c["flops"] for c in got["calls"]] == [4 * 3 * 8 * n * 512 for _, n in hand]
    assert got["kernels"][KERNEL] == {"calls_per_step": 4, "bytes_per_step": 4 * q_out + 3 * 194 * 584,
                                      "flops_per_step": 4 * 3 * 8 * 194 * 512}
    assert work.attention_work(shapes, batch, "torch")["kernels"] == {}

    # the engine's own calls: valid tokens a request, per call, as the kernels see them
    seen = []

    def recording(q, k_cache, indices, lengths, sink, head_dim_v, scale, extra_cache, extra_indices, extra_lengths):
        for idx, n in ((indices, lengths), (extra_indices, extra_lengths)):
            if idx is None:
                continue
            flat = idx.reshape(idx.shape[0], -1)
            valid = (flat >= 0) & (torch.arange(flat.shape[1])[None, :] < n[:, None])
            seen.append((tuple(q.shape), valid.sum(dim=1).tolist()))
        return attention.torch_sparse_decode(q, k_cache, indices, lengths, sink, head_dim_v, scale,
                                             extra_cache, extra_indices, extra_lengths)

    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        layers = []
        for ratio in shapes.layer_compress_ratios:
            layers.append((model.make_layer_weights(shapes, ratio, gen, "cpu"),
                           model.make_layer_state(shapes, ratio, batch, gen, "cpu")))
        model.decode_step(model.random_tensor((batch, shapes.hidden), gen, "cpu"), layers, shapes, recording)
    assert seen == [((batch, 1, 8, 512), [c["tokens"]] * batch) for c in got["calls"]]
