"""Whole investigations on this machine (no GPU: the reference engine runs at reduced shapes under the
Triton CPU interpreter), their runs' git history, replay, resume after kill -9, and bad input."""

import subprocess
from pathlib import Path

import git
import pytest

from agent import runner
from agent.config import load_target
from conftest import DATA, agent, agent_here, events, finding, findings
from reports.format import cell, fmt_spread

pytestmark = pytest.mark.slow


def _commits(run: Path) -> list[git.Commit]:
    return list(reversed(list(git.Repo(run).iter_commits("main"))))


def test_dsv4_report_shows_kernel_grid_and_ceiling(dsv4_run):
    report = (dsv4_run / "PROFILE_FINDINGS.md").read_text()
    profile, grid, ceiling = (finding(dsv4_run, s) for s in ("profile", "grid", "ceiling"))
    # the dominant kernel with its share, labelled as interpreter output
    assert profile["data"]["dominant"]["name"] == "_tiled_sparse_decode_kernel"
    assert "cpu-interpreter" in profile["labels"]
    assert "CPU-interpreter measurements" in report
    share = profile["numbers"]["dominant_share"]["value"]
    assert f"{100 * share:.1f}%" in report
    # its grid as read from the source, at the deployment's per-rank shapes from the target file: the
    # (B, H) grid has B x kernel-heads programs, of which B x (kernel heads - heads a rank) are padding
    target, _ = load_target("dsv4-flash")
    heads_per_rank = target.model.heads // target.deployment.tp
    kernel_heads = max(heads_per_rank, target.deployment.pad_heads_to or 0)
    sms = target.deployment.sm_count
    deployment_b1 = next(r for r in grid["data"]["reports"] if r["point"]["label"] == "deployment B=1")
    assert deployment_b1["report"]["grid_expr"] == "(B, H)"
    assert deployment_b1["point"]["shapes"]["H"] == kernel_heads
    assert grid["numbers"]["programs_b1"]["value"] == kernel_heads
    assert grid["numbers"]["coverage_declared"]["value"] == pytest.approx(kernel_heads / sms)
    assert f"| deployment B=1 | (B, H) | 1x{kernel_heads} | {kernel_heads} | {cell(kernel_heads / sms)} |" in report
    table = next(t for t in grid["tables"] if t["title"].startswith("Grid of "))
    columns = table["columns"]
    rows = {row[0]: row for row in table["rows"]}
    for batch in sorted({1, target.goal.concurrency}):
        row = rows[f"deployment B={batch}"]
        padding = row[columns.index("padding programs")]
        assert padding == batch * (kernel_heads - heads_per_rank)
        # the programs the source's grid evaluates to, less the padding: one a real head a request
        assert row[columns.index("programs")] - padding == batch * heads_per_rank
    # the Amdahl ceiling, recomputed here from the profile's numbers
    total = profile["numbers"]["total_ms"]["value"]
    part = profile["numbers"]["dominant_ms"]["value"]
    window = profile["numbers"]["in_step_window_ms"]["value"]  # W: the profiler's gaps between steps kept out
    assert window <= total
    assert ceiling["numbers"]["kernel_instant_x"]["value"] == pytest.approx(window / (window - part))
    assert "1 / (1 - t_k/W)" in report
    # and the published case from the target's raw inputs
    published = target.published
    p_total = published["kernel_time_ms"] + published.get("idle_ms", 0)
    p_instant = p_total / (p_total - published["dominant_ms"])
    assert ceiling["numbers"]["published_instant_speedup"]["value"] == pytest.approx(p_instant)
    assert (f"T / (T - t) = {p_instant:.2f}x, so {published['tok_s']:.0f} tok/s becomes "
            f"{published['tok_s'] * p_instant:.0f} tok/s") in report


def test_every_number_in_the_report_links_to_its_finding_and_log_line(dsv4_run):
    report = (dsv4_run / "PROFILE_FINDINGS.md").read_text()
    lines = len((dsv4_run / "log.jsonl").read_text().splitlines())
    links = [part.split(")")[0] for part in report.split("(log.jsonl#L")[1:]]
    assert links and all(1 <= int(n) <= lines for n in links)
    for f in findings(dsv4_run):
        for number in f["numbers"].values():
            for seq in number["seqs"]:
                assert events(dsv4_run)[seq - 1]["kind"] == "tool_result"


def test_one_commit_per_finding(dsv4_run):
    commits = _commits(dsv4_run)
    stems = [f"{f['index']:02d} {f['step']}" for f in findings(dsv4_run)]
    assert [c.message.split(":")[0] for c in commits] == stems
    assert commits[-1].message.startswith(f"{len(stems):02d} report:")
    assert "PROFILE_FINDINGS.md" in commits[-1].tree
    # a run of this journal format commits the page with the report (issue 31)
    assert (commits[-1].tree / "PROFILE_FINDINGS.html").data_stream.read() == (dsv4_run / "PROFILE_FINDINGS.html").read_bytes()


