"""The SSH box's test server for the investigation tests (tests/test_box_ssh_investigate.py,
tests/test_box_ssh_sglang.py): a real sshd on loopback (scripts/sshd_harness.py), module-scoped in each file
that imports it, so that each file (which pytest-xdist runs on one worker) has a server of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import sshd_harness as harness  # noqa: E402

NEEDS_SSHD = pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists() or not shutil.which("setfacl"),
                                reason="needs root, openssh-server and acl (make setup-ssh-tests)")

@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    # the servers of one test session share their box users' kept results (the first one starts them empty)
    from conftest import _shared_dir

    with harness.running(session=str(_shared_dir(tmp_path_factory))) as server:
        # the user key is offered by an agent, as a user's would be: the command line names no key
        sock = server.root / "agent.sock"
        keys = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["ssh-add", str(server.user_key)], env={**os.environ, "SSH_AUTH_SOCK": str(sock)}, check=True,
                       capture_output=True)
        server.agent_env = {"SSH_AUTH_SOCK": str(sock)}
        try:
            yield server
        finally:
            keys.kill()
            keys.wait()


def box_args(sshd, user=harness.FULL_USER) -> list[str]:
    return ["--box", f"ssh://{user}@127.0.0.1:{sshd.port}", "--box-known-hosts", str(sshd.known_hosts)]
