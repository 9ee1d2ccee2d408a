"""What an operator without a checkout is given (issue 24, item 4): `inventory init --from` the shipped
examples, `sparkctl runbook NAME`, hints that name what exists, the lab hidden when it is not
installed, and the plotting extra refused with the pip command. tests/lab/test_wheel_install.py runs
the same from a built wheel in a fresh venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import clirun
import pytest
from climain import run

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {"dspark": "dspark-recipe.yaml", "splice": "splice-build.yaml", "lab": "lab.yaml"}  # --from -> file


def without(module: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """sparkctl in a child whose `import module` fails, as where that package is not installed."""
    code = f"import sys; sys.modules[{module!r}] = None; from sparkctl.cli.app import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd, timeout=60,
                          env={**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8"})  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_init_writes_the_shipped_example_and_it_validates(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["inventory", "init", "--from", name], capsys)
    file = EXAMPLES[name]
    assert code in (0, None) and out.strip() == file and "sparkctl inventory validate" in err
    assert (tmp_path / file).read_text() == (REPO / "inventories" / file).read_text()
    code, _, err = run(["inventory", "validate", file, "--file-only"], capsys)  # this machine holds no key of it
    assert code in (0, None), err


def test_init_json_and_out(tmp_path, capsys):
    target = tmp_path / "my-cluster.yaml"
    code, out, _ = run(["inventory", "init", "--from", "splice", "--out", str(target), "--json"], capsys)
    assert code in (0, None) and json.loads(out) == {"file": str(target), "from": "splice", "example": "splice-build.yaml"}
    code, out, _ = run(["inventory", "init", "--from", "dspark", "--out", "-"], capsys)
    assert out == (REPO / "inventories" / "dspark-recipe.yaml").read_text()


def test_init_never_overwrites_and_names_the_examples(tmp_path, capsys):
    target = tmp_path / "cluster.yaml"
    target.write_text("mine\n")
    code, _, err = run(["inventory", "init", "--from", "lab", "--out", str(target)], capsys)
    assert code == 2 and "already exists" in err and "--force" in err and target.read_text() == "mine\n"
    code, _, err = run(["inventory", "init", "--from", "lab", "--out", str(target), "--force"], capsys)
    assert code in (0, None) and target.read_text().startswith("# The lab cluster")
    code, out, _ = run(["inventory", "init", "--from", "dgx", "--json"], capsys)
    doc = json.loads(out)
    assert code == 2 and doc["error"] == "--from 'dgx' is not a shipped example" and "dspark|splice|lab" in doc["fix"]
    code, _, err = run(["inventory", "init", "--from", "lab", "--out", str(tmp_path / "no" / "x.yaml")], capsys)
    assert code == 2 and "does not exist" in err and not (tmp_path / "no").exists()


def test_hints_name_the_command_that_gives_an_inventory(capsys, monkeypatch):
    monkeypatch.delenv("SPARKCTL_INVENTORY", raising=False)
    for argv in (["inventory", "validate", "/nonexistent/inv.yaml"], ["render"]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "sparkctl inventory init --from dspark|splice|lab" in " ".join(err.split()), err
        assert "inventories/lab.yaml" not in err  # a path only a checkout has


def test_runbook_prints_the_shipped_page(capsys):
    code, out, _ = run(["runbook", "fabric.mtu"], capsys)
    assert code in (0, None) and out == (REPO / "docs" / "runbooks" / "fabric.mtu.md").read_text()
    # what doctor's JSON holds and a check's name lead to the same pages
    assert run(["runbook", "docs/runbooks/fabric.mtu.md"], capsys)[1] == out
    assert run(["runbook", "runtime.health"], capsys)[1] == (REPO / "docs" / "runbooks" / "runtime-down.md").read_text()
    code, out, _ = run(["runbook", "--json", "kv-cache-full"], capsys)
    assert json.loads(out)["name"] == "kv-cache-full"


def test_runbook_lists_them_and_refuses_an_unknown_one(capsys):
    code, out, _ = run(["runbook"], capsys)
    names = [line.split()[0] for line in out.splitlines()]
    assert code in (0, None) and "fabric.mtu" in names and "README" not in names
    assert len(names) == len(list((REPO / "docs" / "runbooks").glob("*.md"))) - 1
    code, out, err = run(["runbook", "fabric.mut"], capsys)
    text = " ".join(err.split())
    assert code == 2 and "no runbook named 'fabric.mut' (did you mean fabric.mtu" in text and "ssh.reachable" in text
    code, out, _ = run(["runbook", "nope", "--json"], capsys)
    assert code == 2 and json.loads(out)["exit_code"] == 2


def test_the_lab_is_hidden_where_it_is_not_installed(tmp_path):
    helps = without("sparkctl_lab", "--help", cwd=tmp_path)
    commands = [line.split()[0] for line in helps.stdout.splitlines() if line.startswith("  ") and line.split()]
    assert helps.returncode == 0 and "runbook" in commands and "lab" not in commands, helps.stdout
    lab = without("sparkctl_lab", "lab", "status", cwd=tmp_path)
    assert lab.returncode == 2 and "pip install -e ./lab" in lab.stderr  # still says how, when asked for
    with_lab = clirun.sparkctl(["--help"], timeout=60)
    assert any(line.split()[:1] == ["lab"] for line in with_lab.stdout.splitlines())


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "report", "r.json", "--out", "rep"],
        ["bench", "--endpoint", "http://127.0.0.1:9/v1", "--report", "rep", "--json"],
    ],
)
def test_plots_need_the_report_extra(argv, tmp_path):
    (tmp_path / "r.json").write_text("{}")
    r = without("matplotlib", *argv, cwd=tmp_path)
    text = r.stdout + r.stderr
    assert r.returncode == 2 and "pip install 'sparkctl[report]'" in text and "matplotlib is not installed" in text
    assert "Traceback" not in text and not (tmp_path / "rep").exists()
    if "--json" in argv:
        assert json.loads(r.stdout)["exit_code"] == 2  # refused before measuring anything
