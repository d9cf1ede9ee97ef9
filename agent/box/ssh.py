"""The SSH box: a remote machine, reached with the system OpenSSH client, under the local box's contract.

``SSHBox.run`` takes the same argument list as ``LocalBox.run`` and returns the same CommandResult:
the command is quoted for the remote shell by ``shlex.join`` (its arguments are never interpreted),
runs behind a guard that kills its process group at the timeout, when the command ends, and when
the connection or the agent goes; ``OUT_DIR`` becomes a fresh directory on the host whose files are
streamed back into a local scratch directory (with progress on a terminal). What the command does
is a result, as on the local box; a box that cannot be reached, or a connection that goes during a
call, is not: ``run`` raises BoxUnreachable (BoxLost, with what the call printed until then), so no
step goes on with a box that is gone, and the run stops where a resume re-runs the call and
reconnects.

Before the first command the box uploads the box-side tree it runs (``BOX_PACKAGES``) into a
per-run directory on the host: files are kept on the host by content hash, so only what changed
travels. ``missing()`` says what the host lacks for an investigation (the Python version, the
distributions the box-side tools need, a GPU), as data a step can turn into one finding.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import IO, Callable

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from agent.box.ssh_client import BoxLost, BoxUnreachable, Connection, HostKeyPolicy, SSHTarget, classify
from agent.box.interface import OUT_DIR, CommandResult
from agent.box.local import REPO_ROOT


REMOTE_SOURCE = (Path(__file__).with_name("ssh_remote.py")).read_text()
MARK = "@@perf-investigator-box-end"
BOX_PACKAGES = ("tools", "schema")  # the box-side tree and the records it shares with the agent
PYTHON_MIN = (3, 11)
# What the box-side tools import beyond the standard library, with what needs it. The versions come
# from pyproject's ``box`` extra where it names the distribution (see requirements()).
NEEDED = {
    "torch": "the reference engine and every measurement",
    "triton": "the Triton kernels",
    "numpy": "the reference engine",
    "pydantic": "the engine's spec",
    "sglang": "the engine source the gates and kernel grid read",
}
LOCAL_GRACE_S = 60  # past the guard's own timeout: the guard reports first; this only catches a stuck connection
# A watched call's progress files are fetched this often: one short session on the open connection each
# time, while a sweep's run takes seconds to minutes (the local box looks every local.WATCH_EVERY_S).
WATCH_EVERY_S = 2.0
PEEK_TIMEOUT_S = 10  # a poll that takes longer is skipped: it only shows progress
Progress = Callable[[str, int, int], None]


# -- what the host must have ----------------------------------------------------------------------


def requirements() -> dict[str, str]:
    """Distribution -> version specifier ("" for any): NEEDED, pinned by pyproject's ``box`` extra."""
    pins = {name: "" for name in NEEDED}
    for line in _box_extra():
        match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*([<>=!~][^;]*)?", line)
        if match and match.group(1).lower() in pins:
            pins[match.group(1).lower()] = (match.group(2) or "").strip()
    return pins


def _box_extra() -> list[str]:
    pyproject = REPO_ROOT / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        return tomllib.loads(pyproject.read_text()).get("project", {}).get("optional-dependencies", {}).get("box", [])
    from importlib.metadata import PackageNotFoundError, requires

    try:
        return [r.split(";")[0] for r in requires("perf-investigator") or [] if 'extra == "box"' in r]
    except PackageNotFoundError:
        return []


def satisfies(version: str, specifier: str) -> bool:
    """``version`` against a PEP 440 specifier (``>=2.9``, ``>=3.5,<4``); a local build suffix
    (``2.13.0+cpu``) satisfies what its release does."""
    return Version(version).public in SpecifierSet(specifier) if specifier else True


