"""`up --check` is exact: for every drift scenario, the operations `up --check --json` lists are
exactly those the following real `up --json` performs, host by host and step by step.

Each scenario breaks the lab by hand (ip, docker, mount on the hosts), then compares the two.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from labcli import run

pytestmark = pytest.mark.lab

ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}


def sparkctl(*args: str) -> dict:
    p = run([*args, "--json"], env=ENV)
    assert "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def operations(doc: dict) -> dict[tuple[str, str], list[str]]:
    """(host, step) -> the operations planned (--check) or performed (run); only non-empty ones."""
    return {(r["host"], r["step"]): r["operations"] for r in doc["results"] if r["operations"]}


def check_then_run(inventory: Path) -> tuple[dict, dict]:
    check = sparkctl("up", "-i", str(inventory), "--check")
    run = sparkctl("up", "-i", str(inventory))
    assert run["failed"] == 0, json.dumps(run, indent=1)[-3000:]
    assert operations(check) == operations(run), (operations(check), operations(run))
    return check, run


@pytest.fixture(scope="module")
def inventory(lab) -> Path:
    inv = Path(lab.INVENTORY_PATH)
    sparkctl("up", "-i", str(inv))
    return inv


def image_of(inventory: Path) -> str:
    return yaml.safe_load(inventory.read_text())["runtime"]["image"]


def test_first_run_from_a_stopped_runtime(lab, inventory):
    sparkctl("down", "-i", str(inventory))
    _, run = check_then_run(inventory)
    ops = operations(run)
    assert ops[("head", "stop")] == ["barrier"]  # nothing was running: only the proof before stopping
    assert ops[("head", "runtime")] == ["start", "wait-serving"] and ops[("worker", "runtime")] == ["start"]


def test_no_op(lab, inventory):
    check, run = check_then_run(inventory)
    assert operations(run) == {} and run["changed"] == 0


def test_mtu_drift(lab, inventory):
    lab.host_exec("worker", ["ip", "link", "set", "enP2p1s0f0np0", "mtu", "1500"], check=True)
    _, run = check_then_run(inventory)
    assert operations(run) == {("worker", "fabric"): ["set-mtu"]}


def test_image_removed_from_a_node(lab, inventory):
    lab.host_exec("worker", ["docker", "rmi", "-f", image_of(inventory)], check=True)
    _, run = check_then_run(inventory)
    assert {step for _, step in operations(run)} == {"images"}  # the running containers keep their image


def test_newer_image_under_the_tag_on_every_node(lab, inventory):
    """The case `up --check` used to get wrong: every node holds a newer image under the tag than
    the containers run. Built on the head, pushed to the lab registry, pulled by hand everywhere."""
    image = image_of(inventory)
    old = lab.host_exec("head", ["docker", "image", "inspect", "-f", "{{.Id}}", image], check=True).stdout.strip()
    build = f"printf 'FROM {image}\\nLABEL io.sparkctl.test=newer\\n' | docker build -q -t {image} - && docker push {image}"
    lab.host_exec("head", ["sh", "-c", build], check=True)
    try:
        for h in ("worker", "offload"):
            lab.host_exec(h, ["docker", "pull", "-q", image], check=True)
        _, run = check_then_run(inventory)
        ops = operations(run)
        assert ("head", "runtime") in ops and ("head", "record") in ops and not any(s == "images" for _, s in ops)
        # the head's dockerd named the new manifest, and every node holds it pulled (or pushed) as that
        images = [r["message"] for r in run["results"] if r["step"] == "images"]
        assert len(images) == 3 and all("already current in the registry" in m and "from head's dockerd" in m for m in images)
    finally:  # the lab's own image back in the registry and on every node
        lab.host_exec("head", ["sh", "-c", f"docker tag {old} {image} && docker push {image}"], check=True)
        for h in ("worker", "offload"):
            lab.host_exec(h, ["docker", "pull", "-q", image], check=True)
        sparkctl("up", "-i", str(inventory))


def test_engram_unmounted(lab, inventory):
    lab.host_exec("offload", ["umount", "/mnt/engram"], check=True)
    _, run = check_then_run(inventory)
    assert operations(run) == {("offload", "engram"): ["mount", "copy"]}


def test_engram_byte_flipped_and_truncated(lab, inventory):
    flip = "printf '\\001' | dd of=/mnt/engram/engram-table-002.bin bs=1 seek=100 conv=notrunc 2>/dev/null"
    lab.host_exec("offload", ["sh", "-c", f"{flip} && truncate -s 1000 /mnt/engram/engram-table-000.bin"], check=True)
    _, run = check_then_run(inventory)
    assert operations(run) == {("offload", "engram"): ["copy"]}
    assert "copied 2 table file(s)" in next(r["message"] for r in run["results"] if r["step"] == "engram")
    verified = lab.host_exec("offload", ["sh", "-c", "cd /mnt/engram && sha256sum -c /srv/engram/tables/SHA256SUMS"])
    assert verified.returncode == 0, verified.stdout


def test_container_killed(lab, inventory):
    lab.host_exec("worker", ["docker", "kill", "sparkctl-worker"], check=True)
    _, run = check_then_run(inventory)
    ops = operations(run)
    # the gateway holds new requests before the head's SIGTERM (the check listed it: the run did it)
    assert ops[("head", "stop")] == ["barrier", "hold", "stop"] and ops[("worker", "stop")] == ["stop"]
    assert ops[("head", "runtime")] == ["start", "wait-serving"]
