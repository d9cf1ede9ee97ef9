"""Split-K sparse MLA decode (tools/kernels/sparse_mla_decode.py, tools/kernels/splitk/) on the CPU.

The kernels run under the Triton interpreter in real subprocesses of the tool's CLI
(``TRITON_INTERPRET=1`` must be set before Triton is imported, which a pytest process shared with
other tests cannot promise). Each run draws fresh inputs (the CLI seeds from the clock) with invalid
indices, empty and short rows, top-k 150 (no multiple of the 32- or 64-token tile), duplicated
indices and clustered runs, and poisons every output and partial buffer with NaN first. Two splits
of 150 tokens hold several tiles each, so the in-kernel online softmax, the split merge and the
two-cache merge are all exercised; breaking any of them fails these tests (checked by hand: an
unweighted merge, a dropped split, a missing rescale and a natural-log partial LSE each fail).
The same check at H = 16 and 64 on an H200 is committed in benchmarks/results/sparse_mla_decode.json.
"""

from __future__ import annotations

import itertools

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tools.kernels import sparse_mla_decode as smd
from tools.kernels.splitk import check, sm90, sm90_ws
from tools.kernels.splitk import tiles
from tools.kernels.splitk.gluon_lang import gluon

REPO = Path(__file__).resolve().parents[1]


