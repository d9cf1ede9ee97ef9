"""The keeper of one server's process group: ``python guard.py FD GRACE_S -- SERVER ARGV...``

Started by server.py as the leader of a new session, it starts the server in that group and waits. It holds the
read end (FD) of a pipe whose only write end is in the adapter: when the adapter dies, by any signal,
SIGKILL included, the pipe reads end-of-file and the guard stops the whole group (SIGTERM, then SIGKILL
after GRACE_S), so no server outlives the tool that started it. SIGTERM to the group (the adapter's own
stop) reaches the server and is ignored by the guard, which exits with the server's status when it ends.
Standard library only: it runs by path, before anything of the project is importable.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys


def _stop_group(server: subprocess.Popen, grace_s: float) -> None:
    os.killpg(os.getpgrp(), signal.SIGTERM)
    try:
        server.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the guard goes with the rest


def main(argv: list[str]) -> int:
    fd, grace_s, sep, command = int(argv[0]), float(argv[1]), argv[2], argv[3:]
    if sep != "--" or not command:
        print("usage: guard.py FD GRACE_S -- COMMAND...", file=sys.stderr)
        return 2
    # A handler, not SIG_IGN: an ignored signal would stay ignored in the server across exec.
    signal.signal(signal.SIGTERM, lambda *_: None)
    server = subprocess.Popen(command)
    while server.poll() is None:
        readable, _, _ = select.select([fd], [], [], 0.2)
        if readable and not os.read(fd, 1):  # end of file: the adapter is gone
            _stop_group(server, grace_s)
    code = server.returncode
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
