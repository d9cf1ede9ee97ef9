"""``agent diff RUN_A RUN_B``: the shipped H200 example against its earlier generation, number by
number, each change judged only by the intervals the runs recorded (issue 31)."""

from __future__ import annotations

import json
import shutil

from agent import stats
from agent.cli import main
from tools import exitcodes

from conftest import DATA, ROOT

EARLIER = DATA / "examples-20261201" / "h200"
H200 = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _numbers(run, step):
    found = next(f for f in sorted((run / "findings").glob(f"*-{step}.json")))
    return json.loads(found.read_text())


def _diff_json(a, b, capsys):
    code, out, err = _run(["diff", str(a), str(b), "--json"], capsys)
    assert code == exitcodes.DONE and not err, err
    return json.loads(out)


def test_diff_of_the_h200_example_against_its_earlier_generation(capsys):
    result = _diff_json(EARLIER, H200, capsys)
    rows = {(r["step"], r["key"]): r for r in result["numbers"]}
    assert not result["steps_a_only"] and not result["steps_b_only"]
    for path in sorted((H200 / "findings").glob("*.json")):
        finding, earlier = json.loads(path.read_text()), _numbers(EARLIER, path.stem.split("-", 1)[1])
        for key, number in finding["numbers"].items():
            low = key.endswith("_low") or "_low_" in key
            high = key.endswith("_high") or "_high_" in key
            if low or high:  # a bound is its number's interval, not a row of its own
                assert (finding["step"], key) not in rows
                continue
            row = rows[finding["step"], key]
            if key not in earlier["numbers"]:  # a number the later code states and the earlier did not
                assert (row["a"], row["b"], row["verdict"]) == (None, number["value"], "B only"), row
                continue
            a, b = earlier["numbers"][key]["value"], number["value"]
            assert (row["a"], row["b"]) == (a, b)
            if isinstance(a, float) and a != b:
                assert abs(row["ratio"] - b / a) < 1e-12 and abs(row["change_pct"] - (b / a - 1) * 100) < 1e-9
            recorded = [number.get("spread"), earlier["numbers"][key].get("spread")]
            if a != b and row["ratio_interval"] is None and not any(recorded) and not row["interval_a"] \
                    and not row["interval_b"] and isinstance(a, float):
                assert row["verdict"] == "no interval", row  # never a guess

    # a lever's paired ratio intervals, as each run recorded them: beyond exactly when they do not overlap
    lever_rows = [r for r in result["numbers"] if r["step"] == "levers" and r["key"].endswith("_ratio")]
    assert lever_rows
    for row in lever_rows:
        a_low, a_high = (_numbers(EARLIER, "levers")["numbers"][f"{row['key']}_{s}"]["value"] for s in ("low", "high"))
        b_low, b_high = (_numbers(H200, "levers")["numbers"][f"{row['key']}_{s}"]["value"] for s in ("low", "high"))
        assert row["interval_a"] == [a_low, a_high] and row["interval_b"] == [b_low, b_high]
        assert row["verdict"] == ("beyond" if a_high < b_low or b_high < a_low else "within"), row

    # the baseline's throughput: a ratio interval from both runs' recorded run medians
    base = rows["levers", "baseline_tok_s"]
    expected = stats.ratio_interval(_numbers(EARLIER, "levers")["data"]["baseline"]["run_ms"],
                                    _numbers(H200, "levers")["data"]["baseline"]["run_ms"], 0.95)
    assert base["ratio_interval"] == [expected.low, expected.high]
    assert base["verdict"] == ("beyond" if expected.excludes_no_change() else "within")

    # a number with a spread on both sides is judged by value x (1 +- spread)
    spread = next(r for r in result["numbers"] if r["interval_a"] and r["step"] == "ceiling" and r["key"] == "ceiling_tok_s")
    a_spread = _numbers(EARLIER, "ceiling")["numbers"]["ceiling_tok_s"]["spread"]
    assert abs(spread["interval_a"][1] / spread["a"] - 1 - a_spread) < 1e-12
    assert sum(result["counts"].values()) == len(result["numbers"])


def test_diff_text_reads_as_a_table_with_its_counts(capsys):
    code, out, err = _run(["diff", str(EARLIER), str(H200), "--wide"], capsys)
    assert code == exitcodes.DONE and not err
    lines = out.splitlines()
    assert lines[0] == f"A: {EARLIER}" and lines[1] == f"B: {H200}"
    assert "changed beyond their intervals" in lines[2] and "--all lists them" in lines[2]
    header = next(line for line in lines if line.startswith("step "))
    assert "B/A" in header and "change" in header and "beyond the intervals?" in header
    copy_row = next(line for line in lines if line.split()[:2] == ["survey", "copy_gb_s"])
    assert copy_row.endswith("no interval")
    code, everything, _ = _run(["diff", str(EARLIER), str(H200), "--wide", "--all"], capsys)
    assert any(line.split()[:2] == ["survey", "box_sm"] and line.endswith("same") for line in everything.splitlines())
    assert not any(line.split()[:2] == ["survey", "box_sm"] for line in lines)


def test_diff_lists_steps_and_numbers_in_one_run_only(tmp_path, capsys):
    # B: the shipped run's journal less its round2 finding and one of its levers numbers
    b = tmp_path / "b"
    b.mkdir()
    shutil.copy(H200 / "history.bundle", b)
    lines = []
    for line in (H200 / "log.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "finding" and event["finding"]["step"] == "round2":
            continue
        if event.get("kind") == "finding" and event["finding"]["step"] == "levers":
            del event["finding"]["numbers"]["best_tok_s"]
            line = json.dumps(event)
        lines.append(line)
    (b / "log.jsonl").write_text("\n".join(lines) + "\n")
    result = _diff_json(EARLIER, b, capsys)
    assert result["steps_a_only"] == ["round2"] and result["steps_b_only"] == []
    only = {(r["step"], r["key"]) for r in result["numbers"] if r["verdict"] == "A only"}
    round2 = _numbers(EARLIER, "round2")["numbers"]
    assert only == {("levers", "best_tok_s")} | {("round2", k) for k in round2}
    code, out, _ = _run(["diff", str(EARLIER), str(b), "--wide"], capsys)
    assert out.splitlines()[-1] == "steps in A only: round2"


def test_diff_of_what_is_not_a_run_is_bad_input(tmp_path, capsys):
    for argv in (["diff", str(tmp_path / "missing"), str(H200)], ["diff", str(H200), str(tmp_path)]):
        code, out, err = _run(argv, capsys)
        assert code == exitcodes.BAD_INPUT and not out
        assert err.startswith("error: ") and err.count("\n") == 1 and "not a run" in err, err
    code, out, err = _run(["diff", str(H200), str(tmp_path), "--json"], capsys)
    assert code == exitcodes.BAD_INPUT and json.loads(out)["status"] == "bad-input"
