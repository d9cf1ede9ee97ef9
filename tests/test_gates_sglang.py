"""Gate scan against the real sglang 0.5.23 source (installed with --no-deps; CI installs it).

Every assertion is a fact read by hand in the sglang source; the comment beside it names the
file:line (paths relative to the sglang package) where it was checked. The scan itself is one
run over the whole package for the test session (``sglang_scan`` in conftest.py, about half a minute on
two cores), shared with the refactor nets of tests/test_refactor_nets.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SGLANG_VERSION, sglang_root
from tools.gates import evaluate, fallbacks_for_kernels
from tools.box_cache import CACHE_ENV

SM90, SM100, SM120 = 90, 100, 120
DC_BLACKWELL = [100, 101, 103, 107]
ALL = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 107, 110, 120, 121]


@pytest.fixture(scope="module")
def result(sglang_scan):
    return sglang_scan


def gate(result, file, line):
    found = [g for g in result.gates if g.file == file and g.line == line]
    assert found, f"no gate at {file}:{line}"
    return found[0]


def row(result, sm, file, line):
    return next(r for r in evaluate(result, sm) if r.file == file and r.line == line)


def test_capability_helpers_read_from_their_definitions(result):
    helpers = {h.name: h for h in result.helpers}
    # srt/utils/common.py:304 is_sm120_supported = lru_cache(partial(_check_cuda_device_version,
    # device_capability_majors=[12], cuda_version=(12, 8))); _check_cuda_device_version (common.py:274)
    # compares get_device_sm() // 10 with the majors and torch.version.cuda with the version.
    assert helpers["is_sm120_supported"].sms_definite == [120, 121]
    assert helpers["is_sm120_supported"].defined_at == "srt/utils/common.py:304"
    # common.py:309 majors [10]; common.py:333 majors [9]; common.py:297 majors [10, 11, 12]
    assert helpers["is_sm100_supported"].sms_definite == DC_BLACKWELL
    assert helpers["is_sm90_supported"].sms_definite == [90]
    assert helpers["is_blackwell_supported"].sms_definite == [100, 101, 103, 107, 110, 120, 121]
    # common.py:342-344: is_sm120() is torch.cuda.get_device_capability() == (12, 0): not sm_121
    assert helpers["is_sm120"].sms_definite == [120]
    # common.py:756 get_device_sm() returns major * 10 + minor (NVML or torch.cuda)
    assert helpers["get_device_sm"].values["120"] == "120"


def test_platform_attribute_form_resolves_through_the_probe_table(result):
    # srt/layers/attention/deepseek_v4_backend.py:4335 `if get_platform().is_sm120:`;
    # get_platform() (srt/runtime_context.py:1903) returns PlatformContext, whose __getattr__
    # (runtime_context.py:1862) looks the name up in _PLATFORM_PROBES ("is_sm120": "is_sm120_supported",
    # runtime_context.py:1835) and calls that probe in srt/utils/common.py.
    g = gate(result, "srt/layers/attention/deepseek_v4_backend.py", 4335)
    assert g.kind == "attr" and [h.name for h in g.helpers] == ["is_sm120_supported"]
    assert g.sms_true == [120, 121]
    assert row(result, SM120, g.file, g.line).passes is True
    assert row(result, SM100, g.file, g.line).passes is False
    assert row(result, SM90, g.file, g.line).passes is False


def test_dsv4_sparse_decode_implementation_per_architecture(result):
    g = gate(result, "srt/layers/attention/deepseek_v4_backend.py", 4335)
    # deepseek_v4_backend.py:4336-4339: on sm_120 the decode imports flash_mla_with_kvcache_sm120 ...
    assert "sglang.kernels.ops.attention.flash_mla_sm120.flash_mla_with_kvcache_sm120" in g.when_true.names
    # ... 4361-4366: elsewhere (not XPU) it calls self._flash_mla_with_kvcache, FlashMLA's
    # flash_mla_interface.flash_mla_with_kvcache (bound with functools.partial at :1268).
    assert "flash_mla_with_kvcache" in g.when_false.names
    assert "self._flash_mla_with_kvcache" in g.when_false.text
    # deepseek_v4_backend.py:4303-4318: DeepSeek-V4.1 on sm_100 first tries swapab_attention.
    swapab = gate(result, "srt/layers/attention/deepseek_v4_backend.py", 4304)
    assert swapab.sms_maybe == DC_BLACKWELL and swapab.sms_true == []
    assert swapab.when_true.names[0] == "sglang.kernels.ops.attention.dsv4.decode_attention_sm100.swapab_attention"


def test_sm120_flashmla_backend_is_an_environment_switch(result):
    switches = {s.name: s for s in result.env}
    sw = switches["SGLANG_SM120_FLASHMLA_BACKEND"]
    # srt/environ.py:1272 SGLANG_SM120_FLASHMLA_BACKEND = EnvStr("flashinfer")
    assert (sw.default, sw.defined_at) == ("flashinfer", "srt/environ.py:1272")
    # kernels/ops/attention/flash_mla_sm120.py:209 _sm120_default_backend = envs.SGLANG_SM120_FLASHMLA_BACKEND.get()
    assert "kernels/ops/attention/flash_mla_sm120.py:209" in sw.read_by
    # flash_mla_sm120.py:316 `if _sm120_default_backend == "flashinfer":` returns FlashInfer's kernel
    flashinfer = gate(result, "kernels/ops/attention/flash_mla_sm120.py", 316)
    assert flashinfer.kind == "env" and flashinfer.sms_true == ALL
    # flash_mla_sm120.py:343 `if _sm120_default_backend == "triton":` imports flash_mla_sparse_decode_triton
    triton = gate(result, "kernels/ops/attention/flash_mla_sm120.py", 343)
    assert triton.sms == []
    assert triton.env[0].passes_with["triton"] == ALL
    assert triton.when_true.names[0] == "sglang.kernels.ops.attention.flash_mla_sm120_triton.flash_mla_sparse_decode_triton"
    # flash_mla_sm120.py:362: anything else falls through to the PyTorch _sm120_sparse_decode_fwd
    assert "_sm120_sparse_decode_fwd" in triton.when_false.text


def test_triton_sparse_decode_reached_on_sm120_only_through_the_env_switch(result):
    (tie,) = fallbacks_for_kernels(result, SM120, ["_tiled_sparse_decode_kernel"])
    # kernels/ops/attention/flash_mla_sm120_triton.py:49 @triton.autotune/@triton.jit def _tiled_sparse_decode_kernel,
    # launched at :247 by _run_triton_sparse_decode (:208), called by flash_mla_sparse_decode_triton (:325)
    assert (tie.defined_at, tie.kind) == ("kernels/ops/attention/flash_mla_sm120_triton.py:49", "triton")
    functions = {c["function"] for p in tie.paths for c in p.chain}
    assert {"_run_triton_sparse_decode", "flash_mla_sparse_decode_triton", "flash_mla_with_kvcache_sm120"} <= functions
    assert "DeepseekV4AttnBackend._forward_attention" in functions
    # Default (flashinfer) does not reach it; SGLANG_SM120_FLASHMLA_BACKEND=triton does (flash_mla_sm120.py:316, :343).
    assert tie.reached is False and tie.reachable is True
    assert tie.env_to_reach == {"SGLANG_SM120_FLASHMLA_BACKEND": ["triton"]}
    levers = {lever["env"]: lever for lever in tie.levers if "env" in lever}
    assert levers["SGLANG_SM120_FLASHMLA_BACKEND"]["opens"] == ["triton"]
    # Other architectures take FlashMLA at the is_sm120 gate (deepseek_v4_backend.py:4335).
    assert tie.fallback and {90, 100} <= set(tie.replaced_on) and 120 not in tie.replaced_on
    alternative = next(a for a in tie.alternatives if a["at"] == "srt/layers/attention/deepseek_v4_backend.py:4335")
    assert "flash_mla_with_kvcache" in alternative["names"] and {90, 100} <= set(alternative["sms"])


@pytest.mark.parametrize("sm", [SM90, SM100])
def test_triton_sparse_decode_unreachable_on_hopper_and_datacenter_blackwell(result, sm):
    (tie,) = fallbacks_for_kernels(result, sm, ["_tiled_sparse_decode_kernel"])
    assert tie.reached is False and tie.reachable is False and not tie.env_to_reach
    # deepseek_v4_backend.py:4335 turns them to FlashMLA's flash_mla_with_kvcache instead.
    instead = next(i for i in tie.instead if i["at"] == "srt/layers/attention/deepseek_v4_backend.py:4335")
    assert "flash_mla_with_kvcache" in instead["names"]


def test_trtllm_gen_mxfp4_moe_is_sm100_only(result):
    # srt/layers/quantization/fp8.py:460-472 (FP4 experts, flashinfer_mxfp4 runner): "SM100 uses TRT-LLM;
    # SM90 uses W4A16 and SM120 uses MXFP8xMXFP4": `if get_platform().is_sm90 or get_platform().is_sm120:`
    # returns Mxfp4FlashinferCutlassMoEMethod, otherwise Mxfp4FlashinferTrtllmMoEMethod.
    g = gate(result, "srt/layers/quantization/fp8.py", 461)
    assert g.sms_true == [90, 120, 121]
    assert "Mxfp4FlashinferCutlassMoEMethod" in g.when_true.names
    assert "Mxfp4FlashinferTrtllmMoEMethod" in g.when_false.names
    assert row(result, SM100, g.file, g.line).passes is False
    # srt/arg_groups/overrides.py:1513-1521: modelopt_fp4 with moe_runner_backend auto on sm_120/sm_110
    # becomes flashinfer_cutlass "(trtllm-gen MoE kernels are SM100-only)".
    auto = gate(result, "srt/arg_groups/overrides.py", 1514)
    assert auto.sms_maybe == [110, 120, 121]


def test_deepgemm_paths(result):
    constants = {c.name: c for c in result.constants if c.defined_at.startswith("srt/layers/deep_gemm_wrapper/configurer.py")}
    # srt/layers/deep_gemm_wrapper/configurer.py:57 DEEPGEMM_BLACKWELL = ENABLE_JIT_DEEPGEMM and is_sm100
    assert constants["DEEPGEMM_BLACKWELL"].sms == DC_BLACKWELL
    # configurer.py:64-78: DEEPGEMM_PAGED_SPARSE_MQA_LOGITS requires DEEPGEMM_BLACKWELL
    assert constants["DEEPGEMM_PAGED_SPARSE_MQA_LOGITS"].sms == DC_BLACKWELL
    # configurer.py:39: JIT DeepGEMM needs sm_90 or newer; :44 sm_120/121 only with the SM120 APIs
    # probed in _sm120_deep_gemm_apis_available (:17) and `import deep_gemm` (:49): never definite.
    enabled = constants["ENABLE_JIT_DEEPGEMM"]
    assert enabled.sms == [90, 100, 101, 103, 107, 110, 120, 121] and enabled.sms_definite == []
    assert "deep_gemm importable" in enabled.conditions
    assert enabled.env == ["SGLANG_ENABLE_JIT_DEEPGEMM"]
    probe = gate(result, "srt/layers/deep_gemm_wrapper/configurer.py", 44)
    assert probe.sms_maybe == [120, 121]


def test_fp4_indexer_flag_is_rejected_on_hopper(result):
    # srt/arg_groups/serving_hook.py:464-470: --enable-deepseek-v4-fp4-indexer raises unless
    # is_sm100 or is_sm120 (or gfx95): allowed on sm_100 and sm_120, rejected on sm_90.
    g = gate(result, "srt/arg_groups/serving_hook.py", 464)
    assert g.when_true.kind in ("call", "raise") and "requires SM100, SM120" in g.when_true.text
    assert SM90 in g.sms_maybe
    assert not {100, 101, 103, 107, 120, 121} & set(g.sms)


def test_dsv4_trtllm_attention_backend_asserts_sm100(result):
    # srt/arg_groups/deepseek_v4_hook.py:104: `assert cfg.device == "cuda" and is_sm100_supported()`
    # for --dsv4-attn-backend trtllm
    g = gate(result, "srt/arg_groups/deepseek_v4_hook.py", 104)
    assert g.kind == "assert" and g.sms == DC_BLACKWELL


def test_dsv4_decode_head_padding_depends_on_the_sm120_backend(result):
    # srt/models/deepseek_v4.py:1219-1231: on sm_120 with the FlashInfer backend (the default) the
    # kernel takes the native per-rank heads; otherwise heads are padded to 64.
    outer = gate(result, "srt/models/deepseek_v4.py", 1219)
    inner = gate(result, "srt/models/deepseek_v4.py", 1224)
    assert outer.sms_true == [120, 121]
    assert inner.under == [{"gate": outer.id, "branch": True}]
    assert inner.env[0].name == "SGLANG_SM120_FLASHMLA_BACKEND" and inner.sms_true == ALL


def test_every_undecided_gate_is_listed_as_unresolved(result):
    unresolved_at = {u.at for u in result.unresolved}
    undecided = [g for g in result.gates if g.sms_unknown]
    assert undecided
    assert all(f"{g.file}:{g.line}" in unresolved_at for g in undecided)
    # kernels/jit/utils/arch.py:106/128: _CUDA_ARCH is only bound by `global _CUDA_ARCH` inside functions
    reasons = [u.reason for u in result.unresolved if u.text == "_CUDA_ARCH"]
    assert reasons and all("global statement" in r for r in reasons)


def test_box_side_json_for_sm120(sglang_scan, monkeypatch, capsys, tmp_path):
    """The box tool's JSON (``python -m tools.gates``, as the catalog runs it), in this process so that it
    evaluates the session's one scan of the tree; the tool as a process of its own, and its cache, are
    tests/test_gates_cache.py's, on a small tree."""
    import tools.gates.__main__ as box

    root = sglang_root()

    def the_sessions_scan(scanned, cuda=None):
        assert (Path(scanned).resolve(), cuda) == (root.resolve(), None), (scanned, cuda)
        return sglang_scan

    monkeypatch.setattr(box, "scan", the_sessions_scan)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert box.main(["--sm", "120", "--kernels", "_tiled_sparse_decode_kernel"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cached"] is False and out["source"] == str(root)
    assert out["engine"] == {"package": "sglang", "version": SGLANG_VERSION}
    rows = {(r["file"], r["line"]): r for r in out["evaluation"]}
    assert rows[("srt/layers/attention/deepseek_v4_backend.py", 4335)]["passes"] is True
    assert rows[("kernels/ops/attention/flash_mla_sm120.py", 343)]["passes"] is False
    (tie,) = out["kernels"]
    assert tie["env_to_reach"] == {"SGLANG_SM120_FLASHMLA_BACKEND": ["triton"]}


def test_capability_check_early_exit_is_passed_by_sm120(result):
    # kernels/kda_kernels/sm120_fp8.py:116 `if capability[0] != 12: return None`: the true side is the
    # exit, so sm_120 (which does not take it) goes on to the SM120 FP8 path below; sm_90 is shut out.
    g = gate(result, "kernels/kda_kernels/sm120_fp8.py", 116)
    assert g.role == "exits" and 120 not in g.sms and 90 in g.sms_true
    r120 = row(result, SM120, g.file, g.line)
    assert r120.passes is True and r120.definite and r120.alternative == "return None"
    assert 120 in r120.allows and 90 not in r120.allows
    assert row(result, SM90, g.file, g.line).passes is False
    # srt/arg_groups/serving_hook.py:464: the fp4-indexer check raises (when the flag is on) unless
    # sm_100/sm_120: an exit sm_120 passes whatever the flag; sm_90 passes only with the flag off.
    hook = gate(result, "srt/arg_groups/serving_hook.py", 464)
    h120, h90 = row(result, SM120, hook.file, hook.line), row(result, SM90, hook.file, hook.line)
    assert hook.role == "exits" and h120.passes is True and h120.definite
    assert h90.passes is True and not h90.definite and h90.conditions


def test_sm107_is_a_known_architecture(result):
    assert 107 in result.sm_versions
    # kernels/jit/utils/arch.py:122 `if (major, minor) == (10, 7):` after `major, minor =
    # torch.cuda.get_device_capability(device)` (:110); the rebinding at :126 comes after the test.
    g = gate(result, "kernels/jit/utils/arch.py", 122)
    assert g.sms == [107]
    # srt/layers/quantization/mxfp4.py:75 _is_sm107_supported: get_device_capability() == (10, 7)
    helpers = {h.name: h for h in result.helpers}
    assert helpers["_is_sm107_supported"].sms_definite == [107]


def test_every_literal_capability_a_gate_compares_is_evaluated(result):
    """The known architectures cover what the source tests: every `get_device_sm() == N` and
    `(major, minor) == (M, m)` a gate compares is an evaluated SM, and that gate is true there."""
    import re

    compared = []
    for g in result.gates:
        for n in re.findall(r"get_device_sm\(\) == (\d{2,3})\b", g.test):
            compared.append((g, int(n)))
        for major, minor in re.findall(r"\(major, minor\) == \((\d+), (\d)\)", g.test):
            compared.append((g, int(major) * 10 + int(minor)))
    assert {107, 120} <= {sm for _, sm in compared}
    for g, sm in compared:
        assert sm in result.sm_versions, (g.id, sm)
        if " and " not in g.test and " or " not in g.test and g.test.count("==") == 1:
            assert sm in g.sms, (g.id, g.test, g.sms)


@pytest.mark.parametrize("sm", [SM120, 107])
def test_every_row_verdict_agrees_with_its_test(result, sm):
    """An "enables" row passes where its test can be true; an early-exit row where it can be false."""
    gates = {g.id: g for g in result.gates}
    rows = evaluate(result, sm)
    assert any(r.role == "exits" for r in rows) and any(r.role == "enables" for r in rows)
    for r in rows:
        g = gates[r.id]
        if sm in g.sms_unknown:
            assert r.passes is None
            continue
        expected = (sm not in g.sms_true) if r.role == "exits" else (sm in g.sms)
        assert r.passes is expected and (sm in r.allows) is expected, r


def test_decode_kernel_tie_names_only_its_own_switch(result):
    from agent.steps.gates import headline_for, split_rows, switches_of
    from tools.gates.fallbacks import tie_to_dict
    from tools.gates.model import _jsonable

    (tie,) = fallbacks_for_kernels(result, SM120, ["_tiled_sparse_decode_kernel"])
    # srt/layers/attention/deepseek_v4_backend.py:4263: the sparse-prefill branch returns before the
    # decode call; the decode kernel's path is on its false side whatever SGLANG_OPT_FLASHMLA_SPARSE_PREFILL is.
    envs = [lever["env"] for lever in tie.levers if "env" in lever]
    assert envs == ["SGLANG_SM120_FLASHMLA_BACKEND"]
    prefill = [u for p in tie.paths for g in p.gates for u in g.env if u["name"] == "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL"]
    assert prefill and not any(u["decides"] for u in prefill)
    rows = _jsonable(evaluate(result, SM120))
    ties = [tie_to_dict(tie)]
    shown, shown_exits, exits_passed = split_rows(rows, ties)
    headline = headline_for(SM120, shown, shown_exits, exits_passed, ties, 0)
    assert switches_of(ties) == ["SGLANG_SM120_FLASHMLA_BACKEND"]
    assert "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL" not in headline
    assert "reached by SGLANG_SM120_FLASHMLA_BACKEND=triton" in headline
    # the early exit sm_120 passes is counted among the passed, not the failing
    assert "kernels/kda_kernels/sm120_fp8.py:116" in {f"{r['file']}:{r['line']}" for r in exits_passed}
    assert all(r["role"] == "exits" and r["passes"] is False for r in shown_exits)
    assert f"{len(shown_exits)} early-exit guards it takes" in headline
