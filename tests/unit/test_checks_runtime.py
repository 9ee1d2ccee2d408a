"""Runtime checks on the recorded lab facts plus the runtime's answers: containers (docker inspect),
log lines and /metrics pages built from vLLM 0.33's format strings (docs/conformance.md, via
test_conformance), and the HTTP API."""

from __future__ import annotations

import json

from test_checks import INV, H, O, W, by, edit, failing, run, sections
from test_conformance import line, metrics_page

from sparkctl import runbooks
from sparkctl.facts.endpoint import EndpointFacts
from sparkctl.facts.metrics import parse_page
from sparkctl.launch.plan import render

PLAN = render(INV)
RAY1 = "RayWorkerProc pid=80, ip=10.231.100.3"
OK_LOG = [
    line(
        "moe_nvfp4", "FLASHINFER_B12X", ["FLASHINFER_TRTLLM", "MARLIN"], process="Worker_TP0 pid=79", ray="RayWorkerProc pid=79"
    ),
    line("kv_size", "GPU", "1,930,112", "327,680", 5.89),
    line("serving", "http://0.0.0.0:8888", process="APIServer pid=1"),
]
MODELS = [{"id": INV.runtime.served_model_name, "object": "model", "max_model_len": INV.runtime.max_model_len}]
ENGINE0 = {
    "m_running": 2,
    "m_waiting": 0,
    "m_kv_usage": 0.31,
    "m_spec_drafts": 100,
    "m_spec_draft_tokens": 500,
    "m_spec_accepted": 280,
}
METRICS = {"0": ENGINE0}


def container(spec, status="running", exit_code=0, config_hash=None, image_id=None):
    return {
        "Id": f"{spec.role}{'0' * 60}",
        "Name": f"/{spec.name}",
        "Image": image_id or "",
        "State": {"Status": status, "ExitCode": exit_code, "StartedAt": "2026-11-29T15:20:00.000Z", "Error": ""},
        "Config": {
            "Image": spec.image,
            "Labels": {**spec.labels, **({"io.sparkctl.config-hash": config_hash} if config_hash else {})},
        },
        "HostConfig": {"Ulimits": [{"Name": k, "Soft": v, "Hard": v} for k, v in spec.ulimits.items()]},
    }


def running(secs=None, logs=None, status=None, config_hash=None, drafter_health="200"):
    """The recorded lab with the runtime up on every host of the launch (the gateway on the head)."""
    secs = secs or sections()
    for host in (H, W, O):
        items = []
        scan = ""
        for spec in [c for c in PLAN.all_containers if c.host == host]:
            image_id = secs[host]["image.0"]["out"].strip()
            c = container(spec, status=(status or {}).get(spec.role, "running"), exit_code=1 if (status or {}).get(spec.role) else 0,
                          config_hash=config_hash, image_id=image_id)  # fmt: skip
            items.append(c)
            lines = (logs or {}).get(spec.role, OK_LOG if spec.role in ("head", "worker") else [])
            scan += f"@@ctr {c['Id']}\n" + "".join(line + "\n" for line in lines)
        edit(secs, host, "containers", json.dumps(items))
        edit(secs, host, "logs", scan)
    edit(secs, O, "drafter_health", drafter_health)
    return secs


def endpoint(health=200, models=MODELS, metrics=METRICS, error=None, info=None):
    page = parse_page(metrics_page(metrics, INV.runtime.served_model_name, info))
    return EndpointFacts(url="http://10.231.0.11:8888", health=health, health_error=error, models=models, metrics=page)


def test_runtime_up_and_healthy():
    r = run(running(), endpoint=endpoint())
    assert failing(r) == set()
    runtime = [x for x in r if x.group == "runtime"]
    # runtime.peer is the mp executor's: under ray it does not apply
    applies = [x for x in runtime if not (x.name == "runtime.peer" and x.status == "skipped" and x.message.startswith("ray:"))]
    assert applies and all(x.status == "ok" for x in applies), [x for x in applies if x.status != "ok"]
    m = by(r, "runtime.metrics", H)
    assert "2 running, 0 waiting" in m.message and "KV cache 31% used" in m.message
    # one unit per name: vllm bench serve's (rate in percent of draft tokens, length in tokens per step)
    assert m.data["spec_decode_acceptance_length"] == 3.8 and m.data["spec_decode_acceptance_rate"] == 56.0
    assert "acceptance rate 56% since start" in m.message
    assert "1,930,112" in by(r, "runtime.kv_pool", H).message
    assert by(r, "runtime.containers", W, "sparkctl-worker").status == "ok"
    assert by(r, "host.memlock", H).status == "warn"  # the lab inventory's limit; the containers have it


