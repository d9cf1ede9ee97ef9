"""The streaming reader against json.load on real traces, in every layout and cut at every kind of place."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tools.trace import events
from tools.trace.events import TraceFormatError, iter_events

DATA = Path(__file__).parent / "data"
GPU_TRACE = DATA / "h200-traces/dsv4-like-B1-topk512.trace.json.gz"
CPU_TRACE = DATA / "trace-cpu/reference-cpu.trace.json.gz"


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _read(path: Path) -> tuple[list[dict], dict]:
    metadata: dict = {}
    return list(iter_events(path, metadata)), metadata


@pytest.mark.parametrize("trace", [GPU_TRACE, CPU_TRACE], ids=["h200", "cpu"])
def test_kineto_gzip_trace_reads_like_json_load(trace):
    expected = _load(trace)
    got, metadata = _read(trace)
    assert got == expected["traceEvents"]
    assert metadata == {k: v for k, v in expected.items() if k != "traceEvents"}


def test_every_chunk_boundary_gives_the_same_events(monkeypatch, tmp_path):
    # Tiny chunks put a chunk end inside keys, strings, numbers (the dangerous case: "12" of "12.5"),
    # escapes and between events; prime sizes move it around.
    expected = _load(CPU_TRACE)
    plain = tmp_path / "cpu.trace.json"
    plain.write_text(gzip.open(CPU_TRACE, "rt").read())
    for chunk in (7, 13, 64, 1009):
        monkeypatch.setattr(events, "CHUNK_CHARS", chunk)
        got, metadata = _read(plain)
        assert got == expected["traceEvents"], chunk
        assert metadata["baseTimeNanoseconds"] == expected["baseTimeNanoseconds"], chunk


def test_numbers_cut_by_a_chunk_end_in_metadata_are_read_whole(monkeypatch, tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"baseTimeNanoseconds": 1790857026000000000, "traceEvents": [], "x": 12.5}')
    for chunk in range(1, 40):
        monkeypatch.setattr(events, "CHUNK_CHARS", chunk)
        metadata: dict = {}
        assert list(iter_events(path, metadata)) == []
        assert metadata == {"baseTimeNanoseconds": 1790857026000000000, "x": 12.5}, chunk


def test_one_line_merged_layout_and_bare_array(tmp_path):
    expected = _load(GPU_TRACE)
    one_line = tmp_path / "merged.trace.json.gz"
    with gzip.open(one_line, "wt") as f:
        f.write(json.dumps({"traceEvents": expected["traceEvents"], "deviceProperties": expected["deviceProperties"]}))
    got, metadata = _read(one_line)
    assert got == expected["traceEvents"]
    assert metadata == {"deviceProperties": expected["deviceProperties"]}

    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(expected["traceEvents"][:50]))
    assert _read(bare)[0] == expected["traceEvents"][:50]


def test_gzip_is_recognised_by_content_not_suffix(tmp_path):
    path = tmp_path / "no-suffix"
    path.write_bytes(GPU_TRACE.read_bytes())
    assert len(_read(path)[0]) == len(_load(GPU_TRACE)["traceEvents"])


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"traceEvents": [{"ph": "X"}, {"ph": ', "truncated"),
        ('{"traceEvents": [{"ph": "X"}', "end of file"),
        ('{"schemaVersion": 1}', "no traceEvents"),
        ("hello", "not a Chrome trace"),
        ("", "not a Chrome trace"),
        ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected one of ',]'"),
    ],
)
def test_malformed_files_raise_trace_format_error(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=message):
        list(iter_events(path))


def test_truncated_gzip_raises_trace_format_error(tmp_path):
    data = GPU_TRACE.read_bytes()
    path = tmp_path / "cut.trace.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError):
        list(iter_events(path))


def test_missing_file_raises_trace_format_error(tmp_path):
    with pytest.raises(TraceFormatError, match="No such file"):
        list(iter_events(tmp_path / "absent.json"))


def _records_exact(path: Path) -> list:
    return [events.record_from_dict(e) for e in iter_events(path) if isinstance(e, dict)]


def _records_fast(path: Path) -> list:
    return [record for batch in events.iter_record_batches(path) for record in batch]


@pytest.mark.parametrize("trace", sorted(DATA.glob("*/*.trace.json.gz")), ids=lambda p: p.name.split(".")[0])
def test_fast_records_equal_the_exact_reader_on_every_fixture(trace):
    assert _records_fast(trace) == _records_exact(trace)


def test_fast_records_at_every_chunk_size_and_with_batches_msgspec_refuses(monkeypatch, tmp_path):
    trace = _load(GPU_TRACE)
    # Values of types the fast decoder does not take (a float pid, args as a list, a null name)
    # make whole batches fall back to the exact decoder; the records must not change.
    trace["traceEvents"][100]["pid"] = 1.5
    trace["traceEvents"][5000]["args"] = ["not", "an", "object"]
    trace["traceEvents"][9000]["name"] = None
    trace["traceEvents"].insert(7000, 42)  # not an object: skipped by both
    path = tmp_path / "odd.trace.json"
    path.write_text(json.dumps(trace, indent=1))
    expected = _records_exact(path)
    for chunk in (97, 4096, 65537, 1 << 22):
        monkeypatch.setattr(events, "CHUNK_CHARS", chunk)
        assert _records_fast(path) == expected, chunk
