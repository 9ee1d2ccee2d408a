"""Secrets by value, not only by name: every name pattern of the issue, URLs with a password,
token-shaped values and names the inventory marks secret are masked in render, render --json
and inventory show --json; state documents keep a digest instead of the value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sparkctl.cli.app import main
from sparkctl.transport.redact import MASK, digest, looks_like_token, redact, redact_obj

REPO = Path(__file__).resolve().parents[2]

# One credential per name pattern of the issue (KEY, TOKEN, SECRET, PASSWORD, PASS, CREDENTIAL,
# AUTH), one in a URL, one only token-shaped, one marked secret by runtime.secret_env.
SECRETS = {
    "WANDB_KEY": "wandbvalue-0001",
    "MY_TOKEN_FILE_CONTENT": "tokenvalue-0002",
    "APP_SECRET": "secretvalue-0003",
    "DB_PASSWORD": "passwordvalue-0004",
    "REDIS_PASS": "passvalue-0005",
    "GCP_CREDENTIALS_JSON": "credvalue-0006",
    "PROXY_AUTH": "authvalue-0007",
}
URL_PASSWORD = "urlpass-0008"
TOKEN_SHAPED = "Zk3pQ9xL2mVb7RtY4wNc8HsJ0009"
MARKED = "plainlooking-0010"
ALL = [*SECRETS.values(), URL_PASSWORD, TOKEN_SHAPED, MARKED]


def run(argv: list[str], capsys) -> tuple[int, str]:
    """The console entry point in this process: exit code and stdout + stderr."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out + err


@pytest.fixture
def secret_inventory(tmp_path) -> Path:
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
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
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["render"],
        ["render", "--json"],
        ["inventory", "show"],
        ["inventory", "show", "--json"],
        ["inventory", "validate", "--file-only"],
    ],
)
def test_no_credential_in_any_output(secret_inventory, argv, capsys):
    code, out = run([*argv, "-i", str(secret_inventory)] if argv[0] != "inventory" else [*argv, str(secret_inventory)], capsys)
    assert code == 0, out
    for value in ALL:
        assert value not in out, (argv, value)
    if "render" in argv:
        assert "postgres://svc:***@10.231.0.50:5432/app" in out  # the rest of the URL stays readable
        assert "SIM_STEP_TIME_SCALE" in out and "0.01" in out  # plain values stay


def test_secret_env_must_name_a_set_variable(tmp_path, capsys):
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["runtime"]["secret_env"] = ["NOT_THERE"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out = run(["inventory", "validate", str(path)], capsys)
    assert code == 2
    out = " ".join(out.split())  # the console wraps long lines
    assert "runtime.secret_env: NOT_THERE not set in runtime.env" in out


def test_state_documents_keep_a_digest_that_changes_with_the_secret():
    a = redact_obj({"env": {"WANDB_KEY": "first-value-1"}, "url": "redis://u:pw-first-1@h/0"}, digests=True)
    b = redact_obj({"env": {"WANDB_KEY": "second-value-2"}, "url": "redis://u:pw-second-2@h/0"}, digests=True)
    text = json.dumps([a, b])
    assert "first-value-1" not in text and "second-value-2" not in text and "pw-first-1" not in text
    assert a["env"]["WANDB_KEY"] == MASK + digest("first-value-1") != b["env"]["WANDB_KEY"]
    assert a["url"] == f"redis://u:{MASK}{digest('pw-first-1')}@h/0"
    # output (not state) shows the bare mask
    assert redact_obj({"WANDB_KEY": "first-value-1"}) == {"WANDB_KEY": MASK}


def test_env_assignments_in_free_text():
    line = "docker run -e WANDB_KEY=abc -e DB_PASS='p w' -e NCCL_IB_HCA=mlx5_0 -e X_AUTH_HEADER=zz"
    out = redact(line)
    assert "abc" not in out and "p w" not in out and "zz" not in out
    assert "NCCL_IB_HCA=mlx5_0" in out


@pytest.mark.parametrize(
    "value,secret",
    [
        ("deepseek-ai/DeepSeek-V4-Flash", False),
        ("/models/DeepSeek-V4.1-Flash-1017", False),
        ("10.231.0.1:5000/sparkctl/vllm-sim:0.1", False),
        ("FLASHINFER_B12X_MOE_BACKEND_2", False),
        ("mlx5_0,mlx5_1", False),
        ("0.01", False),
        ("c8f3a91be27d4410a6b1f0d9e3c2b7a5", True),
        ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", True),
        ("nvapi-AbCdEfGh0123456789xyz", True),
        ("ghp_0123456789abcdefghijABCDEFGHIJ", True),
        ("mysql://root:pw@db/x", True),
    ],
)
def test_token_shapes(value, secret):
    assert looks_like_token(value) is secret


def test_names_that_only_look_secret():
    from sparkctl.transport.redact import is_secret_key

    for name in ("WANDB_KEY", "MY_AUTHTOKEN", "DB_PASS", "GCP_CREDENTIALS", "APP_SECRET", "HF_TOKEN"):
        assert is_secret_key(name), name
    for name in ("TOKENIZERS_PARALLELISM", "NCCL_IB_HCA", "host_key_policy", "max_num_batched_tokens", "keyboard"):
        assert not is_secret_key(name), name
    assert redact("TOKENIZERS_PARALLELISM=false HF_TOKEN=abc") == "TOKENIZERS_PARALLELISM=false HF_TOKEN=***"
