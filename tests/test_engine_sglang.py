"""The SGLang engine's agent side (agent/engine_sglang.py, agent/config.py's server, load and flag levers):
settings -> server arguments and environment, the box tools' arguments, the --stand-in choice recorded in
the target, the target's validation, and the preflight check that refuses deprecated, ambiguous and unknown
arguments and an unknown backend value against the installed SGLang (tools/engines/sglang check)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from agent.box.local import LocalBox
from agent.config import TARGETS_DIR, TargetError, parse_target
from agent.engine_runs import baseline as reference_baseline
from agent.engine_runs import bench_spec
from agent import engine_sglang as es

TARGET = TARGETS_DIR / "dsv4-flash-sglang.yaml"


def _data() -> dict:
    return yaml.safe_load(TARGET.read_text())


def _target(mutate=None):
    data = _data()
    if mutate:
        mutate(data)
    return parse_target(data, "test")


def _lever(target, name):
    return next(lever for lever in target.levers if lever.name == name)


def test_a_lever_adds_its_args_after_the_deployments_and_its_env_over_the_deployments():
    target = _target()
    base = es.baseline(target)
    assert base.args[:4] == ["--model-path", "/models/DeepSeek-V4-Flash", "--load-format", "dummy"]
    assert base.args[4:] == target.engine.server.args
    lever = es.with_lever(target, _lever(target, "continuous-decode-4"))
    assert lever.args == base.args + ["--num-continuous-decode-steps", "4"]
    assert lever.env == base.env
    env_lever = es.with_lever(target, _lever(target, "attention-triton"))
    assert env_lever.args == base.args
    assert env_lever.env == {**base.env, "SGLANG_SM120_FLASHMLA_BACKEND": "triton"}


def test_sweep_args_send_each_runs_extras_over_the_shared_launch():
    target = _target()
    runs = [("baseline#r1", es.baseline(target)),
            ("ep-4#r1", es.with_lever(target, _lever(target, "ep-4"))),
            ("attention-triton#r1", es.with_lever(target, _lever(target, "attention-triton")))]
    args = es.sweep_args(target, "cuda", runs)
    spec = args["spec"]
    assert spec["launcher"] == ["{python}", "-m", "sglang.launch_server"]  # the catalog puts the box's Python there
    assert spec["server_args"] == es.baseline(target).args
    assert spec["env"] == dict(target.engine.env)  # a real server gets no stand-in spec
    assert [r["label"] for r in spec["runs"]] == ["baseline#r1", "ep-4#r1", "attention-triton#r1"]
    assert spec["runs"][0] == {"label": "baseline#r1", "args": [], "env": {}}
    assert spec["runs"][1]["args"] == ["--ep-size", "4"]
    assert spec["runs"][2] == {"label": "attention-triton#r1", "args": [], "env": {"SGLANG_SM120_FLASHMLA_BACKEND": "triton"}}
    load = target.engine.load
    assert spec["load"] == {"input_len": load.input_len, "output_len": load.output_len, "concurrency": load.concurrency,
                            "num_prompts": load.num_prompts, "warmup_prompts": load.warmup_prompts, "seed": 0}
    assert args["timeout_s"] == 3 * target.engine.server.run_timeout_s
    cpu = es.sweep_args(target, "cpu", runs[:1])["spec"]["load"]
    assert cpu["concurrency"] == target.engine.load_cpu.concurrency != load.concurrency


def test_the_stand_in_is_recorded_in_the_target_and_gets_the_reference_engines_spec_at_the_boxs_shapes():
    target = es.with_stand_in(_target())
    assert target.engine.server.stand_in
    assert target.engine.server.launcher == ["{python}", "-m", "tools.engines.sglang_standin"]
    # a replay parses the recorded target: the choice survives the round trip
    again = parse_target(json.loads(json.dumps(target.model_dump(mode="json"))), "recorded")
    assert again.engine.server.stand_in and again == target
    spec = es.sweep_args(target, "cpu", [("baseline#r1", es.baseline(target))])["spec"]
    assert spec["launcher"] == ["{python}", "-m", "tools.engines.sglang_standin"]
    assert spec["server_args"] == es.baseline(target).args  # the stand-in gets what the server would get
    standin = json.loads(spec["env"][es.STANDIN_SPEC_ENV])
    assert standin == bench_spec(target, "cpu", reference_baseline(target, "cpu"), [target.engine.load_cpu.concurrency])
    assert standin["overrides"]["heads"] == 4 and standin["device"] == "cpu"


def test_the_stand_in_is_refused_for_a_reference_target():
    reference = parse_target(yaml.safe_load((TARGETS_DIR / "dsv4-flash.yaml").read_text()), "dsv4-flash")
    with pytest.raises(TargetError, match="--stand-in: target dsv4-flash runs the reference engine"):
        es.with_stand_in(reference)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["engine"].pop("server"), "engine kind sglang needs engine.server"),
    (lambda d: d["engine"]["server"]["args"].extend(["--port", "30000"]), "--port: the adapter sets them"),
    (lambda d: d["engine"]["server"]["args"].append("--host=0.0.0.0"), "--host: the adapter sets them"),
    (lambda d: d["engine"].update(what_if_backends={"flashmla": [90]}), "what_if_backends are reference-engine"),
    (lambda d: d["levers"].append({"name": "empty", "kind": "flag"}), "sets nothing (give args)"),
    (lambda d: d["engine"]["load"].update(concurrency=0), "engine.load.concurrency"),
    (lambda d: d["engine"]["server"].update(health_timeout_s=True), "expected a number"),
])
def test_a_bad_sglang_target_is_one_line_naming_the_key(mutate, message):
    with pytest.raises(TargetError) as caught:
        _target(mutate)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_levers_that_cannot_run_here_say_why():
    target = _target(lambda d: d["levers"].append({"name": "nvls", "kind": "env", "env": {"NCCL_ALGO": "NVLSTree"}}))
    assert "NVLink multicast stays off" in es.applicability(target, _lever(target, "nvls"), "cuda")
    assert es.applicability(target, _lever(target, "nccl-proto-ll"), "cuda") is None
    assert "not applicable to gloo" in es.applicability(target, _lever(target, "nccl-proto-ll"), "cpu")
    assert es.applicability(target, _lever(target, "ep-4"), "cpu") is None
    option = _target(lambda d: d["levers"].append({"name": "graphs", "kind": "option", "options": {"cuda_graph": False}}))
    assert "engine options are the reference engine's" in es.applicability(option, _lever(option, "graphs"), "cuda")
    held = _target(lambda d: d["levers"].append({"name": "same", "kind": "env", "env": {"SGLANG_SM120_FLASHMLA_BACKEND": "torch"}}))
    assert "already runs with" in es.applicability(held, _lever(held, "same"), "cuda")


def test_check_args_hold_every_sglang_lever_as_launched():
    target = _target()
    spec = es.check_args(target)["spec"]
    assert spec["server_args"] == es.baseline(target).args
    assert {lever["name"] for lever in spec["levers"]} == {lever.name for lever in target.levers}
    assert next(lv for lv in spec["levers"] if lv["name"] == "attn-dp-2")["args"] == ["--attn-dp-size", "2"]


# -- the preflight, against the installed sglang's own parser (tools/engines/sglang check) ------------------------

SURVEY = {"gpus": [], "software": {"sglang": "0.5.23", "sglang_dir": "installed"}}


def _problems(mutate):
    return es.check_sglang_args(_target(mutate), LocalBox(), SURVEY)


@pytest.mark.slow  # imports the installed sglang's ServerArgs (~10 s on the shared box), twice
def test_preflight_passes_the_shipped_target_and_refuses_a_bad_one_naming_each_problem_on_its_line():
    assert es.check_sglang_args(_target(), LocalBox(), SURVEY) == []

    def bad(d):
        d["engine"]["server"]["args"] += ["--disable-cuda-graph"]              # deprecated
        d["levers"] += [
            {"name": "bare-max-bs", "kind": "flag", "args": ["--cuda-graph-max-bs", "8"]},            # ambiguous
            {"name": "typo", "kind": "flag", "args": ["--num-continuous-decode-stepz", "2"]},       # unknown
            {"name": "dp-old", "kind": "flag", "args": ["--enable-dp-attention"]},                    # deprecated
            {"name": "backend-typo", "kind": "env", "env": {"SGLANG_SM120_FLASHMLA_BACKEND": "flashmla"}},  # value
        ]
    lines = _problems(bad)
    text = "\n".join(lines)
    assert len(lines) == 5, text
    deprecated = next(line for line in lines if "--disable-cuda-graph" in line)
    assert deprecated.startswith("server args: ") and "--cuda-graph-backend" in deprecated
    assert "would only warn" in deprecated
    ambiguous = next(line for line in lines if line.startswith("lever bare-max-bs"))
    assert "--cuda-graph-max-bs-decode" in ambiguous and "--cuda-graph-max-bs-prefill" in ambiguous
    assert next(line for line in lines if line.startswith("lever typo")).count("--num-continuous-decode-stepz")
    assert "--attn-dp-size" in next(line for line in lines if line.startswith("lever dp-old"))
    backend = next(line for line in lines if line.startswith("lever backend-typo"))
    assert all(v in backend for v in ("flashinfer", "triton", "torch"))


PD_TARGET = TARGETS_DIR.parent.parent / "tests" / "data" / "targets" / "dsv4-flash-sglang-pd.yaml"


@pytest.mark.slow  # imports the installed sglang's ServerArgs and sglang-router's RouterArgs
def test_preflight_checks_each_disaggregated_server_and_the_router_as_launched():
    """Each side's command line is checked as the disaggregation tool launches it (its role and transfer backend
    included), a lever on the side it goes to, each side's env, and the router's args by sglang-router's own
    parser; the shipped PD target passes."""
    def pd(mutate=None):
        data = yaml.safe_load(PD_TARGET.read_text())
        if mutate:
            mutate(data)
        return es.check_sglang_args(parse_target(data, "pd"), LocalBox(), SURVEY)

    assert pd() == []

    def bad(d):
        dis = d["engine"]["disaggregation"]
        dis["prefill"]["args"] += ["--enable-dp-attention"]                              # deprecated, prefill only
        dis["decode"]["env"] = {"SGLANG_SM120_FLASHMLA_BACKEND": "cutlass"}              # value, decode only
        dis["router"]["args"] += ["--policy", "fastest"]                                  # the router's choices
        dis["transfer_backend"] = "carrier-pigeon"                                        # SGLang's choices
        d["levers"] += [{"name": "bare-max-bs", "kind": "flag", "args": ["--cuda-graph-max-bs", "8"]}]  # ambiguous
    lines = pd(bad)
    text = "\n".join(lines)
    assert len(lines) == 5, text
    assert next(line for line in lines if line.startswith("prefill server args: --enable-dp-attention")).count("--attn-dp-size")
    assert next(line for line in lines if line.startswith("decode server env SGLANG_SM120_FLASHMLA_BACKEND")).count("cutlass")
    router = next(line for line in lines if line.startswith("router args: --policy"))
    assert "fastest" in router and "round_robin" in router
    assert next(line for line in lines if line.startswith("disaggregation.transfer_backend")).count("mooncake")
    assert next(line for line in lines if line.startswith("lever bare-max-bs (decode server)")).count("-decode")


def test_preflight_refuses_a_box_without_sglang_before_any_check():
    survey = copy.deepcopy(SURVEY)
    survey["software"]["sglang_dir"] = None
    lines = es.check_sglang_args(_target(), LocalBox(), survey)
    assert len(lines) == 1 and lines[0].startswith("sglang is not installed on the box")


def test_split_k_is_not_tried_in_a_live_server_so_auto_stops_and_splitk_is_refused_with_the_reason():
    from agent.steps.options import LIVE_SERVER, _on_engine, accept_option, auto_choice, resolve_choice

    offered = {"name": "splitk", "title": "Split-K", "offered": True, "why": "a serial loop", "can_try_here": True,
               "try_note": "the split-K kernel is on the box", "upper_x": 3.0, "estimate_x": 2.0}
    option = _on_engine(_target(), offered)
    assert not option["can_try_here"] and option["try_note"] == LIVE_SERVER
    assert option["kernel_on_box"]  # what can be measured: the kernel alone (options.kernel_alone)
    options = [option, accept_option(10.0)]
    assert auto_choice(options) == "stop"
    chosen, why = resolve_choice("splitk", options, "stop")
    assert chosen is None and LIVE_SERVER in why
    reference = parse_target(yaml.safe_load((TARGETS_DIR / "dsv4-flash.yaml").read_text()), "dsv4-flash")
    assert _on_engine(reference, offered) is offered  # the reference engine tries it as before
