"""sparkctl as an operator installs it: a wheel, built from this checkout and installed (not
editable) into a fresh virtualenv, runs every command on the lab from wherever it is installed
(playbooks, templates, runbooks and the example inventories come from the package) and does not
carry the lab or the plotting extra.

The day-one tests need neither root nor the lab (not marked `lab`): build, venv and install cost
about 40 s on the CI machine, shared by every test here (module fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def run(exe: Path, *args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    # from a folder far from the checkout: nothing may be found through the source tree
    p = subprocess.run([str(exe), *args], capture_output=True, text=True, env={**ENV, **(env or {})}, cwd=cwd, timeout=600)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def test_the_installed_package_holds_its_data_and_not_the_lab(installed):
    py = installed.parent / "python"
    code = (
        "import importlib.util, sparkctl.resources as r; "
        "print(importlib.util.find_spec('sparkctl_lab') is None, r.names('playbooks', '.yaml'), "
        "r.names('templates'), len(r.names('runbooks', '.md')) > 0, r.names('inventories'), "
        "importlib.util.find_spec('matplotlib') is None)"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.strip() == (
        "True ['down.yaml', 'reload.yaml', 'up.yaml'] ['netplan-fabric.yaml.j2', 'sparkctl-keeper.service.j2'] True "
        "['dspark-recipe.yaml', 'lab.yaml', 'splice-build.yaml'] True"
    )


def test_day_one_from_the_wheel_alone(installed, tmp_path):
    """README's "Install on a control machine": start from a shipped example, validate, render, read a
    runbook, from a folder with no checkout in sight."""
    init = run(installed, "inventory", "init", "--from", "lab", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    assert (tmp_path / "lab.yaml").read_text() == (ROOT / "inventories" / "lab.yaml").read_text()
    env = {"SPARKCTL_INVENTORY": str(tmp_path / "lab.yaml")}
    validate = run(installed, "inventory", "validate", cwd=tmp_path, env=env)
    assert validate.returncode == 0 and "ok " in validate.stdout + validate.stderr, validate.stderr
    with open(tmp_path / "f", "w") as f:
        render = subprocess.run([str(installed), "render"], stdout=f, stderr=subprocess.PIPE, text=True,
                                env={**ENV, **env}, cwd=tmp_path, timeout=120)  # fmt: skip
    # the launch: on stdout once render answers there (issue 24 item 3), on stderr before
    launch = (tmp_path / "f").read_text() + render.stderr
    assert render.returncode == 0 and "vllm serve /models/DeepSeek-V4.1-Flash-1017" in launch, render.stderr
    book = run(installed, "runbook", "fabric.mtu", cwd=tmp_path)
    assert book.returncode == 0 and book.stdout == (ROOT / "docs" / "runbooks" / "fabric.mtu.md").read_text()
    # what a missing file's error offers exists for a wheel user: every example it names
    missing = run(installed, "inventory", "validate", "nothere.yaml", cwd=tmp_path)
    assert missing.returncode == 2 and "sparkctl inventory init --from dspark|splice|lab" in missing.stderr
    for name in ("dspark", "splice"):
        assert run(installed, "inventory", "init", "--from", name, "--out", f"{name}.yaml", cwd=tmp_path).returncode == 0
        # the file alone: this machine holds neither their key nor their hosts' keys (the lab's does)
        assert run(installed, "inventory", "validate", f"{name}.yaml", "--file-only", cwd=tmp_path).returncode == 0


def test_the_wheel_offers_neither_the_lab_nor_plots_it_cannot_draw(installed, tmp_path):
    helps = run(installed, "--help", cwd=tmp_path).stdout
    assert "runbook" in helps and not any(line.split()[:1] == ["lab"] for line in helps.splitlines())
    (tmp_path / "r.json").write_text("{}")
    report = run(installed, "bench", "report", "r.json", "--out", "rep", cwd=tmp_path)
    assert report.returncode == 2 and "pip install 'sparkctl[report]'" in report.stderr, report.stderr
    assert not (tmp_path / "rep").exists()


@pytest.mark.lab
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