def test_replay_is_byte_identical(dsv4_run, tmp_path):
    out = agent_here("replay", dsv4_run, "--out", tmp_path / "replay")
    assert out.returncode == 0, out.stderr
    replayed = tmp_path / "replay"
    assert [c.hexsha for c in _commits(replayed)] == [c.hexsha for c in _commits(dsv4_run)]
    assert (replayed / "PROFILE_FINDINGS.md").read_bytes() == (dsv4_run / "PROFILE_FINDINGS.md").read_bytes()
    assert (replayed / "PROFILE_FINDINGS.html").read_bytes() == (dsv4_run / "PROFILE_FINDINGS.html").read_bytes()
    for path in (dsv4_run / "findings").iterdir():
        assert (replayed / "findings" / path.name).read_bytes() == path.read_bytes()
    assert "replay identical" in out.stdout


def test_the_split_k_step_ran_and_checked_its_kernel(dsv4_run):
    decision = [e for e in events(dsv4_run) if e["kind"] == "decision"]
    assert decision and decision[0]["choice"] == "splitk" and decision[0]["asked"] == "auto"
    splitk = finding(dsv4_run, "splitk")
    assert splitk["numbers"]["kernel_speedup"]["value"] > 0
    # checked at each distinct attention call the engine made, in that call's form
    calls = splitk["data"]["calls"]
    assert calls and all(c["check_ok"] and c["check"]["engine_call"] is not None for c in calls)
    assert all(c["check"]["config_name"] == c["call"]["config"] for c in calls)
    # issue 29: the decision is for the declared sm_120 box, so the rewrite built, checked and timed is its plan's
    # (on this CPU box the interpreter runs the sm_120 family), said in the headline
    assert splitk["data"]["plan"]["arch"] == 120 and splitk["data"]["setting"]["env"]["PERF_INVESTIGATOR_SPLITK_ARCH"] == "120"
    assert all(c["call"]["config"].startswith("sm120_") and c["check"]["plan_arch"] == 120 for c in calls), calls
    assert splitk["headline"].startswith("split-K (sm_120's kernels under the CPU interpreter)")


def test_options_bound_the_fallbacks_by_their_floors_and_the_report_shows_the_measured_outcome(dsv4_run):
    survey, profile, options, splitk = (finding(dsv4_run, s) for s in ("survey", "profile", "options", "splitk"))
    # the rates were measured on the box by the survey's tool call, not assumed
    for key in ("copy_gb_s", "matmul_tflop_s"):
        number = survey["numbers"][key]
        assert number["value"] > 0 and number["seqs"] == survey["evidence"]
    own = next(o for o in options["data"]["options"] if o["name"] == "own-fallbacks")
    row, *rest = own["floors"]["kernels"]
    # the kernel's operation (merge, sink, fill) goes with it when the stack is owned: no floor, instant
    rest_ms = sum(r["ms"] for r in rest)
    assert all(r["calls"] is None and r["floor_ms"] is None for r in rest)
    assert rest_ms == pytest.approx(max(profile["numbers"].get("operation_ms", {}).get("value", 0)
                                        - profile["data"]["dominant"]["total_us"] / 1000, 0.0))
    work = profile["data"]["attention_work"]["kernels"][row["kernel"]]
    steps = profile["numbers"]["steps"]["value"]
    assert row["calls"] == work["calls_per_step"] * steps
    assert (row["bytes"], row["flops"]) == (work["bytes_per_step"] * steps, work["flops_per_step"] * steps)
    floor = 1e3 * max(row["bytes"] / (survey["numbers"]["copy_gb_s"]["value"] * 1e9),
                      row["flops"] / (survey["numbers"]["matmul_tflop_s"]["value"] * 1e12))
    assert row["floor_ms"] == pytest.approx(floor) and row["headroom"] == pytest.approx(row["ms"] / floor)
    total = profile["numbers"]["in_step_window_ms"]["value"]  # W, as the ceiling uses it
    assert own["upper_x"] == pytest.approx(total / (total - row["ms"] - rest_ms + min(floor, row["ms"])))
    assert own["instant_x"] == pytest.approx(total / (total - row["ms"] - rest_ms)) and own["upper_x"] <= own["instant_x"]
    assert any(t["title"] == "Fallback kernels against their floors" for t in options["tables"])
    # the decision table: the chosen row carries the split-K run's measured outcome, the others "-"
    report = (dsv4_run / "PROFILE_FINDINGS.md").read_text()
    section = report.split("## 7. Options")[1].split("## 8.")[0]
    header = next(line for line in section.splitlines() if line.startswith("| option |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ") and not line.startswith(("| option", "| ---"))
            and line.split("|")[1].strip() in {"splitk", "own-fallbacks", "move-hardware", "accept-ceiling"}}
    chosen, measured = columns.index("chosen"), columns.index("measured")
    tok_s, ratio = splitk["numbers"]["splitk_tok_s"]["value"], splitk["numbers"]["measured_x"]["value"]
    spread = splitk["numbers"]["measured_x"]["spread"]
    assert rows["splitk"][chosen] == "yes"
    assert rows["splitk"][measured].startswith(
        f"**{fmt_spread(tok_s, spread, 'tok/s')}, {fmt_spread(ratio, spread)}x** ([08-splitk]")
    assert all(rows[name][measured] == "-" and rows[name][chosen] == "-"
               for name in ("own-fallbacks", "move-hardware", "accept-ceiling"))
    assert "### Fallback kernels against their floors" in section
    # the estimate column is explained: the split-K row's number comes with the grid step's basis
    basis = next(o for o in options["data"]["options"] if o["name"] == "splitk")["estimate_basis"]
    assert "structural" in basis and f"estimate (x): splitk: {basis}" in section


