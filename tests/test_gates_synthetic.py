"""Gate scan on a small synthetic engine tree (tests/data/gates-synthetic, see its README).

Every gate form is planted under names the scanner has no table for; each test fails if the
handling of that form breaks (the gate disappears, or its SM set or kind changes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.gates import evaluate, fallbacks_for_kernels, from_dict, scan
from tools.gates.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]
TREE = REPO / "tests" / "data" / "gates-synthetic" / "fakeengine"
ALL = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 107, 110, 120, 121]
DC_BLACKWELL = [100, 101, 103, 107]


@pytest.fixture(scope="module")
def result():
    return scan(TREE)


def gate(result, line, file="attention.py"):
    found = [g for g in result.gates if g.file == file and g.line == line]
    assert found, f"no gate at {file}:{line}; gates: {[g.id for g in result.gates]}"
    return found[0]


def helper(result, name):
    found = [h for h in result.helpers if h.name == name]
    assert found, f"no helper {name}; helpers: {[h.name for h in result.helpers]}"
    return found[0]


def test_scan_never_imports_the_tree(result):
    # fakeengine/__init__.py raises on import; the scan must have read it with ast only.
    assert "fakeengine" not in sys.modules
    assert result.files_scanned == 7


def test_helpers_are_learned_from_their_definitions(result):
    # partial(_arch_check, majors=(9,), ...) wrapped in lru_cache: platform_utils.py:14
    assert helper(result, "is_hopper_ok").sms_definite == [90]
    assert helper(result, "is_hopper_ok").defined_at == "platform_utils.py:14"
    # `major == 10` from get_device_capability(): platform_utils.py:17
    assert helper(result, "arch_is_blackwell_dc").sms_definite == DC_BLACKWELL
    # built on device_sm(), itself from get_device_properties().major/minor: platform_utils.py:27
    assert helper(result, "supports_fast_fp4").sms_definite == DC_BLACKWELL
    # a helper whose name says nothing about architectures, `cap >= (8, 9)`: platform_utils.py:32
    assert helper(result, "turbo_ok").sms_definite == [89, 90, 100, 101, 103, 107, 110, 120, 121]
    # a class property combining two helpers: platform_utils.py:68
    assert helper(result, "Device.has_tma").sms_definite == [90, 100, 101, 103, 107, 110, 120, 121]
    # a non-boolean helper keeps its value per SM
    assert helper(result, "device_sm").values["120"] == "120"


def test_call_through_star_reexport(result):
    g = gate(result, 26)  # supports_fast_fp4() imported from fakeengine.utils (star re-export)
    assert (g.kind, g.sms_true, [h.name for h in g.helpers]) == ("call", DC_BLACKWELL, ["supports_fast_fp4"])
    assert (g.when_true.text, g.when_false.text) == ("return fp4_quant(x)", "falls through: return fp8_quant(x)")


def test_import_alias(result):
    g = gate(result, 32)  # `is_hopper_ok as _hop`; `if _hop():`
    assert (g.kind, g.sms_true, g.helpers[0].name) == ("call", [90], "is_hopper_ok")


def test_module_constant(result):
    g = gate(result, 38)  # _DC = arch_is_blackwell_dc() at module level; `if _DC:`
    assert (g.kind, g.sms_true) == ("const", DC_BLACKWELL)
    constants = {c.name: c for c in result.constants}
    assert constants["_DC"].sms_definite == DC_BLACKWELL and constants["_DC"].defined_at == "attention.py:18"


def test_function_local_alias_of_attribute_form(result):
    g = gate(result, 45)  # blackwell = facts().is_dc_blackwell; `if blackwell:`
    assert (g.kind, g.sms_true, g.helpers[0].name) == ("const", DC_BLACKWELL, "arch_is_blackwell_dc")


def test_attribute_through_dispatch_table_getattr(result):
    g = gate(result, 51)  # facts().is_hopper -> _FACTS["is_hopper"] -> is_hopper_ok via Facts.__getattr__
    assert (g.kind, g.sms_true, g.helpers[0].name) == ("attr", [90], "is_hopper_ok")
    assert any("Facts.__getattr__" in note for note in g.notes)


def test_property(result):
    g = gate(result, 57)  # Device().has_tma
    assert (g.kind, g.sms_true) == ("attr", [90, 100, 101, 103, 107, 110, 120, 121])


def test_import_probe_becomes_a_condition(result):
    probes = {p.id: p for p in result.import_probes}
    assert probes["attention.py:11:0"].modules == ["fast_fp4_lib"]
    g = gate(result, 63)  # HAS_FP4 (try: import fast_fp4_lib) and supports_fast_fp4()
    assert g.sms_true == [] and g.sms_maybe == DC_BLACKWELL
    assert g.conditions == ["fast_fp4_lib importable"]


def test_os_environ_switch_that_reaches_the_sm(result):
    g = gate(result, 69)  # os.environ.get("FAKE_SM120_PATH", "0") == "1" and device_sm() == 120
    assert g.kind == "env" and g.sms == []
    use = g.env[0]
    assert (use.name, use.default, use.passes_with["1"]) == ("FAKE_SM120_PATH", "0", [120])


def test_direct_capability_compare(result):
    g = gate(result, 75)  # torch.cuda.get_device_capability() >= (9, 0)
    assert (g.kind, g.sms_true) == ("call", [90, 100, 101, 103, 107, 110, 120, 121])


def test_unresolvable_names_are_listed_not_dropped(result):
    assert gate(result, 81).sms_unknown == ALL  # is_sm130_supported from a package outside the tree
    assert gate(result, 87).sms_unknown == ALL  # self.device_caps.is_sm200 on an unknown object
    unresolved = {(u.at, u.text): u.reason for u in result.unresolved}
    assert ("attention.py:81", "is_sm130_supported()") in unresolved
    assert "is_sm200" in unresolved[("attention.py:87", "self.device_caps.is_sm200")]
    rows = {r.line: r for r in evaluate(result, 120)}
    assert rows[81].passes is None and rows[87].passes is None


def test_env_registry_switch_under_arch_gate(result):
    g = gate(result, 97)  # _BACKEND == "slow", _BACKEND = env.FAKE_DECODE_BACKEND.get()
    assert g.kind == "env"
    use = g.env[0]
    # default and where the registry declares it: envs.py:31 FAKE_DECODE_BACKEND = StrFlag("fast")
    assert (use.name, use.default, use.defined_at) == ("FAKE_DECODE_BACKEND", "fast", "envs.py:31")
    assert use.passes_with["<default>"] == [] and use.passes_with["slow"] == ALL
    # it sits after `if arch_is_blackwell_dc(): return ...`, so on that gate's false side
    assert g.under == [{"gate": gate(result, 93).id, "branch": False}]
    assert g.when_true.names[0] == "fakeengine.kernels.decode.slow_decode"


def test_bool_env_registry_field_is_parsed_by_the_registry(result):
    g = gate(result, 107)  # env.FAKE_USE_FP4.get() (BoolFlag(True), parse: lower() in ("1", ...))
    use = g.env[0]
    assert (use.default, use.passes_with["0"], use.passes_with["1"]) == (True, [], DC_BLACKWELL)


def test_env_write_under_gate(result):
    switches = {s.name: s for s in result.env}
    turbo = switches["FAKE_TURBO_MODE"]  # os.environ["FAKE_TURBO_MODE"] = "1" under `if turbo_ok():`
    assert turbo.set_at == [{"at": "attention.py:22", "value": "'1'", "under": [{"gate": gate(result, 21).id, "branch": True}]}]


def test_branch_paths(result):
    g = gate(result, 93)  # if arch_is_blackwell_dc(): from dcblas import dc_decode; return dc_decode(q)
    assert g.when_true.names[0] == "dcblas.dc_decode"
    assert g.when_false.text.startswith("falls through:")
    assert "fakeengine.kernels.decode.slow_decode" in g.when_false.names


def test_evaluate_per_sm_and_env(result):
    rows = {r.line: r for r in evaluate(result, 100)}
    assert rows[93].passes is True and rows[93].definite and rows[93].helper == "arch_is_blackwell_dc"
    assert rows[51].passes is False  # hopper-only
    assert rows[63].passes is True and not rows[63].definite  # needs fast_fp4_lib
    rows120 = {r.line: r for r in evaluate(result, 120)}
    assert rows120[97].passes is False
    flipped = {r.line: r for r in evaluate(result, 120, env={"FAKE_DECODE_BACKEND": "slow"})}
    assert flipped[97].passes is True
    # a value no gate compares against: re-evaluated in place through the live scan
    other = {r.line: r for r in evaluate(result, 120, env={"FAKE_DECODE_BACKEND": "torch"})}
    assert other[97].passes is False
    with pytest.raises(ValueError):
        evaluate(result, 95)


def test_cuda_version_assumption_changes_the_answer():
    old = scan(TREE, cuda="11.8")  # _arch_check requires CUDA >= 12.0 (platform_utils.py:10)
    assert helper(old, "is_hopper_ok").sms == []
    assert gate(old, 32).sms == []  # still listed: it reads the capability, no SM passes
    assert helper(old, "arch_is_blackwell_dc").sms_definite == DC_BLACKWELL


def test_kernel_tie_on_an_architecture_turned_away(result):
    (tie,) = fallbacks_for_kernels(result, 100, ["_slow_decode_kernel"])
    assert (tie.defined_at, tie.kind) == ("kernels/decode.py:6", "triton")
    assert tie.reached is False and tie.reachable is False
    assert tie.instead == [
        {
            "at": "attention.py:93",
            "test": "arch_is_blackwell_dc()",
            "names": ["dcblas.dc_decode", "dc_decode"],
            "text": "from dcblas import dc_decode; return dc_decode(q)",
        }
    ]


def test_kernel_tie_reached_only_through_the_env_switch(result):
    (tie,) = fallbacks_for_kernels(result, 120, ["_slow_decode_kernel"])
    assert tie.reached is False and tie.reachable is True
    assert tie.env_to_reach == {"FAKE_DECODE_BACKEND": ["slow"]}
    assert tie.fallback and tie.replaced_on == DC_BLACKWELL
    assert [a["at"] for a in tie.alternatives] == ["attention.py:93"]
    assert tie.alternatives[0]["names"][0] == "dcblas.dc_decode"
    (path,) = tie.paths
    assert [c["function"] for c in path.chain] == ["_slow_decode_kernel", "slow_decode", "decode"]
    assert [(g.at, g.branch) for g in path.gates] == [("attention.py:97", True), ("attention.py:93", False)]
    levers = {lever["env"]: lever for lever in tie.levers if "env" in lever}
    assert levers["FAKE_DECODE_BACKEND"]["opens"] == ["slow"]
    assert levers["FAKE_DECODE_BACKEND"]["defined_at"] == "envs.py:31"


def test_unknown_kernel_is_reported(result):
    (tie,) = fallbacks_for_kernels(result, 120, ["no_such_kernel"])
    assert tie.defined_at is None and tie.unresolved == ["no definition of 'no_such_kernel' in the tree"]


def test_json_roundtrip_and_determinism(result):
    data = result.to_dict()
    text = json.dumps(data, sort_keys=True, allow_nan=False)
    assert json.dumps(scan(TREE).to_dict(), sort_keys=True) == text
    again = from_dict(json.loads(text))
    assert json.dumps(again.to_dict(), sort_keys=True) == text
    # a scan rebuilt from JSON still evaluates (without the live state)
    assert [r.passes for r in evaluate(again, 100)] == [r.passes for r in evaluate(result, 100)]


def test_box_side_cli_prints_one_json_object():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.gates", "--source", str(TREE), "--sm", "120", "--kernels", "_slow_decode_kernel"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert sorted(out) == ["cached", "engine", "env", "evaluation", "kernels", "scan", "sm", "source", "tool"]
    assert out["tool"] == "gates" and out["sm"] == 120
    rows = {r["line"]: r for r in out["evaluation"]}
    assert rows[93]["passes"] is False and rows[97]["passes"] is False
    assert out["kernels"][0]["env_to_reach"] == {"FAKE_DECODE_BACKEND": ["slow"]}
    with_env = subprocess.run(
        [sys.executable, "-m", "tools.gates", "--source", str(TREE), "--sm", "120", "--env", "FAKE_DECODE_BACKEND=slow"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert {r["line"]: r for r in json.loads(with_env.stdout)["evaluation"]}[97]["passes"] is True


@pytest.mark.parametrize(
    "args, message",
    [
        (["--source", "/nonexistent/tree", "--sm", "90"], "not a directory"),
        (["--sm", "95"], "not a known compute capability"),
        (["--sm", "90", "--env", "NOEQUALS"], "NAME=VALUE"),
    ],
)
def test_box_side_cli_bad_input(args, message):
    if "--source" not in args:
        args = ["--source", str(TREE)] + args
    proc = subprocess.run([sys.executable, "-m", "tools.gates", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""


def test_human_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that each gate's line keeps its guarded path beside it
    assert cli_main(["--source", str(TREE), "--sm", "100", "--kernels", "_slow_decode_kernel", "--all"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("attention.py:93"))
    assert "arch_is_blackwell_dc" in line and "100,101,103" in line and " yes " in line
    assert "unresolved (2):" in out
    assert "this SM runs instead at attention.py:93" in out
    assert cli_main(["--source", str(TREE), "--sm", "100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sm"] == 100


# Early exits (attention.py:111-170): the true side of these tests leaves the function.

EXIT_GATES = {121: "return None", 127: "raise", 134: "continue", 140: "return after logging"}


@pytest.mark.parametrize("line", sorted(EXIT_GATES))
def test_early_exit_guards_are_told_apart(result, line):
    assert gate(result, line).role == "exits", EXIT_GATES[line]


def test_selections_and_fast_paths_are_not_exits(result):
    # `return "hopper"` (:148) chooses a value; `return fp4_quant(x)` (:26) is the fast path itself.
    assert gate(result, 148).role == "enables" and gate(result, 26).role == "enables"
    assert gate(result, 93).role == "enables"  # imports and calls dc_decode before returning


def test_sm120_passes_the_exit_it_does_not_take(result):
    # attention.py:121 `if capability[0] != 12: return None`: sm_120 goes on to the kernel below.
    rows = {r.line: r for r in evaluate(result, 120)}
    row = rows[121]
    assert row.passes is True and row.definite
    assert row.guarded.startswith("falls through: return consumer_gemv_kernel") and row.alternative == "return None"
    assert row.allows == [120, 121]
    # the same guard shuts sm_90 out
    assert {r.line: r for r in evaluate(result, 90)}[121].passes is False
    # dc_only (:127) raises on sm_120: sm_120 fails it, sm_100 passes
    assert rows[127].passes is False and {r.line: r for r in evaluate(result, 100)}[127].passes is True


@pytest.mark.parametrize("sm", [90, 100, 107, 120])
def test_every_row_verdict_agrees_with_its_test_on_the_sm(result, sm):
    """An "enables" row passes where its test can be true, an "exits" row where it can be false;
    `allows` holds exactly the SMs that would pass."""
    gates = {g.id: g for g in result.gates}
    for row in evaluate(result, sm):
        g = gates[row.id]
        if sm in g.sms_unknown:
            assert row.passes is None
            continue
        test_can_be_true = sm in g.sms
        test_can_be_false = sm not in g.sms_true
        expected = test_can_be_false if row.role == "exits" else test_can_be_true
        assert row.passes is expected, row
        assert (sm in row.allows) is expected, row


def test_a_rebinding_after_the_test_does_not_reach_it(result):
    # attention.py:157 `if (major, minor) == (10, 7):` rebinds major, minor inside the branch;
    # only the capability bound before the test reaches it: sm_107 exactly, never sm_87.
    g = gate(result, 157)
    assert g.sms_true == [107] and g.sms_maybe == []


def test_a_rebinding_later_in_the_same_loop_reaches_the_test(result):
    # attention.py:166 `if sm == 90:` inside a loop whose next line rebinds sm = device_sm()
    g = gate(result, 166)
    assert g.sms_maybe == [90] and g.sms_true == []


def test_sm_numbers_are_major_times_ten_plus_minor():
    from tools.gates.model import SM_VERSIONS, capability_of, sm_of

    assert sm_of(10, 7) == 107 and sm_of(12, 0) == 120 and sm_of(8, 7) == 87
    assert all(sm_of(*capability_of(sm)) == sm for sm in SM_VERSIONS)
    assert 107 in SM_VERSIONS


def test_sm107_is_accepted_by_the_box_side_cli():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.gates", "--source", str(TREE), "--sm", "107"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {r["line"]: r for r in json.loads(proc.stdout)["evaluation"]}
    assert rows[157]["passes"] is True and rows[93]["passes"] is True  # major 10: arch_is_blackwell_dc


def test_env_decided_rows_say_so(result):
    rows = {r.line: r for r in evaluate(result, 120)}
    # attention.py:97 `_BACKEND == "slow"`: false on every SM at the default, true on every SM with "slow"
    assert rows[97].decided_by == "env"
    # attention.py:69 needs FAKE_SM120_PATH=1 *and* sm_120: the SM still decides
    assert rows[69].decided_by == "sm" and rows[93].decided_by == "sm"


def test_a_switch_that_cannot_close_the_path_is_not_a_lever(tmp_path):
    # A prefill switch guarding an early return before the decode call: every value of it leaves
    # the decode path open (the decode runs on the guard's false side), so it does not choose the kernel.
    pkg = tmp_path / "eng"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text(
        "import os\n"
        "import torch\n\n\n"
        "def _decode_kernel(x):\n"
        "    return x\n\n\n"
        "def forward(x, is_prefill):\n"
        "    if is_prefill and os.environ.get('ENG_SPARSE_PREFILL', '1') == '1':\n"
        "        return prefill(x)\n"
        "    if torch.cuda.get_device_capability()[0] == 12:\n"
        "        if os.environ.get('ENG_DECODE_BACKEND', 'fast') == 'slow':\n"
        "            return _decode_kernel(x)\n"
        "        return fast_decode(x)\n"
        "    return other_decode(x)\n"
    )
    (tie,) = fallbacks_for_kernels(scan(pkg), 120, ["_decode_kernel"])
    assert tie.env_to_reach == {"ENG_DECODE_BACKEND": ["slow"]}
    assert [lever["env"] for lever in tie.levers if "env" in lever] == ["ENG_DECODE_BACKEND"]
    prefill_uses = [use for path in tie.paths for g in path.gates for use in g.env if use["name"] == "ENG_SPARSE_PREFILL"]
    assert prefill_uses and all(not use["decides"] and not use["closes"] for use in prefill_uses)


def test_gates_step_counts_and_shows_early_exits_apart(result):
    from agent.steps.gates import allows_text, headline_for, reached_by, split_rows
    from tools.gates.fallbacks import tie_to_dict
    from tools.gates.model import _jsonable

    rows = _jsonable(evaluate(result, 120))
    ties = [tie_to_dict(t) for t in fallbacks_for_kernels(result, 120, ["_slow_decode_kernel"])]
    shown, shown_exits, exits_passed = split_rows(rows, ties)
    where = lambda rs: {r["line"] for r in rs}  # noqa: E731
    # attention.py:121 (sm_120 does not take `return None`) passes; :127 (sm_120 takes the raise) fails
    assert 121 in where(exits_passed) and 121 not in where(shown)
    assert 127 in where(shown_exits) and 127 in where(shown)
    assert where(shown_exits) == {r["line"] for r in rows if r["role"] == "exits" and r["passes"] is False}
    headline = headline_for(120, shown, shown_exits, exits_passed, ties, 0)
    assert f"{len(shown_exits)} early-exit guards it takes" in headline
    assert f"passes {len(exits_passed)} early-exit guards" in headline
    assert "reached by FAKE_DECODE_BACKEND=slow" in headline and reached_by(ties[0]) == "FAKE_DECODE_BACKEND=slow"
    by_line = {r["line"]: r for r in rows}
    # attention.py:97: the environment value decides, not the SM
    assert allows_text(by_line[97], result.sm_versions) == "any SM; FAKE_DECODE_BACKEND decides"
    assert allows_text(by_line[121], result.sm_versions) == "sm_120, sm_121"


def test_human_table_marks_early_exits(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert cli_main(["--source", str(TREE), "--sm", "120", "--all"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("attention.py:121"))
    assert " early exit " in line and " yes " in line and ">=120" in line
