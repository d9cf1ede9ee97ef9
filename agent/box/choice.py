"""Which box a command measures: ``--box local`` or ``--box ssh://[user@]host[:port]``, with the SSH
box's host-key and key options; and the two ends a survey records (where the agent runs, the box).

A password is never an option: keys come from the agent or ``~/.ssh`` (or ``--box-identity``).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from agent.box.interface import Box


class BoxChoiceError(ValueError):
    """A --box option that names no box this agent can reach; one line."""


def add_box_arguments(parser: argparse.ArgumentParser) -> None:
    # no default here: a resume tells "not given" (the run's own box) from "given" (agent.cli)
    parser.add_argument("--box", help="the machine to measure: local, or ssh://[user@]host[:port] (default: local; "
                        "a resume: the run's)")
    parser.add_argument("--box-python", help="Python interpreter on the box (default: this one; on an SSH box, "
                        "python3 on its PATH)")
    parser.add_argument("--box-known-hosts", metavar="FILE", help="SSH box: the known_hosts file its host key is "
                        "checked against (default: ssh's own)")
    parser.add_argument("--box-insecure-accept-new", action="store_true", help="SSH box: accept and remember a host "
                        "key never seen before (first contact; a changed key is still refused)")
    parser.add_argument("--box-fingerprint", metavar="SHA256:...", help="SSH box: accept only the host key with this "
                        "fingerprint (as ssh-keygen -l prints it)")
    parser.add_argument("--box-identity", metavar="FILE", help="SSH box: the private key to log in with (default: "
                        "the agent's keys and ~/.ssh)")


def box_from_args(args: argparse.Namespace) -> Box:
    """The box the options name (no --box: local); BoxChoiceError when they name none."""
    if args.box in (None, "local"):
        ssh_only = [name for name in ("box_known_hosts", "box_fingerprint", "box_identity") if getattr(args, name, None)]
        if ssh_only or getattr(args, "box_insecure_accept_new", False):
            raise BoxChoiceError(f"--{(ssh_only or ['box_insecure_accept_new'])[0].replace('_', '-')} applies to an "
                                 "SSH box only (--box ssh://...)")
        from agent.box.local import LocalBox

        return LocalBox(python=args.box_python)
    if not args.box.startswith("ssh://"):
        raise BoxChoiceError(f"--box {args.box}: expected local or ssh://[user@]host[:port]")
    from agent.box.ssh import SSHBox
    from agent.box.ssh_client import HostKeyPolicy

    policy = HostKeyPolicy(known_hosts=_path(args.box_known_hosts), accept_new=args.box_insecure_accept_new,
                           fingerprint=args.box_fingerprint)
    try:
        return SSHBox(args.box, args.box_python, policy=policy, identity=_path(args.box_identity))
    except ValueError as exc:
        raise BoxChoiceError(f"--box {exc}") from None


def _path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None


def agent_end() -> dict:
    """Where the agent runs: the survey's other end (the box's own facts come from the box)."""
    return {"host": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0]}


def ends_rows(agent: dict | None, box: dict | None) -> list[list[str]]:
    """The survey table's rows for both ends: where the agent ran, and how it reached the box (``box``:
    the box's description, with the host name its survey gave)."""
    rows = []
    if agent:
        rows.append(["agent runs on", f"{agent['host']} ({agent['platform']}, python {agent['python']})", "-"])
    if box:
        reached = ("this machine" if box.get("kind") == "local" else
                   f"over SSH as {box.get('target')}" if box.get("kind") == "ssh" else str(box.get("kind")))
        host = f"host {box['host']}, " if box.get("host") else ""
        rows.append(["box reached", f"{reached} ({host}python {box.get('python')})", "-"])
    return rows