def test_other_shapes_give_numbers_that_follow_from_them(other_run):
    target, _ = load_target(str(DATA / "targets" / "other-shapes.yaml"))
    heads, sms, concurrency = target.model.heads, target.deployment.sm_count, target.goal.concurrency
    assert target.deployment.tp == 1 and target.deployment.pad_heads_to is None  # TP1: no padding
    grid = finding(other_run, "grid")
    rows = {r["point"]["label"]: r for r in grid["data"]["reports"]}
    b1, bc = rows["deployment B=1"], rows[f"deployment B={concurrency}"]
    assert b1["point"]["shapes"]["H"] == heads and b1["report"]["programs"] == heads
    assert bc["report"]["programs"] == concurrency * heads
    assert grid["numbers"]["coverage_declared"]["value"] == pytest.approx(heads / sms)
    assert b1["report"]["sms"] == sms
    report = (other_run / "PROFILE_FINDINGS.md").read_text()
    assert f"| deployment B=1 | (B, H) | 1x{heads} | {heads} | {cell(heads / sms)} |" in report
    decision = [e for e in events(other_run) if e["kind"] == "decision"]
    assert decision[0]["choice"] == "stop"
    assert not any(f["step"] == "splitk" for f in findings(other_run))


def test_replay_diverges_when_a_step_asks_for_a_different_call(other_run, tmp_path, monkeypatch):
    import agent.engine_runs as engines

    original = engines.bench_spec

    def changed(*args, **kwargs):
        spec = original(*args, **kwargs)
        spec["seed"] = 1
        return spec

    monkeypatch.setattr(engines, "bench_spec", changed)
    outcome = runner.replay(other_run, tmp_path / "replay")
    assert outcome.exit_code == 1 and outcome.status == "diverged"
    # the first engine call is the lever sweep's (one engine.sweep whose base is a bench spec)
    first = next(e for e in events(other_run) if e["kind"] == "tool_call" and e["tool"].startswith("engine."))
    assert f"log line {first['seq']}" in outcome.message and first["tool"] in outcome.message


def test_replay_diverges_when_a_step_decides_differently(other_run, tmp_path, monkeypatch):
    import agent.stats as stats

    original = stats.t_quantile
    # wider t quantiles: every measured lever's interval in the levers finding moves
    monkeypatch.setattr(stats, "t_quantile", lambda p, df: 2 * original(p, df))
    outcome = runner.replay(other_run, tmp_path / "replay")
    assert outcome.exit_code == 1
    assert "finding 02-levers differs" in outcome.message
    assert not (tmp_path / "replay" / "PROFILE_FINDINGS.md").exists()


def _one_line_error(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stderr.count("\n") == 1, out.stderr
    return out.stderr


def test_bad_input_is_one_line_and_leaves_no_run(tmp_path):
    runs = tmp_path / "runs"
    assert "unknown target" in _one_line_error(agent_here("investigate", "no-such-target", "--runs-dir", runs))
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\ngoal: {output_tok_s: 1000\n")
    assert "malformed YAML" in _one_line_error(agent_here("investigate", broken, "--runs-dir", runs))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert "cannot be created" in _one_line_error(agent_here("investigate", "dsv4-flash", "--runs-dir", blocker / "runs"))
    assert not runs.exists() or not any(runs.iterdir())


def test_missing_sglang_is_one_line_and_leaves_no_run(tmp_path):
    # Stand-in for a box without sglang: a sitecustomize on the box's PYTHONPATH hides the package
    # from the import system (uninstalling it would break the other tests).
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'sglang' or name.startswith('sglang.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Hide())\n")
    runs = tmp_path / "runs"
    out = agent("investigate", "dsv4-flash", "--runs-dir", runs, env={"PYTHONPATH": str(hide)})
    assert "sglang is not installed on the box" in _one_line_error(out)
    assert "pip install --no-deps sglang==0.5.23" in out.stderr
    assert not runs.exists() or not any(runs.iterdir())
