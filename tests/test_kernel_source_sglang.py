"""Other Triton kernels of sglang 0.5.23 with different grids, each checked against what reading the
source by hand gives (file:line of the installed package in the comments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.kernel_source import analyze
from tools.kernels import upstream

ATTN = Path("kernels/ops/attention")
DECODE = ATTN / "decode_attention.py"
DSV4 = ATTN / "dsv4/triton_sparse_decode/triton_mla_kernels_decode_fused.py"
MAMBA = Path("kernels/ops/mamba/triton_ops/mamba_ssm.py")


@pytest.fixture(scope="module")
def sglang() -> Path:
    try:
        root = upstream.sglang_root()
    except upstream.SglangMissing as exc:
        pytest.skip(str(exc))
    if upstream.sglang_version() != upstream.SGLANG_VERSION:
        pytest.skip(f"line numbers below are sglang {upstream.SGLANG_VERSION}'s; installed {upstream.sglang_version()}")
    return root


def test_split_kv_decode_stage1_3d_grid(sglang):
    # decode_attention.py:235 _fwd_kernel_stage1, launched at :484 by _decode_att_m_fwd (:430) on
    # grid = (batch, head_num, MAX_KV_SPLITS) (:460), MAX_KV_SPLITS = max_kv_splits (:452).
    # num_warps is 4 when kv_group_num == 1 (:463); BLOCK_N = BLOCK = 64 off HIP (:447-450).
    # The loop (:320) runs [split_kv_start, split_kv_end) of the program's split: split_kv_start =
    # kv_len_per_split * split_kv_id (:313), split_kv_id = tl.program_id(2) (:282), and
    # kv_len_per_split = cdiv(cdiv(seq_len, kv_splits), MIN_BLOCK_KV) * MIN_BLOCK_KV (:309), with
    # _MIN_BLOCK_KV = 32 (:46): at seq_len 4096 over 8 splits, 512 tokens = 8 tiles of 64.
    shapes = {"batch": 4, "head_num": 32, "max_kv_splits": 8, "kv_group_num": 1, "cur_batch_seq_len": 4096, "kv_splits": 8}
    report = analyze(sglang / DECODE, "_fwd_kernel_stage1", shapes, sms=132)
    assert report.launcher["function"] == "_decode_att_m_fwd" and report.launcher["launch_line"] == 484
    assert report.grid_expr == "(batch, head_num, MAX_KV_SPLITS)" and report.grid_var == "grid"
    assert report.grid == [4, 32, 8] and report.programs == 1024
    (config,) = report.configs
    assert config.source == "launch" and config.config == {"num_warps": 4, "num_stages": 2}
    assert any("_is_hip" in a and "False" in a for a in report.assumptions)
    (loop,) = report.loops
    assert loop.line == 320 and loop.text == "for start_n in range(split_kv_start, split_kv_end, BLOCK_N)"
    assert loop.grid_axes == [2] and loop.covered_by_grid and loop.runtime_bounds
    assert set(loop.accumulators) == {"acc", "e_sum", "e_max"} and loop.reduction
    assert loop.trip_counts == {"launch": 8}
    assert not report.serial_reduction_uncovered and report.split_k_candidate is False
    # without the per-sequence lengths the trip count is left open, with the reason
    open_report = analyze(sglang / DECODE, "_fwd_kernel_stage1", {"batch": 4, "head_num": 32, "max_kv_splits": 8}, sms=132)
    assert open_report.loops[0].trip_counts == {"launch": None}
    assert any("line 320" in u and "tl.load" in u for u in open_report.unresolved)
    assert any("num_warps" in u for u in open_report.unresolved)  # kv_group_num comes from tensor shapes


def test_split_kv_decode_stage2_2d_grid_serial_over_splits(sglang):
    # decode_attention.py:935 _fwd_kernel_stage2, launched at :1049 on grid = (batch, head_num)
    # (:1048). Each program merges all splits: for split_kv_id in tl.range(0, SPLIT_END) (:991)
    # with SPLIT_END = MAX_KV_SPLITS when FORCED_KV_SPLITS is 0 (:976), carrying acc/e_sum/e_max.
    report = analyze(sglang / DECODE, "_fwd_kernel_stage2", {"batch": 4, "head_num": 32, "max_kv_splits": 8}, sms=132)
    assert report.grid == [4, 32] and report.programs == 128 and report.launcher["launch_line"] == 1049
    (loop,) = report.loops
    assert loop.line == 991 and loop.trip_counts == {"launch": 8}
    assert set(loop.accumulators) == {"acc", "e_sum", "e_max"} and not loop.covered_by_grid
    assert report.configs[0].config == {"num_warps": 4, "num_stages": 2}
    assert report.serial_reduction_uncovered and report.below_one_wave is True  # 128 programs < 132 SMs


def test_dsv4_fused_decode_grid_lambda_per_config(sglang):
    # triton_mla_kernels_decode_fused.py:304 _fused_gather_attn_dsv4_kernel, 10 autotune configs
    # (:290-299), launched at :785 inside run_kernel on grid = lambda meta: (triton.cdiv(h_q,
    # meta["BLOCK_H"]), total_tokens) (:782): at 64 heads, 4 tokens: BLOCK_H 16 -> 4 x 4 programs,
    # BLOCK_H 64 or 128 -> 1 x 4. Each program loops range(0, topk, BLOCK_N) (:431).
    report = analyze(sglang / DSV4, "_fused_gather_attn_dsv4_kernel", {"total_tokens": 4, "h_q": 64, "topk": 512}, sms=188, real_heads=16)
    assert report.launcher["function"] == "fused_gather_attn_decode_dsv4.run_kernel" and report.launcher["launch_line"] == 785
    assert report.grid_symbols == ["h_q", "total_tokens", "BLOCK_H"]
    assert len(report.configs) == 10 and report.grid is None  # the grid depends on the config
    (loop,) = report.loops
    for config in report.configs:
        block_h, block_n = config.config["BLOCK_H"], config.config["BLOCK_N"]
        assert config.grid == [-(-64 // block_h), 4]
        assert config.programs == -(-64 // block_h) * 4
        assert loop.trip_counts[config.label] == 512 // block_n
        # 16 real heads of 64: programs whose whole head block is padding
        assert report.padding["by_config"][config.label]["padding_programs"] == (-(-64 // block_h) - 1) * 4
    assert loop.line == 431 and loop.reduction and not loop.covered_by_grid
    assert {"m_i", "l_i", "acc_0", "acc_7"} <= set(loop.accumulators)
    assert report.split_k_candidate is True


def test_dsv4_split_k_decode_3d_lambda(sglang):
    # The split-K variant (:1952) at top-k >= SPLITK_TOPK_THRESHOLD = 8192 (:1933): split_k =
    # _select_split_k(topk, h_q, total_tokens) = 4 (:2727-2741), grid lambda (:654) (cdiv(h_q,
    # BLOCK_H), total_tokens, split_k); topk_per_split = (8192 + 3) // 4 = 2048 (:617); the loop
    # range(k_start, k_end, BLOCK_N) (:2069) starts at pid_k * topk_per_split (:2002).
    report = analyze(sglang / DSV4, "_fused_gather_attn_dsv4_splitk_kernel", {"total_tokens": 4, "h_q": 64, "topk": 8192}, sms=132)
    assert report.grid_var == "grid_splitk" and report.launcher["launch_line"] == 661
    (loop,) = report.loops
    for config in report.configs:
        assert config.grid == [-(-64 // config.config["BLOCK_H"]), 4, 4]
        assert loop.trip_counts[config.label] == 2048 // config.config["BLOCK_N"]
    assert loop.grid_axes == [2] and loop.covered_by_grid and loop.reduction
    assert not report.serial_reduction_uncovered and report.split_k_candidate is False


def test_mamba_state_update_3d_lambda_with_launch_meta(sglang):
    # mamba_ssm.py:85 _selective_scan_update_kernel behind 8 @triton.heuristics (:50-83), launched at
    # :501 on grid = lambda META: (triton.cdiv(dim, META["BLOCK_SIZE_M"]), batch, nheads) (:463);
    # BLOCK_SIZE_M, num_warps = (8, 1) for dstate <= 128 (:470-478), passed positionally after two
    # `*(...) if ... else 0` unpackings. At dim 64, batch 4, 32 heads: (8, 4, 32). The loop over the
    # T tokens (:225) carries the SSM state (a serial recurrence) and steps the x/dt/B/C/out pointers.
    shapes = {"batch": 4, "nheads": 32, "dim": 64, "dstate": 128, "T": 2}
    report = analyze(sglang / MAMBA, "_selective_scan_update_kernel", shapes, sms=132)
    assert report.grid_symbols == ["dim", "batch", "nheads", "BLOCK_SIZE_M"]
    assert report.grid == [8, 4, 32] and report.programs == 1024
    assert report.kernel_args["BLOCK_SIZE_M"]["value"] == 8
    assert report.kernel_args["BLOCK_SIZE_DSTATE"]["value"] == 128  # heuristic next_power_of_2(dstate) (:60)
    assert report.configs[0].config["num_warps"] == 1
    (loop,) = report.loops
    assert loop.line == 225 and loop.trip_counts == {"launch": 2}
    assert loop.accumulators == ["state"]
    assert {"x_ptr", "dt_ptr", "B_ptr", "C_ptr", "out_ptr", "current_step_idx"} <= set(loop.inductions)
    assert not loop.covered_by_grid
    # 1024 programs exceed the SMs; whether they fill a wave needs the occupancy, so no verdict
    assert report.below_one_wave is None and report.split_k_candidate is None


def test_dsv4_fused_decode_compiles_for_sm120(sglang):
    """The DSV4 alternative decode kernel compiles for the declared hardware: its jit helper
    (_process_kv_block_aggressive) is copied with it, its tensors' dtypes come from the launcher
    (q cast to bf16, the cache viewed as uint8, torch.empty outputs)."""
    shapes = {"total_tokens": 1, "h_q": 64, "topk": 512, "block_size": 64}
    report = analyze(sglang / DSV4, "_fused_gather_attn_dsv4_kernel", shapes, sms=188, arch="sm_120",
                     chosen_config={"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1},
                     dtypes={"Q": "bf16", "Indices": "int32"}, compile_all_configs=False)
    chosen = report.config(report.chosen["label"])
    usage = chosen.resources["sm_120"]
    assert usage["ok"], usage["error"]
    assert usage["signature"]["Q"] == "*bf16" and usage["signature"]["KV_Cache"] == "*u8"
    assert 0 < usage["registers"] <= 255
    assert chosen.waves["sm_120"] == pytest.approx(4 / (188 * chosen.blocks_per_sm["sm_120"]))