def test_marlin_fallback_fails_moe_backend_only():
    marlin = [
        line("moe_nvfp4_auto", "MARLIN", ["FLASHINFER_TRTLLM", "MARLIN"], process="Worker_TP0 pid=79"),
        line("marlin_fp4", process="Worker_TP0 pid=79", level="WARNING"),
    ] + OK_LOG[1:]
    r = run(running(logs={"head": marlin}), endpoint=endpoint())
    assert failing(r) == {("runtime.moe_backend", H, "sparkctl-head")}
    f = by(r, "runtime.moe_backend", H)
    assert "fell back to Marlin" in f.message and "flashinfer_b12x" in f.fix
    # the MXFP4 path logs no Marlin warning: the backend line alone says it
    r = run(running(logs={"head": [line("moe_mxfp4_auto", "MARLIN")] + OK_LOG[1:]}), endpoint=endpoint())
    assert failing(r) == {("runtime.moe_backend", H, "sparkctl-head")}


def test_moe_backend_is_read_by_vllms_enum_name_for_the_checkpoints_path():
    # item 1: upper-case enum names, per quantization path (fused_moe/oracle/nvfp4.py, mxfp4.py)
    r = run(running(), endpoint=endpoint())
    assert by(r, "runtime.moe_backend", H).status == "ok" and "FLASHINFER_B12X" in by(r, "runtime.moe_backend", H).message
    nv = INV.model_copy(update={"runtime": INV.runtime.model_copy(update={"moe_quantization": "nvfp4"})})
    assert by(run(running(), inv=nv, endpoint=endpoint()), "runtime.moe_backend", H).status == "ok"
    # another backend than asked: fail, naming what vLLM would have logged
    other = [line("moe_nvfp4", "VLLM_CUTLASS", ["FLASHINFER_TRTLLM"], process="Worker_TP0 pid=79")] + OK_LOG[1:]
    f = by(run(running(logs={"head": other}), inv=nv, endpoint=endpoint()), "runtime.moe_backend", H)
    assert f.status == "failed" and "VLLM_CUTLASS" in f.message and "FLASHINFER_B12X" in f.message
    # the inventory says mxfp4 but the checkpoint took the NvFp4 path
    mx = INV.model_copy(update={"runtime": INV.runtime.model_copy(update={"moe_quantization": "mxfp4"})})
    f = by(run(running(), inv=mx, endpoint=endpoint()), "runtime.moe_backend", H)
    assert f.status == "failed" and "NvFp4" in f.message and "moe_quantization" in f.fix
    # flashinfer_b12x has no MXFP4 name in vLLM 0.33: an image that runs it logs its own; not a failure
    b12x = [line("moe_mxfp4", "B12X_MXFP4_MXFP8", process="Worker_TP0 pid=79")] + OK_LOG[1:]
    f = by(run(running(logs={"head": b12x}), inv=mx, endpoint=endpoint()), "runtime.moe_backend", H)
    assert f.status == "ok" and "B12X_MXFP4_MXFP8" in f.message and "no mxfp4 backend named flashinfer_b12x" in f.message


def test_crash_fails_engine_health_and_container():
    dead = OK_LOG + [
        "(RayWorkerProc pid=80, ip=10.231.100.3) torch.AcceleratorError: CUDA error: device-side assert triggered",
        line("fatal", level="ERROR"),
    ]
    r = run(running(logs={"head": dead}, status={"head": "exited"}), endpoint=endpoint(health=None, error="connection refused"))
    assert failing(r) == {
        ("runtime.engine", H, "sparkctl-head"), ("runtime.health", H, ""), ("runtime.containers", H, "sparkctl-head"),
    }  # fmt: skip
    e = by(r, "runtime.engine", H)
    assert "device-side assert" in e.message and "max_num_seqs" in e.fix
    assert "exited (exit code 1)" in by(r, "runtime.containers", H, "sparkctl-head").message
    # while dead but still up, /health answers 503
    r = run(running(logs={"head": dead}), endpoint=endpoint(health=503))
    assert "503: the engine is dead" in by(r, "runtime.health", H).message


