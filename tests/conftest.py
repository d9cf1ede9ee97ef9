import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shared_runs
from tools.box_cache import CACHE_ENV

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"

# Bytecode kept for every Python process the suite starts (issue 28). With PYTHONDONTWRITEBYTECODE set, as on the
# CI machine, and the venv installed --no-compile, each process compiled every module it imported from source:
# torch 4.4 s of a core instead of 1.7, the agent's imports 3.0 s instead of 1.4, the local SGLang investigation
# (a dozen stand-in launches, their clients and tools) 252 CPU s instead of 124. The setting's intent, nothing
# written beside the sources, is kept: the bytecode goes to the clone's git-ignored .cache/ (PYTHONPYCACHEPREFIX),
# which xdist's workers, the investigations and every tool inherit; box users over SSH get their own environment.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(ROOT / ".cache" / "pycache"))
    sys.dont_write_bytecode = False
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]


def agent(*args, cwd=ROOT, env=None, timeout=1200) -> subprocess.CompletedProcess:
    """``python -m agent ARGS`` as a real subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "agent", *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def agent_here(*args, cwd=ROOT, env=None) -> subprocess.CompletedProcess:
    """``python -m agent ARGS`` run by agent.cli.main in this process, in ``cwd`` with ``env`` added, its output
    caught: what ``agent`` returns, without a new interpreter's imports (3-5 s of a core a call on the 2-core
    machine, issue 28). For commands that start no investigation (runs, report, a refused or finished resume);
    a run that steps, or is to be killed, stays a real process (``agent``)."""
    import contextlib
    import io

    from agent.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        os.environ.update({key: str(value) for key, value in (env or {}).items()})
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(arg) for arg in args])
            except SystemExit as exc:  # argparse: what python -m agent would exit with
                code = exc.code
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["agent", *map(str, args)], code, out.getvalue(), err.getvalue())


def agent_in_process(argv: list[str], capsys) -> tuple[int, str, str]:
    """``python -m agent ARGV`` in this process: (exit code, stdout, stderr)."""
    from agent.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: what python -m agent would exit with
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def agent_on_terminal(*args, cwd=ROOT, env=None, columns=250, timeout=600):
    """``python -m agent ARGS`` under a real pseudo-terminal (pexpect): stdin, stdout and stderr a terminal,
    as a user's; ``.logfile_read`` holds all it printed. SIGINT's default disposition, as a terminal's
    foreground job has it: a suite started as a background job of a non-interactive shell inherits SIGINT
    ignored (POSIX), and a Python started so would never see a Ctrl-C."""
    import io
    import signal

    import pexpect

    child = pexpect.spawn(sys.executable, ["-m", "agent", *map(str, args)], cwd=str(cwd), dimensions=(50, columns),
                          encoding="utf-8", timeout=timeout, env={**os.environ, **(env or {})},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child.logfile_read = io.StringIO()
    return child


def screen_lines(output: str, columns: int = 250, rows: int = 200) -> list[str]:
    """What a terminal shows after ``output`` (escape sequences applied: a line the program erased is
    gone), its non-empty lines."""
    import pyte

    screen = pyte.Screen(columns, rows)
    pyte.Stream(screen).feed(output)
    return [line.rstrip() for line in screen.display if line.strip()]


def only_run(runs_dir: Path) -> Path:
    runs = [p for p in runs_dir.iterdir() if (p / "log.jsonl").exists()]
    assert len(runs) == 1, runs
    return runs[0]


def findings(run: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run / "findings").glob("*.json"))]


def finding(run: Path, step: str) -> dict:
    return next(f for f in findings(run) if f["step"] == step)


def events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def _shared_dir(tmp_path_factory) -> Path:
    """A directory every pytest-xdist worker of this session sees (the workers' base temp dirs' parent),
    or the session's own base temp dir without xdist."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    shared.mkdir(exist_ok=True)
    return shared


