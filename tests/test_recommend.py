"""``agent recommend RUN`` (agent/recommend.py) on the shipped runs: the setting is the run's own choice (the
levers finding's ``best``), a run with no measured gain recommends the baseline and says why, split-K's command
puts the plugin in place, and every command is refused by nothing in the installed SGLang: its server parser
(and sglang-router's, for a disaggregated deployment's router) and its declared environment variables."""

from __future__ import annotations

import json

import pytest

from agent import recommend as rec
from agent.cli import JSON_KEYS
from tools import exitcodes
from tools.engines.sglang import splitk_plugin

from conftest import DATA, ROOT, agent_in_process

H200 = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"
CPU = ROOT / "runs" / "examples" / "dsv4-flash-cpu-20261202"
PD = DATA / "sglang-pd-standin-run"
RUNS = [H200, CPU, PD]


def test_h200_runs_the_levers_winner_while_its_split_k_was_a_what_if_and_says_why():
    r = rec.recommend(str(H200))
    assert r.setting["name"] == "attention-torch-fallback"  # the levers finding's best, as recorded
    assert r.setting["launches"][0]["env"]["SGLANG_SM120_FLASHMLA_BACKEND"] == "torch"
    # split-K measured faster, beyond both intervals, but with the H200's own tile plan: not the sm_120 kernels
    assert r.splitk["interval"][0] > r.setting["interval"][1] and r.splitk["what_if"]
    assert r.run_this == "setting" and any("what-if for the declared GPU" in w for w in r.why)
    env = r.splitk["launches"][0]["env"]
    assert env["SGLANG_SM120_FLASHMLA_BACKEND"] == splitk_plugin.BACKEND
    assert env["PYTHONPATH"].split(":")[:2] == [str(splitk_plugin.REPO_ROOT), str(splitk_plugin.PLUGIN_DIR)]
    assert "a what-if for sm_120" in r.splitk["basis"]  # the box's own plan: said, not hidden
    assert any(w.startswith("compile moved up") and "attention-torch-fallback measured faster" in w for w in r.why)


def test_cpu_run_with_no_measured_gain_recommends_the_baseline_and_never_an_interpreted_split_k():
    r = rec.recommend(str(CPU))
    assert (r.setting["name"], r.setting["levers"], r.run_this) == ("baseline", [], "setting")
    assert r.why[0].startswith("no lever measured a gain")
    assert r.splitk["interpreted"] and any("CPU interpreter" in w for w in r.why)
    # the CPU box's lack of CUDA graphs is the box's, not the deployment's: no flag turns them off
    assert "--cuda-graph-backend-decode" not in r.splitk["launches"][0]["argv"]


def test_a_stand_in_pd_run_gives_both_servers_and_the_router_and_why_its_mover_is_not_taken():
    r = rec.recommend(str(PD))
    assert [launch["role"] for launch in r.setting["launches"]] == ["prefill", "decode", "router"]
    assert r.setting["name"] == "baseline" and r.splitk is None
    assert any(w.startswith("continuous-decode-4 moved up") and "not checked" in w for w in r.why)


def test_options_sglang_has_no_flag_for_are_named_not_guessed():
    assert rec.option_flags({"cuda_graph": False, "compile": True}) == (
        ["--enable-torch-compile", "--cuda-graph-backend-decode", "disabled"], [])
    assert rec.option_flags({"moe": "loop", "steps_per_graph": 4})[1] == ["moe=loop", "steps_per_graph=4"]


def _launches(run) -> list[dict]:
    r = rec.recommend(str(run))
    return r.setting["launches"] + (r.splitk["launches"] if r.splitk else [])


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_every_command_is_refused_by_nothing_in_the_installed_sglang(run):
    pytest.importorskip("sglang.srt.server_args")
    from tools.engines.sglang import check, installed

    fields, deprecated = check.declared_envs()
    for launch in _launches(run):
        argv = launch["argv"]
        if launch["role"] == "router":
            assert argv[:3] == ["python", "-m", "sglang_router.launch_router"]
            parser = installed.router_parser()
            assert check.parse_problems(argv[3:], "router", None, parser) == [], argv
            continue
        assert argv[:3] == rec.LAUNCHER
        assert check.parse_problems(argv[3:], "server args", installed.version("sglang")) == [], argv
        env = {k: v for k, v in launch["env"].items() if k != "PYTHONPATH"}
        assert check.env_problems(env, lambda name: name, fields, deprecated) == [], env


@pytest.mark.parametrize("run", [H200, CPU], ids=lambda p: p.name)
def test_the_command_prints_both_commands_and_json_holds_the_documented_keys(run, capsys):
    code, out, err = agent_in_process(["recommend", str(run)], capsys)
    assert (code, err) == (exitcodes.DONE, "")
    assert "python -m sglang.launch_server --model-path /path/to/DeepSeek-V4-Flash --tp-size 4" in out
    assert "Best measured setting (lever sweep):" in out and "After the split-K build:" in out
    code, out, err = agent_in_process(["recommend", str(run), "--json"], capsys)
    got = json.loads(out)
    assert code == exitcodes.DONE and got["status"] == "done" and got["exit_code"] == 0
    assert set(got) == {"command", "status", "exit_code", "message", *JSON_KEYS["recommend"]}
    chosen = got["splitk"] if got["run_this"] == "splitk" else got["setting"]
    assert got["message"] == chosen["command"]


def test_a_bad_run_is_one_error_line_and_bad_input(capsys, tmp_path):
    code, out, err = agent_in_process(["recommend", "no-such-run", "--runs-dir", str(tmp_path)], capsys)
    assert code == exitcodes.BAD_INPUT and out == ""
    assert err.startswith("error: no run 'no-such-run'") and err.count("\n") == 1
    (tmp_path / "empty").mkdir()
    code, out, err = agent_in_process(["recommend", str(tmp_path / "empty"), "--json"], capsys)
    assert code == exitcodes.BAD_INPUT and err.startswith("error: ") and err.count("\n") == 1
    assert json.loads(out)["status"] == "bad-input" and json.loads(out)["setting"] is None


def test_split_k_is_run_only_when_the_declared_gpus_kernels_were_timed_on_a_gpu_and_clear_the_winner():
    setting = {"name": "attention-torch-fallback", "levers": ["attention-torch-fallback"], "ratio": 1.696,
               "interval": [1.692, 1.700]}
    measured = {"interval": [2.199, 2.210], "over": [], "interpreted": False, "what_if": False}
    assert rec._choose(setting, measured)[0] == "splitk"
    assert rec._choose(setting, dict(measured, what_if=True))[0] == "setting"
    assert rec._choose(setting, dict(measured, interpreted=True))[0] == "setting"
    assert rec._choose(setting, dict(measured, interval=[1.69, 1.75]))[0] == "setting"  # overlaps the winner's
