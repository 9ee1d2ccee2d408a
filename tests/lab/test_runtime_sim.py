"""The runtime simulator in the lab's containers, started by `sparkctl up` from the rendered launch.

What each test checks is what an operator (or doctor, or bench) sees of a real vLLM cluster: the
port refusing while loading, the head's engine dying with its worker, max_num_seqs queueing,
acceptance by workload and by context, and the drain on SIGTERM (health 200, new requests empty `abort`). HTTP goes from this machine to
the head's management address; metrics are read with prometheus_client's parser.

Each test brings the runtime to the config it needs with `sparkctl up -i` (a no-op when it is
already there, whatever ran before), and the tests are ordered so that neighbours share one start:
the lab inventory's runtime (acceptance, then the worker loss, which kills it), a slow start, the
slow steps with a 30 s drain (queueing, then SIGTERM), the slow steps with no drain. The module
puts the lab inventory's runtime back at the end (`restore`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from labcli import HEAD_IP, run
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.lab

ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}
URL = f"http://{HEAD_IP}:8888"
ENGINE = f"{URL}/gateway/engine"  # behind the gateway, on the head's loopback: through its engine route


def sparkctl(*args: str, rc: int = 0) -> dict:
    p = run([*args, "--json"], env=ENV)
    assert p.returncode == rc, (p.stdout[-3000:], p.stderr[-2000:])
    return json.loads(p.stdout)


def metrics() -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(f"{URL}/metrics", timeout=5).text):
        for s in fam.samples:
            key = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def mean_acceptance_length(before: dict, after: dict) -> float:
    drafts = after["vllm:spec_decode_num_drafts_total"] - before["vllm:spec_decode_num_drafts_total"]
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before["vllm:spec_decode_num_accepted_tokens_total"]
    return 1 + accepted / drafts


@pytest.fixture(scope="module")
def lab_inventory(lab) -> dict:
    return yaml.safe_load(Path(lab.INVENTORY_PATH).read_text())


def variant(tmp_path: Path, base: dict, env: dict | None = None, **runtime) -> Path:
    doc = json.loads(json.dumps(base))
    doc["runtime"]["env"].update(env or {})
    doc["runtime"].update(runtime)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def restore(lab):
    """The lab inventory's runtime again once the module is done (each test starts its own config)."""
    yield
    sparkctl("up", "-i", str(lab.INVENTORY_PATH))


SLOW_STEPS = {"SIM_STEP_TIME_SCALE": "0.5"}  # steps 50x a Spark's: requests stay in flight long enough to watch


def complete(model: str, prompt: str, tokens: int, timeout: float = 120, url: str = URL) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/completions",
        json={"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True},
        timeout=timeout,
    )


def test_acceptance_depends_on_the_text_and_decays_with_context(lab, lab_inventory, restore):
    sparkctl("up", "-i", str(lab.INVENTORY_PATH))
    model = lab_inventory["runtime"]["served_model_name"]

    def measured(prompt: str, tokens: int = 400) -> float:
        before = metrics()
        assert complete(model, prompt, tokens).status_code == 200
        return mean_acceptance_length(before, metrics())

    counting = measured("Count from 1 to 200.")
    code = measured("def quicksort(items):\n    # implement quicksort in Python\n")
    prose = measured("Write a short story about a lighthouse keeper.")
    assert counting > code > prose
    assert counting > 5.0  # nearly all of 5 drafts accepted (seed 000)
    long_code = measured("def parse(data):\n" + "    x = compute(x) + 1\n" * 12000)  # ~80K tokens of context
    assert long_code < code - 0.8  # ~4.3 falling to ~2.8 by 80K (seed 002)


def test_worker_loss_kills_the_heads_engine(lab, lab_inventory, restore):
    sparkctl("up", "-i", str(lab.INVENTORY_PATH))
    assert httpx.get(f"{URL}/health", timeout=5).status_code == 200
    lab.host_exec("worker", ["docker", "kill", "sparkctl-worker"], check=True)
    deadline, seen = time.time() + 30, None
    while time.time() < deadline:
        try:
            seen = httpx.get(f"{URL}/health", timeout=2).status_code
        except httpx.HTTPError:
            seen = "gone"
        if seen in (503, "gone"):
            break
        time.sleep(0.2)
    assert seen in (503, "gone")
    # the process exits after its death lines (SIM_DEATH_LINGER): wait for the container to stop
    for _ in range(50):
        if lab.host_exec("head", ["docker", "inspect", "-f", "{{.State.Status}}", "sparkctl-head"]).stdout.strip() == "exited":
            break
        time.sleep(0.2)
    out = lab.host_exec("head", ["docker", "logs", "sparkctl-head"])
    logs = out.stdout + out.stderr
    assert "RayWorkerProc rank=[1] died unexpectedly, shutting down executor." in logs  # ray_executor_v2.py: the list of ranks
    assert "EngineCore encountered a fatal error." in logs
    # and doctor names it
    doc = sparkctl("doctor", "-i", str(lab.INVENTORY_PATH), "--only", "runtime", rc=1)
    assert "runtime.containers" in doc["summary"]["failed_checks"]


