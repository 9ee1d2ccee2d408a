"""The model on every node, on the lab: downloaded once from the lab's hub (the real huggingface_hub
client in the engine's image, against sparkctl_lab/hub.py) on the head, copied to the worker over
the fabric, verified byte for byte; a broken copy is named by doctor and repaired file by file.

Faults are made by hand (rm, a byte written with dd), never through sparkctl."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest
from labcli import ENV, URL, run, sparkctl, start, variant

from sparkctl_lab import checkpoint, hub
from sparkctl_lab.topology import HOSTS

pytestmark = pytest.mark.lab

MODEL = "/models/DeepSeek-V4.1-Flash-1017"
DRAFTER = "/models/drafter"
GATED_MODEL = "/models/gated-lab"  # its own folder: the lab's model stays for the tests after
SHARD = "model-00003-of-00006.safetensors"
FABRIC = "enp1s0f0np0"  # the first rail, which the copy takes
MGMT = HOSTS["worker"].mgmt_device


@pytest.fixture(scope="module")
def inv(lab) -> Path:
    path = Path(lab.INVENTORY_PATH)
    sparkctl("up", "-i", str(path))
    return path


def selected(repo: str = checkpoint.TARGET_REPO) -> dict[str, dict]:
    """The files of the lab inventory's revision that travel (its weights.exclude: original/*)."""
    files = checkpoint.ensure(checkpoint.LAB_SPECS).manifest(repo, "main")
    return {n: m for n, m in files.items() if not n.startswith("original/")}


def rx(lab, host: str, dev: str) -> int:
    return int(lab.host_exec(host, ["cat", f"/sys/class/net/{dev}/statistics/rx_bytes"], check=True).stdout)


def run_json(*args: str, rc: int = 0, env: dict | None = None) -> dict:
    """labcli.sparkctl with extra environment, and the output checked for the token too."""
    p = run([*args, "--json"], env={**ENV, **(env or {})})
    assert p.returncode == rc and "Traceback" not in p.stderr, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    for secret in (env or {}).values():
        assert secret not in p.stdout + p.stderr
    return json.loads(p.stdout)


def step(doc: dict, host: str, name: str = "weights") -> dict:
    return doc["hosts"][host][name]


def serves() -> bool:
    r = httpx.post(f"{URL}/v1/completions", json={"model": "deepseek-v4.1-flash", "prompt": "hi", "max_tokens": 4}, timeout=60)
    return r.status_code == 200 and r.json()["usage"]["completion_tokens"] > 0


def test_a_worker_without_the_model_gets_it_from_the_head_over_the_fabric(lab, inv):
    lab.host_exec("worker", ["rm", "-rf", MODEL], check=True)
    fabric0, mgmt0 = rx(lab, "worker", FABRIC), rx(lab, "worker", MGMT)
    check = sparkctl("up", "-i", str(inv), "--check")
    summary = step(check, "worker")["message"]
    assert f"from head ({HOSTS['head'].nic(FABRIC).ip}) over {FABRIC}" in summary, summary
    # the time expected from the rail as measured (shaped to 1 Gb/s; the inventory says 200)
    measured = re.search(r"at (\d+) MB/s \(the rail measured ([\d.]+) Gb/s in this run\)", summary)
    assert measured and int(measured[1]) <= 125 and float(measured[2]) <= 1.0, summary

    doc = sparkctl("up", "-i", str(inv))
    assert step(doc, "worker")["status"] == "changed" and f"copied {len(selected())} file(s)" in step(doc, "worker")["message"]
    assert step(doc, "head")["status"] == "ok"  # the head's verified copy: no hub, no download
    size = sum(m["size"] for m in selected().values())
    assert rx(lab, "worker", FABRIC) - fabric0 >= size
    assert rx(lab, "worker", MGMT) - mgmt0 < size / 10  # SSH control traffic only
    assert serves()

    again = sparkctl("up", "-i", str(inv))
    assert step(again, "worker")["status"] == "ok" and "every digest verified" in step(again, "worker")["message"]


