"""Safety nets for refactors of the box-side analyzers: the JSON that `agent gates` and `agent grid` print
for a fixed set of inputs (the installed sglang 0.5.23 at sm_90/100/120, and every kernel under
tests/data plus the dsv4-flash sparse-decode kernel), captured before a change and compared after it.

A replay serves tool results from the journal and never runs these tools, so replaying the shipped
examples does not cover them; this does.

    python -m scripts.refactor_nets capture   # writes tests/data/refactor-nets/*.json
    python -m scripts.refactor_nets check     # exits 1 and names each case whose JSON changed

Paths in the output are written relative to the repository (`<repo>/...`) or the installed sglang
(`<sglang>/...`) so that a capture compares across checkouts and virtual environments.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
NETS = DATA / "refactor-nets"
FORMS = DATA / "kernel-source-launch-forms"


def _sglang_root() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: sglang is not installed (make setup installs sglang==0.5.23 without dependencies)")
    return Path(list(spec.submodule_search_locations)[0])


def cases() -> dict[str, list[str]]:
    """name -> arguments of `python -m agent`; one name a file under tests/data/refactor-nets."""
    sglang = _sglang_root()
    out: dict[str, list[str]] = {}
    for sm in (90, 100, 120):
        out[f"gates-sglang-sm{sm}"] = ["gates", "--sm", str(sm), "--json"]
        out[f"gates-sglang-sm{sm}-kernels"] = ["gates", "--sm", str(sm), "--json", "--kernels", "_tiled_sparse_decode_kernel"]
    out["gates-synthetic-sm120"] = ["gates", "--source", str(DATA / "gates-synthetic" / "fakeengine"), "--sm", "120", "--json"]
    grid = {
        "grid-sglang-tiled-sparse-decode": ["--source", str(sglang), "--kernel", "_tiled_sparse_decode_kernel",
                                            "--shape", "has_topk_len=1", "--shape", "B=1", "--shape", "H=64",
                                            "--shape", "topk=512", "--sms", "188", "--arch", "sm_120", "--real-heads", "64"],
        "grid-sglang-tiled-sparse-decode-open": ["--source", str(sglang), "--kernel", "_tiled_sparse_decode_kernel",
                                                 "--sms", "132", "--no-compile"],
        "grid-forms-attend-rows": ["--source", str(FORMS), "--kernel", "attend_rows", "--shape", "rows=8", "--shape", "N=1000",
                                   "--shape", "D=64", "--sms", "132", "--launcher", "attend", "--config-json",
                                   '{"BLOCK_N": 64, "num_warps": 8, "num_stages": 2}', "--arch", "sm_90"],
        "grid-forms-attend-rows-open": ["--source", str(FORMS), "--kernel", "attend_rows", "--sms", "132", "--launcher", "attend",
                                        "--no-compile"],
        "grid-forms-attend-fixed": ["--source", str(FORMS), "--kernel", "attend_rows", "--shape", "rows=8", "--shape", "N=1024",
                                    "--shape", "D=64", "--sms", "132", "--launcher", "attend_fixed", "--no-compile"],
        "grid-forms-blocked-copy": ["--source", str(FORMS), "--kernel", "blocked_copy", "--shape", "M=1000", "--shape", "N=1024",
                                    "--sms", "132", "--launcher", "copy", "--arch", "sm_90"],
        "grid-forms-blocked-copy-run": ["--source", str(FORMS), "--kernel", "blocked_copy", "--shape", "M=1000", "--shape", "N=1024",
                                        "--sms", "132", "--launcher", "copy_run", "--no-compile"],
        "grid-forms-scale-cuda": ["--source", str(FORMS), "--kernel", "scale_kernel", "--sms", "188", "--no-compile"],
        "grid-synthetic-decode": ["--source", str(DATA / "gates-synthetic" / "fakeengine"), "--kernel", "_slow_decode_kernel",
                                  "--sms", "132", "--no-compile"],
        "grid-sglang-tiled-sparse-decode-b2": ["--source", str(sglang), "--kernel", "_tiled_sparse_decode_kernel",
                                               "--shape", "B=2", "--shape", "H=64", "--shape", "topk=512", "--sms", "188",
                                               "--real-heads", "16", "--no-compile"],
    }
    for kernel in ("head_blocked_kernel", "per_head_kernel"):
        for batch, heads in ((1, 16), (8, 64)):
            grid[f"grid-diagnosis-{kernel}-B{batch}-H{heads}"] = [
                "--source", str(DATA / "kernel-diagnosis" / "gather_attention.py"), "--kernel", kernel, "--shape", f"B={batch}",
                "--shape", f"H={heads}", "--shape", "D=64", "--shape", "topk=128", "--sms", "132", "--no-compile"]
    for kernel in ("_rms_norm_kernel", "_scale_add_kernel"):
        grid[f"grid-trace-fixture-{kernel}"] = ["--source", str(DATA / "trace-cpu" / "make_fixture.py"), "--kernel", kernel,
                                               "--sms", "132", "--no-compile"]
    grid.update({
    })
    for name, args in grid.items():
        out[name] = ["grid", *args, "--json"]
    return out


def _normalize(text: str) -> str:
    return text.replace(str(_sglang_root()), "<sglang>").replace(str(ROOT), "<repo>")


# Wall-clock readings: they differ from run to run, so they are no part of what a tool computes.
VOLATILE_KEYS = {"compile_seconds"}


def _without_volatile(value):
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


def run_case(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "agent", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)
    return result_of(proc.returncode, proc.stdout, proc.stderr)


def result_of(code: int, stdout: str, stderr: str) -> dict:
    """What a case's capture holds of a command's exit code and output."""
    return {"rc": code, "stdout": _without_volatile(json.loads(_normalize(stdout))) if stdout.strip().startswith(("{", "["))
            else _normalize(stdout), "stderr_last": _normalize(stderr.strip().splitlines()[-1]) if stderr.strip() else ""}


GZIP_ABOVE = 256 * 1024  # characters of a capture above which it is stored gzipped


def captures() -> dict[str, Path]:
    """Each captured case's file by case name (``NAME.json`` or ``NAME.json.gz``)."""
    return {p.name.split(".json")[0]: p for p in NETS.iterdir() if p.name.endswith((".json", ".json.gz"))}


def load_capture(name: str) -> dict:
    path = captures()[name]
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return json.load(handle)
    return json.loads(path.read_text())


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in ("capture", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    only = set(argv[1:])
    NETS.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, args in cases().items():
        if only and name not in only:
            continue
        got = run_case(args)
        if argv[0] == "capture":
            text = json.dumps({"args": args[:1] + [_normalize(a) for a in args[1:]], **got}, indent=1, sort_keys=True) + "\n"
            for old in NETS.glob(f"{name}.json*"):
                old.unlink()
            if len(text) > GZIP_ABOVE:  # the gate scans' captures: gzip keeps the repository (and a device copy) small
                with gzip.open(NETS / f"{name}.json.gz", "wt", encoding="utf-8") as handle:
                    handle.write(text)
            else:
                (NETS / f"{name}.json").write_text(text)
            print(f"captured {name} (rc {got['rc']})", flush=True)
        else:
            want = load_capture(name)
            if {k: want[k] for k in ("rc", "stdout", "stderr_last")} != got:
                changed.append(name)
                print(f"changed: {name}", flush=True)
            else:
                print(f"same: {name}", flush=True)
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
