"""Issue 21 on the lab: the engine on vLLM's multiprocessing executor (`distributed_executor_backend:
mp`, no Ray), sharing one cluster: reload ray -> mp -> ray keeps serving and the history shows both;
`up` with mp serves and a second `up` changes nothing; the worker's rank process killed under mp is
named by doctor with its runbook. The module gives the lab back its own inventory (ray) whatever
happens.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml
from labcli import ENV, URL, run, sparkctl

from sparkctl_lab.topology import HOSTS

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def invs(lab, tmp_path_factory):
    """(the lab's inventory, its mp variant); on exit the lab runs its own (ray) config again."""
    ray = Path(lab.INVENTORY_PATH)
    doc = yaml.safe_load(ray.read_text())
    doc["runtime"]["distributed_executor_backend"] = "mp"
    mp = tmp_path_factory.mktemp("mp") / "lab-mp.yaml"
    mp.write_text(yaml.safe_dump(doc))
    try:
        yield ray, mp
    finally:
        sparkctl("up", "-i", str(ray), rc=None)


def serving() -> bool:
    r = httpx.post(f"{URL}/v1/completions", json={"prompt": "Count from 1 to 5:", "max_tokens": 8}, timeout=30)
    return httpx.get(f"{URL}/health", timeout=5).status_code == 200 and r.status_code == 200


def worker_command(lab) -> str:
    return lab.host_exec("worker", ["docker", "inspect", "-f", "{{json .Config.Cmd}}", "sparkctl-worker"], check=True).stdout


def config_hash(inv: Path) -> str:
    return sparkctl("render", "-i", str(inv))["config_hash"]


def test_reload_ray_to_mp_and_back_keeps_serving_and_history_shows_both(lab, invs):
    ray, mp = invs
    sparkctl("up", "-i", str(ray))
    to_mp = sparkctl("reload", "-i", str(ray), "--config", str(mp), "--yes")
    assert to_mp["outcome"] == "ok" and to_mp["plan"]["restart_containers"] == ["sparkctl-worker", "sparkctl-head"]
    assert to_mp["plan"]["prediction"] == "warm" and to_mp["runtime_start"]["cache"].startswith("warm")
    assert serving() and '"--headless"' in worker_command(lab) and '"ray"' not in worker_command(lab)
    back = sparkctl("reload", "-i", str(mp), "--config", str(ray), "--yes")
    assert back["outcome"] == "ok" and back["plan"]["prediction"] == "warm"
    assert serving() and '"ray"' in worker_command(lab)
    events = sparkctl("history", "-i", str(ray))["events"]
    assert [(e["outcome"], e["config_hash"]) for e in events[-2:]] == [("ok", config_hash(mp)), ("ok", config_hash(ray))]


def test_up_with_mp_serves_and_a_second_up_changes_nothing(lab, invs):
    _, mp = invs
    first = sparkctl("up", "-i", str(mp))
    assert first["failed"] == 0 and serving()
    log = lab.host_exec("worker", ["docker", "logs", "sparkctl-worker"], check=True)
    assert (
        f"headless multiproc executor, with head node address {HOSTS['head'].nic('enp1s0f0np0').ip}:29501"
        in log.stdout + log.stderr
    )
    again = sparkctl("up", "-i", str(mp))
    assert again["changed"] == 0 and again["failed"] == 0


def test_a_killed_worker_rank_under_mp_is_named_by_doctor_with_the_runbook(lab, invs):
    _, mp = invs
    sparkctl("up", "-i", str(mp))
    top = lab.host_exec("worker", ["docker", "top", "sparkctl-worker", "-eo", "pid,args"], check=True).stdout
    (pid,) = [line.split()[0] for line in top.splitlines() if "sparkctl_lab.sim.mp_worker" in line]  # VllmWorker-1
    lab.host_exec("worker", ["kill", "-9", pid], check=True)
    doc = {}
    for _ in range(40):  # the headless command returns once its monitor sees the rank die
        doc = sparkctl("doctor", "-i", str(mp), "--only", "runtime", rc=None)
        peer = next(c for c in doc["checks"] if c["name"] == "runtime.peer" and c["host"] == "worker")
        if peer["status"] == "failed":
            break
    assert peer["status"] == "failed" and "Worker proc VllmWorker-1 died unexpectedly (exit code: -9)" in peer["message"]
    shown = run(["doctor", "-i", str(mp), "--only", "runtime"], timeout=300, env={**ENV, "COLUMNS": "200"})
    report = shown.stdout + shown.stderr
    assert shown.returncode == 1 and "runtime.peer" in report, report
    assert "runbook: sparkctl runbook worker-lost" in re.sub(r"\s+", " ", report), report  # no runbook_base_url in the lab
    # vLLM 0.33's idle mp head is not told; its next request fails, then the engine is dead. The front
    # door answers it 502 when the engine died with it (never sent again), or, when its /health probe
    # saw the engine go first, holds it and answers 503 after hold_s (30 s in the lab)
    died = httpx.post(f"{URL}/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=90)
    assert died.status_code in (502, 503), died.text
    assert died.status_code == 503 or died.headers.get("x-should-retry") == "false", died.headers
    # the engine's own /health (the front door's never-held route to it: its public /health is held now)
    assert httpx.get(f"{URL}/gateway/engine/health", timeout=5).status_code == 503
