"""The SSH box against a real sshd on loopback (scripts/sshd_harness.py): quoting, the uploaded tree,
produced files (200 MB), timeouts, a server killed mid-call, host keys, what a host lacks."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agent.box import ssh
from agent.box.interface import OUT_DIR
from agent.box.ssh import SSHBox, tree_manifest
from agent.box.ssh_client import BoxLost, BoxUnreachable, HostKeyPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import sshd_harness as harness  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists() or not shutil.which("setfacl"),
                                reason="needs root, openssh-server and acl (make setup-ssh-tests)")
PY = "python3"  # the box users' environment comes first on their PATH (the harness's sshd sets it)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    # one session's servers share their box users' kept results: this one must not empty them under the
    # investigations that other workers run over SSH at the same time
    from conftest import _shared_dir

    with harness.running(session=str(_shared_dir(tmp_path_factory))) as server:
        yield server


OPEN: list[SSHBox] = []


def make_box(sshd, user=harness.FULL_USER, tmp=None, **policy) -> SSHBox:
    """A box on the test server (closed after the test)."""
    policy = HostKeyPolicy(**policy) if policy else HostKeyPolicy(known_hosts=sshd.known_hosts)
    OPEN.append(SSHBox(f"ssh://{user}@127.0.0.1:{sshd.port}", PY, policy=policy, identity=sshd.user_key, scratch_root=tmp))
    return OPEN[-1]


@pytest.fixture(autouse=True)
def close_boxes():
    yield
    while OPEN:
        OPEN.pop().close()


@pytest.fixture
def box(sshd, tmp_path):
    return make_box(sshd, tmp=tmp_path)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


# A command that starts a long sleep as its child, prints the child's pid and waits on it.
SLEEPER = "import subprocess; p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True); p.wait()"


def test_arguments_carrying_shell_syntax_arrive_as_themselves(box):
    planted = Path(f"/tmp/pi-box-planted-{os.getpid()}")
    planted.unlink(missing_ok=True)
    tricky = [f"$(touch {planted})", f"`touch {planted}`", f"; touch {planted}", f"| touch {planted}", "a b  c",
              "'", '"', "\\", "*", "$HOME", "~", "new\nline", "&& exit 3", "#not a comment", ""]
    result = box.run([PY, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *tricky], timeout_s=60)
    assert result.error is None and result.rc == 0, result
    assert json.loads(result.stdout) == tricky
    assert not planted.exists()


def test_runs_the_uploaded_tree_as_a_user_who_cannot_read_the_checkout(box, sshd, tmp_path, monkeypatch):
    result = box.run([PY, "-c", "import tools.survey, os; print(tools.survey.__file__); print(os.getcwd())"], timeout_s=60)
    assert result.rc == 0, result
    module, cwd = result.stdout.split()
    assert module == f"{box.tree_dir}/tools/survey.py" and cwd == box.tree_dir
    assert box.upload["files"] == len(tree_manifest())
    for path in (harness.REPO_ROOT / "pyproject.toml", harness.REPO_ROOT / ".venv" / "bin" / "python"):
        denied = box.run(["cat", str(path)], timeout_s=30)
        assert denied.rc != 0 and "Permission denied" in denied.stderr, denied
    # a second run on the same host: a tree of its own, nothing uploaded again; one changed file travels alone
    again = make_box(sshd, tmp=tmp_path)
    assert again.run(["true"], timeout_s=30).rc == 0 and again.upload["uploaded"] == 0
    assert again.tree_dir != box.tree_dir
    copy = tmp_path / "checkout"
    for package in ssh.BOX_PACKAGES:
        shutil.copytree(harness.REPO_ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    edit = f"# changed {time.time_ns()}\n"  # new to the host's blob cache, whatever earlier test runs left there
    (copy / "tools" / "survey.py").write_text((copy / "tools" / "survey.py").read_text() + edit)
    monkeypatch.setattr(ssh, "REPO_ROOT", copy)
    changed = make_box(sshd, tmp=tmp_path)
    shown = changed.run(["tail", "-n", "1", "tools/survey.py"], timeout_s=30)
    assert shown.stdout == edit and changed.upload["uploaded"] == 1


def test_produced_files_come_back_and_a_missing_program_is_a_result(box):
    script = textwrap.dedent("""
        import pathlib, sys
        out = pathlib.Path(sys.argv[1])
        (out / "sub").mkdir()
        (out / "sub" / "a.txt").write_text("alpha")
        (out / "empty").write_bytes(b"")
        print('{"ok": true}')
    """)
    result = box.run([PY, "-c", script, OUT_DIR], timeout_s=60)
    try:
        assert result.rc == 0 and sorted(result.files) == ["empty", "sub/a.txt"]
        assert result.files["sub/a.txt"].read_text() == "alpha" and result.files["empty"].read_bytes() == b""
    finally:
        result.cleanup()
    assert not result.scratch.exists()
    missing = box.run(["/nonexistent/program", "x"], timeout_s=30)
    assert missing.rc is None and "cannot start /nonexistent/program" in missing.error


# A sweep as the progress view sees it: its first run's line, then (once the agent has shown that run, or
# after a minute) its second, and whether it was seen.
SWEEP = textwrap.dedent("""
    import json, os, pathlib, sys, time
    out, seen = pathlib.Path(sys.argv[1]), sys.argv[2]
    def line(record):
        with open(out / "sweep_runs.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\\n")
    line({"meta": {}})
    line({"run": {"label": "baseline#0"}})
    deadline = time.monotonic() + 60
    while not os.path.exists(seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    line({"run": {"label": "baseline#1"}})
    print(json.dumps({"ok": os.path.exists(seen)}))
""")


def test_a_sweeps_runs_done_show_while_it_runs_on_the_box(box):
    """As on the local box (tests/test_progress_position.py): the progress view sees each run as it ends,
    from the output folder on the host, not only once the call has ended."""
    from agent.engine_runs import sweep_watch

    seen, mirrors = [], []
    watch = sweep_watch("engine.sweep", {"spec": {"runs": [{}, {}]}}, lambda *shown: seen.append(shown))
    flag = Path(f"/tmp/pi-box-seen-{os.getpid()}-{time.monotonic_ns()}")  # on this loopback host, the box's /tmp too

    def looking(folder):
        mirrors.append(folder)
        watch(folder)
        if seen:
            flag.touch()  # the command goes on only once its first run was seen here
    looking.reads = watch.reads

    try:
        result = box.run([PY, "-c", SWEEP, OUT_DIR, str(flag)], timeout_s=120, watch=looking)
    finally:
        flag.unlink(missing_ok=True)
    try:
        assert result.rc == 0 and json.loads(result.stdout) == {"ok": True}, result
        assert seen[0] == (1, 2, "runs")
        # the call's files are the command's, whole, whatever the polls fetched meanwhile
        assert result.files["sweep_runs.jsonl"].read_text().count('{"run"') == 2
    finally:
        result.cleanup()
    assert mirrors and not any(folder.exists() for folder in mirrors)  # the polls' copies go with the call

@pytest.mark.slow
def test_a_200_mb_file_streams_to_disk_with_progress(box):
    seen = []
    box.progress = lambda name, done, total: seen.append((name, done, total))
    script = textwrap.dedent("""
        import hashlib, os, pathlib, sys
        block, digest = os.urandom(1 << 20), hashlib.sha256()
        with open(pathlib.Path(sys.argv[1]) / "trace.json", "wb") as handle:
            for i in range(200):
                chunk = block[i:] + block[:i]
                handle.write(chunk)
                digest.update(chunk)
        print(digest.hexdigest())
    """)
    started = time.monotonic()
    result = box.run([PY, "-c", script, OUT_DIR], timeout_s=300)
    try:
        assert result.rc == 0 and result.error is None, result
        path = result.files["trace.json"]
        assert path.stat().st_size == 200 << 20
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
        assert digest.hexdigest() == result.stdout.strip()
        assert seen[-1] == ("trace.json", 200 << 20, 200 << 20) and len(seen) >= 100  # streamed, 1 MiB at a time
        print(f"200 MiB made and fetched in {time.monotonic() - started:.1f} s")
    finally:
        result.cleanup()


def test_a_hung_command_is_killed_by_its_timeout_with_its_children(box):
    result = box.run([PY, "-c", SLEEPER], timeout_s=2)
    assert result.timed_out and result.rc == -signal.SIGKILL and result.error is None
    assert 2 <= result.duration_s < 15
    assert gone_within(int(result.stdout.split()[0]), 5)  # the sleep, a child of the command, is gone too


def test_the_guard_ends_the_command_when_the_agent_dies(sshd, tmp_path):
    """kill -9 of the agent leaves no handler to run: the remote guard sees its stdin close."""
    agent = textwrap.dedent(f"""
        import sys
        sys.path[:0] = {sys.path!r}
        from pathlib import Path
        from agent.box.ssh import SSHBox
        from agent.box.ssh_client import BoxLost, BoxUnreachable, HostKeyPolicy
        box = SSHBox("ssh://{harness.FULL_USER}@127.0.0.1:{sshd.port}", "python3",
                     policy=HostKeyPolicy(known_hosts=Path({str(sshd.known_hosts)!r})), identity=Path({str(sshd.user_key)!r}))
        box.run(["sh", "-c", "echo $$ > " + sys.argv[1] + "; exec sleep 300"], timeout_s=600)
    """)
    pidfile = f"/tmp/pi-box-agent-{os.getpid()}"
    # its connection's private directory goes in a short folder of the test's own, which the test removes: nothing
    # is left to remove it after a kill -9 (tmp_path's own path can be too long for the control socket's)
    private = tempfile.mkdtemp(prefix="pi-t-", dir="/tmp")
    proc = subprocess.Popen([sys.executable, "-c", agent, pidfile], env={**os.environ, "TMPDIR": private})
    try:
        deadline = time.monotonic() + 30
        while not (Path(pidfile).exists() and Path(pidfile).read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = int(Path(pidfile).read_text())
        assert alive(pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert gone_within(pid, 10)
        Path(pidfile).unlink()
    finally:
        shutil.rmtree(private, ignore_errors=True)


@pytest.mark.slow
def test_the_server_killed_mid_call_fails_that_call_cleanly_then_the_box_reconnects(box, sshd):
    holder = {}

    def call():
        try:
            box.run([PY, "-c", SLEEPER], timeout_s=120)
        except BoxLost as exc:
            holder["lost"] = exc

    worker = threading.Thread(target=call)
    worker.start()
    time.sleep(3)  # connected, tree uploaded, command running
    sshd.kill()
    worker.join(timeout=60)
    lost = holder["lost"]
    assert str(lost).startswith("the connection to the box went during the call"), lost
    assert lost.partial.rc is None and lost.partial.error == str(lost) and lost.partial.duration_s < 30
    assert gone_within(int(lost.partial.stdout.split()[0]), 10)  # the guard saw the connection go, killed the group
    with pytest.raises(BoxUnreachable, match="connection refused"):
        box.run(["true"], timeout_s=30)
    sshd.start()
    assert box.run(["true"], timeout_s=30).rc == 0  # the next call reconnects


def test_host_keys_are_checked(sshd, tmp_path):
    unknown = tmp_path / "known_hosts"
    unknown.write_text("")
    with pytest.raises(BoxUnreachable, match=f"host key of 127.0.0.1:{sshd.port} is not known: refused"):
        make_box(sshd, tmp=tmp_path, known_hosts=unknown).run(["true"], timeout_s=30)
    accepted = make_box(sshd, tmp=tmp_path, known_hosts=unknown, accept_new=True)
    assert accepted.run(["true"], timeout_s=30).rc == 0 and unknown.read_text().strip()  # remembered (hashed)
    strict = make_box(sshd, tmp=tmp_path, known_hosts=unknown)
    assert strict.run(["true"], timeout_s=30).rc == 0
    pinned = make_box(sshd, tmp=tmp_path, known_hosts=tmp_path / "none", fingerprint=sshd.fingerprint())
    assert pinned.run(["true"], timeout_s=30).rc == 0
    wrong = "SHA256:" + "A" * 43
    with pytest.raises(BoxUnreachable, match="no host key with fingerprint"):
        make_box(sshd, tmp=tmp_path, fingerprint=wrong).run(["true"], timeout_s=30)


def test_a_changed_host_key_is_refused(sshd, tmp_path):
    other = harness.SSHD(Path(tempfile.mkdtemp(prefix="pi-sshd-")), sshd.users).start()
    other.record_host_key()
    before = make_box(other, tmp=tmp_path)
    assert before.run(["true"], timeout_s=30).rc == 0
    other.new_host_key()  # the known_hosts entry stays the old key
    try:
        with pytest.raises(BoxUnreachable, match="has changed since it was recorded: refused"):
            make_box(other, tmp=tmp_path).run(["true"], timeout_s=30)
        with pytest.raises(BoxUnreachable, match="has changed"):  # accept-new takes a new key, never a changed one
            make_box(other, tmp=tmp_path, known_hosts=other.known_hosts, accept_new=True).run(["true"], timeout_s=30)
    finally:
        other.kill()
        shutil.rmtree(other.root, ignore_errors=True)


def test_what_a_host_lacks_is_data(sshd, tmp_path):
    bare = make_box(sshd, user=harness.BARE_USER, tmp=tmp_path)
    rows = {row["what"]: row for row in bare.missing()}
    assert {"torch", "triton", "numpy", "pydantic", "sglang", "GPU"} <= set(rows)
    assert rows["torch"]["have"] is None and rows["torch"]["need"].startswith(">=")
    full = make_box(sshd, tmp=tmp_path)
    assert [row["what"] for row in full.missing()] == ["GPU"]  # this machine has none


def test_a_password_never_reaches_a_command_line():
    with pytest.raises(ValueError, match="password") as refused:
        SSHBox("ssh://user:secret@127.0.0.1:22")
    assert "secret" not in str(refused.value) and "user:***@" in str(refused.value)
    for bad in ("ssh://-oProxyCommand=x@host", "ssh://host/path", "http://host", "ssh://us er@host"):
        with pytest.raises(ValueError):
            SSHBox(bad)


def test_progress_shows_on_a_terminal_for_large_files_only():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    show = ssh.terminal_progress(screen, at_least=4 << 20)
    show("small.json", 1000, 1000)
    for done in range(1 << 20, 9 << 20, 1 << 20):
        show("trace.json.gz", done, 8 << 20)
    assert "small.json" not in screen.getvalue()
    assert screen.getvalue().endswith("\r  fetching trace.json.gz: 8.0 / 8.0 MiB\n")
    quiet = io.StringIO()  # not a terminal: nothing
    ssh.terminal_progress(quiet, at_least=0)("trace.json.gz", 1, 1)
    assert quiet.getvalue() == ""


def test_version_requirements():
    assert ssh.satisfies("2.13.0+cpu", ">=2.9") and not ssh.satisfies("2.8.1", ">=2.9")
    assert ssh.satisfies("0.5.23", "==0.5.23") and not ssh.satisfies("0.5.22", "==0.5.23")
    assert ssh.satisfies("3.9.0", ">=3.5,<4") and not ssh.satisfies("4.0", ">=3.5,<4")
    facts = {"python": [3, 10, 12], "distributions": {"torch": "2.13.0", "triton": None}, "nvidia_smi": False, "gpus": []}
    rows = {row["what"]: row for row in ssh.missing_from(facts, {"torch": ">=2.9", "triton": ">=3.5"})}
    assert set(rows) == {"python", "triton", "GPU"} and rows["python"]["have"] == "3.10.12"


def test_the_ssh_control_socket_fits_a_unix_socket_path_under_a_long_tmpdir(tmp_path, monkeypatch):
    """ssh binds the control socket under its path plus a random suffix; a TMPDIR of about 90 characters (a
    deep pytest temp dir, a macOS $TMPDIR) left no room, and the connection failed ("too long for Unix domain
    socket"). The connection's private directory goes under /tmp then; under a short TMPDIR it stays there."""
    from agent.box import ssh_client

    short = Path(tempfile.mkdtemp(prefix="pi-t-", dir="/tmp"))  # tmp_path itself may be too long (under xdist it is)
    try:
        for tmpdir, expected_parent in ((tmp_path / ("d" * 90), Path("/tmp")), (short, short)):
            tmpdir.mkdir(exist_ok=True)
            monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
            connection = ssh_client.Connection(ssh_client.SSHTarget.parse("ssh://someone@127.0.0.1:22"))
            try:
                assert connection.private.parent == expected_parent, connection.private
                assert len(str(connection.control_path)) + ssh_client.SSH_SOCKET_SUFFIX <= ssh_client.SOCKET_PATH_MAX
            finally:
                shutil.rmtree(connection.private, ignore_errors=True)
    finally:
        shutil.rmtree(short, ignore_errors=True)