def test_lost_ray_worker_names_the_worker():
    lost = OK_LOG + [line("ray_worker_died", [1], level="ERROR"), line("fatal", level="ERROR")]
    r = run(running(logs={"head": lost}), endpoint=endpoint(health=503))
    found = [x for x in r if x.name == "runtime.engine" and x.host == H]
    assert [x.data["sign"] for x in found] == ["worker_died", "engine_fatal"]  # every sign, the cause first
    assert "RayWorkerProc rank=[1] died unexpectedly" in found[0].message and "worker" in found[0].fix


def test_several_fatal_signs_are_all_reported_most_causal_first():
    # item 3: a device-side assert, a lost Ray worker and the engine's death in one log
    dead = OK_LOG + [
        line("fatal", level="ERROR"),
        "(RayWorkerProc pid=80, ip=10.231.100.3) torch.AcceleratorError: CUDA error: device-side assert triggered",
        line("ray_worker_died", [1], level="ERROR"),
    ]
    r = run(running(logs={"head": dead}), endpoint=endpoint(health=503))
    found = [x for x in r if x.name == "runtime.engine" and x.host == H]
    assert [(x.status, x.data["sign"]) for x in found] == [
        ("failed", "device_assert"),
        ("failed", "worker_died"),
        ("failed", "engine_fatal"),
    ]
    assert "max_num_seqs" in found[0].fix and "worker" in found[1].fix and "traceback" in found[2].fix


def test_still_loading_fails_naming_the_phase_unless_loading_is_allowed():
    # nothing serves while the runtime loads: doctor exits 1, naming the start-up phase and the time
    loading = running(logs={"head": OK_LOG[:2]})
    r = run(loading, endpoint=endpoint(health=None, error="connection refused"))
    h = by(r, "runtime.health", H)
    assert (
        h.status == "failed" and "not serving yet, loading (allocating KV cache, " in h.message and " s since start)" in h.message
    )
    assert "--allow-loading" in h.fix and "never restarts one" in h.fix
    assert by(r, "runtime.models", H).status == "skipped"
    allowed = by(
        run(loading, endpoint=endpoint(health=None, error="connection refused"), allow_loading=True), "runtime.health", H
    )
    assert allowed.status == "warn"


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
    small = [OK_LOG[0], line("kv_size", "GPU", "1,500,000", "327,680", 4.58), OK_LOG[2]]
    r = run(running(logs={"head": small}), endpoint=endpoint())
    assert by(r, "runtime.kv_pool", H).status == "warn" and "1,930,000" in by(r, "runtime.kv_pool", H).message
    tiny = [OK_LOG[0], line("kv_size", "GPU", "200,000", "327,680", 0.61), OK_LOG[2]]
    r = run(running(logs={"head": tiny}), endpoint=endpoint())
    assert failing(r) == {("runtime.kv_pool", H, "")}


def test_kv_nearly_full_warns():
    r = run(running(), endpoint=endpoint(metrics={"0": {**ENGINE0, "m_kv_usage": 0.97}}))
    assert by(r, "runtime.metrics", H).status == "warn" and "nearly full" in by(r, "runtime.metrics", H).message