def test_port_refuses_connections_while_loading(lab, lab_inventory, tmp_path, restore):
    # start-up phases 8x as long (~3 s of loading at the lab's scale): the loop below looks every 0.2 s
    inv = variant(tmp_path, lab_inventory, {"SIM_FAULTS": "slow_start=8"})
    # --force: a start to watch, whatever config the runtime has now
    up = subprocess.Popen([sys.executable, "-m", "sparkctl", "up", "-i", str(inv), "--force", "--json"], stdout=subprocess.PIPE,
                          env=ENV, text=True)  # fmt: skip
    refused = 0
    try:
        while up.poll() is None:
            head = lab.host_exec("head", ["docker", "inspect", "-f", "{{.State.Status}}", "sparkctl-head"])
            if head.stdout.strip() == "running":
                try:
                    # the engine itself (the gateway's door holds instead): 502 is the gateway saying it refused
                    refused += httpx.get(f"{ENGINE}/health", timeout=1).status_code == 502
                except (httpx.ConnectError, httpx.ReadError):  # reset while the gateway starts
                    refused += 1
            time.sleep(0.2)
        doc = json.loads(up.stdout.read())
    finally:
        if up.poll() is None:  # SIGTERM: the run ends like Ctrl-C and releases the cluster lock
            up.terminate()
            up.wait(60)
    assert doc["failed"] == 0, doc["stopped_at"]
    assert refused > 0, "the port should refuse connections while the engine loads"
    assert httpx.get(f"{URL}/health", timeout=5).status_code == 200


def test_max_num_seqs_runs_four_and_queues_the_rest(lab, lab_inventory, tmp_path, restore):
    inv = variant(tmp_path, lab_inventory, SLOW_STEPS, shutdown_timeout=30)  # the drain test's config: one start for both
    sparkctl("up", "-i", str(inv))
    model = lab_inventory["runtime"]["served_model_name"]
    threads = [threading.Thread(target=complete, args=(model, f"Write an essay about rivers, part {i}.", 400)) for i in range(6)]
    for t in threads:
        t.start()
    peak = (0.0, 0.0)
    try:
        for _ in range(40):
            m = metrics()
            running, waiting = m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]
            peak = max(peak, (running, waiting))
            if (running, waiting) == (4.0, 2.0):
                break
            time.sleep(0.1)
    finally:
        for t in threads:
            t.join()
    assert peak == (4.0, 2.0)  # max_num_seqs 4: the other two wait


def test_sigterm_drains_in_flight_while_health_stays_200_and_new_requests_end_empty(lab, lab_inventory, tmp_path, restore):
    # vLLM 0.33 (docs/conformance.md h_drain_*): during the drain /health stays 200 and a new request
    # is answered 200 with nothing in it, finished `abort`; only what was in flight at SIGTERM runs on
    inv = variant(tmp_path, lab_inventory, SLOW_STEPS, shutdown_timeout=30)
    sparkctl("up", "-i", str(inv))
    model = lab_inventory["runtime"]["served_model_name"]
    engine = ENGINE  # not the gateway's held door
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(r=complete(model, "Write an essay about the sea.", 600, url=engine)))
    t.start()
    time.sleep(0.5)
    stopper = threading.Thread(target=lambda: lab.host_exec("head", ["docker", "stop", "sparkctl-head"], timeout=60))
    stopper.start()
    deadline, draining = time.monotonic() + 20, False
    while not draining and time.monotonic() < deadline:
        log = lab.host_exec("head", ["docker", "logs", "sparkctl-head"]).stdout
        draining = "[shutdown] EngineCore: draining in-flight requests count=1" in log
        time.sleep(0.1)
    try:
        health = httpx.get(f"{engine}/health", timeout=2).status_code
        late = complete(model, "Count from 1 to 10.", 20, timeout=10, url=engine)
    finally:
        t.join(timeout=60)
        stopper.join(timeout=60)
    assert draining
    assert health == 200  # /health does not tell a drain from serving
    choice = late.json()["choices"][0]
    assert (late.status_code, choice["finish_reason"], choice["text"]) == (200, "abort", "")
    r = result["r"]
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 600  # in-flight finished


def test_shutdown_timeout_zero_aborts_in_flight(lab, lab_inventory, tmp_path, restore):
    inv = variant(tmp_path, lab_inventory, SLOW_STEPS, shutdown_timeout=0)
    sparkctl("up", "-i", str(inv))
    model = lab_inventory["runtime"]["served_model_name"]
    result: dict = {}

    def call() -> None:
        try:
            result["r"] = complete(model, "Write an essay about the sea.", 600)
        except httpx.HTTPError as exc:
            result["error"] = exc

    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.5)
    lab.host_exec("head", ["docker", "stop", "sparkctl-head"], timeout=60)
    t.join(timeout=60)
    r = result.get("r")
    aborted = r is None or r.status_code != 200 or r.json()["usage"]["completion_tokens"] < 600
    assert aborted
