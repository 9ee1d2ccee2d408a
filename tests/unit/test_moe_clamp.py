"""vLLM 0.33 refuses flashinfer_b12x for a checkpoint that sets swiglu_limit (fused_moe/oracle/nvfp4.py):
doctor's env.moe_clamp and `sparkctl render` warn when the inventory combines them."""

from __future__ import annotations

import json
from pathlib import Path

import clirun
import yaml
from test_checks import H, by, run, sections

from sparkctl.inventory.models import Inventory

REC = Path(__file__).parent / "recorded" / "doctor"


def inventory(**runtime) -> dict:
    d = yaml.safe_load((REC / "inventory.yaml").read_text())
    d["runtime"].update(runtime)
    return d


def test_doctor_warns_on_flashinfer_b12x_with_a_clamped_checkpoint():
    inv = Inventory.model_validate(inventory(checkpoint_swiglu_limit=10.0))  # lab: flashinfer_b12x on nvfp4
    c = by(run(sections(), inv=inv), "env.moe_clamp", H)
    assert c.status == "warn" and "swiglu_limit=10.0" in c.message and "refuses to start" in c.message
    assert "b12x" in c.fix
    for ok_runtime in ({"checkpoint_swiglu_limit": 10.0, "moe_backend": "b12x"}, {}):  # the clamp applied; no limit set
        c = by(run(sections(), inv=Inventory.model_validate(inventory(**ok_runtime))), "env.moe_clamp", H)
        assert c.status == "ok", c


def test_render_warns_on_stderr_and_in_json(tmp_path):
    path = tmp_path / "clamped.yaml"
    path.write_text(yaml.safe_dump(inventory(checkpoint_swiglu_limit=10.0)))
    cmd = ["render", "-i", str(path)]
    human = clirun.sparkctl(cmd, timeout=60)
    assert human.returncode == 0 and "warning:" in human.stderr and "swiglu_limit" in human.stderr
    as_json = clirun.sparkctl(cmd + ["--json"], timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert len(doc["warnings"]) == 1 and "flashinfer_b12x" in doc["warnings"][0]
    path.write_text(yaml.safe_dump(inventory()))
    assert json.loads(clirun.sparkctl(cmd + ["--json"], timeout=60).stdout)["warnings"] == []
