"""What every lab benchmark shares: where the lab lives, its test lock, the CLI with --json.

A benchmark measures the lab only while no test session uses it, so each takes the lab test lock
(tests/conftest.py's) for its whole run; and it needs root, as the lab's hosts do.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys

from sparkctl_lab.paths import LAB_DIR, PREFIX  # SPARKCTL_LAB_INSTANCE: a second lab is its own

INVENTORY = LAB_DIR / "inventory.yaml"
LAB_SESSION_LOCK = f"/run/lock/sparkctl-{PREFIX}-tests.lock"  # tests/conftest.py's, per lab: lab users take turns
ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}
SPARKCTL = [sys.executable, "-m", "sparkctl"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def hold_lab():
    """The lab test lock, held until this process exits (the open file is returned and kept)."""
    os.makedirs(os.path.dirname(LAB_SESSION_LOCK), exist_ok=True)
    f = open(LAB_SESSION_LOCK, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log(f"[waiting for the lab: a test session holds {LAB_SESSION_LOCK}]")
        fcntl.flock(f, fcntl.LOCK_EX)
    return f


def require_lab():
    """Exit with what to do unless this runs as root with the lab up; then hold the lab (keep the result)."""
    if os.geteuid() != 0:
        sys.exit("needs root (the lab's test lock and hosts): run with sudo")
    if not INVENTORY.exists():
        sys.exit("the lab is not up: run `sparkctl lab up` first")
    return hold_lab()


def sparkctl(*args: str) -> tuple[int, dict]:
    """`sparkctl ARGS --json`: its exit code and its one JSON document."""
    p = subprocess.run([*SPARKCTL, *args, "--json"], capture_output=True, text=True, env=ENV, timeout=1800)
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        sys.exit(f"sparkctl {' '.join(args)} gave no JSON (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.returncode, doc


def converge() -> None:
    """The lab converged on its own inventory (`sparkctl up`), or exit saying why not."""
    log("converging the lab on its own inventory (sparkctl up) ...")
    rc, doc = sparkctl("up", "-i", str(INVENTORY))
    if rc != 0:
        sys.exit(f"sparkctl up failed: {json.dumps(doc)[-2000:]}")
