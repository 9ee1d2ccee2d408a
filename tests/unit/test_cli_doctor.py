"""`sparkctl doctor` rejects bad input with exit 2 before touching any host."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import clirun
import pytest
import yaml
from controlfiles import usable_here

REPO = Path(__file__).resolve().parents[2]
LAB = str(REPO / "inventories" / "lab.yaml")


def doctor(*args: str) -> subprocess.CompletedProcess:
    # fenced to loopback only: were anything to try a host, it would be refused, never sent
    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    env["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8"
    return clirun.sparkctl(["doctor", *args], timeout=60, env=env)


@pytest.fixture(scope="module")
def usable_lab(tmp_path_factory) -> str:
    """The lab's inventory with a key and known_hosts of its own (the lab's exist only while it is up):
    what doctor checks on this machine passes, so the bad option is what it refuses."""
    folder = tmp_path_factory.mktemp("doctor")
    path = folder / "lab.yaml"
    path.write_text(yaml.safe_dump(usable_here(yaml.safe_load(Path(LAB).read_text()), folder)))
    return str(path)


@pytest.mark.parametrize(
    "args, words",
    [
        (["-i", LAB, "--only", "fabrik"], "did you mean 'fabric'"),
        (["-i", LAB, "--ignore", "gpu.modle"], "did you mean 'gpu.model'"),
        (["-i", LAB, "--hosts", "nope"], "unknown host(s): nope"),
        (["-i", str(REPO / "inventories" / "missing.yaml")], "does not exist"),
        ([], "no inventory given"),
    ],
)
def test_bad_input_exits_2_with_one_json_document(args, words, usable_lab):
    r = doctor(*(usable_lab if a == LAB else a for a in args), "--json")
    assert r.returncode == 2, r.stderr
    doc = json.loads(r.stdout)
    assert words in doc["error"] and doc["exit_code"] == 2
    assert "Traceback" not in r.stderr


def test_bad_input_human_message_on_stderr(usable_lab):
    r = doctor("-i", usable_lab, "--only", "fabrik")
    assert r.returncode == 2 and r.stdout == ""
    assert "unknown check group" in r.stderr and "fix:" in r.stderr
