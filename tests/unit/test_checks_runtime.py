"""Runtime checks on the recorded lab facts plus the runtime's answers: containers (docker inspect),
log lines (vLLM's own, as the simulator prints them), and the HTTP API."""

from __future__ import annotations

import json

from sparkctl.facts.endpoint import EndpointFacts
from sparkctl.runtime.launch import render
from test_checks import INV, H, O, W, by, edit, failing, run, sections

PLAN = render(INV)
OK_LOG = [
    "(RayWorkerWrapper pid=80) INFO [oracle.py:389] Using 'flashinfer_b12x' Mxfp4 MoE backend out of potential backends: ['flashinfer_b12x', 'marlin'].",
    "(EngineCore_DP0 pid=2) INFO [kv_cache_utils.py:1733] GPU KV cache size: 1,930,112 tokens",
    "(APIServer pid=1) INFO [api_server.py:1950] Starting vLLM server on http://0.0.0.0:8888",
]
MODELS = [{"id": INV.runtime.served_model_name, "object": "model", "max_model_len": INV.runtime.max_model_len}]
METRICS = {
    "vllm:num_requests_running": 2.0, "vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 0.31,
    "vllm:spec_decode_num_drafts_total": 100.0, "vllm:spec_decode_num_draft_tokens_total": 500.0,
    "vllm:spec_decode_num_accepted_tokens_total": 280.0,
}  # fmt: skip


def container(spec, status="running", exit_code=0, config_hash=None, image_id=None):
    return {
        "Id": f"{spec.role}{'0' * 60}",
        "Name": f"/{spec.name}",
        "Image": image_id or "",
        "State": {"Status": status, "ExitCode": exit_code, "StartedAt": "2026-11-29T15:20:00.000Z", "Error": ""},
        "Config": {"Image": spec.image, "Labels": {**spec.labels, **({"io.sparkctl.config-hash": config_hash} if config_hash else {})}},
        "HostConfig": {"Ulimits": [{"Name": "memlock", "Soft": spec.ulimits["memlock"], "Hard": spec.ulimits["memlock"]}]},
    }


def running(secs=None, logs=None, status=None, config_hash=None, drafter_health="200"):
    """The recorded lab with the runtime up on every host of the launch."""
    secs = secs or sections()
    for host in (H, W, O):
        items = []
        scan = ""
        for spec in PLAN.for_host(host):
            image_id = secs[host]["image.0"]["out"].strip()
            c = container(spec, status=(status or {}).get(spec.role, "running"), exit_code=1 if (status or {}).get(spec.role) else 0,
                          config_hash=config_hash, image_id=image_id)  # fmt: skip
            items.append(c)
            lines = (logs or {}).get(spec.role, OK_LOG if spec.role != "drafter" else [])
            scan += f"@@ctr {c['Id']}\n" + "".join(line + "\n" for line in lines)
        edit(secs, host, "containers", json.dumps(items))
        edit(secs, host, "logs", scan)
    edit(secs, O, "drafter_health", drafter_health)
    return secs


def endpoint(health=200, models=MODELS, metrics=METRICS, error=None):
    return EndpointFacts(url="http://10.231.0.11:8888", health=health, health_error=error, models=models, metrics=dict(metrics))


def test_runtime_up_and_healthy():
    r = run(running(), endpoint=endpoint())
    assert failing(r) == set()
    runtime = [x for x in r if x.group == "runtime"]
    assert runtime and all(x.status == "ok" for x in runtime), [x for x in runtime if x.status != "ok"]
    m = by(r, "runtime.metrics", H)
    assert "2 running, 0 waiting" in m.message and "KV cache 31% used" in m.message
    assert m.data["acceptance_length"] == 3.8 and m.data["acceptance_rate"] == 0.56
    assert "1,930,112" in by(r, "runtime.kv_pool", H).message
    assert by(r, "runtime.containers", W, "sparkctl-worker").status == "ok"
    assert by(r, "host.memlock", H).status == "warn"  # the lab inventory's limit; the containers have it


def test_marlin_fallback_fails_moe_backend_only():
    marlin = [
        "(RayWorkerWrapper pid=80) WARNING [marlin_utils_fp8.py:118] Your GPU does not have native support for FP8 computation but "
        "FP8 quantization is being used. Weight-only FP8 compression will be used leveraging the Marlin kernel.",
        "(RayWorkerWrapper pid=80) INFO [oracle.py:389] Using 'marlin' Mxfp4 MoE backend out of potential backends: ['flashinfer_b12x', 'marlin'].",
    ] + OK_LOG[1:]
    r = run(running(logs={"head": marlin}), endpoint=endpoint())
    assert failing(r) == {("runtime.moe_backend", H, "sparkctl-head")}
    f = by(r, "runtime.moe_backend", H)
    assert "fell back to Marlin" in f.message and "flashinfer_b12x" in f.fix