def missing_from(facts: dict, pins: dict[str, str]) -> list[dict]:
    """What the probed host lacks: one row per missing thing (what, need, have, needed_for)."""
    rows = []
    python = ".".join(map(str, facts["python"]))
    if tuple(facts["python"][:2]) < PYTHON_MIN:
        rows.append({"what": "python", "need": ">=" + ".".join(map(str, PYTHON_MIN)), "have": python,
                     "needed_for": "every box-side tool"})
    for name, spec in pins.items():
        have = facts["distributions"].get(name)
        if have is None or (spec and not satisfies(have, spec)):
            rows.append({"what": name, "need": spec or "any", "have": have, "needed_for": NEEDED[name]})
    if not facts["gpus"]:
        rows.append({"what": "GPU", "need": "an NVIDIA GPU", "have": None if not facts["nvidia_smi"] else "nvidia-smi lists none",
                     "needed_for": "measuring the declared hardware (a CPU box stands in, on the Triton interpreter)"})
    return rows


# -- the box-side tree --------------------------------------------------------------------------


def tree_manifest(root: Path | None = None) -> dict[str, str]:
    """Relative path -> sha256 of every file of the box-side packages (bytecode caches aside)."""
    root = root or REPO_ROOT
    manifest = {}
    for package in BOX_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                manifest[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return manifest


def terminal_progress(stream: IO[str] | None = None, at_least: int = 16 << 20) -> Progress:
    """Bytes fetched so far, redrawn in place at most 5 times a second; only on a terminal, and only for
    files of ``at_least`` bytes (a trace of hundreds of MB, not the small JSON most tools leave)."""
    out = stream or sys.stderr
    last = [0.0]

    def show(name: str, done: int, total: int) -> None:
        if total < at_least or not out.isatty():
            return
        now = time.monotonic()
        if done < total and now - last[0] < 0.2:
            return
        last[0] = now
        out.write(f"\r  fetching {name}: {done / 2**20:.1f} / {total / 2**20:.1f} MiB"
                  + ("\n" if done >= total else ""))
        out.flush()
    return show


class SSHBox:
    """A box reached over SSH: ``ssh://[user@]host[:port]``; ``python`` is the interpreter on the host."""

    name = "ssh"
    watches_output = True  # run's ``watch``: the files it ``reads`` are fetched while the command runs

    def __init__(self, url: str, python: str | None = None, *, policy: HostKeyPolicy | None = None,
                 identity: Path | None = None, ssh_config: Path | None = None, scratch_root: Path | None = None,
                 progress: Progress | None = None, run_key: str | None = None):
        self.url = url
        self.target = SSHTarget.parse(url)
        self.python = python or "python3"
        self.connection = Connection(self.target, policy, identity, ssh_config)
        self.scratch_root = scratch_root
        self.progress = progress or terminal_progress()
        self.run_key = run_key or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        self.facts: dict | None = None  # the probe's answer, once connected
        self.upload: dict | None = None  # files in the tree, and how many had to travel
        self._ready_key: str | None = None
        self._calls = 0

    # -- the contract ----------------------------------------------------------------------------

    def describe(self) -> dict:
        return {"kind": "ssh", "target": str(self.target), "python": self.python}

    def attach(self, run_key: str) -> None:
        """Use the per-run directory named ``run_key`` from the next call on (the run's id)."""
        self.run_key = run_key

    def missing(self) -> list[dict]:
        """What the host lacks for an investigation (connecting first); [] when nothing."""
        self._prepare()
        return missing_from(self.facts, requirements())

    def blockers(self) -> str | None:
        """One line naming everything the host lacks that no investigation can do without (a missing GPU
        is not among them: a CPU box stands in), or None."""
        rows = [row for row in self.missing() if row["what"] != "GPU"]
        if not rows:
            return None
        listed = "; ".join(f"{row['what']} ({'need ' + row['need'] if row['need'] != 'any' else 'any version'}"
                           f"{', has ' + row['have'] if row['have'] else ''}: {row['needed_for']})" for row in rows)
        names = [row["what"] + (row["need"] if row["need"].startswith(("=", ">", "<")) else "") for row in rows
                 if row["what"] not in ("python", "sglang")]
        hints = ([f"pip install {' '.join(repr(n) if '<' in n or '>' in n else n for n in names)}"] if names else []) + \
                (["pip install --no-deps sglang==0.5.23"] if any(row["what"] == "sglang" for row in rows) else [])
        return (f"the box {self.target} lacks what the investigation needs, in {self.facts['executable']}: {listed}; "
                f"install it there ({'; '.join(hints) or 'a newer Python'}), or name another interpreter with --box-python")

    def run(self, argv: list[str], *, timeout_s: float, env: dict[str, str] | None = None,
            watch: Callable[[Path], None] | None = None) -> CommandResult:
        """The command on the host, under the local box's contract; BoxUnreachable when the host cannot be
        reached, BoxLost when the connection goes during the call (or while its files come back).
        ``watch(folder)`` is called as LocalBox.run calls it, every WATCH_EVERY_S, on a local folder holding
        what the output folder's files it names in ``watch.reads`` hold so far."""
        argv = list(argv)
        started = time.perf_counter()
        self._prepare()
        self._calls += 1
        call = f"{self._calls:05d}-{secrets.token_hex(3)}"
        out = f"{self.run_dir}/out/{call}" if OUT_DIR in argv else None
        argv = [out if a == OUT_DIR else a for a in argv]
        nonce = secrets.token_hex(8)
        spec = {"argv": argv, "cwd": self.tree_dir, "pythonpath": self.tree_dir, "env": dict(env or {}),
                "timeout_s": timeout_s, "out": out, "pidfile": f"{self.run_dir}/pids/{call}", "nonce": nonce}
        peek = self._watcher(out, watch) if out is not None and watch is not None else None
        try:
            stdout, stderr, rc_ssh, stuck = self._exec(spec, peek)
        finally:
            if peek is not None:
                shutil.rmtree(peek.mirror, ignore_errors=True)
        stderr, end = _split_end(stderr, nonce)
        if end is None:
            why = self._no_end(stderr, rc_ssh, stuck)
            raise BoxLost(why, CommandResult(argv, None, stdout, stderr, time.perf_counter() - started, error=why))
        if end["error"]:
            return CommandResult(argv, None, stdout, stderr, 0.0, error=end["error"])
        error = "the connection to the box went during the call (the guard killed the command)" if end["lost"] else None
        # the command's own time, as the guard measured it on the host (not the connection's or the fetch's)
        result = CommandResult(argv, end["rc"], stdout, stderr, end["duration_s"], end["timed_out"], error)
        if out is not None:
            result.files, result.scratch, fetch_error = self._fetch(out, end["files"])
            if fetch_error:
                result.cleanup()
                result.error = f"the command ran, but its files did not come back: {fetch_error}"
                raise BoxLost(result.error, result)
        return result

    def _no_end(self, stderr: str, rc_ssh: int | None, stuck: bool) -> str:
        """Why a call ended without the guard's end line."""
        if stuck:
            return (f"the call outlived its timeout by {LOCAL_GRACE_S} s without an answer from the box (the connection "
                    "hangs?): its ssh was killed, and its process group on the box")
        if rc_ssh == 255:
            return f"the connection to the box went during the call: {classify(stderr, self.target)}"
        return f"the box's guard ended without its report (exit {rc_ssh}): {_last(stderr) or 'no output'}"

    def close(self) -> None:
        """Remove this run's directory on the host (the blob cache stays) and close the connection."""
        if self._ready_key is not None and self.connection.alive():
            try:
                self._call_json(["clean", self.run_dir], timeout_s=60)
            except BoxUnreachable:
                pass
        self.connection.close()

    # -- where things are on the host ----------------------------------------------------------

    @property
    def base(self) -> str:
        return f"{self.facts['home']}/.cache/perf-investigator"

    @property
    def run_dir(self) -> str:
        return f"{self.base}/runs/{self.run_key}"

    @property
    def tree_dir(self) -> str:
        return f"{self.run_dir}/tree"

    # -- connecting, probing, uploading ----------------------------------------------------------

    def _prepare(self) -> None:
        """Connect (again after a drop); the first time for this run key, probe and upload the tree."""
        self.connection.connect()
        if self._ready_key == self.run_key:
            return
        if self._ready_key is not None:  # attached to a run: the directory the preflight used goes
            self._call_json(["clean", f"{self.base}/runs/{self._ready_key}"])
        if self.facts is None:
            self.facts = self._call_json(["probe", json.dumps(sorted(requirements()))])
        manifest = tree_manifest()
        blobs = f"{self.base}/blobs"
        wanted = sorted(set(manifest.values()))
        absent = self._call_json(["missing", blobs], json.dumps(wanted).encode())
        if absent:
            self._upload(blobs, {digest: path for path, digest in manifest.items() if digest in set(absent)})
        self._call_json(["assemble", blobs, self.tree_dir], json.dumps(manifest).encode())
        self.upload = {"files": len(manifest), "uploaded": len(absent), "tree": self.tree_dir}
        self._ready_key = self.run_key

    def _remote(self, args: list[str]) -> list[str]:
        return self.connection.command([self.python, "-c", REMOTE_SOURCE, *args])

    def _call_json(self, args: list[str], stdin: bytes | None = None, timeout_s: float = 300) -> object:
        try:
            done = subprocess.run(self._remote(args), input=stdin or b"", capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise BoxUnreachable(f"{self.target}: the box did not answer {args[0]} within {timeout_s:g} s") from None
        text = done.stdout.decode(errors="replace").strip()
        if done.returncode != 0 or not text:
            err = done.stderr.decode(errors="replace")
            if done.returncode == 127 or "not found" in err and self.python in err:
                raise BoxUnreachable(f"{self.target}: no Python at {self.python!r} on the box (--box-python names it)")
            raise BoxUnreachable(classify(err, self.target) if done.returncode == 255 else
                                 f"{self.target}: the box helper failed ({args[0]}): {_last(err) or 'no output'}")
        return json.loads(text.splitlines()[-1])

    def _upload(self, blobs: str, files: dict[str, str]) -> None:
        """The blobs the host lacks, as one tar stream (each checked against its hash on arrival)."""
        proc = subprocess.Popen(self._remote(["receive", blobs]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            with tarfile.open(fileobj=proc.stdin, mode="w|") as tar:
                for digest, rel in sorted(files.items()):
                    tar.add(REPO_ROOT / rel, arcname=digest, recursive=False)
        except BrokenPipeError:  # the helper failed early: its stderr says why
            pass
        _, err = proc.communicate(timeout=300)  # closes stdin: the end of the stream
        if proc.returncode != 0:
            raise BoxUnreachable(f"{self.target}: uploading the box-side tools failed: "
                                 f"{_last(err.decode(errors='replace')) or f'exit {proc.returncode}'}")

    # -- one command ------------------------------------------------------------------------------

    def _exec(self, spec: dict, peek: Callable[[], None] | None = None) -> tuple[str, str, int | None, bool]:
        """Run the guard over the connection; stdin stays open until the end (its EOF tells the guard
        the agent is gone), ``peek`` called every WATCH_EVERY_S meanwhile. Returns stdout, stderr, ssh's
        exit code, and whether the local backstop fired."""
        proc = subprocess.Popen(self._remote(["exec", json.dumps(spec)]), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        chunks: dict[str, list[bytes]] = {"out": [], "err": []}
        readers = [threading.Thread(target=_read_all, args=(pipe, chunks[key]), daemon=True)
                   for key, pipe in (("out", proc.stdout), ("err", proc.stderr))]
        for reader in readers:
            reader.start()
        stuck = False
        try:
            _wait(proc, spec["timeout_s"] + LOCAL_GRACE_S, peek)
        except subprocess.TimeoutExpired:
            stuck = True
            self._kill_remote(spec["pidfile"])
            proc.kill()
            proc.wait()
        except BaseException:  # Ctrl-C: the command must not go on measuring on the host
            self._kill_remote(spec["pidfile"])
            proc.kill()
            proc.wait()
            raise
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass
        for reader in readers:
            reader.join(timeout=10)
        text = lambda key: b"".join(chunks[key]).decode(errors="replace")  # noqa: E731
        return text("out"), text("err"), proc.returncode, stuck

    def _watcher(self, out: str, watch: Callable[[Path], None]) -> Callable[[], None] | None:
        """A poll for ``_exec``: what the files ``watch`` reads gained on the host since the last poll,
        appended to their copies in a local folder (``.mirror``), then ``watch`` on that folder. A poll
        that fails (the connection slow or gone: the call itself will say) is skipped; it only shows."""
        names = [name for name in getattr(watch, "reads", ()) if _safe_name(name) == name]
        if not names:
            return None  # a watch that names nothing would get an empty folder
        mirror = Path(tempfile.mkdtemp(prefix="box-watch-", dir=self.scratch_root))
        offsets = dict.fromkeys(names, 0)

        def peek() -> None:
            try:
                done = subprocess.run(self._remote(["peek", out]), input=json.dumps(offsets).encode(),
                                      capture_output=True, timeout=PEEK_TIMEOUT_S)
                grown = json.loads(done.stdout.decode().strip().splitlines()[-1]) if done.returncode == 0 else {}
                for name in names:  # only what was asked for: the host names no local path
                    data = grown.get(name, "").encode("latin-1")
                    if data:
                        (mirror / name).parent.mkdir(parents=True, exist_ok=True)
                        with open(mirror / name, "ab") as handle:
                            handle.write(data)
                        offsets[name] += len(data)
                watch(mirror)
            except Exception:  # a progress view's failure must not end a measurement
                pass
        peek.mirror = mirror
        return peek

    def _kill_remote(self, pidfile: str) -> None:
        try:
            subprocess.run(self._remote(["kill", pidfile]), stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _fetch(self, out: str, listed: list) -> tuple[dict[str, Path], Path | None, str | None]:
        """The files the command left in ``out``, streamed into a local scratch directory."""
        scratch = Path(tempfile.mkdtemp(prefix="box-", dir=self.scratch_root))
        if not listed:
            self._call_json(["clean", out])
            return {}, scratch, None
        sizes = dict((name, size) for name, size in listed)
        files: dict[str, Path] = {}
        proc = subprocess.Popen(self._remote(["send", out]), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    rel = _safe_name(member.name)
                    if rel is None or not member.isfile():
                        continue
                    dest = scratch / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    self._copy(tar.extractfile(member), dest, rel, member.size)
                    files[rel] = dest
        except (tarfile.TarError, OSError, EOFError) as exc:
            proc.kill()
            proc.wait()
            return files, scratch, f"{type(exc).__name__}: {exc}; {classify(proc.stderr.read().decode(errors='replace'), self.target)}"
        proc.wait()
        short = sorted(set(sizes) - set(files))
        if proc.returncode != 0 or short:
            err = proc.stderr.read().decode(errors="replace")
            return files, scratch, (f"{len(short)} of {len(sizes)} files did not arrive ({', '.join(short[:3])}); "
                                    + (classify(err, self.target) if proc.returncode == 255 else _last(err)))
        return dict(sorted(files.items())), scratch, None

    def _copy(self, source: IO[bytes], dest: Path, name: str, total: int) -> None:
        done = 0
        with open(dest, "wb") as handle:
            while chunk := source.read(1 << 20):
                handle.write(chunk)
                done += len(chunk)
                self.progress(name, done, total)
        if done < total:
            raise EOFError(f"{name}: {done} of {total} bytes arrived")
        if total == 0:
            self.progress(name, 0, 0)


def _wait(proc: subprocess.Popen, seconds: float, peek: Callable[[], None] | None) -> None:
    """``proc.wait(seconds)``, with ``peek`` called every WATCH_EVERY_S meanwhile; TimeoutExpired at ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(WATCH_EVERY_S, left) if peek is not None else left))
            return
        except subprocess.TimeoutExpired:
            if peek is None or time.monotonic() >= deadline:
                raise
            peek()


def _read_all(pipe: IO[bytes], into: list[bytes]) -> None:
    while chunk := pipe.read(65536):
        into.append(chunk)


def _split_end(stderr: str, nonce: str) -> tuple[str, dict | None]:
    """The command's own stderr, and the guard's end record (None when the guard never wrote it)."""
    marker = f"\n{MARK} {nonce} "
    at = stderr.rfind(marker)
    if at < 0:
        return stderr, None
    line = stderr[at + len(marker):].split("\n", 1)[0]
    try:
        return stderr[:at], json.loads(line)
    except json.JSONDecodeError:
        return stderr, None


def _safe_name(name: str) -> str | None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return None
    return path.as_posix()


def _last(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""
