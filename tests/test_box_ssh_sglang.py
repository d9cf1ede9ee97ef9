"""The SGLang target over the SSH box (issue #15's Must show over SSH), against a real sshd on loopback: the
stand-in server runs on the host as the box user, from the uploaded tree, with the host's own sglang; every
step runs, every rank's trace comes back. (A file of its own: pytest-xdist runs it beside
tests/test_box_ssh_investigate.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import agent, findings, only_run
from ssh_box import NEEDS_SSHD, box_args, harness, sshd  # noqa: F401  (sshd: this module's own server)

pytestmark = [pytest.mark.slow, NEEDS_SSHD]


# The SGLang target's levers the run over SSH tries: one of each kind the sweep meets (a start that fails for a
# missing package, a planted out-of-memory, a server flag measured, an NCCL variable that gloo cannot use). What
# is particular to SSH (the uploaded tree, the host's own sglang and Python, the stand-in launched on the host as
# the box user, every rank's trace and every log brought back) is the same for every lever; each other lever of the
# target is judged in the local run (tests/test_investigate_sglang.py), whose sweep is the same code.
SSH_LEVERS = ("attention-flashinfer", "mem-fraction-0.95", "cuda-graph-off", "nccl-proto-simple")
TP = 2


@pytest.fixture(scope="module")
def ssh_sglang_run(sshd, tmp_path_factory) -> Path:
    """Issue #15's Must show over the SSH box: the SGLang target against the stand-in server, which runs on
    the host as the box user, from the uploaded tree, with the host's own sglang."""
    import yaml

    from agent.config import TARGETS_DIR

    runs = tmp_path_factory.mktemp("runs-ssh-sglang")
    target = yaml.safe_load((TARGETS_DIR / "dsv4-flash-sglang.yaml").read_text())
    target["levers"] = [lever for lever in target["levers"] if lever["name"] in SSH_LEVERS]
    assert {lever["name"] for lever in target["levers"]} == set(SSH_LEVERS)  # each still a lever of the shipped target
    # The smallest load that still measures each healthy run (two requests of eight tokens, one warm-up): this run
    # judges no timing (the local run holds the sweep to the planted effects at the target's own load), and each of
    # its healthy launches spent some 16 s of a 2-core box on the target's three waves of 32 tokens.
    target["engine"]["load_cpu"] = {"input_len": 16, "output_len": 8, "concurrency": 2, "num_prompts": 2, "warmup_prompts": 1}
    # Two ranks, not the target's four: what SSH adds (every rank's trace brought back) is the same for two, and four
    # rank processes on a 2-core box beside the rest of the suite cost each launch and step twice the cores. The local
    # run keeps the target's TP4.
    args = target["engine"]["server"]["args"]
    args[args.index("--tp-size") + 1] = str(TP)
    path = runs.parent / "dsv4-flash-sglang-over-ssh.yaml"
    path.write_text(yaml.safe_dump(target, sort_keys=False))
    out = agent("investigate", path, "--stand-in", *box_args(sshd), "--runs-dir", runs, "--decide", "auto",
                env=sshd.agent_env, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    return only_run(runs)


def test_the_sglang_stand_in_over_ssh_runs_every_step(ssh_sglang_run):
    run = findings(ssh_sglang_run)
    steps = [f["step"] for f in run]
    assert steps[:3] == ["survey", "levers", "profile"] and {"ceiling", "gates", "options", "report"} <= set(steps), steps
    assert "splitk" not in steps  # split-K cannot be dropped into a live server
    levers = {r["name"]: r for r in next(f for f in run if f["step"] == "levers")["data"]["levers"]}
    assert sorted(levers) == sorted(SSH_LEVERS)
    # what no timing decides: the planted crash and the missing FlashInfer fail, with their log excerpts;
    # NCCL's variables are not applicable to gloo; the server-flag lever was measured, with an interval
    for name in ("mem-fraction-0.95", "attention-flashinfer"):
        assert levers[name]["status"] == "failed" and levers[name]["log_excerpt"], levers[name]
    assert "out of memory" in levers["mem-fraction-0.95"]["log_excerpt"]
    assert "not applicable to gloo" in levers["nccl-proto-simple"]["reason"]
    assert levers["cuda-graph-off"]["interval"]
    survey = next(f for f in run if f["step"] == "survey")
    sglang_dir = survey["data"]["software"]["sglang_dir"]
    assert sglang_dir.startswith(str(harness.ENV_CACHE))  # the host's own sglang, not the agent's
    gates = next(f for f in run if f["step"] == "gates")
    assert gates["data"]["source"]["dir"] == sglang_dir
    profile = next(f for f in run if f["step"] == "profile")
    files = profile["data"]["summary"]["files"]
    assert sorted(r for f in files for r in f["ranks"]) == [str(r) for r in range(TP)]
    assert len(files) == TP and all((ssh_sglang_run / f["path"]).is_file() for f in files)  # every rank's trace came back
    assert (ssh_sglang_run / "PROFILE_FINDINGS.md").is_file()
