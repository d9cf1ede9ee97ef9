"""A real OpenSSH server on loopback for the SSH box's tests (Debian's openssh-server; needs root).

It runs ``/usr/sbin/sshd`` on a free port with a throwaway host key and user key in a temp dir, and
logs in as box users that this harness creates (useradd) and that cannot read the checkout (an ACL
entry denies them its root directory) nor so its virtual environment. Each user has a Python
environment of its own, built once into a fixed cache path (``ENV_CACHE``, keyed by what is in it):
``pi-box`` has what the box-side tools need at the versions this checkout's environment runs, so a
run over SSH computes what a local run does; ``pi-box-bare`` has no torch.

``python -m scripts.sshd_harness envs`` builds the environments ahead (CI's setup does).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV_CACHE = Path(os.environ.get("PERF_INVESTIGATOR_BOX_ENVS", "/var/cache/perf-investigator/box-envs"))
SYSTEM_PYTHON = "/usr/bin/python3"  # the box users' interpreter: one they can run (the checkout's is root's)
FULL_USER, BARE_USER = "pi-box", "pi-box-bare"
# installed with their dependencies; the second line is what SGLang's server arguments, environment
# and benchmark client import (tools/engines/sglang), never torchvision (a stand-in module replaces the
# one import that reaches it, on the client's path only)
BOX_DISTRIBUTIONS = ("torch", "triton", "numpy", "pydantic", "msgspec",
                     "transformers", "tokenizers", "aiohttp", "datasets", "orjson", "pybase64", "psutil", "pillow",
                     "pyzmq", "starlette", "requests", "tqdm", "ipython")
NO_DEPS = ("sglang",)  # its source only, as the Makefile installs it


def pins() -> dict[str, str]:
    """Each box distribution at the version this checkout's environment has (a local build suffix dropped)."""
    found = {}
    for name in BOX_DISTRIBUTIONS + NO_DEPS:
        try:
            found[name] = version(name).split("+")[0]
        except PackageNotFoundError:
            raise RuntimeError(f"{name} is not installed here: run make setup first") from None
    return found


def env_path(kind: str) -> Path:
    key = hashlib.sha256(json.dumps([SYSTEM_PYTHON, kind, pins() if kind == "full" else {}]).encode()).hexdigest()[:12]
    return ENV_CACHE / f"{kind}-{key}"


@contextlib.contextmanager
def _lock(path: Path):
    """An exclusive lock on ``path`` (test servers of parallel workers start at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build_env(kind: str) -> Path:
    """The cached environment of this kind, built when absent (under a lock: parallel runs build it once)."""
    path = env_path(kind)
    ENV_CACHE.mkdir(parents=True, exist_ok=True)
    with open(ENV_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (path / ".complete").exists():
            return path
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(path)], check=True)
        pip = [str(path / "bin" / "python"), "-m", "pip", "install", "-q"]
        if kind == "full":
            versions = pins()
            subprocess.run(pip + [f"{n}=={versions[n]}" for n in BOX_DISTRIBUTIONS], check=True)
            subprocess.run(pip + ["--no-deps"] + [f"{n}=={versions[n]}" for n in NO_DEPS], check=True)
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(path)], check=True)  # the box users read it, none writes it
        os.chmod(ENV_CACHE, 0o755)
        (path / ".complete").write_text("ok\n")
    return path


def ensure_user(name: str) -> pwd.struct_passwd:
    """A system user with a home of its own, who can log in by key only and cannot read the checkout."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
        entry = pwd.getpwnam(name)
    # '!' (useradd's default) reads as a locked account to sshd without PAM; '*' is "no password", not locked
    subprocess.run(["usermod", "-p", "*", name], check=True)
    subprocess.run(["setfacl", "-m", f"u:{name}:---", str(REPO_ROOT)], check=True)
    return entry


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keygen(path: Path) -> Path:
    path.unlink(missing_ok=True)
    Path(str(path) + ".pub").unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "perf-investigator-test", "-f", str(path)],
                   check=True)
    return path