def shared_run(tmp_path_factory, name: str) -> Path:
    """One of the session's shared investigations (tests/shared_runs.py), run once for all its workers."""
    outcome = shared_runs.get(_shared_dir(tmp_path_factory), name)
    assert outcome["rc"] == 0, outcome["stderr"]
    return Path(outcome["run"])


# Under pytest-xdist (make test: -n 2) each test file goes whole to one worker, so that its module-scoped
# fixtures are built once (the scheduler below). Files go together where they share: the two that read the
# session's one gate scan of the installed sglang; and the SGLang run's tests (which hold its sweep to the
# stand-in's planted effects) with the adapter's timed sweeps of the stand-in, so that they run one after the
# other, never beside each other. The heavy files are sent first and the tests that read the investigations
# started in the background last, so that those have run by then.
GROUPS = {"test_gates_sglang": "sglang-scan", "test_refactor_nets": "sglang-scan",
          "test_investigate_sglang": "timed-sglang", "test_sglang_adapter": "timed-sglang"}
FIRST = ("test_investigate_sglang", "test_sglang_adapter", "test_box_ssh_sglang", "test_box_ssh_investigate",
         "test_sglang_disagg", "test_gates_sglang", "test_refactor_nets", "test_box_ssh", "test_sglang_standin",
         "test_reference_engine_tp", "test_engine_sglang", "test_engine_options")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


