"""`sparkctl doctor` with the runtime simulator running in the lab: healthy, Marlin fallback, crash.

The containers are started the way `sparkctl up` starts them (sparkctl/runtime/containers.py
`start()` with the specs `render()` gives, drafter -> worker -> head), from the lab registry's
simulator image. The model paths live under each lab host's own /srv, so docker's bind mounts
create nothing on the machine's filesystem.
"""

from __future__ import annotations

import time

import pytest
import yaml
from test_doctor import LAB, doctor_lab, failing, run_doctor, sh, variant  # noqa: F401  (fixture)

pytestmark = pytest.mark.lab

MODELS = "/srv/doctor-models"
HOST_CACHE = LAB["caches"]["host_path"]  # the head's cache dir, mounted in its container at:
CONTAINER_CACHE = LAB["caches"]["container_path"]


def runtime_variant(tmp_path, name: str, **env: str):
    def edit(doc):
        doc["runtime"]["model"] = f"{MODELS}/DeepSeek-V4.1-Flash-1017"
        doc["runtime"]["speculative"]["model"] = f"{MODELS}/drafter"
        doc["runtime"]["env"].update(env)
        # the containers start here, not through `up`: no weights are placed in these folders
        doc.pop("weights")
        doc["runtime"]["env"].pop("SIM_CHECK_MODEL_PATH")

    return variant(tmp_path, name, edit)


def _client(lab, host: str):
    import docker

    return docker.DockerClient(base_url=f"unix://{lab.docker_socket(host)}")


def stop_all(lab, cluster: str) -> None:
    from sparkctl.runtime import containers

    for host in ("head", "worker", "offload"):
        containers.stop(_client(lab, host), cluster, timeout=2)


def place_gateway_code(lab, host: str) -> None:
    """The gateway's code where its launch mounts it (what `up`'s gateway step ships)."""
    import json

    from sparkctl.launch import gateway_code
    from sparkctl.launch.names import SHIPPED_COMPLETE

    write = (
        "import json, os, sys; d = sys.argv[1]; files = json.load(sys.stdin)\n"
        "for rel, text in files.items():\n"
        "    os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True); open(os.path.join(d, rel), 'w').write(text)\n"
        f"open(os.path.join(d, {SHIPPED_COMPLETE!r}), 'w').close()\n"
    )
    files = {rel: data.decode() for rel, data in gateway_code.files().items()}
    r = lab.host_exec(host, ["python3", "-c", write, gateway_code.directory()], input=json.dumps(files))
    assert r.returncode == 0, r.stderr


def start(lab, inv_path, wait_health: bool = True, timeout: float = 120):
    """Start the rendered launch in order; wait until the head serves (or its container exits)."""
    import httpx

    from sparkctl.inventory.loader import load_inventory
    from sparkctl.launch.plan import render
    from sparkctl.runtime import containers
    from sparkctl.runtime.health import base_url

    inv = load_inventory(inv_path)
    for host in ("head", "worker", "offload"):
        sh(lab, host, f"mkdir -p {MODELS}/DeepSeek-V4.1-Flash-1017 {MODELS}/drafter")
    stop_all(lab, inv.cluster.name)
    plan = render(inv)
    if plan.gateway:
        place_gateway_code(lab, plan.gateway.host)
    for spec in plan.all_containers:  # gateway, drafter, worker, head
        client = _client(lab, spec.host)
        containers.start(client, spec)
    head = inv.hosts_with_role("head")[0]
    url = f"{base_url(inv)}/health"  # the engine itself, behind the gateway
    deadline = time.monotonic() + timeout
    head_ctr = _client(lab, head).containers.get("sparkctl-head")
    while time.monotonic() < deadline:
        head_ctr.reload()
        if head_ctr.status == "exited":
            return inv, "exited"
        try:
            if wait_health and httpx.get(url, timeout=1, trust_env=False).status_code == 200:
                return inv, "serving"
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"runtime did not serve in {timeout} s: {head_ctr.logs(tail=30).decode(errors='replace')}")


