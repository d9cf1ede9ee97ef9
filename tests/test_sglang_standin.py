"""The SGLang stand-in server (tools/engines/sglang_standin) as a real subprocess: its routes, its stream, its
continuous batching, its profiles (read back with tools.trace), its planted flags, and the real
``python -m sglang.benchmark.serving`` against it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from agent.config import TARGETS_DIR, parse_target
from agent.engine_runs import baseline, bench_spec
from tools.engines.sglang_standin import planted, profiling
from tools.trace import summarize

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
START_TIMEOUT_S = 180


def cpu_spec(**changes) -> dict:
    """The reference engine's spec at dsv4-flash's CPU shapes (what the agent puts in the stand-in's env),
    with the torch attention backend (the Triton one runs under the interpreter on a CPU: minutes)."""
    target = parse_target(yaml.safe_load((TARGETS_DIR / "dsv4-flash.yaml").read_text()), "dsv4-flash")
    return {**bench_spec(target, "cpu", baseline(target, "cpu"), [1]), "attention": "torch", **changes}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandIn:
    """A stand-in server process in its own process group, its log in a file."""

    def __init__(self, tmp: Path, args: list[str], spec: dict | None = None, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"standin-{self.port}.log"
        full_env = {**os.environ, "PERF_INVESTIGATOR_STANDIN_SPEC": json.dumps(spec or cpu_spec()), **(env or {})}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([PY, "-m", "tools.engines.sglang_standin", *args, "--host", "127.0.0.1",
                                          "--port", str(self.port)], cwd=ROOT, env=full_env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the stand-in exited {self.proc.returncode}:\n{self.log()[-3000:]}"
            try:
                if get(self.url + "/health", timeout=30)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"the stand-in did not come up in {START_TIMEOUT_S} s:\n{self.log()[-3000:]}")

    def wait_exit(self, timeout_s: float = 120) -> int:
        return self.proc.wait(timeout_s)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)


def get(url: str, timeout: float = 30) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def post(url: str, body: dict | None, timeout: float = 120) -> tuple[int, bytes, str]:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def events(raw: bytes) -> list:
    """The SSE body's events: JSON objects, and "[DONE]"."""
    out = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            payload = block[len("data: "):]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def server_info(server: StandIn) -> dict:
    status, body, _ = get(server.url + "/server_info")
    assert status == 200
    return json.loads(body)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from tools.engines.sglang.tokenizer import build

    return build(tmp_path_factory.mktemp("tokenizer"))


# Started as servers (the other planted crashes take the same path: planted.startup_crash, checked below).
FAILED_STARTS = {
    "oom": (["--mem-fraction-static", "0.95"], {}, 1, "OutOfMemoryError: CUDA out of memory"),
}
# A TP2 / EP2 stand-in with the planted decode flags: 4 continuous decode steps, the decode CUDA graph off.
TP2_ARGS = ["--model-path", "/models/absent", "--tp-size", "2", "--ep-size", "2", "--num-continuous-decode-steps", "4",
            "--cuda-graph-backend-decode", "disabled"]


def _stop_checked(s: StandIn) -> None:
    """SIGTERM: exit 0, and no rank process left."""
    pids = [r["pid"] for r in server_info(s)["standin"]["ranks"]] if s.proc.poll() is None else []
    assert s.stop() == 0, s.log()[-2000:]
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)], "a rank process outlived the server"


@pytest.fixture(scope="module")
def launched(tmp_path_factory, tokenizer_dir):
    """Every stand-in the module uses, started at once (each start pays sglang's import, ~15 s here):
    "single" (TP1, the tokenizer's directory as model path, 4 running requests at most), "tp2", and the
    FAILED_STARTS."""
    tmp = tmp_path_factory.mktemp("standin")
    started = {"single": StandIn(tmp, ["--model-path", str(tokenizer_dir), "--max-running-requests", "4"]),
               "tp2": StandIn(tmp, TP2_ARGS)}
    started.update({name: StandIn(tmp, ["--model-path", "/models/absent", *args], env=env)
                    for name, (args, env, _, _) in FAILED_STARTS.items()})
    try:
        yield started
    finally:
        for name, s in started.items():
            if name not in ("single", "tp2") and s.proc.poll() is None:
                os.killpg(s.proc.pid, signal.SIGKILL)  # a planted crash that did not die: its test failed
        for name in ("single", "tp2"):
            if started[name].proc.poll() is None:
                _stop_checked(started[name])


