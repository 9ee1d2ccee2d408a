"""sparkctl as an operator installs it: a wheel, built from this checkout and installed (not
editable) into a fresh virtualenv, runs every command on the lab from wherever it is installed
(playbooks, templates and runbooks come from the package) and does not carry the lab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(d / "dist"), str(ROOT)], check=True)
    (wheel,) = (d / "dist").glob("sparkctl-*.whl")
    venv = d / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)], check=True)
    return venv / "bin" / "sparkctl"


def run(exe: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    # from a folder far from the checkout: nothing may be found through the source tree
    p = subprocess.run([str(exe), *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=600)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def test_the_installed_package_holds_its_data_and_not_the_lab(installed):
    py = installed.parent / "python"
    code = (
        "import importlib.util, sparkctl.resources as r; "
        "print(importlib.util.find_spec('sparkctl_lab') is None, r.names('playbooks', '.yaml'), "
        "r.names('templates'), len(r.names('runbooks', '.md')) > 0)"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.strip() == "True ['down.yaml', 'reload.yaml', 'up.yaml'] ['netplan-fabric.yaml.j2'] True"


def test_every_command_runs_from_the_wheel_on_the_lab(lab, installed, tmp_path):
    inv = lab.INVENTORY_PATH
    render = run(installed, "render", "-i", inv, "--json", cwd=tmp_path)
    assert render.returncode == 0 and json.loads(render.stdout)["config_hash"]
    up = run(installed, "up", "-i", inv, "--json", cwd=tmp_path)
    doc = json.loads(up.stdout)
    assert up.returncode == 0 and doc["failed"] == 0, up.stdout[-2000:]
    again = json.loads(run(installed, "up", "-i", inv, "--json", cwd=tmp_path).stdout)
    assert again["changed"] == 0
    status = run(installed, "status", "-i", inv, "--json", cwd=tmp_path)
    assert status.returncode == 0 and json.loads(status.stdout)["healthy"] is True
    doctor = run(installed, "doctor", "-i", inv, "--json", cwd=tmp_path)
    checks = json.loads(doctor.stdout)["checks"]
    assert doctor.returncode in (0, 1) and {c["name"] for c in checks} >= {"fabric.mtu", "runtime.health"}


def test_the_lab_command_says_how_to_install_the_lab(installed, tmp_path):
    p = run(installed, "lab", "status", cwd=tmp_path)
    assert p.returncode == 2 and "pip install -e ./lab" in p.stderr