class SSHD:
    """sshd on 127.0.0.1:port for ``users`` ({name: environment}), with files under ``root`` (a directory
    the box users can traverse: sshd reads their authorized keys there as them)."""

    def __init__(self, root: Path, users: dict[str, Path], port: int | None = None):
        self.root = root
        self.users = users
        self.port = port or free_port()
        self.host_key = root / "host_ed25519"
        self.user_key = root / "id_ed25519"
        self.known_hosts = root / "known_hosts"
        self.proc: subprocess.Popen | None = None
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        keygen(self.user_key)
        keygen(self.host_key)
        self._write_config()

    def _write_config(self) -> None:
        keys = self.root / "authorized_keys"
        keys.mkdir(exist_ok=True)
        public = Path(str(self.user_key) + ".pub").read_text()
        for name in self.users:
            (keys / name).write_text(public)
        lines = [f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
                 f"PidFile {self.root / 'sshd.pid'}", f"AuthorizedKeysFile {keys}/%u",
                 "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
                 "UsePAM no", "StrictModes no", "PermitRootLogin no", "AllowUsers " + " ".join(self.users),
                 "MaxSessions 50", "MaxStartups 50", "LogLevel VERBOSE", "Subsystem sftp internal-sftp"]
        for name, env in self.users.items():
            lines += [f"Match User {name}", f"    SetEnv PATH={env / 'bin'}:/usr/local/bin:/usr/bin:/bin"]
        (self.root / "sshd_config").write_text("\n".join(lines) + "\n")

    def record_host_key(self) -> None:
        """known_hosts with this server's current key (what a first contact that was checked leaves)."""
        public = Path(str(self.host_key) + ".pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {public[0]} {public[1]}\n")

    def fingerprint(self) -> str:
        out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(self.host_key) + ".pub"],
                             capture_output=True, text=True, check=True)
        return out.stdout.split()[1]

    def start(self) -> "SSHD":
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        log = open(self.root / "sshd.log", "ab")
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(self.root / "sshd_config")],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {(self.root / 'sshd.log').read_text()[-2000:]}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 20 s")

    def kill(self) -> None:
        """SIGKILL the server and every session it forked: clients see their connection drop."""
        if self.proc is None:
            return
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.proc = None

    def new_host_key(self) -> None:
        """Replace the host key (a reinstalled host, or an impostor); restart if running."""
        running = self.proc is not None
        self.kill()
        keygen(self.host_key)
        if running:
            self.start()


# The box users' kept tool results (tools/box_cache.py), by kind.
BOX_CACHE_KINDS = ("gates", "gates-scan", "sglang-client")


@contextlib.contextmanager
def running(session: str | None = None) -> "Iterator[SSHD]":
    """A started test server, its box users and their environments ready and its host key recorded;
    killed and removed on exit (the tests' fixture). The box users' kept tool results are emptied, as a new
    host has them, when this server is the first of test session ``session`` (None: every server) to start:
    the servers of one session share what its box users' runs keep, no result of another session's is read."""
    envs = {FULL_USER: build_env("full"), BARE_USER: build_env("bare")}
    for user in envs:
        entry = ensure_user(user)
        cache = Path(entry.pw_dir) / ".cache" / "perf-investigator"
        marker = cache / ".test-session"
        with _lock(ENV_CACHE / f".{user}-cache.lock"):
            if session is None or not marker.exists() or marker.read_text() != session:
                for kind in BOX_CACHE_KINDS:
                    shutil.rmtree(cache / kind, ignore_errors=True)
                if session is not None:
                    for directory in (cache.parent, cache):  # ~/.cache and its perf-investigator: the user's own
                        directory.mkdir(exist_ok=True)
                        shutil.chown(directory, entry.pw_uid, entry.pw_gid)
                    marker.write_text(session)
                    shutil.chown(marker, entry.pw_uid, entry.pw_gid)
    server = SSHD(Path(tempfile.mkdtemp(prefix="pi-sshd-")), envs).start()
    try:
        server.record_host_key()
        yield server
    finally:
        server.kill()
        shutil.rmtree(server.root, ignore_errors=True)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc: the sshd session processes of its connections)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


if __name__ == "__main__":
    if sys.argv[1:] == ["envs"]:
        for kind in ("full", "bare"):
            print(build_env(kind))
    else:
        sys.exit("usage: python -m scripts.sshd_harness envs")
