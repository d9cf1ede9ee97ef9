"""Targets: the shipped one validates; every kind of bad input is one line naming file, key, expectation."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.config import TargetError, load_target

ROOT = Path(__file__).resolve().parents[1]
DSV4 = ROOT / "agent" / "targets" / "dsv4-flash.yaml"


def test_dsv4_flash_target():
    target, path = load_target("dsv4-flash")
    assert path == DSV4
    assert target.goal.step_budget_ms == pytest.approx(16.0)
    assert target.deployment.heads_per_rank(target.model.heads) == 16
    assert target.deployment.kernel_heads(target.model.heads) == 64
    assert (target.model.nope_dim, target.model.rope_dim, target.model.index_topk) == (448, 64, 512)
    assert target.engine.env["SGLANG_SM120_FLASHMLA_BACKEND"] == "triton"
    assert len(target.model.compress_ratios) == target.model.layers == 43


def _write(tmp_path, mutate) -> Path:
    data = yaml.safe_load(DSV4.read_text())
    mutate(data)
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["model"].__setitem__("heads", "sixty-four"), "model.heads: input should be a valid integer, unable to parse string as an integer, got 'sixty-four'"),
    (lambda d: d["goal"].__setitem__("speed", 3), "goal.speed: unknown key"),
    (lambda d: d["deployment"].pop("sm_count"), "deployment.sm_count: required key missing"),
    (lambda d: d["model"].__setitem__("compress_ratios", [4]), "compress_ratios has 1 entries, expected one per layer (43)"),
    (lambda d: d["thresholds"].__setitem__("dominant_share", 1.5), "thresholds.dominant_share: input should be less than 1"),
    (lambda d: d["levers"].append(dict(d["levers"][0])), "lever names must be unique"),
])
def test_bad_fields_are_one_line_naming_file_and_key(tmp_path, mutate, expected):
    path = _write(tmp_path, mutate)
    with pytest.raises(TargetError) as err:
        load_target(str(path))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert expected in message


def test_malformed_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\ngoal: [1, 2\nmodel: {}\n")
    with pytest.raises(TargetError) as err:
        load_target(str(path))
    assert "malformed YAML" in str(err.value) and "line" in str(err.value)


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(TargetError, match="unknown target 'nope'.*dsv4-flash"):
        load_target("nope")


def test_validate_command_exit_codes(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "agent", "validate", "dsv4-flash"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0 and "valid" in ok.stdout and "188 SMs" in ok.stdout
    bad = _write(tmp_path, lambda d: d["goal"].__setitem__("concurrency", 0))
    out = subprocess.run([sys.executable, "-m", "agent", "validate", str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "goal.concurrency" in out.stderr
