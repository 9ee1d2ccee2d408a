"""The answers that need a reachable head, on stdout with nothing on stderr (issue 24 item 3):
`history` and `status` as a person runs them, piped. Cheap: two reads, whatever the lab serves."""

from __future__ import annotations

import os
import subprocess

import pytest
from labcli import run as run_cli

pytestmark = pytest.mark.lab

ENV = {k: v for k, v in os.environ.items() if k not in ("SPARKCTL_INVENTORY", "COLUMNS")}
ENV["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8,10.231.0.0/16"


def run(*args: str) -> subprocess.CompletedProcess:
    return run_cli(list(args), timeout=120, env=ENV)


def test_history_and_status_answer_on_stdout(lab):
    history = run("history", "-i", str(lab.INVENTORY_PATH))
    assert history.returncode == 0, history.stderr
    assert history.stderr == "" and history.stdout.startswith("cluster lab: last good config ")
    status = run("status", "-i", str(lab.INVENTORY_PATH), "--sample", "0.2")
    assert status.returncode in (0, 1), status.stderr  # 1 when the lab is not serving right now
    assert status.stderr == "" and status.stdout.startswith("cluster lab: inventory config ")
    assert "runtime http://10.231.0.11:8888/gateway/engine: " in status.stdout  # the engine, through the gateway
