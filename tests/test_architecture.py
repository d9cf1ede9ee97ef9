"""The shape of the tree, checked: layers that only import downward, no import cycles, small files and
functions, and no twin code between the two static evaluators (issue #12).

Layers, bottom to top: `schema` (records every layer shares), `tools` (what runs on the box), `reports`,
`agent`, `perf_investigator` (the public Python API). A module may import its own package and the ones
below it, never one above: the box side must run without the agent installed, and the report renders
from records alone.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

LAYERS = ["schema", "tools", "reports", "agent", "perf_investigator"]
PACKAGES = [ROOT / name for name in LAYERS if (ROOT / name).is_dir()]
# where the size rules hold: every Python file we write (fixture sources under tests/data are data)
CHECKED = [*PACKAGES, ROOT / "tests", ROOT / "benchmarks", ROOT / "scripts"]
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
KEPT_WHOLE = "Kept whole:"


def _python_files(roots) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if "data" not in p.relative_to(ROOT).parts[1:2])


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, top_level_only: bool, main_block: bool = False) -> set[str]:
    """Absolute names of the modules `path` imports (relative imports resolved); with ``main_block``, the
    imports of its `if __name__ == "__main__":` block count as top level too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    nodes = _top_level_nodes(tree, main_block) if top_level_only else ast.walk(tree)
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _top_level_nodes(tree: ast.Module, main_block: bool = False):
    """Statements run at import time: the module body, its `if`/`try` blocks, never `if TYPE_CHECKING:`
    nor, unless ``main_block``, `if __name__ == "__main__":` (which runs only when the module is the program)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "TYPE_CHECKING" in test or ("__name__" in test and not main_block):
                continue
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
        else:
            yield node


def test_layers_only_import_downward():
    wrong = []
    for path in _python_files(PACKAGES):
        layer = LAYERS.index(path.relative_to(ROOT).parts[0])
        for name in _imports(path, top_level_only=False):
            top = name.split(".")[0]
            if top in LAYERS and LAYERS.index(top) > layer:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "imports from a layer above:\n" + "\n".join(sorted(set(wrong)))


def test_no_import_cycles():
    """Nor through a module's `if __name__ == "__main__":` block: a module run as the program that imports a
    module importing it back runs its own body twice (as __main__ and under its name); a CLI lives in an
    entry module of its own (a package's __main__.py)."""
    files = {_module_name(p): p for p in _python_files(PACKAGES)}
    graph = {mod: {name for name in _imports(path, top_level_only=True, main_block=True) if name in files and name != mod}
             for mod, path in files.items()}
    cycles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, "modules that import each other at import time: " + "; ".join(" <-> ".join(c) for c in cycles)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the module graph is deep enough to hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(component)
    return out


def test_no_file_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in _python_files(CHECKED)
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert not long, f"files over {MAX_FILE_LINES} lines: {long}"


def test_no_function_over_80_lines_without_its_reason():
    long = []
    for path in _python_files(CHECKED):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and KEPT_WHOLE not in (ast.get_docstring(node) or ""):
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines whose docstring gives no '{KEPT_WHOLE}' reason:\n" + "\n".join(long)


def test_the_long_function_check_can_fail(tmp_path):
    """The size checks read real files: a planted 81-line function without a reason is caught."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    planted = tmp_path / "planted.py"
    planted.write_text(f"def planted():\n{body}\n")
    node = ast.parse(planted.read_text()).body[0]
    assert node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES and KEPT_WHOLE not in (ast.get_docstring(node) or "")


EVALUATORS = ["tools/gates", "tools/kernel_source"]
SHARED_CORE = "tools/pyeval"


@pytest.mark.slow
def test_no_twins_between_the_two_evaluators():
    """pylint's similarity checker (R0801) over both evaluators and their shared core: a block of six
    or more lines that appears in both tools/gates and tools/kernel_source belongs in the core."""
    roots = [r for r in [*EVALUATORS, SHARED_CORE] if (ROOT / r).is_dir()]
    proc = subprocess.run(
        [sys.executable, "-m", "pylint", "--disable=all", "--enable=duplicate-code", "--min-similarity-lines=6",
         "--ignore-imports=yes", "--ignore-docstrings=yes", "--ignore-comments=yes", "--score=no", *roots],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "No module named pylint" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 8), proc.stderr  # 8: refactor messages (R0801) were issued
    twins = []
    for block in proc.stdout.split("Similar lines in")[1:]:
        files = set(re.findall(r"^==([\w.]+):", block, flags=re.M))
        if {f.split(".")[1] for f in files} >= {"gates", "kernel_source"}:
            twins.append(block.strip().splitlines()[0] + " " + ", ".join(sorted(files)))
    assert not twins, "twins between the evaluators:\n" + "\n".join(twins)


# -- scripts and benchmarks: run as modules from the repository root, through public names (issue #33) --

RUN_AS_MODULES = [ROOT / "scripts", ROOT / "benchmarks"]
OWN_TOPS = {*LAYERS, "scripts", "benchmarks"}


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _sys_path_edits(path: Path) -> list[str]:
    """Each line of ``path`` that touches ``sys.path`` (an insert, a slice assignment, an append: any use)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{_where(path)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys"]


def _kernels_of(module: str) -> set[str]:
    """The Triton kernels a project module defines (``@triton.jit``, ``@gluon.jit``): their names are the kernels'
    names in every trace, so a script may name a ``_split_kernel`` whatever its underscore."""
    path = ROOT / Path(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        return set()
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)
            and any(ast.unparse(d).split("(")[0].endswith("jit") for d in node.decorator_list)}


def _private_uses(path: Path) -> list[str]:
    """Each private name (``_x``, not a dunder) ``path`` takes from one of the project's modules: imported
    by name (``from tools.kernels.splitk.check import _call_args``) or read off an imported module
    (``check._call_args``); a Triton kernel read off its module is its trace name, not a private helper."""
    tree = ast.parse(path.read_text(), filename=str(path))
    private = lambda name: name.startswith("_") and not name.startswith("__")  # noqa: E731
    modules: dict[str, str] = {}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OWN_TOPS:
            for alias in node.names:
                if private(alias.name):
                    out.append(f"{_where(path)}:{node.lineno} imports {node.module}.{alias.name}")
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            modules.update({alias.asname or alias.name.split(".")[0]: alias.asname and alias.name or alias.name.split(".")[0]
                            for alias in node.names if alias.name.split(".")[0] in OWN_TOPS})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in modules and node.attr not in _kernels_of(modules[node.value.id])):
            out.append(f"{_where(path)}:{node.lineno} reads {node.value.id}.{node.attr}")
    return out


