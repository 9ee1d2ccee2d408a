"""Running the real CLI against the lab the way a script would (`sparkctl ... --json`).

`sparkctl()` runs it in the test's process (tests/clirun.py: its argv, ENV, stdout, stderr and exit
code as a process of its own would have them; its deadline a TimeoutExpired, as subprocess.run's);
from a thread other than the main one (signal handlers are the main thread's) a process. `start()`
is a process (a test kills it or acts while it runs), and so is `lab_cli()`: `sparkctl lab` starts
the lab's daemons, which must not be children of the test session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import clirun
import yaml

from sparkctl_lab.paths import LAB_DIR
from sparkctl_lab.topology import HOSTS  # this lab's (SPARKCTL_LAB_INSTANCE: a second lab's addresses differ)

ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}
HEAD_IP = HOSTS["head"].mgmt_ip
URL = f"http://{HEAD_IP}:8888"  # the lab head's runtime


def sparkctl(*args: str, rc: int | None = 0) -> dict:
    """One command's --json document; asserts its exit code (unless rc is None) and no traceback."""
    p = run([*args, "--json"])
    assert "Traceback" not in p.stderr, p.stderr
    doc = json.loads(p.stdout) if p.stdout.strip() else {}
    if rc is not None:
        assert p.returncode == rc, (p.returncode, json.dumps(doc, indent=1)[-4000:], p.stderr[-2000:])
    return doc


def run(args: list[str], timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """One command as a person runs it: its exit code, stdout and stderr (the human output), in
    `env` (ENV when None)."""
    env = ENV if env is None else env
    if threading.current_thread() is threading.main_thread():
        return clirun.sparkctl(args, env=env, timeout=timeout)
    return subprocess.run([sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, env=env, timeout=timeout)


BACKGROUND: list[subprocess.Popen] = []  # started by start(); end_background() ends what a test left


def start(*args: str) -> subprocess.Popen:
    """The same, in the background (to kill it, or to act while it runs)."""
    p = subprocess.Popen([sys.executable, "-m", "sparkctl", *args, "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
    BACKGROUND.append(p)
    return p


def end_background() -> list[str]:
    """Kill every background run a test left running (a failed assertion skips its wait): left alive
    it holds the cluster lock and fails the tests after it. Returns what it had to kill."""
    killed = []
    while BACKGROUND:
        p = BACKGROUND.pop()
        if p.poll() is None:
            killed.append(" ".join(p.args[3:6]))
            p.kill()
            p.wait(30)
        for stream in (p.stdout, p.stderr):
            if stream:
                stream.close()
    return killed


def variant(inv: Path, tmp_path: Path, name: str, **fields) -> Path:
    """The inventory with `section__key=value` fields set (runtime__served_model_name=...), as NAME.yaml."""
    doc = yaml.safe_load(inv.read_text())
    for k, v in fields.items():
        *path, last = k.split("__")
        node = doc
        for p in path:
            node = node.setdefault(p, {})
        node[last] = v
    out = tmp_path / f"{name}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def fresh_batched_tokens() -> int:
    """A scheduler size (runtime.max_num_batched_tokens) this lab's cluster has never served, so a
    variant with it starts cold. One counter per lab in LAB_DIR, shared by every module that asks:
    it lives and ends with the hosts' state (reload history, compile cache) under the same folder.
    (Each module deriving its own from the clock collided: CI saw a 'cold' reload planned warm.)"""
    import fcntl

    with open(LAB_DIR / "test-fresh-batched-tokens", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = int(f.read().strip() or 0) + 1
        f.seek(0)
        f.truncate()
        f.write(str(n))
    return 16384 + 8 * n


def lab_cli(*args: str) -> dict:
    """`sparkctl lab ARGS --json`'s document; asserts exit 0 and no traceback."""
    p = subprocess.run([sys.executable, "-m", "sparkctl", "lab", *args, "--json"], capture_output=True, text=True,
                       env=ENV, timeout=600)  # fmt: skip
    assert p.returncode == 0 and "Traceback" not in p.stderr, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    return json.loads(p.stdout)


def door_states(lab) -> dict[str, str]:
    """Each member's state at the fleet's front door (vllm-router's own view: its workers, their health)."""
    from sparkctl.fleet import router_admin
    from sparkctl.fleet.model import load_fleet

    return {n: m["state"] for n, m in router_admin.status(load_fleet(lab.FLEET_PATH))["members"].items()}


def wait_door(lab, until: Callable[[dict[str, str]], bool], timeout: float) -> dict[str, str]:
    """The door's member states once `until` holds for them, or the last seen after `timeout` s
    (the caller's assertion says what it expected)."""
    t_end = time.monotonic() + timeout
    while not until(st := door_states(lab)) and time.monotonic() < t_end:
        time.sleep(0.5)
    return st


def wait_passing(lab, timeout: float = 60) -> dict[str, str]:
    return wait_door(lab, lambda st: set(st.values()) == {"passing"}, timeout)