def test_two_engines_at_half_are_not_a_full_pool():
    # item 2: a gauge is never summed over engines (data parallel: one pool each)
    two = {"0": {**ENGINE0, "m_kv_usage": 0.5}, "1": {**ENGINE0, "m_running": 1, "m_kv_usage": 0.5}}
    m = by(run(running(), endpoint=endpoint(metrics=two)), "runtime.metrics", H)
    assert m.status == "ok" and "KV cache 50% used on the fullest of 2 engines" in m.message
    assert "3 running" in m.message  # request counts do add up
    assert m.data["kv_cache_usage"] == {"max": 0.5, "mean": 0.5, "per_engine": {"0": 0.5, "1": 0.5}}
    assert m.data["spec_decode_acceptance_rate"] == 56.0  # counters summed, then divided
    one_full = {"0": {**ENGINE0, "m_kv_usage": 0.2}, "1": {**ENGINE0, "m_kv_usage": 0.96}}
    m = by(run(running(), endpoint=endpoint(metrics=one_full)), "runtime.metrics", H)
    assert m.status == "warn" and "engine 1's pool is nearly full" in m.message


def test_kv_pool_from_cache_config_info_without_the_log_line():
    # item 8: vllm:cache_config_info carries kv_cache_size_tokens
    no_kv_line = [OK_LOG[0], OK_LOG[2]]
    r = run(running(logs={"head": no_kv_line}), endpoint=endpoint())
    assert by(r, "runtime.kv_pool", H).status == "skipped"
    info = {"0": {"block_size": "256", "kv_cache_size_tokens": "1930112"}}
    k = by(run(running(logs={"head": no_kv_line}), endpoint=endpoint(info=info)), "runtime.kv_pool", H)
    assert k.status == "ok" and "1,930,112" in k.message and k.data["source"] == "metrics"


def test_memlock_launch_limit_warns_unlimited_is_ok_and_drift_fails():
    import yaml
    from test_checks import REC

    from sparkctl.inventory.models import Inventory

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


def test_last_starts_warm_or_cold_from_the_log_informs_the_cache_check():
    # item 3: the compile line the log ends on says how the running config's last start went
    cold = OK_LOG + [line("compile_miss", "[backbone] ", "(1, 8192)", 612.0, process="Worker_TP0 pid=79")]
    warm = "present\nd ./3f2a\ni ./3f2a/rank_0_0/backbone/vllm_compile_cache.py\n"
    secs = edit(running(logs={"head": cold}), H, "cache", warm)
    c = by(run(secs, endpoint=endpoint()), "caches.compile", H)
    assert c.status == "ok" and "last start compiled from scratch (612 s)" in c.message and c.data["last_start"] == "cold"
    # compiled, yet nothing on the volume: the runtime writes its cache elsewhere, every start is cold
    secs = edit(running(logs={"head": cold}), H, "cache", "present\n")
    c = by(run(secs, endpoint=endpoint()), "caches.compile", H)
    assert c.status == "failed" and "every start is cold" in c.message and "VLLM_CACHE_ROOT" in c.fix
    hit = cold + [line("compile_hit", "[backbone] ", "(1, 8192)", 1.2, process="Worker_TP0 pid=79")]
    secs = edit(running(logs={"head": hit}), H, "cache", warm)
    c = by(run(secs, endpoint=endpoint()), "caches.compile", H)
    assert c.status == "ok" and "warm start" in c.message and c.data["last_start"] == "warm"


# --- runtime.spec_acceptance: vLLM's last logged interval against the inventory's expected level ----


def spec_line(length: float) -> str:
    # vLLM 0.33's SpecDecoding line (v1/spec_decode/metrics.py:120) as the head's API server logs it
    return line("spec", length, 310.5, 900.0, 3105, 9000, "0.510, 0.260, 0.130, 0.070, 0.040", 34.5, process="APIServer pid=1")


def test_acceptance_over_the_last_interval_below_the_expected_level_warns():
    logs = {"head": OK_LOG + [spec_line(3.90), spec_line(1.84)]}  # the newest interval counts, not the first
    r = by(run(running(logs=logs), endpoint=endpoint()), "runtime.spec_acceptance", H)
    assert r.status == "warn" and "1.84" in r.message and f"{INV.alerts.acceptance_length_min:g}" in r.message
    assert runbooks.for_result(r) == "docs/runbooks/spec-acceptance-low.md"


def test_acceptance_at_or_above_the_level_or_not_logged_yet_is_ok():
    r = by(
        run(running(logs={"head": OK_LOG + [spec_line(1.5), spec_line(3.10)]}), endpoint=endpoint()), "runtime.spec_acceptance", H
    )
    assert r.status == "ok" and "3.10" in r.message
    r = by(run(running(), endpoint=endpoint()), "runtime.spec_acceptance", H)
    assert r.status == "ok" and "no speculative interval" in r.message