@pytest.fixture(scope="module")
def sim(doctor_lab):  # noqa: F811  (the fixture imported from test_doctor)
    lab, inv = doctor_lab
    if not lab.status().get("image", {}).get("present", True):
        pytest.skip("the simulator image is not in the lab registry (`sparkctl lab up` builds it)")
    yield lab, inv
    stop_all(lab, yaml.safe_load(inv.read_text())["cluster"]["name"])
    for host in ("head", "worker", "offload"):
        sh(lab, host, f"rm -rf {MODELS}", check=False)


def test_running_runtime_every_runtime_check_ok(sim, tmp_path):
    lab, _ = sim
    inv = runtime_variant(tmp_path, "ok")
    _, state = start(lab, inv)
    assert state == "serving"
    rc, doc, err = run_doctor(inv, "--json", "--only", "runtime,gpu,host,images,caches")
    assert failing(doc) == set() and rc == 0, failing(doc)
    runtime = {(c["name"], c["host"]): c for c in doc["checks"] if c["name"].startswith("runtime.")}
    # runtime.peer is the mp executor's check: under ray (the lab's) it says why it does not apply
    peer = runtime.pop(("runtime.peer", "worker"))
    assert peer["status"] == "skipped" and peer["message"].startswith("ray:"), peer
    assert all(c["status"] == "ok" for c in runtime.values()), [c for c in runtime.values() if c["status"] != "ok"]
    assert ("runtime.drafter", "offload") in runtime and ("runtime.containers", "worker") in runtime
    assert runtime[("runtime.kv_pool", "head")]["data"]["kv_pool_tokens"] > 0
    assert "running" in runtime[("runtime.metrics", "head")]["message"]


def test_marlin_fallback_fails_only_moe_backend(sim, tmp_path):
    lab, _ = sim
    inv = runtime_variant(tmp_path, "marlin", SIM_FAULTS="marlin")
    _, state = start(lab, inv)
    assert state == "serving"
    rc, doc, _ = run_doctor(inv, "--json", "--only", "runtime")
    assert failing(doc) == {("runtime.moe_backend", "head", "sparkctl-head")} and rc == 1
    bad = next(c for c in doc["checks"] if c["status"] == "failed")
    assert "Marlin" in bad["message"] and "flashinfer_b12x" in bad["fix"]


def test_crash_fails_engine_and_says_why(sim, tmp_path):
    # SIM_FAULTS_FILE is read by every container; only the head's host gets the file (the cache
    # dir is per host), so only the head's engine crashes: a device-side assert while serving.
    lab, _ = sim
    fault_file = f"{CONTAINER_CACHE}/doctor-sim-faults"
    inv = runtime_variant(tmp_path, "crash", SIM_FAULTS_FILE=fault_file)
    _, state = start(lab, inv)
    assert state == "serving"
    sh(lab, "head", f"echo crash_now > {HOST_CACHE}/doctor-sim-faults")
    try:
        head = _client(lab, "head").containers.get("sparkctl-head")
        deadline = time.monotonic() + 60
        while head.status != "exited" and time.monotonic() < deadline:  # 503 while it lingers, then exit
            time.sleep(0.3)
            head.reload()
        assert head.status == "exited"
        rc, doc, _ = run_doctor(inv, "--json", "--only", "runtime")
    finally:
        sh(lab, "head", f"rm -f {HOST_CACHE}/doctor-sim-faults")
    assert rc == 1
    on_head = {n for n, h, _ in failing(doc) if h == "head"}
    assert {"runtime.engine", "runtime.containers", "runtime.health"} <= on_head, failing(doc)
    # the worker's Ray node may go down with the head (its GCS is gone): that is the same crash
    assert {n for n, _, _ in failing(doc)} <= {"runtime.engine", "runtime.containers", "runtime.health"}, failing(doc)
    engine = next(c for c in doc["checks"] if c["name"] == "runtime.engine" and c["host"] == "head")
    assert "device-side assert" in engine["message"] and "max_num_seqs" in engine["fix"]
