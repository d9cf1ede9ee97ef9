"""Secrets: values of secret-looking environment variables (the target's and the process's) never
reach the journal, a recorded command line, a finding, an artifact, the checkpoint, the report or
the run's git history; the box still gets the real values. The whole-run check (a run with planted secrets
leaks none anywhere, and replays byte for byte) is the kill battery's run (tests/test_faults.py), which carries
them through every kill and resume: one investigation fewer in the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent import redact
from agent.box.local import LocalBox
from agent.rundir import RunDir
from agent.runlog import RunLog, read_events
from agent.session.live import LiveSession

from conftest import DATA, ROOT

TARGET_SECRET = "hf_PLANTEDtargetSECRET0123456789"
PROCESS_SECRET = "sk-PLANTEDprocessSECRET9876543210"


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("OPENAI_API_KEY", True), ("AWS_SECRET_ACCESS_KEY", True),
    ("DB_PASSWORD", True), ("GITHUB_TOKEN", True), ("MY_PASSWD", True), ("WANDB_APIKEY", True),
    ("PWD", False), ("TOKENIZERS_PARALLELISM", False), ("SGLANG_SM120_FLASHMLA_BACKEND", False), ("MONKEY", False),
    ("PATH", False), ("KEYBOARD", False),
])
def test_which_names_look_secret(name, secret):
    assert redact.looks_secret(name) is secret


def test_scrub_by_name_and_by_value(monkeypatch):
    monkeypatch.setenv("SOME_API_KEY", PROCESS_SECRET)
    event = {"kind": "tool_result", "args": {"env": {"HF_TOKEN": "short", "SGLANG_X": "triton"}},
             "argv": ["python", "--env", f"X={PROCESS_SECRET}"], "stderr_tail": f"token {PROCESS_SECRET} refused",
             "data": {"key": "a journal key, not an environment variable"}}
    clean = redact.scrub_event(event)
    assert clean["args"]["env"] == {"HF_TOKEN": redact.PLACEHOLDER, "SGLANG_X": "triton"}
    assert clean["argv"][-1] == f"X={redact.PLACEHOLDER}"
    assert PROCESS_SECRET not in json.dumps(clean)
    assert clean["data"] == event["data"]
    plain = {"kind": "step_start", "step": "survey"}
    assert redact.scrub_event(plain) is plain  # nothing to redact: the event itself, untouched


def test_resolve_gives_the_box_the_real_values_back():
    args = {"env": {"HF_TOKEN": redact.PLACEHOLDER, "A": "1", "GONE_TOKEN": redact.PLACEHOLDER},
            "spec": {"runs": [{"env": {"HF_TOKEN": redact.PLACEHOLDER}}]}}
    resolved = redact.resolve(args, {"HF_TOKEN": TARGET_SECRET})
    assert resolved == {"env": {"HF_TOKEN": TARGET_SECRET, "A": "1"},
                        "spec": {"runs": [{"env": {"HF_TOKEN": TARGET_SECRET}}]}}


def _planted_target(path: Path) -> Path:
    """other-shapes with HF_TOKEN in its engine environment and pasted into a lever's note, and the
    process secret pasted into its description."""
    data = yaml.safe_load((DATA / "targets" / "other-shapes.yaml").read_text())
    data["engine"]["env"]["HF_TOKEN"] = TARGET_SECRET
    data["description"] = f"{data.get('description', '')} (deployed with {PROCESS_SECRET})"
    data["levers"][0]["note"] = f"{data['levers'][0].get('note', '')} token {TARGET_SECRET}"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_recorded_target_holds_no_secret(tmp_path, monkeypatch):
    from agent.config import load_target

    monkeypatch.setenv("SERVICE_API_KEY", PROCESS_SECRET)
    path = _planted_target(tmp_path / "t.yaml")
    target, _ = load_target(str(path))
    recorded = redact.redact_target(target)
    dumped = json.dumps(recorded.model_dump(mode="json"))
    assert TARGET_SECRET not in dumped and PROCESS_SECRET not in dumped
    assert recorded.engine.env["HF_TOKEN"] == redact.PLACEHOLDER
    assert recorded.engine.env["SGLANG_SM120_FLASHMLA_BACKEND"] == "triton"  # what is not secret stays
    assert redact.target_secrets(target) == {"HF_TOKEN": TARGET_SECRET}


class SpyBox(LocalBox):
    """The real local box, noting the command line each command really got."""

    def __init__(self):
        super().__init__()
        self.argvs = []

    def run(self, argv, *, timeout_s, env=None):
        self.argvs.append(list(argv))
        return super().run(argv, timeout_s=timeout_s, env=env)


def test_a_tool_call_journals_no_secret_and_the_box_gets_it(tmp_path, monkeypatch):
    """One real tool call (the gate scan echoes its environment): the journal and the stored result hold the
    placeholder, the box got the value, in the tool's environment and not on its command line (which every user
    of the box can read)."""
    from tools.box_cli import SPEC_ENV

    monkeypatch.setenv("CI_DEPLOY_TOKEN", PROCESS_SECRET)
    source = tmp_path / "engine"
    source.mkdir()
    (source / "mod.py").write_text(f"# {PROCESS_SECRET}\nimport os\nFAST = os.environ.get('HF_TOKEN') == 'x'\n")
    run = RunDir.create(tmp_path / "runs", "r1")
    log = RunLog.create(run.log_path)
    box = EnvSpyBox()
    session = LiveSession(run, log, box, secrets={"HF_TOKEN": TARGET_SECRET})
    redact.remember([TARGET_SECRET])
    result = session.call("gates.scan", {"sm": 120, "source": str(source), "env": {"HF_TOKEN": redact.PLACEHOLDER}})
    assert result["ok"], result["error"]
    assert TARGET_SECRET not in json.dumps(box.argvs[-1]) and "--env" not in box.argvs[-1]
    assert box.argvs[-1][-2:] == ["--env-spec", "@env"]
    assert json.loads(box.envs[-1][SPEC_ENV]) == {"HF_TOKEN": TARGET_SECRET}  # the box got the real value
    assert result["data"]["env"] == {"HF_TOKEN": redact.PLACEHOLDER}  # the scan evaluated with it, echoed redacted
    text = run.log_path.read_text()
    assert TARGET_SECRET not in text and PROCESS_SECRET not in text
    assert [e["kind"] for e in read_events(run.log_path)] == ["tool_call", "tool_result"]


class EnvSpyBox(SpyBox):
    """SpyBox noting the environment each command got, too."""

    def __init__(self):
        super().__init__()
        self.envs = []

    def run(self, argv, *, timeout_s, env=None):
        self.envs.append(dict(env or {}))
        return super().run(argv, timeout_s=timeout_s, env=env)


def test_an_sglang_tool_gets_its_spec_off_the_command_line_where_every_user_of_the_box_could_read_it(tmp_path):
    """The SGLang adapter's spec carries the servers' environment, tokens included: it reaches the tool in the
    tool's environment (only its user and root can read that; any user can read a command line), and the tool
    still reads it (its check passes), then drops it from what its servers would inherit."""
    from tools.box_cli import SPEC_ENV

    run = RunDir.create(tmp_path / "runs", "r1")
    box = EnvSpyBox()
    session = LiveSession(run, RunLog.create(run.log_path), box, secrets={"HF_TOKEN": TARGET_SECRET})
    redact.remember([TARGET_SECRET])
    spec = {"server_args": ["--model-path", "/models/m"], "env": {"HF_TOKEN": redact.PLACEHOLDER}, "levers": []}
    result = session.call("sglang.check", {"spec": spec})
    assert result["ok"], result["error"]
    assert TARGET_SECRET not in json.dumps(box.argvs[-1]) and box.argvs[-1][-2:] == ["--spec", "@env"]
    assert json.loads(box.envs[-1][SPEC_ENV])["env"] == {"HF_TOKEN": TARGET_SECRET}  # the box got the real value
    assert TARGET_SECRET not in run.log_path.read_text()
    probe = ("import os, sys; from tools.box_cli import read_spec, SPEC_ENV; spec = read_spec('@env'); "
             "print(spec['env']['HF_TOKEN'] == sys.argv[1], SPEC_ENV in os.environ)")
    out = subprocess.run([sys.executable, "-c", probe, TARGET_SECRET], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, SPEC_ENV: box.envs[-1][SPEC_ENV]})
    assert out.stdout.split() == ["True", "False"], out.stderr


def _everything_in(run: Path) -> bytes:
    """Every byte a run left: its files (checkpoint, artifacts, findings, report, journal) and its
    whole git history, patches and every object, decompressed."""
    blobs = [p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()]
    git = ["git", "-C", str(run)]
    blobs.append(subprocess.run([*git, "log", "-p", "--all", "--format=%H %an %ad %B"], capture_output=True, check=True).stdout)
    blobs.append(subprocess.run([*git, "cat-file", "--batch-all-objects", "--batch"], capture_output=True, check=True).stdout)
    return b"\n".join(blobs)