# --- runtime.queue: requests waiting while slots are free (a long prefill holds the budget) --------


def test_requests_waiting_with_free_slots_warn_head_of_line():
    r = by(run(running(), endpoint=endpoint(metrics={"0": {**ENGINE0, "m_running": 1, "m_waiting": 6}})), "runtime.queue", H)
    assert r.status == "warn" and "6 request(s) wait with 1 of 4 slots busy" in r.message
    assert runbooks.for_result(r) == "docs/runbooks/long-ttft.md"


def test_waiting_for_full_slots_or_a_request_arriving_mid_step_is_ok():
    full = {"0": {**ENGINE0, "m_running": INV.runtime.max_num_seqs, "m_waiting": 9}}
    assert by(run(running(), endpoint=endpoint(metrics=full)), "runtime.queue", H).status == "ok"
    mid_step = {"0": {**ENGINE0, "m_running": 2, "m_waiting": 1}}  # seen on the lab with 3 chat users, no long prompt
    assert by(run(running(), endpoint=endpoint(metrics=mid_step)), "runtime.queue", H).status == "ok"
    assert by(run(running(), endpoint=endpoint()), "runtime.queue", H).status == "ok"


def test_waiting_for_kv_space_is_the_pools_problem_not_head_of_line():
    full = {"0": {**ENGINE0, "m_running": 2, "m_waiting": 7, "m_kv_usage": 0.99}}
    r = run(running(), endpoint=endpoint(metrics=full))
    assert by(r, "runtime.queue", H).status == "ok" and "KV space" in by(r, "runtime.queue", H).message
    assert by(r, "runtime.metrics", H).status == "warn"


# --- runtime.ttft: p99 time to first token between doctor's two /metrics pages ---------------------


def sim_pages(before: list[float], between: list[float]) -> tuple[str, str]:
    """Two /metrics pages of the simulator (its own exposition code): TTFTs observed before the
    first page, then `between` observed before the second."""
    from sparkctl_lab.sim.metrics import VllmMetrics

    m = VllmMetrics(INV.runtime.served_model_name, INV.runtime.max_model_len, 0, {})
    for v in before:
        m.observe(m.ttft, v)
    first = m.render()
    for v in between:
        m.observe(m.ttft, v)
    return first, m.render()


def windowed(before: list[float], between: list[float], window_s: float = 2.0) -> EndpointFacts:
    first, second = sim_pages(before, between)
    ep = endpoint()
    ep.earlier, ep.metrics, ep.window_s = parse_page(first), parse_page(second), window_s
    return ep


def test_ttft_quantile_counts_only_what_happened_between_the_pages():
    from sparkctl.facts.metrics import TTFT, quantile_between

    first, second = sim_pages([40.0] * 50, [0.01] * 99 + [0.3])  # an old burst of 40 s, then fast
    p99, n = quantile_between(parse_page(first), parse_page(second), TTFT, 0.99)
    assert n == 100 and p99 is not None and p99 <= 0.3  # the old burst is not in it
    assert quantile_between(parse_page(second), parse_page(second), TTFT, 0.99) == (None, 0)


def test_ttft_warns_on_a_slow_first_token_now_and_names_the_runbook():
    want = INV.alerts.ttft_p99_seconds
    slow = by(run(running(), endpoint=windowed([0.01] * 20, [0.01] * 5 + [want * 2] * 5)), "runtime.ttft", H)
    assert slow.status == "warn" and "above alerts.ttft_p99_seconds" in slow.message and slow.data["first_tokens"] == 10
    assert runbooks.for_check("runtime.ttft") == "docs/runbooks/long-ttft.md"
    fast = by(run(running(), endpoint=windowed([want * 2] * 20, [0.01] * 10)), "runtime.ttft", H)
    assert fast.status == "ok" and fast.data["first_tokens"] == 10
    idle = by(run(running(), endpoint=windowed([0.01] * 3, [])), "runtime.ttft", H)
    assert idle.status == "ok" and "no request got its first token" in idle.message
    assert by(run(running(), endpoint=endpoint()), "runtime.ttft", H).status == "ok"  # one page: nothing to compare


