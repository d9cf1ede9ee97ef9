"""Issue #34's CPU parts for a real SGLang server (0.5.17) on the H200: the carry's cut, check and reassembly on
small files; its repack of sglang-kernel; its call plan; the import walk that says which wheels the launch
needs, and that the carry covers what 0.5.17's own source imports; the adapter reading 0.5.17's unpacked source
(its parser, its environment: which release it read); the device (H100) target checked by 0.5.17's own parser; the
scaled DeepSeek-V4 config loaded by 0.5.17's own ModelConfig; docs/sglang-0.5.17-vs-0.5.23.md as the two
releases give it. 0.5.17's source is ``make setup``'s (scripts/real_sglang/source.py; fetched here if absent)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT
from scripts.real_sglang import bundle, carry, diff, imports, source

TARGET = "dsv4-scaled-sglang-h100"
CONFIG = ROOT / "tools" / "engines" / "sglang" / "models" / "dsv4-flash-scaled" / "config.json"


# --- the carry -----------------------------------------------------------------------------------------------

def _wheels(folder: Path, sizes: dict[str, int]) -> list[Path]:
    folder.mkdir(parents=True)
    out = []
    for name, size in sizes.items():
        path = folder / name
        path.write_bytes(bytes((i * 7 + len(name)) % 251 for i in range(size)))
        out.append(path)
    return out


def test_bundle_cuts_into_parts_and_reassembles_the_same_wheels(tmp_path):
    wheels = _wheels(tmp_path / "w", {"a-1-py3-none-any.whl": 5000, "b-2-py3-none-any.whl": 12345,
                                      "c-3-py3-none-any.whl": 1})
    manifest = bundle.pack(wheels, tmp_path / "parts", part_bytes=4096)
    assert all(p["bytes"] <= 4096 for p in manifest["parts"]) and len(manifest["parts"]) >= 5
    assert sum(p["bytes"] for p in manifest["parts"]) == manifest["tar"]["bytes"]
    assert not (tmp_path / "parts" / "bundle.tar").exists()  # only the parts travel
    back = bundle.reassemble(tmp_path / "parts", tmp_path / "out")
    assert [p.name for p in back] == sorted(w.name for w in wheels)
    assert all((tmp_path / "out" / w.name).read_bytes() == w.read_bytes() for w in wheels)


def test_reassembly_refuses_a_changed_or_missing_part(tmp_path):
    wheels = _wheels(tmp_path / "w", {"a-1-py3-none-any.whl": 9000})
    bundle.pack(wheels, tmp_path / "parts", part_bytes=4096)
    part = tmp_path / "parts" / "part001"
    data = bytearray(part.read_bytes())
    data[10] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(bundle.Corrupt, match="part001: size or sha256"):
        bundle.reassemble(tmp_path / "parts", tmp_path / "out")
    part.unlink()  # a cold machine between calls: the part is not there
    with pytest.raises(bundle.Corrupt, match="part001 is missing"):
        bundle.reassemble(tmp_path / "parts", tmp_path / "out")


def test_slim_sgl_kernel_leaves_out_fa3_and_sm100_and_their_record_lines(tmp_path):
    wheel = tmp_path / "in" / "sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl"
    wheel.parent.mkdir()
    files = {"sgl_kernel/__init__.py": b"x", "sgl_kernel/flash_ops.abi3.so": b"fa3" * 100,
             "sgl_kernel/flashmla_ops.abi3.so": b"mla", "sgl_kernel/sm90/common_ops.abi3.so": b"90",
             "sgl_kernel/sm100/common_ops.abi3.so": b"100"}
    record = "".join(f"{name},sha256=x,1\n" for name in files) + "sglang_kernel-0.4.5.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as out:
        for name, data in files.items():
            out.writestr(name, data)
        out.writestr("sglang_kernel-0.4.5.dist-info/RECORD", record)
    slim = carry.slim_sgl_kernel(wheel, tmp_path / "slim")
    with zipfile.ZipFile(slim) as result:
        names = set(result.namelist())
        kept_record = result.read("sglang_kernel-0.4.5.dist-info/RECORD").decode()
    assert names == {"sgl_kernel/__init__.py", "sgl_kernel/flashmla_ops.abi3.so",
                     "sgl_kernel/sm90/common_ops.abi3.so", "sglang_kernel-0.4.5.dist-info/RECORD"}
    assert "flash_ops" not in kept_record and "sm100" not in kept_record and "flashmla_ops" in kept_record


def test_plan_carries_one_part_a_call_and_installs_each_group_in_its_last(tmp_path, monkeypatch):
    monkeypatch.setattr(carry, "CARRY", tmp_path)
    for group, sizes in (("server", {"s-1-py3-none-any.whl": 10000}), ("client", {"c-1-py3-none-any.whl": 3000})):
        bundle.pack(_wheels(tmp_path / "w" / group, sizes), tmp_path / "parts" / group, part_bytes=4096)
    calls = carry.plan()
    installs = [i for i, c in enumerate(calls) if "install" in c["command"]]
    assert [calls[i]["command"].split()[-1] for i in installs] == ["server", "client"]
    assert installs[-1] == len(calls) - 1 and all(len(c["carry"]) == 1 for i, c in enumerate(calls) if i not in installs)
    assert all(calls[i]["carry"][-1].endswith("manifest.json") for i in installs)


# --- which wheels: the import walk ---------------------------------------------------------------------------

def test_import_walk_counts_what_runs_on_import(tmp_path):
    pkg = tmp_path / "sglang"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import alpha\n")
    (pkg / "entry.py").write_text(
        "from typing import TYPE_CHECKING\nimport os\nfrom . import mod\nfrom .sub import helper\n"
        "try:\n    import optional_dep\nexcept ImportError:\n    optional_dep = None\n"
        "if TYPE_CHECKING:\n    import typing_only\nif os.environ.get('X'):\n    import conditional\n"
        "def lazy():\n    import lazy_dep\n")
    (pkg / "mod.py").write_text("import beta.sub\n")
    (pkg / "sub" / "__init__.py").write_text("from .impl import helper\n")
    (pkg / "sub" / "impl.py").write_text("import gamma\n")
    (pkg / "sub" / "helper.py").write_text("import never\n")  # shadowed: the package binds helper itself
    found = imports.external_imports(tmp_path, ["sglang.entry"])
    assert set(found) == {"alpha", "beta", "gamma", "conditional"}
    assert found["gamma"] == ["sglang.sub.impl"]


@pytest.fixture(scope="module")
def release_tree() -> Path:
    return source.fetch()


def test_the_carry_covers_what_0517_imports_at_launch(release_tree):
    names = set(imports.external_imports(release_tree)) - imports.PLATFORM_ONLY
    # the server's own kernels, its HTTP stack and the client's datasets are among them: the walk reaches them
    assert {"sgl_kernel", "flashinfer", "fastapi", "uvicorn", "zmq", "torchvision", "datasets"} <= names
    assert carry.uncovered(names) == []


# --- the adapter on 0.5.17's source --------------------------------------------------------------------------

PROBE = r"""
import json, os, sys
from tools.engines.sglang import release
release.activate(sys.argv[1], sys.argv[2])
from tools.engines.sglang import check, surface
checked = check.run(json.loads(open(sys.argv[3]).read()))
os.environ["SGLANG_DSV4_FP4_EXPERTS"] = "0"  # as the target's env: no probe of the checkpoint's safetensors
from sglang.srt.configs.model_config import ModelConfig, is_deepseek_v4
m = ModelConfig(sys.argv[4])
h = m.hf_config
model = {"config_class": type(h).__name__, "deepseek_v4": is_deepseek_v4(h), "heads": m.num_attention_heads,
         "head_dim": m.head_dim, "rope_dim": m.qk_rope_head_dim, "window": m.window_size,
         "compress_ratios": list(m.compress_ratios), "index_head_dim": m.index_head_dim, "index_topk": h.index_topk,
         "index_heads": h.index_n_heads, "kv_heads": h.num_key_value_heads, "layers": m.num_hidden_layers,
         "experts": h.n_routed_experts, "experts_per_token": h.num_experts_per_tok, "fp4_experts": m.is_fp4_experts}
