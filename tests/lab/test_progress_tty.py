"""`sparkctl up` as a person sees it in an 80-column terminal: run under a pseudo-terminal, its
output replayed into a terminal emulator (pyte). No line is wider than the terminal (the terminal
never wraps one), and the final screen shows every host with the last step it took part in.

`down` then `up`: both change the runtime, so the live block really shows phases (drain, start,
health) while the run goes on; which step is each host's last comes from the command's own `--json`
recap. The lab ends serving, as it started.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import ptyrun
import pyte
import pytest
from wcwidth import wcswidth

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
COLUMNS, ROWS = 80, 40
ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16", "TERM": "xterm-256color"}
for name in ("SPARKCTL_INVENTORY", "COLUMNS", "LINES", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
    ENV.pop(name, None)


class WrapWatchingScreen(pyte.Screen):
    """A terminal screen that notes every line the terminal had to wrap (text past the last column)."""

    def __init__(self, columns: int, lines: int):
        super().__init__(columns, lines)
        self.wrapped: list[str] = []

    def draw(self, data: str) -> None:
        if self.cursor.x + max(wcswidth(data), 0) > self.columns:
            self.wrapped.append(data)
        super().draw(data)


def run_in_pty(*args: str, timeout: float = 600) -> tuple[int, bytes]:
    """Run sparkctl with stdin/stdout/stderr on a pseudo-terminal of COLUMNS x ROWS; all it wrote."""
    return ptyrun.run_in_pty(*args, columns=COLUMNS, rows=ROWS, env=ENV, cwd=ROOT, timeout=timeout)


def check_in_terminal(command: str, inventory: str) -> None:
    """Run `sparkctl COMMAND -i INVENTORY` in the terminal: nothing wraps, a live phase was shown,
    and the final screen shows each host's last step."""
    rc, raw = run_in_pty(command, "-i", inventory)
    assert rc == 0, raw.decode(errors="replace")[-3000:]

    screen = WrapWatchingScreen(COLUMNS, ROWS)
    pyte.ByteStream(screen).feed(raw)
    assert screen.wrapped == [], f"the terminal wrapped: {screen.wrapped[:3]}"
    # the same from the raw bytes: every line written between cursor moves fits the width
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]", "", raw.decode())
    widths = {line: wcswidth(line) for line in re.split(r"[\r\n]", text) if line}
    assert max(widths.values()) <= COLUMNS, [line for line, w in widths.items() if w > COLUMNS][:3]
    # it was live: the step that changes the runtime showed its time and phase while it ran
    step = {"down": "stop", "up": "runtime"}[command]
    assert re.search(rf"^\S \w+ +{step} +\d+s \S", text, re.M), f"no live phase line for {command}'s {step} step"

    # each host's last step that ran, from the command's own JSON recap (run again: a no-op, same
    # hosts and steps)
    p = subprocess.run(
        [sys.executable, "-m", "sparkctl", command, "-i", inventory, "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    last: dict[str, str] = {}
    for r in json.loads(p.stdout)["results"]:
        if r["status"] != "skipped":
            last[r["host"]] = r["step"]
    from sparkctl.inventory.loader import load_inventory

    assert set(last) == set(load_inventory(Path(inventory)).hosts)
    final = [line.rstrip() for line in screen.display]
    for host, step in last.items():
        assert any(re.match(rf"^[✓✗] {host} +{step} +(ok|changed) ", line) for line in final), (
            f"{command}: {host}'s last step {step} is not on the final screen:\n" + "\n".join(final)
        )


def test_down_and_up_fit_an_80_column_terminal_and_end_on_each_hosts_last_step(lab):
    inventory = str(lab.INVENTORY_PATH)
    try:
        check_in_terminal("down", inventory)
    finally:
        check_in_terminal("up", inventory)  # the lab serves again, whatever happened to down