def pytest_xdist_make_scheduler(config, log):
    """xdist's load-by-scope scheduling with a file (or a GROUPS entry) as the scope. (Not --dist loadgroup:
    xdist 3.8 marks a group by rewriting item._nodeid, which pytest 9 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    # xdist's default reorders the scopes by their number of tests, which puts the many small unit tests before
    # the long investigations and leaves a worker idle behind them at the end: keep the order made below.
    config.option.loadscopereorder = False

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return GROUPS.get(_module(nodeid)) or nodeid.split("::", 1)[0]

    return FileGroups(config, log)


# What leaves `make test-quick` (-m "not slow") for `make test` alone, beside the tests marked slow where they are:
# those that cost 7 s of CPU or more, or 10 s of wall, in the quick set (PERF_INVESTIGATOR_TEST_CPU, 2026-12-07,
# 2-core machine: 414 of its 624 CPU seconds, then 163 of the 369 left), by file or fixture where the cost is a
# shared fixture (the session's whole-tree gate scan of the installed sglang; the stand-in servers a file's tests share). docs/testing.md lists them.
QUICK_LEAVES_FILES = ("test_gates_sglang", "test_sglang_standin", "test_sglang_disagg", "test_real_sglang",
                      "test_splitk_plugin")
QUICK_LEAVES_FIXTURES = ("sglang_scan",)  # the whole-tree gate scan of the installed sglang (a minute of a core)
QUICK_LEAVES_TESTS = (
    "test_sglang_adapter.py::test_sweep_spec_is_checked_before_any_launch",
    "test_sglang_adapter.py::test_client_shim_stands_in_for_one_module_with_the_installed_constant",
    "test_sglang_adapter.py::test_killing_the_tool_with_sigkill_leaves_no_server",
    "test_inventory.py::test_the_map_is_what_the_script_makes",
    "test_cli_contract.py::test_ctrl_c_on_a_terminal_keeps_the_step_line_and_ends_in_one_calm_line",
    "test_inventory.py::test_every_recorded_test_is_kept_or_accounted_for",
    "test_reference_engine.py::test_bench_upstream_kernel_on_interpreter_writes_trace",
    "test_reference_engine.py::test_sglang_missing_is_exit_2",
    "test_sglang_lean.py::test_the_lean_import_parses_every_shipped_sglang_command_line_as_the_whole_package_does",
    "test_sglang_lean.py::test_lean_does_nothing_where_sglang_was_imported_already",
    "test_audit_report.py::", "test_audit_h100.py::", "test_audit_h200.py::",  # each regenerates an example
    "test_engine_options.py::test_sweep_runs_in_order_each_with_its_own_samples_and_failures_as_results",
    "test_engine_options.py::test_the_per_expert_loop_computes_what_the_grouped_gemm_does",
    "test_round2.py::test_a_gluon_launch_is_said_to_be_gluon_and_not_read",
    "test_kernel_names.py::test_a_journal_with_the_map_shows_meanings_and_keeps_the_mangled_name",
    "test_sweep_crash.py::test_a_run_that_kills_the_sweep_process_fails_alone_and_the_sweep_goes_on",
    "test_kernel_source_sparse_decode.py::test_aot_resources_for_sm90_and_sm120",
    "test_recommend.py::test_every_command_is_refused_by_nothing_in_the_installed_sglang",
    "test_faults.py::test_a_tool_whose_child_keeps_its_pipes_open_does_not_hang_the_run",
)


def _leaves_quick(item) -> bool:
    nodeid = item.nodeid
    if set(QUICK_LEAVES_FIXTURES) & set(item.fixturenames):
        return True
    path = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return path.removesuffix(".py") in QUICK_LEAVES_FILES or any(
        f"{path}::{nodeid.split('::', 1)[1]}".startswith(test) for test in QUICK_LEAVES_TESTS)


def pytest_collection_modifyitems(session, config, items):
    shared = {fixture for fixture, _, _ in shared_runs.RUNS.values()}

    def rank(pair):
        index, item = pair
        module = _module(item.nodeid)
        if module in FIRST:
            return (0, FIRST.index(module), index)
        return (2 if shared & set(item.fixturenames) else 1, 0, index)  # the SGLang run's tests are FIRST

    items[:] = [item for _, item in sorted(enumerate(items), key=rank)]
    for item in items:
        if _leaves_quick(item):
            item.add_marker(pytest.mark.slow)


# The suite's time is the machine's two cores: where their seconds go is each test's CPU, its waited-for children
# included (a tool, an investigation, a server), and each shared investigation's (written beside them at the end).
# Opt-in: PERF_INVESTIGATOR_TEST_CPU=FILE appends a JSON line per test; scripts/suite_cpu.py sums them.
CPU_LOG_ENV = "PERF_INVESTIGATOR_TEST_CPU"


def _cpu_now() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _log_cpu(record: dict) -> None:
    with open(os.environ[CPU_LOG_ENV], "a") as log:
        log.write(json.dumps(record) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not os.environ.get(CPU_LOG_ENV):
        yield
        return
    cpu, wall = _cpu_now(), time.monotonic()
    yield
    _log_cpu({"test": item.nodeid, "cpu_s": round(_cpu_now() - cpu, 2), "wall_s": round(time.monotonic() - wall, 2),
              "worker": os.environ.get("PYTEST_XDIST_WORKER", "-")})


def pytest_sessionfinish(session):
    if os.environ.get(CPU_LOG_ENV) and not os.environ.get("PYTEST_XDIST_WORKER"):  # once: the controller
        shared = session.config._tmp_path_factory.getbasetemp() / "shared"
        for record in sorted(shared.glob("*.json")) if shared.is_dir() else []:
            outcome = json.loads(record.read_text())
            _log_cpu({"shared": record.stem, "cpu_s": outcome.get("cpu_s"), "wall_s": outcome.get("wall_s"),
                      "built_by": outcome.get("built_by")})


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Start the shared investigations the selected tests need in the background as the session begins
    (on one worker of an xdist session, or in the only process), so that they run beside the other tests."""
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0" or session.config.option.collectonly:
        return
    wanted = {fixture: name for name, (fixture, _, _) in shared_runs.RUNS.items() if name in shared_runs.BACKGROUND}
    needed = sorted({wanted[f] for item in session.items for f in item.fixturenames if f in wanted})
    if needed:
        _use_session_cache(session.config._tmp_path_factory)  # the builders inherit it: one gate scan a session
        shared_runs.start_in_background(_shared_dir(session.config._tmp_path_factory), needed, watch=os.getpid())