def test_crash_fails_engine_health_and_container():
    dead = OK_LOG + [
        "(EngineCore_DP0 pid=2) ERROR [worker_base.py:617] RuntimeError: CUDA error: device-side assert triggered",
        "(EngineCore_DP0 pid=2) ERROR [core.py:710] EngineCore encountered a fatal error.",
    ]
    r = run(running(logs={"head": dead}, status={"head": "exited"}), endpoint=endpoint(health=None, error="connection refused"))
    assert failing(r) == {
        ("runtime.engine", H, "sparkctl-head"), ("runtime.health", H, ""), ("runtime.containers", H, "sparkctl-head"),
    }  # fmt: skip
    e = by(r, "runtime.engine", H)
    assert "device-side assert" in e.message and "max_num_seqs" in e.fix
    assert "exited (exit code 1)" in by(r, "runtime.containers", H).message
    # while dead but still up, /health answers 503
    r = run(running(logs={"head": dead}), endpoint=endpoint(health=503))
    assert "503: the engine is dead" in by(r, "runtime.health", H).message


def test_lost_ray_worker_names_the_worker():
    lost = OK_LOG + [
        "(EngineCore_DP0 pid=2) ERROR [ray_executor.py:508] RayWorkerProc rank=1 died unexpectedly (node ip=10.231.100.3).",
        "(EngineCore_DP0 pid=2) ERROR [core.py:710] EngineCore encountered a fatal error.",
    ]
    r = run(running(logs={"head": lost}), endpoint=endpoint(health=503))
    e = by(r, "runtime.engine", H)
    assert e.status == "fail" and "RayWorkerProc rank=1 died unexpectedly" in e.message and "worker" in e.fix


def test_still_loading_is_a_warning():
    r = run(running(logs={"head": OK_LOG[:2]}), endpoint=endpoint(health=None, error="connection refused"))
    h = by(r, "runtime.health", H)
    assert h.status == "warn" and "loading" in h.message
    assert by(r, "runtime.models", H).status == "skipped"


def test_config_changed_since_start_and_wrong_model():
    r = run(running(config_hash="0123456789abcdef"), endpoint=endpoint(models=[{"id": "other", "max_model_len": 4096}]))
    assert {(n, h) for n, h, _ in failing(r)} >= {("runtime.config", H), ("runtime.config", W), ("runtime.models", H)}
    assert "the inventory changed since it started" in by(r, "runtime.config", W).message
    r = run(running(), endpoint=endpoint(models=[{**MODELS[0], "max_model_len": 262144}]))
    assert failing(r) == {("runtime.models", H, "")} and "262144" in by(r, "runtime.models", H).message


def test_missing_container_and_stale_drafter():
    secs = running(drafter_health="000")
    edit(secs, W, "containers", "[]")
    r = run(secs, endpoint=endpoint())
    assert ("runtime.containers", W, "sparkctl-worker") in failing(r) and ("runtime.drafter", O, "") in failing(r)


def test_kv_pool_smaller_than_expected_or_than_a_request():
    small = [OK_LOG[0], "(EngineCore_DP0 pid=2) INFO [kv_cache_utils.py:1733] GPU KV cache size: 1,500,000 tokens", OK_LOG[2]]
    r = run(running(logs={"head": small}), endpoint=endpoint())
    assert by(r, "runtime.kv_pool", H).status == "warn" and "1,930,000" in by(r, "runtime.kv_pool", H).message
    tiny = [OK_LOG[0], "(EngineCore_DP0 pid=2) INFO [kv_cache_utils.py:1733] GPU KV cache size: 200,000 tokens", OK_LOG[2]]
    r = run(running(logs={"head": tiny}), endpoint=endpoint())
    assert failing(r) == {("runtime.kv_pool", H, "")}


def test_kv_nearly_full_warns():
    r = run(running(), endpoint=endpoint(metrics={**METRICS, "vllm:kv_cache_usage_perc": 0.97}))
    assert by(r, "runtime.metrics", H).status == "warn" and "nearly full" in by(r, "runtime.metrics", H).message


def test_memlock_launch_limit_warns_unlimited_is_ok_and_drift_fails():
    import yaml

    from sparkctl.inventory.models import Inventory
    from test_checks import REC

    r = run(sections())  # the recorded lab inventory sets 8 MiB: its dockerd cannot raise the limit
    m = by(r, "host.memlock", H)
    assert m.status == "warn" and "8388608" in m.message and "-1" in m.fix
    doc = yaml.safe_load((REC / "inventory.yaml").read_text())
    doc["runtime"]["memlock"] = -1
    inv = Inventory.model_validate(doc)
    assert by(run(sections(), inv=inv), "host.memlock", H).status == "ok"
    # containers running with 8 MiB while the launch now says unlimited: not started from this launch
    r = run(running(), inv=inv, endpoint=endpoint())
    assert ("host.memlock", H, "") in failing(r) and "sparkctl up" in by(r, "host.memlock", H).fix