@pytest.fixture(scope="module")
def server(launched):
    launched["single"].wait_up()
    return launched["single"]


@pytest.fixture(scope="module")
def tp2(launched):
    launched["tp2"].wait_up()
    return launched["tp2"]


def test_it_says_it_is_a_stand_in_and_answers_sglangs_info_routes(server, tokenizer_dir):
    assert "STAND-IN" in server.log() and "The server is fired up and ready to roll!" in server.log()
    info = server_info(server)
    assert info["server"] == "stand-in" and info["tp_size"] == 1 and info["max_running_requests"] == 4
    assert info["version"] == "0.5.23" and info["internal_states"][0]["avg_spec_accept_length"] is None
    for route in ("/get_server_info", "/get_model_info", "/model_info"):
        status, body, _ = get(server.url + route)
        assert status == 200 and json.loads(body)["server"] == "stand-in", route
    model = json.loads(get(server.url + "/model_info")[1])
    assert model["model_path"] == str(tokenizer_dir) and model["tokenizer_path"] == str(tokenizer_dir)
    models = json.loads(get(server.url + "/v1/models")[1])
    assert [m["id"] for m in models["data"]] == [str(tokenizer_dir)]
    assert get(server.url + "/health_generate")[0] == 200 and get(server.url + "/ready")[0] == 200
    status, body, _ = post(server.url + "/flush_cache?timeout=60", None)
    assert status == 200 and body.startswith(b"Cache flushed.")
    assert get(server.url + "/no_such_route")[0] == 404


REAL = json.loads((ROOT / "tests" / "data" / "real-sglang-0517-h100" / "smoke.json").read_text())


