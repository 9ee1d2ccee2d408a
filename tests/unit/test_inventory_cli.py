"""`sparkctl inventory validate | show | schema` as an operator runs them: exit codes, one JSON document
with --json, the answer on stdout and problems on stderr, no traceback, secrets redacted, a schema editors can use."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import clirun
import pytest
import yaml
from climain import run

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ["lab.yaml", "dspark-recipe.yaml", "splice-build.yaml"]


def sparkctl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real console entry point (in this process: tests/clirun.py)."""
    return clirun.sparkctl(list(args), cwd=REPO, env={**os.environ, **(env or {})}, timeout=60)


def broken(tmp_path) -> Path:
    path = tmp_path / "broken.yaml"
    path.write_text((REPO / "inventories" / "lab.yaml").read_text().replace("mtu: 9000", "mtu: 1500", 1))
    return path


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_inventories_validate(name):
    # the file alone: its key and known_hosts are the operator's, not this machine's (test_control_machine.py)
    r = sparkctl("inventory", "validate", f"inventories/{name}", "--file-only")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # the verdict is the answer (stdout); a warning would go to stderr
    assert r.stdout.startswith(f"ok inventories/{name}: cluster ")
    assert "TP 2" in r.stdout and "warning" not in r.stdout


@pytest.mark.parametrize("name", SHIPPED)
def test_validate_json_is_one_document_with_a_summary(name, capsys):
    code, out, err = run(["inventory", "validate", str(REPO / "inventories" / name), "--json", "--file-only"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] is True
    assert doc["tensor_parallel_size"] == 2
    assert len(doc["hosts"]["head"]) == 1 and len(doc["hosts"]["worker"]) == 1
    assert doc["warnings"] == []


def test_seed_inventories_summaries(capsys):
    _, out, _ = run(["inventory", "validate", str(REPO / "inventories" / "splice-build.yaml"), "--json", "--file-only"], capsys)
    doc = json.loads(out)
    assert doc["cluster"] == "splice-build"
    assert doc["hosts"] == {"head": ["spark-head"], "worker": ["spark-worker"], "offload": ["offload"]}
    _, out, _ = run(["inventory", "validate", str(REPO / "inventories" / "dspark-recipe.yaml"), "--json", "--file-only"], capsys)
    doc = json.loads(out)
    assert doc["image"] == "dspark-vllm-gx10:0.1.1" and doc["hosts"]["offload"] == []


def test_broken_inventory_exits_2_without_traceback(tmp_path):
    path = broken(tmp_path)
    r = sparkctl("inventory", "validate", str(path))
    assert r.returncode == 2
    assert "Traceback" not in r.stdout + r.stderr
    assert f"{path}:" in r.stderr and "hosts.head.fabric[0].mtu" in r.stderr
    assert "fix:" in r.stderr


def test_broken_inventory_json_is_one_document(tmp_path):
    path = broken(tmp_path)
    r = sparkctl("inventory", "validate", str(path), "--json")
    assert r.returncode == 2
    assert "Traceback" not in r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2
    assert doc["problems"][0]["path"] == "hosts.head.fabric[0].mtu"
    assert doc["problems"][0]["file"] == str(path)


def test_file_from_option_and_environment(capsys, monkeypatch):
    lab = str(REPO / "inventories" / "lab.yaml")
    code, out, _ = run(["inventory", "validate", "-i", lab, "--file-only"], capsys)
    assert code == 0 and "ok" in out
    monkeypatch.setenv("SPARKCTL_INVENTORY", lab)
    code, out, _ = run(["inventory", "validate", "--file-only"], capsys)
    assert code == 0 and lab in out


def test_no_file_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("SPARKCTL_INVENTORY", raising=False)
    code, out, err = run(["inventory", "validate"], capsys)
    assert code == 2
    assert "no inventory given" in err


def test_missing_file_exits_2(capsys):
    code, out, err = run(["inventory", "show", "/nonexistent/inventory.yaml", "--json"], capsys)
    assert code == 2
    assert "does not exist" in json.loads(out)["error"]


def test_show_tables(capsys):
    code, out, err = run(["inventory", "show", str(REPO / "inventories" / "splice-build.yaml")], capsys)
    assert code == 0
    assert err == ""  # the tables are the answer: `inventory show | less` pages them
    for text in (
        "spark-head",
        "nvidia@192.168.1.11:22",
        "2x NVIDIA GeForce RTX 3090",
        "503 GiB",  # hosts
        "enp1s0f0np0",
        "enP2p1s0f0np0",  # the port's second twin: a rail of its own
        "roceP2p1s0f0",
        "192.168.200.2/24",
        "192.168.201.2/24",
        "200 Gb/s",
        "spark-worker (192.168.200.3)",  # fabric
        "--max-model-len",
        "327680",
        "--speculative-config",
        "1930000",  # runtime
        "/var/lib/sparkctl/cache",
        "/mnt/engram",
        "220 GiB",  # caches, engram
    ):
        assert text in out, text


def test_show_redacts_secrets_in_env(tmp_path, capsys):
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["runtime"]["env"] = {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz", "PLAIN": "visible"}
    path = tmp_path / "secret.yaml"
    path.write_text(yaml.safe_dump(data))

    code, out, err = run(["inventory", "show", str(path)], capsys)
    assert code == 0
    assert "hf_abcdefghijklmnopqrstuvwxyz" not in out + err
    assert "env.HF_TOKEN" in out and "***" in out and "visible" in out

    code, out, err = run(["inventory", "show", str(path), "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert "hf_abcdefghijklmnopqrstuvwxyz" not in out
    assert doc["runtime"]["env"] == {"HF_TOKEN": "***", "PLAIN": "visible"}
    # Token *counts* are not secrets.
    assert doc["runtime"]["max_num_batched_tokens"] == 8192
    assert doc["runtime"]["speculative"]["num_speculative_tokens"] == 5


def test_show_json_round_trips_to_the_same_inventory(tmp_path, capsys):
    from sparkctl.inventory.loader import load_inventory

    src = REPO / "inventories" / "dspark-recipe.yaml"
    _, out, _ = run(["inventory", "show", str(src), "--json"], capsys)
    doc = json.loads(out)
    del doc["file"]
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(doc))
    assert load_inventory(again).model_dump() == load_inventory(src).model_dump()


@pytest.fixture(scope="module")
def schema() -> dict:
    r = sparkctl("inventory", "schema")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_schema_is_valid_json_schema(schema):
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    runtime = schema["$defs"]["Runtime"]["properties"]
    assert "--max-model-len" in runtime["max_model_len"]["description"]
    assert schema["$defs"]["FabricLink"]["properties"]["peer"]["description"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_inventories_match_the_schema(schema, name):
    from jsonschema import Draft202012Validator

    data = yaml.safe_load((REPO / "inventories" / name).read_text())
    errors = list(Draft202012Validator(schema).iter_errors(data))
    assert not errors, [e.message for e in errors]


def test_schema_catches_what_an_editor_should_flag(schema):
    from jsonschema import Draft202012Validator

    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["runtime"]["max_num_seq"] = 4
    data["hosts"]["head"]["role"] = "haed"
    data["runtime"]["max_model_len"] = "256K"  # allowed: vLLM's notation
    messages = [e.message for e in Draft202012Validator(schema).iter_errors(data)]
    assert any("max_num_seq" in m for m in messages)
    assert any("haed" in m for m in messages)
    assert len(messages) == 2


def test_inventory_group_help_lists_the_commands():
    r = sparkctl("inventory", "--help")
    assert r.returncode == 0
    for command in ("validate", "show", "schema"):
        assert command in r.stdout