# --- runtime.progress: running requests and nothing moving (a hang behind a 200 /health) ---------


def engine_pages(running: float, steps: list[tuple[float, float, float]], window_s: float) -> EndpointFacts:
    """Two pages of the simulator's own exposition: before, then after `steps`, each adding
    (generated tokens, prompt tokens counted at first token, KV usage now)."""
    from sparkctl_lab.sim.metrics import VllmMetrics

    m = VllmMetrics(INV.runtime.served_model_name, INV.runtime.max_model_len, 0, {})
    m.set_gauge(m.running, running)
    m.set_gauge(m.kv_usage, 0.2)
    m.inc(m.generation_tokens, 500)
    first = m.render()
    for generated, prompt, kv in steps:
        m.inc(m.generation_tokens, generated)
        m.inc(m.prompt_tokens, prompt)
        m.set_gauge(m.kv_usage, kv)
    ep = endpoint()
    ep.earlier, ep.metrics, ep.window_s = parse_page(first), parse_page(m.render()), window_s
    return ep


def test_an_engine_that_holds_requests_and_moves_nothing_warns_a_hang_with_the_restart():
    from sparkctl.checks.runtime import STALL_SECONDS

    r = by(run(running(), endpoint=engine_pages(2, [], STALL_SECONDS + 0.5)), "runtime.progress", H)
    assert r.status == "warn" and "holds 2 running request(s)" in r.message and "/health answers 200" in r.message
    assert "`sparkctl restart`" in r.fix and runbooks.for_result(r) == "docs/runbooks/engine-stalled.md"


def test_a_decode_a_finished_prefill_or_a_prefill_chunk_is_progress_and_an_idle_engine_holds_nothing():
    from sparkctl.checks.runtime import STALL_SECONDS

    long = STALL_SECONDS + 0.5
    for steps in ([(40, 0, 0.2)], [(1, 9000, 0.25)], [(0, 0, 0.23)]):  # decode; a prompt done; a chunk's KV blocks
        r = by(run(running(), endpoint=engine_pages(1, steps, long)), "runtime.progress", H)
        assert r.status == "ok" and "progress" in r.message, (steps, r.message)
    assert by(run(running(), endpoint=engine_pages(0, [], long)), "runtime.progress", H).status == "ok"
    short = by(run(running(), endpoint=engine_pages(2, [], 1.0)), "runtime.progress", H)  # doctor's longer look failed
    assert short.status == "ok" and "too short to judge" in short.message
    assert by(run(running(), endpoint=endpoint()), "runtime.progress", H).status == "ok"  # one page: nothing to compare


# ---- the mp executor: what replaces Ray's own view of its workers ---------------------------------

MP_INV = INV.model_copy(update={"runtime": INV.runtime.model_copy(update={"distributed_executor_backend": "mp"})})
MP_PLAN = render(MP_INV)
MASTER = "10.231.100.2:29501"
MP_HEAD_LOG = [
    line("dp_leader", 0, 0, "10.231.100.2", "10.231.100.2", 2, 1),
    line("moe_nvfp4", "FLASHINFER_B12X", ["FLASHINFER_TRTLLM", "MARLIN"], process="Worker_TP0 pid=79"),
    line("kv_size", "GPU", "1,930,112", "327,680", 5.89),
    line("serving", "http://0.0.0.0:8888", process="APIServer pid=1"),
]
MP_WORKER_LOG = [
    line("mp_headless", "0.33.0", MASTER, process="MainProcess pid=1"),
    line("dist_init", 2, 1, 0, f"tcp://{MASTER}", "nccl", process="Worker_TP1 pid=40"),
]
MP_WORKER_DIED = MP_WORKER_LOG + [line("mp_headless_worker_died", "VllmWorker-1", -9, process="MainProcess pid=1", level="ERROR")]