def _interpreted(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "heads,config,splits,with_upstream",
    # The upstream kernel does not depend on our tile shape: compared twice, not for every shape.
    # The sm_120 family (_split_kernel_sm120) by name, and as the sm_120 plan picks it (--plan-arch 120).
    [(4, "small", 2, True), (8, "medium", 2, False), (8, "large", 2, False), (8, "auto", None, True),
     (4, "sm120_small", 2, False), (8, "sm120_medium", 2, False), (8, "sm120_large", 2, False),
     (8, "auto@120", None, False)],
)
def test_check_matches_reference_and_upstream(heads, config, splits, with_upstream):
    args = ["-m", "tools.kernels.splitk", "check", "--batch", "3", "--topk", "150"]
    config, _, plan = config.partition("@")
    args += ["--heads", str(heads), "--device", "cpu", "--config", config] + (["--plan-arch", plan] if plan else [])
    if splits:
        args += ["--num-splits", str(splits)]
    if not with_upstream:
        args += ["--no-upstream"]
    proc = _interpreted(args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["ok"]
    assert set(result["variants"]) == set(check.VARIANTS)
    if plan or config.startswith("sm120"):  # the sm_120 kernel ran
        assert result["config_name"].startswith("sm120_") and result["plan_arch"] == (120 if plan else None), result
    for res in result["variants"].values():
        if splits:
            assert res["splits"] == splits
        ref = res["vs_reference"]
        assert ref["all_written"]
        assert ref["lse_neg_inf_mismatch"] == 0
        assert ref["out_norm_rel"] <= check.OUT_NORM_REL_MAX
        assert ref["lse_max_abs"] <= check.LSE_ABS_MAX
        assert ("vs_upstream" in res) == with_upstream
        if with_upstream:
            up = res["vs_upstream"]
            assert up["all_written"] and up["lse_neg_inf_mismatch"] == 0
            assert up["out_norm_rel"] <= check.OUT_NORM_REL_MAX_VS_UPSTREAM
            assert up["lse_max_abs"] <= check.LSE_ABS_MAX


def _merge_partials_wrongly() -> dict:
    """Runs in a TRITON_INTERPRET=1 subprocess: the kernel's real split partials, merged right (by
    the combine kernel) and wrong (in torch) three ways, each compared with the reference."""
    from tools.kernels import dsv4_cache

    batch, topk, heads, splits = 3, 150, 4, 2
    case = check.make_case(batch, topk, heads, "cpu", int.from_bytes(os.urandom(4), "little"), topk_length=False)
    nan = float("nan")
    out = torch.full((batch, 1, heads, 512), nan, dtype=torch.bfloat16)
    lse = torch.full((batch, heads), nan)
    o_part = torch.full((batch, splits, heads, 512), nan)
    lse_part = torch.full((batch, splits, heads), nan)
    smd.sparse_mla_decode_into(out, lse, (o_part, lse_part), *check.call_args(case), num_splits=splits)
    ref_out, ref_lse = dsv4_cache.reference_sparse_decode(case["q"], case["k_cache"], case["indices"])

    def merged(weights: torch.Tensor, lse_nat: torch.Tensor):
        o = (weights.unsqueeze(-1) * o_part).sum(1) / weights.sum(1).unsqueeze(-1)
        return o.view(batch, 1, heads, 512), lse_nat.view(batch, heads, 1)

    lse2 = lse_part  # base 2
    top = lse2.max(dim=1, keepdim=True).values
    w = torch.exp2(lse2 - top)
    right_lse = (top.squeeze(1) + torch.log2(w.sum(1))) * math.log(2)
    cases = {
        "combine_kernel": (out, lse.view(batch, heads, 1)),
        "torch_right": merged(w, right_lse),
        "equal_weights": merged(torch.ones_like(w), right_lse),
        "natural_exp_weights": merged(torch.exp(lse2 - top), right_lse),
        "last_split_dropped": merged(
            torch.cat([w[:, :-1], torch.zeros_like(w[:, -1:])], 1),
            (top.squeeze(1) + torch.log2(w[:, :-1].sum(1))) * math.log(2),
        ),
    }
    return {name: check.compare(o, l, ref_out, ref_lse) for name, (o, l) in cases.items()}


@pytest.mark.slow
def test_check_rejects_wrong_merges_of_real_partials():
    proc = _interpreted([str(Path(__file__).resolve()), "merge-partials"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert check.verdict(res["combine_kernel"], check.OUT_NORM_REL_MAX)
    assert check.verdict(res["torch_right"], check.OUT_NORM_REL_MAX)
    for wrong in ("equal_weights", "natural_exp_weights", "last_split_dropped"):
        assert not check.verdict(res[wrong], check.OUT_NORM_REL_MAX), (wrong, res[wrong])


RESULTS = REPO / "benchmarks" / "results"
# KernelConfig fields a sweep entry's config records that select the kernel and its tiles
_CONFIG_FIELDS = ("block_h", "block_t", "num_warps", "num_stages", "p_scratch", "d_halves", "sm90")


def _same_config(recorded: dict, cfg: "tiles.KernelConfig") -> bool:
    return all(recorded.get(f, False) == getattr(cfg, f) for f in _CONFIG_FIELDS) and not recorded.get("ablate") \
        and (not cfg.ws_regs or (list(recorded.get("ws_regs") or []) == list(cfg.ws_regs)
                                 and recorded.get("ws_batch", 1) == cfg.ws_batch))


def _sweep_timings(entries) -> dict:
    """{(config name, batch, top-k): {splits: us}} over sweep entries (H = 64, the sweeps' heads)."""
    out: dict = {}
    for entry in entries:
        for t in entry["timings"]:
            out.setdefault((entry["name"], t["batch"], t["topk"]), {})[t["splits"]] = t["us"]
    return out


def test_split_heuristic_picks_the_fastest_split_the_h200_sweep_measured():
    """At every shape of the H200 sweep (benchmarks/results/sparse_mla_decode_run3_sweep.json), the
    config choose_config picks is the sweep's fastest at its best split count, and choose_num_splits
    picks that split count."""
    sweep = json.loads((RESULTS / "sparse_mla_decode_run3_sweep.json").read_text())
    sms = sweep["env"]["sm_count"]
    configs = {e["name"]: e["config"] for e in sweep["sweep"]}
    timings = _sweep_timings(sweep["sweep"])
    shapes = sorted({(b, k) for _, b, k in timings})
    assert len(shapes) >= 5
    for batch, topk in shapes:
        cfg = tiles.choose_config(batch, topk, 64)
        (name,) = [n for n, c in configs.items() if _same_config(c, cfg)]
        by_splits = timings[(name, batch, topk)]
        assert len(by_splits) >= 2, (batch, topk)
        fastest = min(by_splits, key=by_splits.get)
        assert tiles.choose_num_splits(batch, topk, 64, sms) == fastest, (batch, topk, by_splits)
        others = [min(v.values()) for (n, b, k), v in timings.items() if (b, k) == (batch, topk) and n != name]
        assert by_splits[fastest] <= min(others), (batch, topk)


def test_split_heuristic_bounds():
    # A batch that fills the chip many times over gains nothing from splitting.
    assert tiles.choose_num_splits(2000, 2048, 64, 132) == 1
    for batch in (1, 3, 16, 64, 200):
        for topk in (1, 31, 128, 512, 2048, 8192):
            for heads in (4, 16, 64):
                cfg = tiles.choose_config(batch, topk, heads)
                splits = tiles.choose_num_splits(batch, topk, heads, 132)
                assert 1 <= splits <= min(-(-topk // cfg.block_t), tiles.MAX_SPLITS)


def test_config_regimes():
    assert tiles.choose_config(1, 512, 64) is tiles.SMALL
    assert tiles.choose_config(64, 2048, 16) is tiles.SMALL
    assert tiles.choose_config(4, 2048, 64) is tiles.MEDIUM
    assert tiles.choose_config(64, 2048, 64) is tiles.LARGE
    assert tiles.LARGE.block_h == 64  # all 64 heads share each gathered tile at large batch
    # Hopper takes the Gluon wgmma kernel in the large regime (where Gluon exists); nothing else changes
    hopper = tiles.LARGE_WS if gluon is not None else tiles.LARGE
    assert tiles.choose_config(64, 2048, 64, arch=90) is hopper
    assert tiles.choose_config(64, 2048, 64, arch=100) is tiles.LARGE
    assert tiles.choose_config(2, 2048, 64, arch=90) is tiles.MEDIUM
    assert tiles.choose_config(4, 2048, 64, arch=90) is (hopper if hopper is tiles.LARGE_WS else tiles.MEDIUM)
    assert tiles.choose_config(4, 2048, 64, arch=100) is tiles.MEDIUM
    assert tiles.choose_config(64, 2048, 16, arch=90) is tiles.SMALL


def test_warp_specialized_splits_are_the_fastest_the_h200_measured():
    """Wherever the H200 sweeps of runs 6 and 7 (benchmarks/results/sparse_mla_decode_run{6,7}_sweep.json)
    timed a warp-specialized build at several split counts, at a shape choose_config gives LARGE_WS on
    Hopper, choose_num_splits picks that build's fastest; on run 7's shapes Hopper's chooser picks the
    faster of LARGE_WS and MEDIUM, both timed there."""
    if gluon is None:
        pytest.skip("this Triton has no Gluon")
    run6 = json.loads((RESULTS / "sparse_mla_decode_run6_sweep.json").read_text())
    run7 = json.loads((RESULTS / "sparse_mla_decode_run7_sweep.json").read_text())
    sms = run7["env"]["sm_count"]
    ws_entries = [e for call in run6["calls"] for e in call["entries"]] + run7["sweep"]
    ws_entries = [e for e in ws_entries if e["config"].get("ws_regs") and not e["config"].get("ablate")]
    checked = 0
    for (name, batch, topk), by_splits in _sweep_timings(ws_entries).items():
        if len(by_splits) < 2 or tiles.choose_config(batch, topk, 64, arch=90) is not tiles.LARGE_WS:
            continue
        fastest = min(by_splits, key=by_splits.get)
        assert tiles.choose_num_splits(batch, topk, 64, sms, arch=90) == fastest, (name, batch, topk, by_splits)
        checked += 1
    assert checked >= 5
    by_name = {e["name"]: e for e in run7["sweep"]}
    ((ws_name, _),) = [(n, e) for n, e in by_name.items() if _same_config(e["config"], tiles.LARGE_WS)]
    ((medium_name, _),) = [(n, e) for n, e in by_name.items() if _same_config(e["config"], tiles.MEDIUM)]
    timings = _sweep_timings(run7["sweep"])
    for batch, topk in sorted({(b, k) for _, b, k in timings}):
        best = {n: min(timings[(n, batch, topk)].values()) for n in (ws_name, medium_name)}
        faster = tiles.LARGE_WS if best[ws_name] < best[medium_name] else tiles.MEDIUM
        assert tiles.choose_config(batch, topk, 64, arch=90) is faster, (batch, topk, best)
    for topk in (64, 128, 192, 2048):
        splits = tiles.choose_num_splits(64, topk, 64, 132, arch=90)
        assert -(-topk // 64) // splits >= 2 or splits == 1


def _compile_for_sm90(fn, constexprs: dict, **options):
    """A Gluon kernel compiled ahead of time for sm_90 by the installed Triton (no GPU needed), with the
    argument types and 16-divisibility Triton's launcher would give it at the large shape."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    pointers = {"q_ptr": "*bf16", "cache_fp8_ptr": "*fp8e4nv", "cache_u8_ptr": "*u8", "cache_bf16_ptr": "*bf16",
                "indices_ptr": "*i32", "topk_len_ptr": "*i32", "o_part_ptr": "*fp32", "lse_part_ptr": "*fp32",
                "x_cache_u8_ptr": "*u8", "x_cache_bf16_ptr": "*bf16", "x_indices_ptr": "*i32", "x_topk_len_ptr": "*i32"}
    signature, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            consts[(i,)] = constexprs[name]
        else:
            signature[name] = pointers.get(name, "fp32" if name == "qk_scale_log2" else "i32")
            if name in pointers or name in ("page_bytes", "scale_section_off", "stride_qb", "stride_qh", "x_page_bytes",
                                            "x_scale_section_off"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    source = GluonASTSource(fn, signature, consts, attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def _compile_sm90_kernel(dequant_rows: int):
    return _compile_for_sm90(
        sm90._split_kernel_sm90, {"HAS_TOPK_LEN": True, "BLOCK_T": tiles.LARGE_SM90.block_t, "DEQUANT_ROWS": dequant_rows},
        num_warps=tiles.LARGE_SM90.num_warps,
    )  # fmt: skip


@pytest.mark.skipif(gluon is None, reason="this Triton has no Gluon")
@pytest.mark.parametrize("has_extra", [False, True])
def test_ws_kernel_compiles_to_three_warpgroups_with_register_handoff(has_extra):
    # Stand-in for the H200: the warp-specialized kernel as Triton builds it for sm_90, one cache and the
    # fused two-cache launch (page 256 window, page 64 compressed). Two consumer warpgroups run wgmma
    # (the whole S: 64x64; half of O: 64x256), the producer fills the ring by cp.async and dequantizes
    # with integer ops (no F2F.BF16.F16, the one-element-a-lane conversion the fp8 -> f16 -> bf16 path
    # compiles to); registers are handed from the producer to the consumers.
    cfg = tiles.LARGE_WS
    kernel = _compile_for_sm90(
        sm90_ws._split_kernel_ws,
        {"HAS_TOPK_LEN": True, "PAGE_SIZE": 256 if has_extra else 64, "BLOCK_T": cfg.block_t, "STAGES": cfg.num_stages,
         "CONSUMER_REGS": cfg.ws_regs[0], "PRODUCER_REGS": cfg.ws_regs[1], "BATCH": cfg.ws_batch, "ABLATE": 0,
         "X_PAGE_SIZE": 64, "HAS_EXTRA": has_extra, "HAS_X_TOPK_LEN": has_extra},
        num_warps=cfg.num_warps, maxnreg=tiles.WS_MAXNREG,
    )  # fmt: skip
    sass, ptx = kernel.asm["sass"], kernel.asm["ptx"]
    assert "HGMMA.64x256x16.F32.BF16" in sass and "HGMMA.64x64x16.F32.BF16" in sass
    assert "LDGSTS" in sass and "SYNCS.ARRIVE" in sass  # cp.async ring, mbarrier hand-offs
    assert "F2F.BF16.F16" not in sass
    regs = {int(r) for r in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
    # 168 x 3 warpgroups = 504 a lane: the second consumer and the producer as configured, the first
    # consumer what is left
    assert {cfg.ws_regs[0], cfg.ws_regs[1], 3 * tiles.WS_MAXNREG - sum(cfg.ws_regs)} <= regs
    assert kernel.metadata.shared <= 227 * 1024
    # a few spilled scalars in the consumers (16 stores with Triton 3.9, 11 with the H200's 3.6), none a tile
    assert len(re.findall(r"\bSTL\b", sass)) <= 24


@pytest.mark.skipif(gluon is None, reason="this Triton has no Gluon")
def test_sm90_kernel_compiles_to_wgmma_without_spills():
    # Stand-in for the H200 (CI has no GPU): Triton's own sm_90 build of the Hopper kernel. It must
    # use wgmma (HGMMA), keep everything in registers (no local-memory traffic) and fit in shared memory.
    kernel = _compile_sm90_kernel(tiles.LARGE_SM90.dequant_rows)
    sass = kernel.asm["sass"]
    assert "HGMMA.64x256x16.F32.BF16" in sass and "HGMMA.64x32x16.F32.BF16" in sass
    assert "LDGSTS" in sass  # the ring is filled by cp.async
    assert not re.search(r"\b(STL|LDL)\b", sass)
    assert kernel.metadata.shared <= 227 * 1024


def test_bad_inputs_rejected():
    q = torch.zeros(2, 1, 4, 256, dtype=torch.bfloat16)
    cache = torch.zeros(1, 64, 1, 584, dtype=torch.uint8).view(torch.float8_e4m3fn)
    idx = torch.zeros(2, 1, 8, dtype=torch.int32)
    with pytest.raises(ValueError, match="q must be"):
        smd.sparse_mla_decode(q, cache, idx, None, None, 512, None)
    q = torch.zeros(2, 1, 4, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="head_dim_v"):
        smd.sparse_mla_decode(q, cache, idx, None, None, 448, None)
    with pytest.raises(ValueError, match="num_splits"):
        smd.plan_splits(2, 8, 4, torch.device("cpu"), num_splits=0)


def test_cli_bad_input_exits_2():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.kernels.splitk", "check", "--batch", "0", "--topk", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stdout == ""


if __name__ == "__main__" and sys.argv[1:] == ["merge-partials"]:
    print(json.dumps(_merge_partials_wrongly(), sort_keys=True))


def test_each_cache_runs_the_config_its_own_width_calls_for(monkeypatch):
    """The two-cache call (the model's 128-token window plus the compressed top-k) launches the window
    with its own config and the compressed cache with the config of its own width, and the launch plan
    and the engine's call log say the same; a ``config`` override still serves both caches."""
    launched = []

    class Stop(Exception):
        pass

    def record(q3, k_cache, indices, topk_length, o_part, lse_part, scale, splits, offset, cfg, extra=None):
        assert extra is None  # no fused launch off Hopper
        launched.append((indices.shape[-1], cfg, splits, offset))
        if len(launched) == 2:
            raise Stop

    monkeypatch.setattr(smd, "_launch_splits", record)
    batch, heads = 16, 64
    case = check.make_case(batch, 128, heads, torch.device("cpu"), 5, extra=True, extra_topk=1024, sink=True)
    args = check.call_args(case)
    with pytest.raises(Stop):
        smd.sparse_mla_decode(*args)
    window_cfg, compressed_cfg = tiles.choose_config(batch, 128, heads), tiles.choose_config(batch, 1024, heads)
    assert (window_cfg, compressed_cfg) == (tiles.MEDIUM, tiles.LARGE)  # the case is one where they differ
    assert [(w, c) for w, c, _, _ in launched] == [(128, window_cfg), (1024, compressed_cfg)]
    assert launched[1][3] == launched[0][2]  # the compressed partials follow the window's splits
    launched.clear()
    with pytest.raises(Stop):
        smd.sparse_mla_decode_into(torch.empty(batch, 1, heads, 512, dtype=torch.bfloat16), torch.empty(batch, heads),
                                   None, *args, config=tiles.SMALL)  # fmt: skip
    assert [c for _, c, _, _ in launched] == [tiles.SMALL, tiles.SMALL]

    from tools.kernels import sparse_mla_plan

    for arch, sms in ((90, 132), (120, 188)):
        plan = sparse_mla_plan.plan_point({"label": "x", "batch": batch, "heads": heads, "topk": 128, "extra_topk": 1024,
                                           "arch": arch, "sms": sms})  # fmt: skip
        if arch == 90 and gluon is not None:  # Hopper: one launch over the joined row of 128 + 1024 tokens
            assert [(l["cache"], l["config_name"], l["topk"], l["fused"]) for l in plan["launches"]] == [
                ("window+compressed", "large_ws", 1152, True)]
            assert plan["launches"][0]["splits"] == tiles.choose_num_splits(batch, 1152, heads, sms, arch)
            continue
        assert tuple(l["config_name"] for l in plan["launches"]) == ("sm120_medium", "sm120_large")  # the sm_120 family
        assert [l["splits"] for l in plan["launches"]] == [tiles.choose_num_splits(batch, w, heads, sms, arch) for w in (128, 1024)]

    from tools.engines.reference import attention

    call = attention._describe_call(smd, case["q"], case["indices"], case["topk_length"], case["attn_sink"], case["extra_indices"])
    assert (call["config"], call["extra_config"], call["fused"]) == ("medium", "large", False)
    plan = check.configs_run(batch, 128, heads, torch.device("cpu"), None, {"extra_topk": 1024})
    assert (plan.cfg, plan.extra_cfg, plan.fused, plan.beside) == (tiles.MEDIUM, tiles.LARGE, False, False)


def test_the_two_cache_call_fuses_on_hopper_where_the_joined_row_picks_large_ws_else_runs_beside():
    """plan_call: on Hopper (arch 90, Gluon present) the model's call is one launch over the joined row
    where that row picks LARGE_WS, else two launches, the compressed cache's beside the window's where the
    window's config is a small-work one; off Hopper never fused; on the CPU (arch None) never beside."""
    for batch, topk in itertools.product((1, 2, 3, 4, 8, 16, 32, 48, 64, 128), (512, 1024, 2048)):
        joined = tiles.joined_width(128, topk)
        assert joined == 128 + topk
        hopper = tiles.plan_call(batch, 128, 64, 90, 132, topk)
        big = gluon is not None and batch * joined > tiles.HOPPER_MEDIUM_TOKENS
        assert hopper.fused is big, (batch, topk)
        if big:
            assert (hopper.cfg, hopper.extra_cfg, hopper.extra_splits) == (tiles.LARGE_WS, tiles.LARGE_WS, 0)
            assert hopper.splits == hopper.total == tiles.choose_num_splits(batch, joined, 64, 132, 90)
            assert not hopper.beside
        else:
            assert hopper.beside is (tiles.choose_config(batch, 128, 64, 90) in tiles.BESIDE_CONFIGS)
        other = tiles.plan_call(batch, 128, 64, 120, 188, topk)
        assert not other.fused and other.total == other.splits + other.extra_splits
        assert other.beside is (other.cfg in tiles.BESIDE_CONFIGS)
        assert not tiles.plan_call(batch, 128, 64, None, 4, topk).beside
    assert tiles.joined_width(100, 512) == 128 + 512  # the window padded to whole 64-token tiles
    one = tiles.plan_call(64, 2048, 64, 90, 132)
    assert (one.extra_cfg, one.extra_splits, one.fused) == (None, 0, False)
    forced = tiles.plan_call(64, 128, 64, 90, 132, 2048, fused=False)
    assert not forced.fused and forced.extra_splits > 0
    if gluon is not None:  # forced below its regime (the grid's probe): LARGE_WS's own split count
        small = tiles.plan_call(1, 128, 64, 90, 132, 512, fused=True)
        assert (small.cfg, small.fused, small.splits) == (tiles.LARGE_WS, True, tiles.most_splits(tiles.LARGE_WS, 640))
    with pytest.raises(ValueError, match="LARGE_WS"):
        tiles.plan_call(64, 128, 64, 120, 188, 512, fused=True)  # not Hopper
    assert not tiles.plan_call(64, 128, 64, 90, 132, 2048, config=tiles.MEDIUM).fused  # a forced config keeps two launches