def test_a_flipped_byte_on_the_worker_is_named_by_doctor_and_that_file_alone_is_copied_again(lab, inv):
    path = f"{MODEL}/{SHARD}"
    # one byte in the middle of the shard's data, size kept (conv=notrunc)
    lab.host_exec("worker", ["sh", "-c", f"printf '\\377' | dd of={path} bs=1 seek=1000000 conv=notrunc status=none"], check=True)
    doc = sparkctl("doctor", "-i", str(inv), "--only", "weights", rc=1)
    bad = [c for c in doc["checks"] if c["name"] == "weights.verified" and c["status"] == "failed"]
    assert [c["host"] for c in bad] == ["worker"] and SHARD in bad[0]["message"], bad

    fixed = sparkctl("up", "-i", str(inv))
    assert "copied 1 file(s)" in step(fixed, "worker")["message"], step(fixed, "worker")
    assert sparkctl("doctor", "-i", str(inv), "--only", "weights")["summary"]["failed_checks"] == []


def test_no_weights_anywhere_goes_from_the_hub_to_serving_with_one_up(lab, inv):
    sparkctl("down", "-i", str(inv))
    for host, path in (("head", MODEL), ("worker", MODEL), ("offload", DRAFTER)):
        lab.host_exec(host, ["rm", "-rf", path], check=True)
    doc = sparkctl("up", "-i", str(inv))
    assert f"downloaded {len(selected())} file(s)" in step(doc, "head")["message"]
    assert f"downloaded {len(selected(checkpoint.DRAFTER_REPO))} file(s)" in step(doc, "offload")["message"]
    assert f"copied {len(selected())} file(s)" in step(doc, "worker")["message"]
    assert serves()
    # the engine runs offline: it can never start a download of its own
    env = lab.host_exec("head", ["docker", "inspect", "-f", "{{json .Config.Env}}", "sparkctl-head"], check=True).stdout
    assert "HF_HUB_OFFLINE=1" in env


def test_a_gated_repo_downloads_with_the_token_from_sparkctls_environment_and_stores_it_nowhere(lab, inv, tmp_path):
    token = hub.token()
    for host in ("head", "worker"):  # a copy an earlier run of this test left would be its own manifest
        lab.host_exec(host, ["sh", "-c", f"rm -rf {GATED_MODEL} /models/.gated-lab.sparkctl-*"], check=True)
    gated = variant(inv, tmp_path, "gated", runtime__model=GATED_MODEL, weights__repo=checkpoint.GATED_REPO,
                    weights__access_env="LAB_HUB_TOKEN")  # fmt: skip
    refused = run_json("up", "-i", str(gated), "--check", rc=1)
    assert "is gated and $LAB_HUB_TOKEN is not set" in step(refused, "head")["message"]
    env = {"LAB_HUB_TOKEN": token}
    done = run_json("up", "-i", str(gated), env=env)
    files = len(checkpoint.ensure(checkpoint.LAB_SPECS).manifest(checkpoint.GATED_REPO, "main"))
    assert f"downloaded {files} file(s)" in step(done, "head")["message"]
    assert serves()
    # nowhere on the head: not in sparkctl's state or history, not in the containers' settings
    grep = lab.host_exec("head", ["sh", "-c", f"grep -rlF {token} /var/lib/sparkctl /models 2>/dev/null; "
                                              "docker inspect sparkctl-head sparkctl-gateway"], check=False)  # fmt: skip
    assert token not in grep.stdout
    sparkctl("up", "-i", str(inv))  # back to the lab's model
    assert serves()


def test_a_copy_cut_by_a_dropped_rail_fails_naming_it_and_the_next_up_resumes_it(lab, inv):
    from sparkctl_lab import shaping
    from sparkctl_lab.topology import HOSTS

    staging = f"/models/.{MODEL.rsplit('/', 1)[1]}.sparkctl-staging"

    def staged() -> int:
        r = lab.host_exec("worker", ["sh", "-c", f"du -sb --apparent-size {staging} 2>/dev/null | cut -f1"])
        return int(r.stdout.strip() or 0)

    lab.host_exec("worker", ["rm", "-rf", MODEL, staging], check=True)
    shaping.shape(HOSTS["worker"], FABRIC, 80)  # 10 MB/s: the copy takes ~20 s, time to cut it
    try:
        run = start("up", "-i", str(inv))
        deadline = time.monotonic() + 60
        while staged() < 20e6 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        lab.host_exec("worker", ["ip", "link", "set", FABRIC, "down"], check=True)
        out, err = run.communicate(timeout=180)
    finally:
        lab.host_exec("worker", ["ip", "link", "set", FABRIC, "up"], check=True)
        shaping.shape(HOSTS["worker"], FABRIC)  # back to the rail's line rate
    assert run.returncode == 1, (out[-2000:], err[-2000:])
    failed = step(json.loads(out), "worker")
    assert failed["status"] == "failed" and "rsync from head" in failed["message"], failed
    assert FABRIC in failed.get("fix", ""), failed
    # the model's path never held a partial copy; what arrived waits in staging
    assert lab.host_exec("worker", ["test", "-e", MODEL]).returncode != 0
    cut = staged()
    assert cut >= 20e6

    check = sparkctl("up", "-i", str(inv), "--check")
    assert "staged by a cut transfer (resumed)" in step(check, "worker")["message"]
    doc = sparkctl("up", "-i", str(inv))
    assert f"copied {len(selected())} file(s)" in step(doc, "worker")["message"]
    assert sparkctl("doctor", "-i", str(inv), "--only", "weights")["summary"]["failed_checks"] == []
    assert serves()


