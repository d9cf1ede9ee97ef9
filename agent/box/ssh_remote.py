"""The SSH box's helper on the far end. Standard library only: it is sent as ``python -c`` source with
every call, so nothing has to be installed on the host before the first one.

``python -c SOURCE SUBCOMMAND ARGS...``, each subcommand printing one JSON line on stdout unless said:
  probe REQUIREMENTS   the interpreter, the home directory, the installed version of each required
                       distribution (REQUIREMENTS: JSON list of names) and whether nvidia-smi sees a GPU
  missing BLOBS        stdin: JSON list of sha256; prints those not yet in BLOBS (the upload cache)
  receive BLOBS        stdin: a tar stream of files named by their sha256; each is checked and kept
  assemble BLOBS TREE  stdin: JSON {path: sha256}; TREE/path becomes a hard link to the blob
  exec SPEC            the guard (SPEC: JSON): runs the command in a process group of its own; kills the
                       group at the timeout, when the connection goes (its stdin closes) and when the
                       command ends; then prints on stderr one end line (MARK, the nonce, JSON)
  send DIR             stdout: a tar stream of the files under DIR, then DIR is removed
  peek DIR             stdin: JSON {name: offset}; prints {name: the bytes of DIR/name past offset, at most
                       PEEK_MAX, as latin-1 text} for each that has grown (a running command's progress)
  kill PIDFILE         SIGKILL the process group whose id PIDFILE holds
  clean DIR            remove DIR
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

MARK = "@@perf-investigator-box-end"
PEEK_MAX = 1 << 20  # a poll's share of a file: a progress file bigger than this comes over several polls


def _probe(names):
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    smi = shutil.which("nvidia-smi")
    gpus = []
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            gpus = [line for line in out.stdout.splitlines() if line.startswith("GPU")]
        except (OSError, subprocess.TimeoutExpired):
            gpus = []
    return {"python": list(sys.version_info[:3]), "executable": sys.executable, "home": os.path.expanduser("~"),
            "distributions": found, "nvidia_smi": bool(smi), "gpus": gpus}


def _missing(blobs):
    wanted = json.load(sys.stdin)
    return [h for h in wanted if not os.path.isfile(os.path.join(blobs, h))]


def _receive(blobs):
    os.makedirs(blobs, exist_ok=True)
    kept = 0
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tar:
        for member in tar:
            name = os.path.basename(member.name)
            source = tar.extractfile(member) if member.isfile() else None
            if source is None or len(name) != 64:
                continue
            data = source.read()
            if hashlib.sha256(data).hexdigest() != name:  # a damaged upload is refused, never linked
                raise SystemExit("blob " + name + " arrived damaged")
            partial = os.path.join(blobs, name + ".part")
            with open(partial, "wb") as handle:
                handle.write(data)
            os.replace(partial, os.path.join(blobs, name))
            kept += 1
    return {"kept": kept}


def _assemble(blobs, tree):
    manifest = json.load(sys.stdin)
    partial = tree + ".part"
    shutil.rmtree(partial, ignore_errors=True)
    for rel, digest in manifest.items():
        dest = os.path.join(partial, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.link(os.path.join(blobs, digest), dest)
    shutil.rmtree(tree, ignore_errors=True)
    os.replace(partial, tree)
    return {"files": len(manifest)}


def _killpg(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _files(out):
    if not out or not os.path.isdir(out):
        return []
    listed = []
    for root, _, names in os.walk(out):
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                listed.append([os.path.relpath(path, out), os.path.getsize(path)])
    return sorted(listed)


def _end(nonce, record):
    sys.stderr.write("\n" + MARK + " " + nonce + " " + json.dumps(record) + "\n")
    sys.stderr.flush()


def _watch_stdin(gone, pgid):
    """The agent's end holds our stdin open for the whole call: EOF means it, or the connection, is gone."""
    while True:
        try:
            chunk = os.read(0, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            gone.set()
            _killpg(pgid)
            return


def _exec(spec):
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    if spec.get("pythonpath"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [spec["pythonpath"], env.get("PYTHONPATH")]))
    argv = spec["argv"]
    end = {"rc": None, "timed_out": False, "error": None, "lost": False, "files": []}
    if spec.get("out"):
        os.makedirs(spec["out"], exist_ok=True)
    program = shutil.which(argv[0], path=env.get("PATH")) if argv else None
    if program is None:
        end["error"] = "cannot start " + (argv[0] if argv else "(empty)") + ": no such executable"
        return _end(spec["nonce"], end)
    try:
        child = subprocess.Popen([program] + argv[1:], cwd=spec.get("cwd"), env=env, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    except OSError as exc:
        end["error"] = "cannot start " + argv[0] + ": " + str(exc.strerror)
        return _end(spec["nonce"], end)
    if spec.get("pidfile"):
        os.makedirs(os.path.dirname(spec["pidfile"]), exist_ok=True)
        with open(spec["pidfile"], "w") as handle:
            handle.write(str(child.pid))
    gone = threading.Event()
    threading.Thread(target=_watch_stdin, args=(gone, child.pid), daemon=True).start()
    started = time.monotonic()
    try:
        child.wait(timeout=spec["timeout_s"])
    except subprocess.TimeoutExpired:
        end["timed_out"] = True
        _killpg(child.pid)
        child.wait()
    duration = time.monotonic() - started
    _killpg(child.pid)  # what the command left running in its group ends with it
    if spec.get("pidfile"):
        try:
            os.unlink(spec["pidfile"])
        except OSError:
            pass
    end.update(rc=child.returncode, lost=gone.is_set(), files=_files(spec.get("out")), duration_s=duration)
    return _end(spec["nonce"], end)


def _send(directory):
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
        for rel, _ in _files(directory):
            tar.add(os.path.join(directory, rel), arcname=rel, recursive=False)
    sys.stdout.buffer.flush()
    shutil.rmtree(directory, ignore_errors=True)


def _peek(directory):
    grown = {}
    for name, offset in json.load(sys.stdin).items():
        try:
            with open(os.path.join(directory, name), "rb") as handle:
                handle.seek(offset)
                data = handle.read(PEEK_MAX)
        except OSError:  # not written yet
            continue
        if data:
            grown[name] = data.decode("latin-1")  # every byte as one code point: JSON carries them exactly
    return grown


def _kill(pidfile):
    try:
        with open(pidfile) as handle:
            pgid = int(handle.read().strip())
    except (OSError, ValueError):
        return {"killed": None}
    _killpg(pgid)
    return {"killed": pgid}


def main(argv):
    command, args = argv[0], argv[1:]
    if command == "exec":
        return _exec(json.loads(args[0]))
    if command == "send":
        return _send(args[0])
    if command == "clean":
        shutil.rmtree(args[0], ignore_errors=True)
        result = {"cleaned": args[0]}
    else:
        result = {"probe": lambda: _probe(json.loads(args[0])), "missing": lambda: _missing(args[0]),
                  "receive": lambda: _receive(args[0]), "assemble": lambda: _assemble(args[0], args[1]),
                  "kill": lambda: _kill(args[0]), "peek": lambda: _peek(args[0])}[command]()
    sys.stdout.write(json.dumps(result) + "\n")
    return None


if __name__ == "__main__":
    main(sys.argv[1:])
