"""One SSH connection to a box, through the system OpenSSH client.

Why OpenSSH and not a Python SSH library: the user's own ``ssh`` already knows how to reach the host
(``~/.ssh/config``, ProxyJump through a login node, certificates, the agent, hardware keys,
known_hosts in any of its forms), and it is what the host's administrators support; a library would
re-implement a subset of that and need its own dependency tree. ControlMaster gives one
authenticated connection for the whole run: each command is one more session on it, a few
milliseconds instead of a handshake.

Security: host keys are checked (``StrictHostKeyChecking=yes``) unless the user asks to accept a new
key on first contact or pins a fingerprint; ``BatchMode=yes``, so ssh never asks for a password
(keys come from the agent or ``~/.ssh``); a remote command is always one string made by
``shlex.join`` from an argument list.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit


class BoxUnreachable(Exception):
    """The box cannot be reached or refuses us; the message is one line that says why."""


class BoxLost(BoxUnreachable):
    """The connection went during a call: the call has no result, only ``partial`` (what it printed
    until then, a CommandResult with ``error`` set). Raised, not returned: a step must not go on
    with a box that is gone, and the run stops where a resume re-runs the call."""

    def __init__(self, message: str, partial):
        super().__init__(message)
        self.partial = partial


# A unix socket's path holds at most 107 bytes, and ssh binds the control socket under its name plus a random
# suffix of 17 characters before renaming it: a long TMPDIR (a test's, a macOS $TMPDIR) would leave no room.
SOCKET_PATH_MAX = 107
SSH_SOCKET_SUFFIX = 17


def _short_private_dir() -> Path:
    """A private directory for the connection's control socket: under TMPDIR when the socket's path fits there,
    else under /tmp."""
    private = Path(tempfile.mkdtemp(prefix="pi-ssh-"))
    if len(str(private / "cm")) + SSH_SOCKET_SUFFIX > SOCKET_PATH_MAX:
        shutil.rmtree(private, ignore_errors=True)
        private = Path(tempfile.mkdtemp(prefix="pi-ssh-", dir="/tmp"))
    return private


@dataclass(frozen=True)
class SSHTarget:
    user: str | None
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> "SSHTarget":
        """``ssh://[user@]host[:port]`` (an IPv6 host in brackets). Anything else is refused."""
        parts = urlsplit(url)
        if parts.password is not None:  # refused, and never repeated: the error line shows it masked
            masked = url.replace(f":{parts.password}@", ":***@", 1)
            raise ValueError(f"{masked}: a password does not belong in the box's address (use a key: the agent or ~/.ssh)")
        if parts.scheme != "ssh" or not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"{url}: expected ssh://[user@]host[:port]")
        try:
            port = parts.port or 22
        except ValueError:
            raise ValueError(f"{url}: the port is not a number from 1 to 65535") from None
        user = unquote(parts.username) if parts.username else None
        for value in (user or "", parts.hostname):
            if value.startswith("-") or re.search(r"[\s@/]", value):  # never an option or a second address to ssh
                raise ValueError(f"{url}: {value!r} is not a user or host name")
        return cls(user, parts.hostname, port)

    @property
    def address(self) -> str:
        """host:port (an IPv6 host in brackets): what a host key belongs to."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.address}"


@dataclass(frozen=True)
class HostKeyPolicy:
    """How the host's key is checked: against ``known_hosts`` (default: ssh's own files), optionally
    accepting and remembering a key never seen before, or against one pinned fingerprint."""

    known_hosts: Path | None = None
    accept_new: bool = False
    fingerprint: str | None = None  # "SHA256:..." as ssh-keygen -l prints it


def classify(stderr: str, target: SSHTarget) -> str:
    """ssh's complaint as one line a person can act on."""
    text = stderr or ""
    where = str(target)
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return (f"the host key of {target.address} has changed since it was recorded: refused (someone may be impersonating "
                f"the host; if the change is expected, remove the old key with ssh-keygen -R)")
    if "Host key verification failed" in text or "No ED25519 host key is known" in text or "host key is known" in text:
        return (f"the host key of {target.address} is not known: refused (add it to known_hosts, or accept it on first "
                f"contact with --box-insecure-accept-new, or pin it with --box-fingerprint)")
    if "Permission denied" in text:
        return f"{where} refused every key offered (from the agent or ~/.ssh): permission denied"
    if "Connection refused" in text:
        return f"{where}: connection refused (no SSH server listens there)"
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("Warning: Permanently")]
    return f"{where}: {lines[-1] if lines else 'the SSH connection closed without a word (the server or the network went)'}"