print(json.dumps({"check": checked, "surface": surface.run(), "model": model}))
"""


@pytest.fixture(scope="module")
def probe(release_tree, tmp_path_factory) -> dict:
    from agent.config import load_target
    from agent.engine_sglang import check_args

    spec = check_args(load_target(TARGET)[0])["spec"]
    # 0.5.23's replacement of --enable-dp-attention, which 0.5.17 does not have: its own parser must refuse it
    spec["levers"].append({"name": "attn-dp-2", "args": ["--attn-dp-size", "2"], "env": {}})
    path = tmp_path_factory.mktemp("spec") / "spec.json"
    path.write_text(json.dumps(spec))
    command = [sys.executable, "-c", PROBE, str(release_tree), str(source.SITE_DIR), str(path), str(CONFIG)]
    with ThreadPoolExecutor(2) as pool:  # the installed 0.5.23's surface alongside: two processes, one wait
        installed = pool.submit(diff.surface, False)
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return {**json.loads(proc.stdout.strip().splitlines()[-1]), "installed_surface": installed.result()}


def test_the_adapter_reads_0517_and_says_so(probe, release_tree):
    read = probe["check"]["sglang"]
    assert read["version"] == "0.5.17" and Path(read["path"]) == release_tree / "sglang"
    assert read.get("shims") in (None, ["torchvision"])  # the placeholder only where torchvision cannot load
    surf = probe["surface"]
    assert surf["sglang"]["version"] == "0.5.17"
    assert "--cuda-graph-backend-decode" in surf["server_args"] and "--attn-dp-size" not in surf["server_args"]
    assert {"output_dir", "num_steps", "activities", "with_stack", "profile_by_stage"} <= set(surf["profile_request"])
    # the stage suffix that gives -DECODE: ForwardMode's name, in 0.5.17's own profiler
    assert 'stage_suffix = f"-{stage.name}" if stage else ""' in surf["trace_name_lines"][surface_file()]


def surface_file() -> str:
    from tools.engines.sglang import surface

    return surface.TRACE_FILES[0]


def test_the_device_target_passes_0517s_own_parser_and_attn_dp_size_does_not(probe):
    problems = probe["check"]["problems"]
    assert [(p["where"], p["item"]) for p in problems] == [("lever attn-dp-2", "--attn-dp-size")], problems


def test_the_scaled_config_loads_with_0517s_model_config_and_keeps_the_attention_geometry(probe):
    from agent.config import load_target

    model = probe["model"]
    flash = load_target("dsv4-flash")[0].model
    scaled = load_target(TARGET)[0].model
    assert model["config_class"] == "_DeepseekV4ConfigAlias" and model["deepseek_v4"]
    # DeepSeek-V4-Flash's attention, as the project's dsv4-flash target declares it
    assert (model["heads"], model["head_dim"], model["rope_dim"]) == (flash.heads, flash.nope_dim + flash.rope_dim,
                                                                     flash.rope_dim)
    assert (model["index_topk"], model["index_heads"], model["index_head_dim"]) == (
        flash.index_topk, flash.index_heads, flash.index_head_dim)
    assert model["window"] == flash.sliding_window and model["kv_heads"] == 1
    assert set(model["compress_ratios"]) == set(flash.compress_ratios) == {0, 4, 128}
    assert model["compress_ratios"] == flash.compress_ratios[:model["layers"]]
    # scaled down, and the device target says the same model
    assert model["layers"] < flash.layers and model["experts"] < flash.experts
    assert (model["layers"], model["experts"], model["experts_per_token"], model["compress_ratios"]) == (
        scaled.layers, scaled.experts, scaled.experts_per_token, scaled.compress_ratios)
    assert model["fp4_experts"] is False


def test_the_scaled_config_has_every_rope_key_0517s_deepseek_v4_subscripts(release_tree):
    # the first launch on the H100 died in the attention's __init__ on scaling["original_max_position_embeddings"]
    # with rope_scaling null: every key the model reads without a default must be in the config
    import ast

    tree = ast.parse((release_tree / "sglang/srt/models/deepseek_v4.py").read_text())
    read = {n.slice.value for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id == "scaling" and isinstance(n.slice, ast.Constant)}
    assert "original_max_position_embeddings" in read
    assert read <= set(json.loads(CONFIG.read_text())["rope_scaling"] or {})


def test_the_difference_document_is_what_the_two_releases_give(probe):
    installed_surface = probe["installed_surface"]
    assert installed_surface["sglang"]["version"] == "0.5.23"
    assert diff.DOC.read_text() == diff.render(probe["surface"], installed_surface), (
        "run: python -m scripts.real_sglang.diff")


def test_the_device_target_is_sized_for_the_device():
    from agent.config import load_target

    target = load_target(TARGET)[0]
    server = target.engine.server
    assert target.engine.kind == "sglang" and not server.stand_in and server.load_format == "dummy"
    assert "--skip-tokenizer-init" not in server.args and Path(ROOT / server.model_path / "config.json") == CONFIG
    assert target.deployment.sm == 90 and target.deployment.tp == 1
    assert len(target.levers) == 3 and target.thresholds.noise.rounds_for("cuda") <= 3
    assert server.health_timeout_s <= 600 and server.run_timeout_s <= 600  # the device's 10 minutes a command
    assert json.loads(CONFIG.read_text())["num_hidden_layers"] == target.model.layers


def test_the_scaled_models_tokenizer_streams_every_id_as_text(tmp_path):
    """The server loads the model folder's tokenizer (no --skip-tokenizer-init), so each id the dummy weights emit
    must decode to a word: one word per id over the config's whole vocabulary, as tokenizer.build writes it."""
    from transformers import AutoTokenizer

    from tools.engines.sglang import tokenizer

    folder = CONFIG.parent
    vocab = json.loads(CONFIG.read_text())["vocab_size"]
    loaded = AutoTokenizer.from_pretrained(str(folder))
    assert len(loaded) == vocab
    for ids in ([1], [vocab - 1], [7, vocab // 2, vocab - 2]):
        assert loaded.decode(ids).split() == [f"w{i}" for i in ids]
    # the committed files are the builder's, byte for byte
    tokenizer.build(tmp_path, vocab)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), name