def test_scripts_and_benchmarks_edit_no_sys_path():
    """They run with ``python -m scripts.NAME`` (or ``benchmarks.NAME``) from the repository root, which puts
    the root on the path: none edits ``sys.path`` to find the project (the H200 runs them from an uninstalled tree)."""
    edits = [hit for path in _python_files(RUN_AS_MODULES) for hit in _sys_path_edits(path)]
    assert not edits, "sys.path edited (run the file with python -m from the repository root instead):\n" + "\n".join(edits)


def test_scripts_and_benchmarks_use_only_public_names():
    used = [hit for path in _python_files(RUN_AS_MODULES) for hit in _private_uses(path)]
    assert not used, "private names of the project's modules used by scripts or benchmarks:\n" + "\n".join(used)


def test_the_script_checks_can_fail(tmp_path):
    """Both checks read real source: a planted path edit and planted private uses are caught."""
    planted = tmp_path / "planted.py"
    planted.write_text("import sys\nsys.path.insert(0, '.')\nfrom tools.kernels.splitk.check import _call_args\n"
                       "from tools.kernels.splitk import check\ncheck._variant\n")
    assert len(_sys_path_edits(planted)) == 1
    assert len(_private_uses(planted)) == 2


# -- findings read only through their types (issue #33) ------------------------------------------

# A step's own draft is written (and read) by key while the step makes it; every other finding is read through
# its step's model (agent.evidence: data_of, typed, evidence), the one module that reads stored data by key.
OWN_DRAFT = {"draft"}
EVIDENCE = ROOT / "agent" / "evidence.py"


def _finding_data_reads(path: Path) -> list[str]:
    """Each read of a finding's stored ``data`` (``finding.data.get("k")``, ``finding.data["k"]``, ``finding.data``
    handed on whole) in ``path``, other than a step's own draft."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{_where(path)}:{node.lineno} {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load)
            and not (isinstance(node.value, ast.Name) and node.value.id in OWN_DRAFT)]


def test_findings_are_read_through_their_types():
    """No module of the agent reads another finding's data by string key: a later step, the routers, the
    consistency check, the summary and the diff read it through the step's model (agent.evidence)."""
    reads = [hit for path in _python_files([ROOT / "agent"]) if path != EVIDENCE for hit in _finding_data_reads(path)]
    assert not reads, "a finding's data read by key (read it through agent.evidence's models):\n" + "\n".join(reads)


