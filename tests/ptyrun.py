"""Run sparkctl on a pseudo-terminal of a given size and read everything it wrote (the pty tests of
tests/unit and tests/lab: a tmux pane is what an operator watches `up` or reads `status` in)."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path


def run_in_pty(*args: str, columns: int, rows: int, env: dict, cwd: Path | str, timeout: float = 600) -> tuple[int, bytes]:
    """`python -m sparkctl ARGS` with stdin/stdout/stderr on a COLUMNS x ROWS terminal: its exit
    code and all it wrote."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "sparkctl", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=env, cwd=cwd, start_new_session=True)  # fmt: skip
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every end of the terminal's other side is closed
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
    finally:
        os.close(master)
    return proc.wait(timeout=30), out
