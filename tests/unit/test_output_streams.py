"""What a command answers goes on stdout, progress and problems on stderr (kubectl, docker,
ansible-inventory), so `sparkctl render > launch.txt` holds the launch and `doctor | less` pages
the table; with --json even a usage error is one JSON document on stdout.

The real CLI (in this process, tests/clirun.py; with a file as its stdout, a process of its own),
stdout and stderr read apart. Commands that need hosts run
against an inventory whose hosts are loopback addresses where nothing listens (connection
refused at once): what they answer about an unreachable cluster is still an answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import clirun
import pytest
import yaml
from controlfiles import usable_here

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "inventories" / "lab.yaml"


def sparkctl(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKCTL_INVENTORY", "COLUMNS")}
    env["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8"  # loopback only
    return clirun.sparkctl(list(args), cwd=REPO, env=env, timeout=120)


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory) -> Path:
    """The lab inventory with every host and the registry on 127.0.0.x port 9 (nothing listens:
    refused at once)."""
    data = yaml.safe_load(LAB.read_text().replace("10.231.0.1:5000/", "127.0.0.1:9/"))
    for i, host in enumerate(data["hosts"].values()):
        host["ssh"] = {"address": f"127.0.0.{i + 2}"}
    data["ssh_defaults"]["port"] = 9
    folder = tmp_path_factory.mktemp("streams")
    # a key and known_hosts of its own: the lab's (under /var/lib/sparkctl-lab) exist only while the lab is up
    data = usable_here(data, folder)
    path = folder / "unreachable.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_render_to_a_file_holds_the_launch(tmp_path):
    out = tmp_path / "launch.txt"
    with out.open("w") as f:
        r = subprocess.run([sys.executable, "-m", "sparkctl", "render", "-i", str(LAB)], stdout=f, stderr=subprocess.PIPE,
                           text=True, cwd=REPO, env={**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8"}, timeout=60)  # fmt: skip
    assert r.returncode == 0 and r.stderr == ""
    text = out.read_text()
    assert text.startswith("cluster lab  config hash ")
    for host in ("head", "worker", "offload"):
        assert f"\n{host} (" in text
    assert text.count("  docker run: docker run ") == 4  # the gateway, drafter, worker, head


def test_inventory_show_and_validate_answer_on_stdout():
    show = sparkctl("inventory", "show", str(LAB))
    assert show.returncode == 0 and show.stderr == ""
    assert "lab: hosts" in show.stdout and "fabric links" in show.stdout and "10.231.0.11" in show.stdout
    ok = sparkctl("inventory", "validate", str(LAB), "--file-only")  # the lab's key is there only while it is up
    assert ok.returncode == 0 and ok.stderr == "" and ok.stdout.startswith("ok ")


def test_a_warning_is_not_part_of_the_answer(tmp_path):
    data = yaml.safe_load(LAB.read_text())
    data["runtime"]["gpu_memory_utilization"] = 0.95
    path = tmp_path / "warn.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    r = sparkctl("inventory", "validate", str(path), "--file-only")
    assert r.returncode == 0
    assert r.stdout.startswith("ok ") and "warning:" not in r.stdout
    assert "warning:" in r.stderr and "runtime.gpu_memory_utilization" in r.stderr


def test_an_error_goes_to_stderr_only():
    r = sparkctl("render", "-i", "/nonexistent/inventory.yaml")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: ") and "fix:" in r.stderr


def test_doctor_table_on_stdout(unreachable):
    r = sparkctl("doctor", "-i", str(unreachable))
    assert r.returncode == 1
    assert r.stderr == ""  # off a terminal there is no spinner either
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["group", "head", "worker", "offload"]
    assert "✗ ssh.reachable  on head" in r.stdout and "runbook: " in r.stdout
    assert lines[-1] == "failed: ssh.reachable"


def test_status_table_on_stdout(unreachable):
    r = sparkctl("status", "-i", str(unreachable), "--sample", "0.2")
    assert r.returncode == 1 and r.stderr == ""
    assert "cluster lab: inventory config " in r.stdout
    # the engine, through the gateway's engine route (it listens on the head's loopback)
    assert "runtime http://127.0.0.2:8888/gateway/engine: not answering" in r.stdout
    assert r.stdout.rstrip().endswith("not healthy: run `sparkctl doctor` (or `sparkctl up`)")


def test_up_check_answers_with_its_lines_and_recap_on_stdout(unreachable):
    r = sparkctl("up", "--check", "-i", str(unreachable))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr == ""  # off a terminal no live block: nothing but the answer
    # a line per host and step as it finished (the plan, here its failure), then the recap
    assert " failed head      connect  head: cannot connect to root@127.0.0.2:9" in r.stdout
    assert "up --check: recap" in r.stdout and "\nFAILED  ok=0, changed=0, failed=3" in r.stdout


@pytest.mark.parametrize(
    "args, words",
    [(["up", "--json", "--chek"], "No such option: --chek"),
     (["reload", "--json", "-i", str(LAB)], "Missing option '--config'"),
     (["status", "--json", "--sample", "x"], "--sample"),
     (["inventory", "show", "--json", "--nope", str(LAB)], "No such option: --nope")],
)  # fmt: skip
def test_a_usage_error_with_json_is_one_json_document(args, words):
    r = sparkctl(*args)
    assert r.returncode == 2
    assert r.stderr == ""
    doc = json.loads(r.stdout)  # exactly one document: json.loads refuses anything after it
    assert words in doc["error"] and doc["exit_code"] == 2
    assert doc["fix"].startswith("see `sparkctl ") and doc["fix"].endswith(" --help`")


def test_a_usage_error_without_json_stays_clicks_text_on_stderr():
    r = sparkctl("up", "--chek")
    assert r.returncode == 2 and r.stdout == ""
    assert "No such option: --chek" in r.stderr
