"""docs/first-deployment.md followed on the lab, so the guide cannot rot (issue 40).

The guide's command blocks run in order (tests/guide_blocks.py: the marker before each says where:
the control machine, each Spark, or not run with the reason), the lab standing in for the Sparks:
its own names in place of the real owner's (lab_for(): each must still occur in the guide), its
inventory as the owner's edit, `ssh` through the lab's ssh config and key. Every
command must exit 0, and the guide's last command, its curl, must stream a token.

The lab's cluster is converged to its own inventory first (a no-op when the tests before left it
so), so the guide's `doctor` meets a serving cluster and its `up` changes nothing: the test costs
the commands' own seconds, not a start.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import guide_blocks
import pytest
import yaml
from labcli import sparkctl

pytestmark = pytest.mark.lab

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "first-deployment.md"
ANNOUNCED = re.compile(r"^### (\d+) ([\d.]+): (.*)$", re.M)
REAL_NAMES = re.compile(r"\.lan\b|192\.168\.|<[a-z ]+>")  # the owner's hosts and placeholders: never run here


def lab_for(lab) -> dict[str, str]:
    """The real owner's words in the guide -> the lab's."""
    inv = yaml.safe_load(Path(lab.INVENTORY_PATH).read_text())
    hosts = inv["hosts"]
    return {
        "nvidia@": "root@",  # the lab's hosts are logged in to as root
        "spark-head.lan": hosts["head"]["ssh"]["address"],
        "spark-worker.lan": hosts["worker"]["ssh"]["address"],
        "192.168.200.3": hosts["worker"]["fabric"][0]["address"].split("/")[0],  # the worker's first rail
        "$EDITOR my-cluster.yaml": f"cp {lab.INVENTORY_PATH} my-cluster.yaml",  # the owner's edit: the lab's values
        "deepseek-v4-flash-dspark": inv["runtime"]["served_model_name"],
    }


def script(blocks: list[guide_blocks.Block], swap: dict[str, str], sparks: list[str]) -> tuple[str, list[str]]:
    """One bash script running every runnable command in order, each announced (`### N TIME: COMMAND`)
    and checked (a failed one ends the script naming it); and the commands, as run."""
    lines = ['fail() { echo "FAILED (exit $1): $2" >&2; exit 1; }', "set -o pipefail"]
    ran: list[str] = []

    def step(command: str, shell_line: str) -> None:
        ran.append(command)
        lines.append(f'echo "### {len(ran)} $EPOCHREALTIME: "{shlex.quote(command)}')
        lines.append(f"{{\n{shell_line}\n}} || fail $? {shlex.quote(command)}")

    for b in blocks:
        for command in b.commands if b.where else ():
            for old, new in swap.items():
                command = command.replace(old, new)
            if b.where == guide_blocks.CONTROL:
                step(command, command)
            else:  # as its owner would, logged in to each Spark
                for host in sparks:
                    step(f"[on {host}] {command}", f"ssh {host} bash -o pipefail -c {shlex.quote(shlex.quote(command))}")
    return "\n".join(lines), ran


def streamed_text(output: str) -> str:
    """The content deltas of an OpenAI-style event stream."""
    text = ""
    for line in output.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                text += (choice.get("delta") or {}).get("content") or ""
    return text


def test_the_first_deployment_guide_runs_on_the_lab_to_the_first_streamed_token(lab, tmp_path):
    from sparkctl_lab.paths import LAB_DIR

    blocks, problems = guide_blocks.parse(GUIDE.read_text())
    assert not problems, problems
    swap = lab_for(lab)
    runnable = "\n".join(c for b in blocks if b.where for c in b.commands)
    unused = [old for old in swap if old not in runnable]
    assert not unused, f"the guide no longer says {unused}: update lab_for()"
    inv = yaml.safe_load(Path(lab.INVENTORY_PATH).read_text())
    sparks = [h["ssh"]["address"] for h in inv["hosts"].values() if h["role"] in ("head", "worker")]
    text, ran = script(blocks, swap, sparks)
    left = [c for c in ran if REAL_NAMES.search(c)]
    assert not left, f"commands that would leave the lab: {left}; add what they name to lab_for()"
    assert ran[-1].startswith("curl "), ran[-1]  # the guide ends on its first streamed token

    sparkctl("up", "-i", str(lab.INVENTORY_PATH))  # the cluster the guide's doctor and up meet: converged
    home = tmp_path / "home"  # ssh-copy-id offers $HOME/.ssh's key: the lab's
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    for name in ("id_ed25519", "id_ed25519.pub"):
        (home / ".ssh" / name).symlink_to(LAB_DIR / "ssh" / name)
    # `ssh` through the lab's config, one connection per host for all the guide's commands (a
    # handshake costs ~0.4 s here); the connections end with the test
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sockets = tempfile.mkdtemp(prefix="guide-ssh-")  # short: a socket's path has at most 107 bytes
    mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={sockets}/%h", "-o", "ControlPersist=60"]
    ssh = ["/usr/bin/ssh", "-F", str(LAB_DIR / "ssh" / "config"), *mux]
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec {shlex.join(ssh)} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    env |= {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")]),
        "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16",
        "NO_COLOR": "1",
    }
    t0, t0_epoch = time.monotonic(), time.time()
    try:
        p = subprocess.run(["bash", "-c", text], cwd=tmp_path, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=600)  # fmt: skip
    finally:
        for host in sparks:
            subprocess.run([*ssh, "-O", "exit", host], capture_output=True, timeout=30)
        shutil.rmtree(sockets, ignore_errors=True)
    took = time.monotonic() - t0
    assert p.returncode == 0, (p.stderr[-3000:], p.stdout[-3000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    parts = ANNOUNCED.split(p.stdout)  # [before, N, start, command, its output, N, ...]
    assert int(parts[-4]) == len(ran), parts[-4:]
    assert streamed_text(parts[-1]), parts[-1][-2000:]
    starts = [float(t) for t in parts[2::4]] + [t0_epoch + took]
    slowest = sorted(zip((b - a for a, b in zip(starts, starts[1:])), parts[3::4]), reverse=True)[:3]
    print(
        f"\nthe guide's {len(ran)} commands ran on the lab in {took:.1f} s; slowest: "
        + "; ".join(f"{c.split('#')[0].strip()[:40]} {s:.1f} s" for s, c in slowest)
    )