class Connection:
    """A ControlMaster connection and the ``ssh`` command lines that use it."""

    def __init__(self, target: SSHTarget, policy: HostKeyPolicy | None = None, identity: Path | None = None,
                 ssh_config: Path | None = None, connect_timeout_s: int = 15):
        self.target = target
        self.policy = policy or HostKeyPolicy()
        self.identity = identity
        self.ssh_config = ssh_config
        self.connect_timeout_s = connect_timeout_s
        self.private = _short_private_dir()
        self.control_path = self.private / "cm"
        self._pinned: Path | None = None

    # -- command lines --------------------------------------------------------------------------

    def options(self) -> list[str]:
        opts = ["-o", "BatchMode=yes", "-o", f"ControlPath={self.control_path}", "-o", "ServerAliveInterval=5",
                "-o", "ServerAliveCountMax=3", "-o", f"ConnectTimeout={self.connect_timeout_s}",
                "-o", "LogLevel=ERROR", "-p", str(self.target.port)]
        if self.ssh_config is not None:
            opts = ["-F", str(self.ssh_config)] + opts
        known = self._pinned or self.policy.known_hosts
        if known is not None:
            opts += ["-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null"]
        strict = "accept-new" if self.policy.accept_new and self._pinned is None else "yes"
        opts += ["-o", f"StrictHostKeyChecking={strict}"]
        if self.identity is not None:
            opts += ["-i", str(self.identity), "-o", "IdentitiesOnly=yes"]
        if self.target.user:
            opts += ["-l", self.target.user]
        return opts

    def command(self, remote_argv: list[str]) -> list[str]:
        """The local argv that runs ``remote_argv`` on the box over the master connection. The remote
        shell gets one string, made by shlex.join: every argument arrives as itself."""
        return ["ssh", *self.options(), "-o", "ControlMaster=no", "-T", "--", self.target.host, shlex.join(remote_argv)]

    # -- the master -----------------------------------------------------------------------------

    def alive(self) -> bool:
        if not self.control_path.exists():
            return False
        check = subprocess.run(["ssh", *self.options(), "-O", "check", "--", self.target.host],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        return check.returncode == 0

    def connect(self) -> None:
        """Open the master connection (again, after a drop). BoxUnreachable with the reason otherwise."""
        if shutil.which("ssh") is None:
            raise BoxUnreachable("the OpenSSH client (ssh) is not installed here")
        if self.alive():
            return
        if self.policy.fingerprint and self._pinned is None:
            self._pinned = self._pin(self.policy.fingerprint)
        log = self.private / "master.log"
        with open(log, "wb") as err:
            # -f: ssh goes to the background once authenticated, so the return code says whether it is
            # in; ControlPersist ends a master that an agent killed with -9 left behind
            started = subprocess.run(["ssh", *self.options(), "-M", "-N", "-f", "-o", "ControlMaster=yes",
                                      "-o", "ControlPersist=60", "--", self.target.host],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                     timeout=self.connect_timeout_s + 30)
        if started.returncode != 0 or not self.alive():
            raise BoxUnreachable(classify(log.read_text(errors="replace"), self.target))

    def _pin(self, fingerprint: str) -> Path:
        """A private known_hosts holding the host's key whose fingerprint is ``fingerprint``: then the
        connection itself checks strictly against that key (a scan alone proves nothing)."""
        if not re.fullmatch(r"SHA256:[A-Za-z0-9+/]{43}=?", fingerprint):
            raise BoxUnreachable(f"--box-fingerprint {fingerprint}: expected SHA256:... as ssh-keygen -l prints it")
        scan = subprocess.run(["ssh-keyscan", "-p", str(self.target.port), "-T", str(self.connect_timeout_s),
                               self.target.host], capture_output=True, text=True, timeout=self.connect_timeout_s + 30)
        for line in scan.stdout.splitlines():
            if not line or line.startswith("#"):
                continue
            listed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", "-"], input=line, capture_output=True,
                                    text=True, timeout=30)
            fields = listed.stdout.split()
            if listed.returncode == 0 and len(fields) > 1 and fields[1].rstrip("=") == fingerprint.rstrip("="):
                pinned = self.private / "known_hosts"
                pinned.write_text(line + "\n")
                return pinned
        raise BoxUnreachable(f"{self.target}: no host key with fingerprint {fingerprint}: refused")

    def close(self) -> None:
        if self.control_path.exists():
            subprocess.run(["ssh", *self.options(), "-O", "exit", "--", self.target.host], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30)
        shutil.rmtree(self.private, ignore_errors=True)

    def __del__(self):  # pragma: no cover - best effort: an unclosed master ends itself (ControlPersist)
        try:
            if os.path.isdir(self.private):
                self.close()
        except Exception:
            pass
