"""Bad input: a target that is wrong in type, key, size or number, or built to attack the loader, is
refused in one ``error:`` line with the bad-input exit code; values carrying shell syntax reach the
box as plain arguments and environment values, never through a shell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from agent.box.catalog import run_tool
from agent.box.local import LocalBox
from agent.cli import main
from agent.config import MAX_TARGET_BYTES
from tools import exitcodes

ROOT = Path(__file__).resolve().parents[1]
DSV4 = ROOT / "agent" / "targets" / "dsv4-flash.yaml"


def _target(tmp_path: Path, mutate=None, text: str | None = None, name: str = "t.yaml") -> Path:
    path = tmp_path / name
    if text is None:
        data = yaml.safe_load(DSV4.read_text())
        if mutate:
            mutate(data)
        text = yaml.safe_dump(data)
    path.write_text(text)
    return path


def _validate(path: Path, capsys) -> str:
    """``validate PATH`` in process: must exit BAD_INPUT with one ``error:`` line on stderr."""
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == exitcodes.BAD_INPUT, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def _set(section, key, value):
    return lambda d: d[section].__setitem__(key, value)


@pytest.mark.parametrize("mutate, expected", [
    (_set("model", "heads", True), "model.heads: value error, expected a number, got true"),
    (_set("goal", "concurrency", "many"), "goal.concurrency: input should be a valid integer"),
    (_set("model", "compress_ratios", "4,4"), "model.compress_ratios: input should be a valid list"),
    (lambda d: d.__setitem__("engine", ["reference"]), "engine: input should be a valid dictionary"),
    (lambda d: d["engine"]["cpu"].__setitem__("bach", 4), "engine.cpu.bach: unknown key"),
    (lambda d: d.__setitem__("levers", [{"name": "x", "kind": "env", "env": {"A": "1"}, "typo": 1}]),
     "levers.0.typo: unknown key"),
    (_set("goal", "concurrency", -16), "goal.concurrency: input should be greater than 0"),
    (lambda d: d["engine"]["cpu"].__setitem__("steps", -1), "engine.cpu.steps: input should be greater than 0"),
    (_set("goal", "concurrency", 10 ** 12), "goal.concurrency: input should be less than or equal to 1048576"),
    (_set("model", "layers", 10 ** 9), "model.layers: input should be less than or equal to 10000"),
    (lambda d: d["engine"]["cpu"].__setitem__("context_len", 10 ** 15), "engine.cpu.context_len: input should be less"),
    (_set("goal", "output_tok_s", float("inf")), "goal.output_tok_s: input should be a finite number"),
    (_set("goal", "output_tok_s", 1e300), "goal.output_tok_s: input should be less than or equal to"),
    (lambda d: d.__setitem__("name", "../../escape"), "name: string should match pattern"),
])
def test_bad_values_are_one_line(tmp_path, capsys, mutate, expected):
    err = _validate(_target(tmp_path, mutate), capsys)
    assert expected in err


def test_file_over_the_limit_is_refused_before_it_is_read(tmp_path, capsys):
    path = tmp_path / "huge.yaml"
    line = b"# a comment line that YAML would have to scan, all hundred megabytes of it\n"
    path.write_bytes(DSV4.read_bytes() + line * (100 * 2**20 // len(line)))
    err = _validate(path, capsys)
    assert f"a target is at most {MAX_TARGET_BYTES:,} bytes" in err


def test_object_constructing_tags_construct_nothing(tmp_path, capsys):
    marker = tmp_path / "constructed"
    for tag in (f"!!python/object/apply:os.system ['touch {marker}']", "!!python/object:agent.config.Target {}",
                f"!!python/object/new:subprocess.Popen [['touch', '{marker}']]"):
        text = DSV4.read_text().replace("name: dsv4-flash", f"name: {tag}", 1)
        assert text != DSV4.read_text()
        err = _validate(_target(tmp_path, text=text), capsys)
        assert "could not determine a constructor for the tag" in err
    assert not marker.exists()


def test_alias_bomb_is_refused(tmp_path, capsys):
    # nine levels of ten aliases each: 10**9 values once expanded, a few hundred bytes of YAML
    lines = ['a0: &a0 ["x"]'] + [f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(10))}]" for i in range(1, 10)]
    text = DSV4.read_text() + "published:\n" + "".join(f"  {line}\n" for line in lines)
    err = _validate(_target(tmp_path, text=text), capsys)
    assert "values once its aliases are expanded" in err


def test_not_utf8_and_too_deep_are_one_line(tmp_path, capsys):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    assert "not UTF-8 text" in _validate(binary, capsys)
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert "malformed YAML" in _validate(deep, capsys)


def test_the_real_exit_code_and_json_on_bad_input(tmp_path):
    import subprocess

    bad = _target(tmp_path, _set("goal", "concurrency", -1))
    out = subprocess.run([sys.executable, "-m", "agent", "validate", str(bad), "--json"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == exitcodes.BAD_INPUT == 2
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1
    obj = json.loads(out.stdout)
    assert obj["status"] == "bad-input" and obj["exit_code"] == 2 and "goal.concurrency" in obj["message"]


# -- shell syntax ----------------------------------------------------------------------------------


def _shell_payloads(marker: Path) -> list[str]:
    """Values that create ``marker`` if any shell ever reads them."""
    return [f"; touch {marker}", f"$(touch {marker})", f"`touch {marker}`", f"x\ntouch {marker}\n",
            f"| touch {marker}", f"&& touch {marker}"]


def test_shell_syntax_in_a_target_is_just_text(tmp_path, capsys):
    marker = tmp_path / "shell-ran"
    payloads = _shell_payloads(marker)

    def mutate(d):
        d["engine"]["env"]["MODEL_PATH"] = payloads[0]
        d["engine"]["env"]["EXTRA"] = payloads[1]
        d["deployment"]["source"] = payloads[2]
        d["levers"].append({"name": "flags", "kind": "flag", "flags": [f"--model-path={p}" for p in payloads],
                            "engines": ["sglang"]})

    path = _target(tmp_path, mutate)
    assert main(["validate", str(path), "--json"]) == exitcodes.DONE
    target = json.loads(capsys.readouterr().out)["target"]
    assert target["engine"]["env"]["EXTRA"] == payloads[1]
    assert target["levers"][-1]["flags"] == [f"--model-path={p}" for p in payloads]
    assert not marker.exists()


def test_shell_syntax_reaches_the_box_verbatim(tmp_path):
    marker = tmp_path / "shell-ran"
    payloads = _shell_payloads(marker)
    env = {f"PAYLOAD_{i}": p for i, p in enumerate(payloads)}
    echo = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': {k: os.environ[k] for k in sorted(os.environ) if k.startswith('PAYLOAD_')}}))"
    result = LocalBox().run([sys.executable, "-c", echo, *payloads], timeout_s=60, env=env)
    assert result.rc == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen == {"argv": payloads, "env": env}
    assert not marker.exists()


def test_shell_syntax_in_a_tool_call_through_the_catalog(tmp_path):
    """A catalogued tool (the gate scan) run through the real box with shell syntax in its
    environment arguments and its source path: the tool gets the text, nothing runs."""
    marker = tmp_path / "shell-ran"
    payloads = _shell_payloads(marker)
    source = tmp_path / "engine $(touch shell-ran) ; x"
    source.mkdir()
    (source / "mod.py").write_text("import torch\n\ndef f():\n    return torch.cuda.get_device_capability()[0] >= 9\n")
    env = {f"SGLANG_PAYLOAD_{i}": p for i, p in enumerate(payloads)}
    record, raw = run_tool(LocalBox(), "gates.scan", {"sm": 120, "source": str(source), "env": env})
    raw.cleanup()
    assert record["ok"], record["error"]
    assert record["data"]["env"] == env and record["data"]["source"] == str(source)
    assert not marker.exists() and not (ROOT / "shell-ran").exists()