def mp_running(worker_log=MP_WORKER_LOG, worker_status="running", master_port="open"):
    secs = sections()
    for host in (H, W, O):
        items, scan = [], ""
        for spec in [c for c in MP_PLAN.all_containers if c.host == host]:
            st = worker_status if spec.role == "worker" else "running"
            c = container(spec, status=st, exit_code=0, image_id=secs[host]["image.0"]["out"].strip())
            items.append(c)
            log = {"head": MP_HEAD_LOG, "worker": worker_log}.get(spec.role, [])
            scan += f"@@ctr {c['Id']}\n" + "".join(x + "\n" for x in log)
        edit(secs, host, "containers", json.dumps(items))
        edit(secs, host, "logs", scan)
    edit(secs, W, "master_port", master_port)
    edit(secs, O, "drafter_health", "200")
    return secs


def test_mp_a_joined_headless_worker_is_ok_and_ray_skips_the_check():
    r = run(mp_running(), inv=MP_INV, endpoint=endpoint())
    peer = by(r, "runtime.peer", W)
    assert peer.status == "ok" and f"joined tcp://{MASTER}, reachable over the fabric" in peer.message
    assert failing(r) == set()
    assert by(run(running(), endpoint=endpoint()), "runtime.peer", W).status == "skipped"


def test_mp_a_killed_worker_rank_is_named_with_the_runbook_while_the_idle_head_still_answers_200():
    r = run(mp_running(MP_WORKER_DIED, worker_status="exited"), inv=MP_INV, endpoint=endpoint(health=200))
    peer = by(r, "runtime.peer", W)
    assert peer.status == "failed" and "Worker proc VllmWorker-1 died unexpectedly (exit code: -9)" in peer.message
    assert "it dies at its next request" in peer.message
    assert runbooks.for_result(peer) == "docs/runbooks/worker-lost.md"
    engine = by(r, "runtime.engine", W)
    assert engine.status == "failed" and runbooks.for_result(engine) == "docs/runbooks/worker-lost.md"
    assert by(r, "runtime.health", H).status == "ok"


def test_mp_a_closed_master_port_or_another_head_fails_the_peer():
    closed = by(run(mp_running(master_port="closed"), inv=MP_INV, endpoint=endpoint()), "runtime.peer", W)
    assert closed.status == "failed" and f"rendezvous {MASTER} refuses connections from {W} over the fabric" in closed.message
    other = [line("mp_headless", "0.33.0", "10.0.0.9:29501", process="MainProcess pid=1")]
    wrong = by(run(mp_running(other), inv=MP_INV, endpoint=endpoint()), "runtime.peer", W)
    assert wrong.status == "failed" and "joined the head at 10.0.0.9:29501" in wrong.message


def test_mp_the_heads_lost_peer_is_a_fatal_sign_in_the_executors_words():
    nccl = "NCCL error: remote process exited or there was a network error"
    dead = MP_HEAD_LOG + [
        line("mp_rank_exception", process="Worker_TP0 pid=79", level="ERROR"),
        f"(Worker_TP0 pid=79) ERROR 12-01 01:00:00 [multiproc_executor.py:1189] RuntimeError: {nccl}",
        line("fatal", level="ERROR"),
        f"(EngineCore pid=2) ERROR 12-01 01:00:00 [core.py:1586] RuntimeError: Worker failed with error '{nccl}', "
        "please check the stack trace above for the root cause",
    ]
    secs = mp_running()
    cid = next(c["Id"] for c in json.loads(secs[H]["containers"]["out"]) if c["Name"] == "/sparkctl-head")
    edit(secs, H, "logs", f"@@ctr {cid}\n" + "".join(x + "\n" for x in dead))
    r = run(secs, inv=MP_INV, endpoint=endpoint(health=503))
    signs = [x.data.get("sign") for x in r if x.name == "runtime.engine" and x.host == H and x.status == "failed"]
    assert signs == ["peer_lost", "engine_fatal"]
    peer = next(x for x in r if x.name == "runtime.engine" and x.host == H and x.data.get("sign") == "peer_lost")
    assert runbooks.for_result(peer) == "docs/runbooks/worker-lost.md"
    from sparkctl.facts import logs

    assert logs.fatal_line("\n".join(dead[-1:])) and logs.fatal_line(dead[-3])
