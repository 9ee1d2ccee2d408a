"""`sparkctl status --watch` with an inventory, as a person runs it in a terminal: frames keep
coming at the interval over one SSH session per host for the whole watch (the head's sshd sees a
single connection from it, not a new one per frame), each frame shows every host's containers,
and `q` ends it with exit 0."""

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

import pytest

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16", "TERM": "xterm-256color"}
for name in ("SPARKCTL_INVENTORY", "COLUMNS", "LINES", "NO_COLOR"):
    ENV.pop(name, None)
TITLE = b"sparkctl status --watch"


def test_watch_frames_keep_coming_and_q_quits(lab):
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "sparkctl", "status", "--watch", "--interval", "1", "-i",
                             str(lab.INVENTORY_PATH)], stdin=slave, stdout=slave, stderr=slave, env=ENV, cwd=ROOT,
                            start_new_session=True)  # fmt: skip
    os.close(slave)
    out, stamps = b"", []

    def read(seconds: float) -> None:
        nonlocal out
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return
                out += chunk
                stamps.extend([time.monotonic()] * chunk.count(TITLE))

    try:
        deadline = time.monotonic() + 60
        while len(stamps) < 1 and time.monotonic() < deadline and proc.poll() is None:
            read(0.5)
        assert stamps, f"no frame within 60 s: {out[-2000:]!r}"
        sessions: set[str] = set()  # the watch's SSH connections to the head, by client address:port
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            read(0.3)
            r = lab.host_exec("head", ["ss", "-Htn", "state", "established", "( sport = :22 )"])
            sessions |= {line.split()[-1] for line in r.stdout.splitlines() if line.strip()}
        frames_after_first = len(stamps) - 1
        os.write(master, b"q")
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = out.decode(errors="replace")
    assert frames_after_first >= 3, f"{frames_after_first} frame(s) in 8 s after the first"
    assert len(sessions) == 1, f"SSH connections to the head during the watch: {sorted(sessions)}"
    assert "sparkctl-head" in text and "sparkctl-worker" in text  # every frame lists the hosts' containers
    assert rc == 0
