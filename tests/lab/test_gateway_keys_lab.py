"""Keys at the front door on the lab (issue 39): `up` and a warm reload with `gateway.api_keys_file`
set serve (their smoke completion, first token and decode measurement send sparkctl's key, read
from the head), a client without the key gets 401 in OpenAI's shape, and the engine's own port
(gateway.engine_port) does not answer from another host of the lab: behind the gateway it listens
on the head's loopback. The module ends on the lab's own inventory (no keys)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from labcli import HEAD_IP, URL, sparkctl, variant

pytestmark = pytest.mark.lab

KEYS_FILE = "/etc/sparkctl-lab-test/api-keys"
KEY = "sk-lab-front-door-key-made-up-0001"  # made up for this test
CONNECT = """
import socket, sys, json
out = {}
for port in map(int, sys.argv[2:]):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((sys.argv[1], port))
        out[port] = "open"
    except OSError as e:
        out[port] = type(e).__name__
    finally:
        s.close()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def keyed(lab, tmp_path_factory) -> tuple[Path, Path]:
    lab_inv = Path(lab.INVENTORY_PATH)
    d = tmp_path_factory.mktemp("keys")
    lab.host_exec("head", ["sh", "-c", f"umask 077 && mkdir -p {Path(KEYS_FILE).parent} && "
                                       f"printf '# clients\\n{KEY}\\n' > {KEYS_FILE}"], check=True)  # fmt: skip
    inv = variant(lab_inv, d, "keyed", gateway__api_keys_file=KEYS_FILE)
    renamed = variant(inv, d, "keyed-renamed", runtime__served_model_name="keyed-model")
    yield inv, renamed
    sparkctl("up", "-i", str(lab_inv), rc=None)
    lab.host_exec("head", ["rm", "-rf", str(Path(KEYS_FILE).parent)])


def test_up_and_a_reload_with_keys_serve_and_turn_away_a_client_without_one(lab, keyed):
    """Cost: an `up` (the gateway restarts with its keys), a warm reload, and the `up` back."""
    inv, renamed = keyed
    up = sparkctl("up", "-i", str(inv))
    assert up["failed"] == 0
    body = {"model": "deepseek-v4.1-flash", "prompt": "Count from 1 to 5:", "max_tokens": 4}
    r = httpx.post(f"{URL}/v1/completions", json=body, timeout=60)
    assert r.status_code == 401, r.text
    assert r.json()["error"]["type"] == "AuthenticationError"
    assert httpx.get(f"{URL}/gateway/metrics", timeout=10).status_code == 401  # from off the head: the key
    ok = httpx.post(f"{URL}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"], ok.text

    # a warm reload: its drain watch, smoke completion, first token and decode measurement all pass the door
    reload = sparkctl("reload", "-i", str(inv), "--config", str(renamed), "--yes")
    assert reload["outcome"] == "ok" and reload["plan"]["prediction"] == "warm", json.dumps(reload)[-3000:]
    assert KEY not in json.dumps(reload)  # sparkctl's key is in no output
    body["model"] = "keyed-model"
    assert httpx.post(f"{URL}/v1/completions", json=body, timeout=60).status_code == 401
    ok = httpx.post(f"{URL}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert ok.status_code == 200, ok.text

    # the engine's port from the worker: nothing answers (it listens on the head's loopback); the gateway's does
    r = lab.host_exec("worker", ["python3", "-c", CONNECT, HEAD_IP, "8001", URL.rsplit(":", 1)[1]], timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"8001": "ConnectionRefusedError", URL.rsplit(":", 1)[1]: "open"}, r.stdout
