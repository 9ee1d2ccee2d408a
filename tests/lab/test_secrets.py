"""A credential in runtime.env, under every name pattern of issue 10, inside a URL, token-shaped
under an innocent name, or marked by runtime.secret_env, reaches the containers but appears in no
output (render, render --json, inventory show --json, up --json and its human output) and in no
state file on the head (/var/lib/sparkctl/state/**), where a digest stands in for it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from labcli import run

from sparkctl.transport.redact import MASK, state_digests

pytestmark = pytest.mark.lab

ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}

SECRETS = {
    "WANDB_KEY": "lab-wandb-3141",
    "MY_TOKEN": "lab-token-5926",
    "APP_SECRET": "lab-secret-5358",
    "DB_PASSWORD": "lab-password-9793",
    "REDIS_PASS": "lab-pass-2384",
    "GCP_CREDENTIAL": "lab-credential-6264",
    "PROXY_AUTH": "lab-auth-3383",
}
URL_PASSWORD = "lab-urlpass-2795"
TOKEN_SHAPED = "Qm8xT4vR2nW7kL5pZ9cY3hJ6"
MARKED = "lab-marked-0288"
ALL = [*SECRETS.values(), URL_PASSWORD, TOKEN_SHAPED, MARKED]


def sparkctl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    p = run(list(args), timeout=timeout, env=ENV)
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p


@pytest.fixture
def secret_inventory(lab, tmp_path):
    data = yaml.safe_load(Path(lab.INVENTORY_PATH).read_text())
    data["runtime"]["env"] = {
        **data["runtime"].get("env", {}),
        **SECRETS,
        "MY_DB_URL": f"postgres://svc:{URL_PASSWORD}@10.231.0.50:5432/app",
        "INNOCENT_NAME": TOKEN_SHAPED,
        "FEATURE_BLOB": MARKED,
    }
    data["runtime"]["secret_env"] = ["FEATURE_BLOB"]
    path = tmp_path / "secret.yaml"
    path.write_text(yaml.safe_dump(data))
    yield path
    # leave the lab on its own inventory (the runtime restarts without the extra env)
    p = sparkctl("up", "-i", lab.INVENTORY_PATH, "--json")
    assert p.returncode == 0, p.stdout[-3000:]


def leaks(text: str) -> list[str]:
    return [v for v in ALL if v in text]


def test_credentials_reach_the_containers_and_nothing_else(lab, secret_inventory):
    inv = str(secret_inventory)
    outputs = {
        "render": sparkctl("render", "-i", inv),
        "render --json": sparkctl("render", "-i", inv, "--json"),
        "inventory show --json": sparkctl("inventory", "show", inv, "--json"),
        "up --json": sparkctl("up", "-i", inv, "--json"),
        "up": sparkctl("up", "-i", inv, "--force"),  # human output, with the restart's progress
        "status --json": sparkctl("status", "-i", inv, "--json"),
    }
    for what, p in outputs.items():
        assert p.returncode == 0, (what, p.stdout[-2000:], p.stderr[-2000:])
        assert leaks(p.stdout + p.stderr) == [], what
    assert json.loads(outputs["up --json"].stdout)["changed"] > 0  # the new env was really applied

    # the containers got the real values
    env = json.loads(
        lab.host_exec("head", ["docker", "inspect", "-f", "{{json .Config.Env}}", "sparkctl-head"], check=True).stdout
    )
    for name, value in SECRETS.items():
        assert f"{name}={value}" in env
    assert f"MY_DB_URL=postgres://svc:{URL_PASSWORD}@10.231.0.50:5432/app" in env

    # every state file on the head: no value, a digest instead
    state = lab.host_exec("head", ["sh", "-c", "find /var/lib/sparkctl/state -type f -exec cat {} +"], check=True).stdout
    assert leaks(state) == []
    applied = json.loads(lab.host_exec("head", ["cat", "/var/lib/sparkctl/state/applied.json"], check=True).stdout)
    stored = applied["inventory"]["runtime"]["env"]
    digest = state_digests(applied["cluster"])  # salted with this cluster's name
    assert stored["WANDB_KEY"] == MASK + digest(SECRETS["WANDB_KEY"])
    assert stored["FEATURE_BLOB"] == MASK + digest(MARKED)
    assert stored["MY_DB_URL"] == f"postgres://svc:{MASK}{digest(URL_PASSWORD)}@10.231.0.50:5432/app"
    assert stored["SIM_STEP_TIME_SCALE"] == "0.01"  # plain values are kept as they are