def test_a_folder_on_the_head_is_verified_in_place_against_its_sha256sums_and_copied_to_the_worker(lab, inv, tmp_path):
    names = sorted(selected())
    lab.host_exec("head", ["sh", "-c", f"cd {MODEL} && sha256sum {' '.join(names)} > SHA256SUMS"], check=True)
    lab.host_exec("worker", ["rm", "-rf", MODEL], check=True)
    folder = variant(inv, tmp_path, "folder", weights__repo=None, weights__revision=None, weights__exclude=[],
                     weights__directory=MODEL)  # fmt: skip
    try:
        doc = sparkctl("up", "-i", str(folder))
        head, worker = step(doc, "head"), step(doc, "worker")
        assert head["status"] == "changed" and f"head:{MODEL}@" in head["message"], head  # verified where it is
        assert "downloaded" not in head["message"] and f"copied {len(names)} file(s)" in worker["message"], worker
        again = sparkctl("up", "-i", str(folder))
        assert step(again, "head")["status"] == "ok" and step(again, "worker")["status"] == "ok"
        # a byte flipped in the source itself: refused there, never spread
        lab.host_exec("head", ["sh", "-c", f"printf X | dd of={MODEL}/{SHARD} bs=1 seek=4096 conv=notrunc status=none"],
                      check=True)  # fmt: skip
        refused = run_json("up", "-i", str(folder), rc=1)
        assert "do not match its SHA256SUMS" in step(refused, "head")["message"] and SHARD in step(refused, "head")["message"]
        assert serves()
    finally:
        lab.host_exec("head", ["rm", "-f", f"{MODEL}/SHA256SUMS", f"{MODEL}/{SHARD}"], check=True)
        sparkctl("up", "-i", str(inv))  # the lab's hub source again: the head downloads the shard back
    assert serves()


def test_a_reload_to_another_revision_keeps_the_serving_one_beside_it_and_going_back_fetches_nothing(lab, inv, tmp_path):
    older_commit = checkpoint.ensure(checkpoint.LAB_SPECS).commits(checkpoint.TARGET_REPO)[0]
    older = variant(inv, tmp_path, "older", weights__revision=older_commit)  # one shard differs from main's
    kept = f"/models/.{MODEL.rsplit('/', 1)[1]}.sparkctl-previous"
    for host in ("head", "worker"):  # whatever an earlier change kept: the older revision is on no node
        lab.host_exec(host, ["rm", "-rf", kept], check=True)
    check = sparkctl("reload", "-i", str(inv), "--config", str(older), "--check")
    plans = {r["host"]: r for r in check["results"] if r["step"] == "weights"}
    head = plans["head"]["message"]
    assert plans["head"]["operations"] == ["download"] and "1 file(s)" in head and kept in head, plans
    assert check["plan"]["restart_groups"] == ["engine"], check["plan"]
    try:
        run = sparkctl("reload", "-i", str(inv), "--config", str(older), "--yes")
        assert run["outcome"] == "ok", run
        done = {r["host"]: r["message"] for r in run["results"] if r["step"] == "weights"}
        assert "downloaded 1 file(s)" in done["head"] and "copied 1 file(s)" in done["worker"], done
        assert serves()
    finally:
        back = sparkctl("reload", "-i", str(older), "--config", str(inv), "--yes")
    # back to main: both nodes put the kept copy back with links, no hub, no fabric copy
    done = {r["host"]: r["message"] for r in back["results"] if r["step"] == "weights"}
    assert back["outcome"] == "ok" and all("nothing fetched" in done[h] for h in ("head", "worker")), done
    assert serves()