def test_the_finding_read_check_can_fail(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def route(state, draft):\n    ceiling = finding_for(state, 'ceiling')\n"
                       "    draft.data['own'] = 1\n    return ceiling.data.get('beaten_by'), ceiling.data['round']\n")
    assert len(_finding_data_reads(planted)) == 2


# -- the steps never ask which engine they hold (issue #33) ----------------------------------------

# The steps and the preflight take the target's engine from agent.engines.engine_for and ask it questions named
# for what is asked (live_server, measured_by_client, scanned_source, profile, box_problems): they never read an
# engine's kind (``target.engine.kind``, ``engine_for(t).kind``, ``is_sglang``) nor import a concrete engine's side.
ENGINE_BLIND = [*sorted((ROOT / "agent" / "steps").glob("*.py")), ROOT / "agent" / "preflight.py"]
CONCRETE_ENGINES = {"agent.engine_sglang", "agent.engines.reference", "agent.engines.sglang"}
# What a step may take from agent.engine_runs: the reference engine as the instrument the split-K, what-if and
# Nsight Compute runs use whichever engine the target names (its setting record, run specs, sweep, batch and
# shapes), and the choice of the best measured lever. The reference engine's own setting rules (baseline,
# with_lever(s), applicability, backend_for, shapes_for) are its engine's (agent.engines.reference).
REFERENCE_INSTRUMENT = {"Setting", "bench_spec", "bench_args", "run_sweep", "measured_batch", "profiled_shapes", "best_setting"}


def _engine_kind_questions(path: Path) -> list[str]:
    """Each place ``path`` asks which engine it holds: a read of an engine's ``kind`` (an attribute ``kind`` of
    something named ``engine`` or of ``engine_for(...)``), a call of ``is_sglang``, an import of a concrete
    engine's module, the whole of agent.engine_runs, or a name of it outside REFERENCE_INSTRUMENT."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        where = f"{_where(path)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr == "kind":
            owner = node.value
            named = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else None
            called = isinstance(owner, ast.Call) and ast.unparse(owner.func).split(".")[-1] == "engine_for"
            if named == "engine" or called:
                out.append(f"{where} reads {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "is_sglang":
            out.append(f"{where} calls {ast.unparse(node.func)}")
        elif isinstance(node, ast.Import):
            out += [f"{where} imports {a.name}" for a in node.names if a.name in CONCRETE_ENGINES | {"agent.engine_runs"}]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if module in CONCRETE_ENGINES or full in CONCRETE_ENGINES or full == "agent.engine_runs":
                    out.append(f"{where} imports {full}")
                elif module == "agent.engine_runs" and alias.name not in REFERENCE_INSTRUMENT:
                    out.append(f"{where} imports {full} (the reference engine's own: ask agent.engines.engine_for)")
    return out


def test_no_step_asks_which_engine_it_holds():
    asked = [hit for path in ENGINE_BLIND for hit in _engine_kind_questions(path)]
    assert not asked, "a step asks which engine it holds (ask the engine, agent.engines.engine_for):\n" + "\n".join(asked)


def test_the_engine_kind_check_can_fail(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from agent import engine_sglang, engine_runs\nfrom agent.engine_sglang import concurrency_of\n"
                       "from agent.engines.sglang import SGLANG\nimport agent.engines.reference\n"
                       "from agent.engine_runs import Setting, with_levers\n"
                       "from agent.engines import engine_for\n"
                       "def step(target):\n    if target.engine.kind == 'sglang' or engine_sglang.is_sglang(target):\n"
                       "        return engine_for(target).kind\n    return engine_for(target).live_server, target.kind\n")
    found = _engine_kind_questions(planted)
    assert len(found) == 9, found
    assert not any("Setting" in hit or "live_server" in hit or "target.kind" in hit for hit in found)


# The agent's process (python -m agent investigate, resume, replay, regenerate) reads records and starts the box's
# tools, which import torch and sglang themselves: importing either here cost every agent process seconds of a
# core (torch some 2.5 s, sglang's package some 12 s), paid by each of the suite's many runs.
AGENT_MODULES = ["agent.cli", "agent.runner", "agent.graph", "agent.recommend", "perf_investigator"]


def test_the_agent_imports_neither_torch_nor_sglang():
    probe = (f"import importlib, sys\nfor name in {AGENT_MODULES!r}:\n    importlib.import_module(name)\n"
             "print(sorted(m for m in ('torch', 'sglang', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]", f"the agent's modules import {out.stdout.strip()}"