@pytest.fixture(scope="session", autouse=True)
def _box_cache(tmp_path_factory):
    """The box tools' kept results (tools/box_cache.py) of this test session alone, shared by its workers:
    every session starts cold, as on a fresh machine, and no result of an earlier session's code is served."""
    _use_session_cache(tmp_path_factory)
    yield


def _use_session_cache(tmp_path_factory) -> None:
    """This process and what it starts from now on keep the box tools' results in the session's cache. Set as
    the session's investigations start in the background too (before any fixture runs): without it their
    builders kept theirs in the user's cache, each scanning the installed sglang again."""
    os.environ[CACHE_ENV] = str(_shared_dir(tmp_path_factory) / "box-cache")


@pytest.fixture(scope="session")
def dsv4_run(tmp_path_factory) -> Path:
    """The README's main job: the dsv4-flash investigation on this (GPU-less) machine, split-K included."""
    return shared_run(tmp_path_factory, "dsv4")


@pytest.fixture(scope="session")
def other_run(tmp_path_factory) -> Path:
    """A target with other shapes (16 heads at TP1, 170 SMs), stopped at the decision."""
    return shared_run(tmp_path_factory, "other")


@pytest.fixture(scope="session")
def sglang_run(tmp_path_factory) -> Path:
    """Issue #15's Must show, locally: the SGLang target against the stand-in server (shared by
    tests/test_investigate_sglang.py and the SSH box's comparison in tests/test_box_ssh_investigate.py)."""
    return shared_run(tmp_path_factory, "sglang")


@pytest.fixture(scope="session")
def tp2_run(tmp_path_factory) -> Path:
    """The dsv4-flash-tp2 investigation: the reference engine at TP2 over gloo (tests/test_investigate_tp2.py)."""
    return shared_run(tmp_path_factory, "tp2")


SGLANG_VERSION = "0.5.23"


def sglang_root() -> Path:
    """The installed sglang package (its source, installed with --no-deps), at the version the tests' facts were read in."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"sglang {SGLANG_VERSION} source is not installed; these tests read it: "
                    f"pip install --no-deps sglang=={SGLANG_VERSION}")
    version = importlib.metadata.version("sglang")
    if version != SGLANG_VERSION:
        pytest.fail(f"these facts were checked in sglang {SGLANG_VERSION}; installed is {version}")
    return Path(list(spec.submodule_search_locations)[0])


@pytest.fixture(scope="session")
def sglang_scan():
    """One gate scan of the installed sglang for the session (about half a minute on two cores): the
    scan reads the tree and takes no SM (tools.gates.scan), so the tests of its facts and the refactor
    nets of every SM's output share it; tools.gates evaluates it per SM and environment. It is the scan
    the session's investigations read too (tools/box_cache.py, the session's cache): whoever asks first
    scans, the others wait for it."""
    from tools.gates.__main__ import scan_kept

    return scan_kept(sglang_root(), None)


H200_AUDIT = Path(__file__).parent / "data" / "h200-audit-20261202b"


@pytest.fixture(scope="session")
def h200_audit_run(tmp_path_factory) -> Path:
    """The H200 example the issue-30 audit read (tests/data/h200-audit-20261202b), regenerated by the current
    code: every tool result served from its journal, every finding and the report drawn anew (about 12 s)."""
    from agent.regenerate import regenerate

    root = tmp_path_factory.mktemp("h200-audit")
    source = root / "recorded"
    shutil.copytree(H200_AUDIT, source)
    subprocess.run(["git", "init", "-q", str(source)], check=True)  # a run directory; the journal is what is read
    out = root / "dsv4-flash-h200-20261202b"
    outcome = regenerate(source, out)
    assert outcome.exit_code == 0, outcome.message
    return out