def test_generate_answers_with_the_fields_the_real_server_sent(server):
    # the smoke's request to the real 0.5.17 server (scripts/real_sglang/smoke.py), sent to the stand-in
    status, body, _ = post(server.url + "/generate", {"input_ids": list(range(100, 116)),
                                                      "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
    out = json.loads(body)
    assert status == 200 and list(out["meta_info"]) == list(REAL["generate"]["meta_info"])
    # the real server ran with --skip-tokenizer-init, which sends ids only; this stand-in has a tokenizer
    assert set(REAL["generate"]) == {"output_ids", "meta_info"} and set(out) == {"text", "output_ids", "meta_info"}
    assert out["meta_info"]["finish_reason"] == REAL["generate"]["meta_info"]["finish_reason"]


def test_with_skip_tokenizer_init_generate_sends_ids_only():
    from types import SimpleNamespace

    from tools.engines.sglang_standin import generate
    from tools.engines.sglang_standin.scheduler import Request

    req = Request(prompt_len=16, max_new_tokens=2, output_ids=[7, 8])
    req.finished_at = req.created
    for skip, keys in ((True, {"output_ids", "meta_info"}), (False, {"text", "output_ids", "meta_info"})):
        app = SimpleNamespace(args=SimpleNamespace(skip_tokenizer_init=skip), vocab=SimpleNamespace(text=str))
        assert set(generate._native_out(app, req, 2, True)) == keys


def test_generate_streams_cumulative_text_and_meta_info_then_done_as_sglang_does(server):
    status, raw, ctype = post(server.url + "/generate", {"input_ids": [5, 6, 7], "stream": True, "model": None,
                                                         "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}})
    assert status == 200 and ctype == "text/event-stream"
    evs = events(raw)
    assert evs[-1] == "[DONE]"
    chunks = evs[:-1]
    assert [len(c["output_ids"]) for c in chunks] == [1, 2, 3, 4, 5]  # the prefill's token, then one per decode step
    for i, chunk in enumerate(chunks):
        meta = chunk["meta_info"]
        assert meta["prompt_tokens"] == 3 and meta["completion_tokens"] == i + 1
        assert chunk["output_ids"][:i] == chunks[i - 1]["output_ids"] if i else True
        assert chunk["text"] and chunk["text"].startswith(chunks[i - 1]["text"] if i else "")
        last = i == len(chunks) - 1
        assert meta["finish_reason"] == ({"type": "length", "length": 5} if last else None)
        assert ("e2e_latency" in meta) == last
    # the text is the tokenizer's decode of the ids (the client re-tokenizes it)
    assert len(chunks[-1]["text"].split()) == 5
    status, body, _ = post(server.url + "/generate", {"text": "w1 w2 w3 w4", "sampling_params": {"max_new_tokens": 2}})
    out = json.loads(body)
    assert status == 200 and len(out["output_ids"]) == 2 and out["meta_info"]["prompt_tokens"] == 4
    assert post(server.url + "/generate", {"sampling_params": {}})[0] == 400


def test_openai_completions_stream_deltas(server):
    status, raw, _ = post(server.url + "/v1/completions", {"prompt": [1, 2], "max_tokens": 3, "stream": True,
                                                           "stream_options": {"include_usage": True}})
    evs = events(raw)
    assert status == 200 and evs[-1] == "[DONE]"
    texts = [e["choices"][0]["text"] for e in evs[:-2]]
    assert len(texts) == 3 and all(texts)
    assert [e["choices"][0]["finish_reason"] for e in evs[:-2]] == [None, None, "length"]
    assert evs[-2]["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    whole = json.loads(post(server.url + "/v1/completions", {"prompt": "w1 w2", "max_tokens": 2})[1])
    assert whole["usage"]["completion_tokens"] == 2 and len(whole["choices"][0]["text"].split()) == 2
    status, raw, _ = post(server.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "w3 w4"}],
                                                                "max_tokens": 2, "stream": True})
    chat = events(raw)
    assert status == 200 and chat[-1] == "[DONE]" and [e["object"] for e in chat[:-1]] == ["chat.completion.chunk"] * 2
    assert all(e["choices"][0]["delta"]["content"] for e in chat[:-1])


def test_requests_are_batched_continuously_up_to_max_running_requests(server):
    """Six requests of 6 tokens at once, 4 running at most: the forward steps are far fewer than one
    request at a time takes (6 x 6), and never more requests run than --max-running-requests."""
    before = server_info(server)["internal_states"][0]["forward_ct"]
    seen, outs = [], []

    def watch():
        while len(outs) < 6:
            seen.append(server_info(server)["internal_states"][0]["running_requests"])
            time.sleep(0.05)

    def one():
        outs.append(json.loads(post(server.url + "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 6}})[1]))

    threads = [threading.Thread(target=one) for _ in range(6)] + [threading.Thread(target=watch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    steps = server_info(server)["internal_states"][0]["forward_ct"] - before
    assert [len(o["output_ids"]) for o in outs] == [6] * 6
    assert steps < 6 * 6 / 2, steps
    assert max(seen) <= 4 and max(seen) >= 2, seen


TRACE_NAME = re.compile(r"^(?P<id>\d+\.\d+)-TP-(?P<tp>\d+)(?:-EP-(?P<ep>\d+))?(?P<stage>-EXTEND|-DECODE|-prefill|-decode)?"
                        r"\.trace\.json\.gz$")


def wait_files(folder: Path, count: int, timeout_s: float = 60) -> list[Path]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(folder.glob("*.trace.json.gz"))
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{count} traces expected in {folder}, found {sorted(p.name for p in folder.iterdir())}")


def test_profile_by_stage_writes_an_extend_and_a_decode_trace_named_as_sglang_0_5_23(server, tmp_path):
    body = {"output_dir": str(tmp_path), "num_steps": 3, "activities": ["CPU", "GPU"], "with_stack": True,
            "profile_by_stage": True}
    assert post(server.url + "/start_profile", body) == (200, b"Start profiling.\n", "text/plain; charset=utf-8")
    assert REAL["profile"]["answer"]["text"] == "Start profiling.\n"  # what the real 0.5.17 server answered
    assert post(server.url + "/start_profile", body)[0] == 500  # one at a time, as SGLang
    post(server.url + "/generate", {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 8}})
    files = wait_files(tmp_path, 2)
    names = [TRACE_NAME.match(p.name) for p in files]
    assert all(names), [p.name for p in files]
    assert {m["stage"] for m in names} == {"-EXTEND", "-DECODE"} and len({m["id"] for m in names}) == 1
    assert {m["tp"] for m in names} == {"0"} and not any(m["ep"] for m in names)
    decode = next(p for p in files if p.name.endswith("-DECODE.trace.json.gz"))
    summary = summarize([decode])
    assert summary.kind == "cpu-host"
    names_seen = {k.name for k in summary.merged.kernels}
    # the reference engine's real work, and the planted overhead as its own range, are in the trace
    assert "standin:scheduler_overhead" in names_seen and any(n.startswith("aten::") for n in names_seen)
    assert not (tmp_path / ".partial").exists() and not list(tmp_path.glob(".*"))


def test_a_manual_profile_stops_on_stop_profile_and_names_no_stage(server, tmp_path):
    assert post(server.url + "/stop_profile", {})[0] == 500  # nothing to stop: SGLang's RuntimeError
    assert post(server.url + "/start_profile", {"output_dir": str(tmp_path), "profile_id": "fixed-id"})[0] == 200
    post(server.url + "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 3}})
    assert post(server.url + "/stop_profile", {})[:2] == (200, b"Stop profiling. This will take some time.\n")
    assert [p.name for p in tmp_path.glob("*.trace.json.gz")] == ["fixed-id-TP-0.trace.json.gz"]


def test_trace_names_follow_the_installed_sglangs_rule(monkeypatch):
    """The rule profiling.trace_name writes is the installed 0.5.23's: the filename expression of its
    scheduler profiler, read from the source."""
    import importlib.util

    installed = Path(list(importlib.util.find_spec("sglang").submodule_search_locations)[0])
    source = (installed / "srt/managers/scheduler_components/profiler_manager.py").read_text()
    assert 'filename_parts = [self.profile_id, f"TP-{get_parallel().tp_rank}"]' in source
    assert 'filename_parts.append(f"EP-{get_parallel().moe_ep_rank}")' in source
    assert 'stage_suffix = f"-{stage.name}" if stage else ""' in source
    assert profiling.trace_name("1.5", None, 1, 2, "decode") == "1.5-TP-1-EP-1-DECODE.trace.json.gz"
    assert profiling.trace_name("1.5", "pre", 0, 1, None) == "pre-1.5-TP-0.trace.json.gz"
    v2 = (installed / "srt/utils/profile_utils.py").read_text()
    assert 'output_suffix=f"-{stage}" if stage else ""' in v2 and 'return "decode"' in v2
    monkeypatch.setenv("SGLANG_PROFILE_V2", "1")
    assert profiling.trace_name("1.5", None, 0, 1, "extend") == "1.5-TP-0-prefill.trace.json.gz"


def test_the_docstring_table_states_the_planted_constants():
    import tools.engines.sglang_standin as standin

    doc = standin.__doc__
    for name in ("SCHEDULER_OVERHEAD_MS", "EAGER_DECODE_DELAY_MS", "OOM_MEM_FRACTION"):
        stated = re.search(rf"{name} = ([0-9.]+)", doc)
        assert stated and float(stated[1]) == getattr(planted, name), name
    assert f"step + {planted.SCHEDULER_OVERHEAD_MS:g} / N ms" in doc


def test_the_reference_spec_takes_tp_ep_moe_and_attention_from_the_server_flags(monkeypatch):
    from sglang.srt.server_args import prepare_server_args

    from tools.engines.sglang_standin.__main__ import UsageError, _spec

    monkeypatch.setenv("PERF_INVESTIGATOR_STANDIN_SPEC", json.dumps(cpu_spec(tp=4, profile={"batch": 1, "steps": 2})))
    args = prepare_server_args(["--model-path", "/m", "--tp-size", "2", "--ep-size", "2", "--moe-runner-backend", "triton"])
    spec = _spec(args, planted.effects(args, {"SGLANG_SM120_FLASHMLA_BACKEND": "torch"}))
    assert (spec.tp, spec.distributed, spec.ep, spec.moe, spec.attention, spec.profile) == (2, True, 2, "loop", "torch", None)
    one = prepare_server_args(["--model-path", "/m"])
    assert (_spec(one, planted.effects(one, {})).tp, _spec(one, planted.effects(one, {})).distributed) == (1, False)
    monkeypatch.delenv("PERF_INVESTIGATOR_STANDIN_SPEC")
    with pytest.raises(UsageError, match="PERF_INVESTIGATOR_STANDIN_SPEC is not set"):
        _spec(one, planted.effects(one, {}))


@pytest.fixture(scope="module")
def failed_starts(launched) -> dict[str, tuple[int, str]]:
    """name -> (exit code, log) of each of FAILED_STARTS."""
    return {name: (launched[name].wait_exit(), launched[name].log()) for name in FAILED_STARTS}


def test_a_planted_crash_dies_at_start_with_a_traceback(failed_starts):
    code, log = failed_starts["oom"]
    assert code == 1
    assert "Traceback (most recent call last)" in log and FAILED_STARTS["oom"][3] in log
    assert "fired up" not in log


def test_planted_effects_follow_the_flags():
    """The table of the package docstring, from ServerArgs parsed by sglang's own parser."""
    from sglang.srt.server_args import prepare_server_args

    def of(*argv, env=None):
        return planted.effects(prepare_server_args(["--model-path", "/m", *argv]), env or {})

    base = of()
    assert (base.decode_steps, base.eager_delay_ms, base.moe, base.ep, base.attention) == (1, 0.0, "grouped", 1, None)
    assert of("--num-continuous-decode-steps", "4").decode_steps == 4
    assert of("--cuda-graph-backend-decode", "disabled").eager_delay_ms == planted.EAGER_DECODE_DELAY_MS
    assert of("--cuda-graph-backend-decode", "full").eager_delay_ms == 0.0
    assert of("--moe-runner-backend", "triton").moe == "loop" and of("--moe-runner-backend", "deep_gemm").moe == "grouped"
    assert of(env={"SGLANG_SM120_FLASHMLA_BACKEND": "triton"}).attention == "sglang-triton"
    assert of(env={"SGLANG_SM120_FLASHMLA_BACKEND": "bogus"}).attention == "torch"  # 0.5.23 falls through to torch
    def crash(*argv):
        found = planted.startup_crash(prepare_server_args(["--model-path", "/m", *argv]))
        return found and f"{type(found).__name__}: {found}"

    assert crash("--mem-fraction-static", "0.9") is None
    assert crash("--mem-fraction-static", "0.93").startswith("OutOfMemoryError: CUDA out of memory")
    assert crash("--attn-dp-size", "2") == "PlantedCrash: the stand-in has no DP attention (--attn-dp-size 2)"
    assert crash("--dp-size", "2") == "PlantedCrash: the stand-in has no data parallelism (--dp-size 2)"
    with pytest.raises(planted.PlantedCrash, match="no FlashInfer backend"):
        of(env={"SGLANG_SM120_FLASHMLA_BACKEND": "flashinfer"})
    with pytest.raises(SystemExit) as exit_:  # sglang's own parser refuses what SGLang lacks, exit 2
        prepare_server_args(["--model-path", "/m", "--no-such-flag", "1"])
    assert exit_.value.code == 2
    assert planted.expected_tpot_ms(10.0, 4, True) == 10.0 + planted.EAGER_DECODE_DELAY_MS + planted.SCHEDULER_OVERHEAD_MS / 4


def _ranges(path: Path, name: str) -> list[float]:
    """Durations (ms) of the host ranges called ``name`` in a trace."""
    import gzip

    trace = json.loads(gzip.open(path).read())
    return [e["dur"] / 1e3 for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name]


def _trace_pids(path: Path) -> set[int]:
    import gzip

    trace = json.loads(gzip.open(path).read())
    return {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"}


def test_tp2_ranks_are_processes_of_their_own_each_writing_its_own_trace(tp2, tmp_path):
    ranks = server_info(tp2)["standin"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and len({r["pid"] for r in ranks} | {tp2.proc.pid}) == 3
    body = {"output_dir": str(tmp_path), "num_steps": 4, "profile_by_stage": True, "with_stack": True}
    assert post(tp2.url + "/start_profile", body)[0] == 200
    out = json.loads(post(tp2.url + "/generate", {"input_ids": [3, 4], "sampling_params": {"max_new_tokens": 6}})[1])
    assert len(out["output_ids"]) == 6
    files = wait_files(tmp_path, 4)
    decode = sorted(p for p in files if p.name.endswith("-DECODE.trace.json.gz"))
    assert [TRACE_NAME.match(p.name)["tp"] + TRACE_NAME.match(p.name)["ep"] for p in decode] == ["00", "11"]
    # each trace comes from its rank's process: its events carry that process's pid, and the files differ
    assert [_trace_pids(p) for p in decode] == [{r["pid"]} for r in ranks]
    assert decode[0].read_bytes() != decode[1].read_bytes()
    summary = summarize(decode, by_rank=True)
    assert sorted(summary.ranks) == ["TP0-EP0", "TP1-EP1"]  # tools.trace reads the rank from the name
    assert all(any(k.name.startswith("gloo:") for k in r.kernels) for r in summary.ranks.values())


def test_planted_decode_flags_show_in_the_trace_as_the_table_says(tp2, tmp_path):
    """8 decode steps at 4 a scheduler iteration: 2 overhead sleeps, and 8 eager delays, of the planted lengths."""
    body = {"output_dir": str(tmp_path), "num_steps": 8, "profile_by_stage": True, "with_stack": False,
            "record_shapes": False}
    assert post(tp2.url + "/start_profile", body)[0] == 200
    post(tp2.url + "/generate", {"input_ids": [3], "sampling_params": {"max_new_tokens": 12}})
    decode = [p for p in wait_files(tmp_path, 4) if "-TP-0-" in p.name and p.name.endswith("-DECODE.trace.json.gz")]
    overhead = _ranges(decode[0], "standin:scheduler_overhead")
    eager = _ranges(decode[0], "standin:eager_launch_delay")
    assert len(overhead) == 2 and min(overhead) >= planted.SCHEDULER_OVERHEAD_MS
    assert len(eager) == 8 and min(eager) >= planted.EAGER_DECODE_DELAY_MS
    # one ProfilerStep#N a forward step, and the profiler's trailing one (open from the last step to the stop)
    assert [len(_ranges(decode[0], f"ProfilerStep#{n}")) for n in range(10)] == [1] * 9 + [0]


def _client_env() -> dict[str, str]:
    """The real client's environment: with the adapter's shim on its path only when the real import fails."""
    from tools.engines.sglang import client

    env = {**os.environ}
    if client.shims_needed():
        env["PYTHONPATH"] = os.pathsep.join([str(client.SHIM_DIR), *filter(None, [env.get("PYTHONPATH")])])
    return env


@pytest.mark.slow
def test_the_real_sglang_benchmark_client_measures_the_stand_in(server, tokenizer_dir, tmp_path):
    out = tmp_path / "bench.jsonl"
    cmd = [PY, "-m", "sglang.benchmark.serving", "--backend", "sglang", "--host", "127.0.0.1", "--port", str(server.port),
           "--dataset-name", "random-ids", "--random-input-len", "16", "--random-output-len", "6",
           "--random-range-ratio", "1.0", "--max-concurrency", "2", "--num-prompts", "4", "--warmup-requests", "1",
           "--seed", "1", "--tokenizer", str(tokenizer_dir), "--tokenize-prompt", "--output-file", str(out),
           "--disable-tqdm"]
    done = subprocess.run(cmd, cwd=ROOT, env=_client_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["completed"] == 4 and record["total_output_tokens"] == 4 * 6
    assert record["server_info"]["server"] == "stand-in"
    assert record["output_throughput"] > 0 and record["median_tpot_ms"] > 0 and record["median_ttft_ms"] > 0


def test_a_sigkilled_server_takes_its_rank_processes_with_it(tp2):
    """Last in the module (it ends the TP2 stand-in): SIGKILL of the server alone, not its process group,
    and both rank processes die with it (PR_SET_PDEATHSIG), as the adapter's kill of a hung server needs."""
    pids = [r["pid"] for r in server_info(tp2)["standin"]["ranks"]]
    assert all(alive(p) for p in pids)
    tp2.proc.send_signal(signal.SIGKILL)
    assert tp2.proc.wait(10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], "rank processes outlived a SIGKILLed server"


def test_a_rank_that_dies_mid_request_ends_the_server_with_a_traceback(server):
    """Last in the module (it ends the TP1 stand-in): SIGKILL of the rank process while a request streams;
    the request's stream ends with an error event, and the server dies (exit 1) logging a traceback that
    names the rank, as SGLang's server dies with its scheduler."""
    rank_pid = server_info(server)["standin"]["ranks"][0]["pid"]
    got = {}

    def stream():
        got["reply"] = post(server.url + "/generate", {"input_ids": [1], "stream": True,
                                                       "sampling_params": {"max_new_tokens": 400}})

    reader = threading.Thread(target=stream)
    reader.start()
    deadline = time.monotonic() + 60
    while server_info(server)["internal_states"][0]["running_requests"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(rank_pid, signal.SIGKILL)
    reader.join(60)
    assert server.wait_exit(60) == 1
    evs = events(got["reply"][1])
    assert "error" in evs[-2] and evs[-1] == "[DONE]"
    log = server.log()
    assert "Scheduler hit an exception" in log and "Traceback (most recent call last)" in log
    assert f"rank 0 (pid {rank_pid}) exited with code -9" in log
