"""Doctor's fact parsers and probe building, on real output formats (no host needed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from sparkctl.facts import bandwidth, caches, docker, engram, logs
from sparkctl.facts.host import background_keys, probes_for
from sparkctl.facts.metrics import parse_page
from sparkctl.facts.probe import build_script, parse_output
from sparkctl.inventory.models import Inventory

REPO = Path(__file__).resolve().parents[2]
LAB = Inventory.model_validate(yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text()))

# vLLM's log lines (vllm-interface.md; the simulator prints the same)
VLLM_LOG = (
    """\
(APIServer pid=1) INFO 11-29 15:20:01 [api_server.py:1885] vLLM API server version 0.33.0
(RayWorkerWrapper pid=80, ip=10.231.100.3) WARNING 11-29 15:20:05 [marlin_utils_fp8.py:118] Your GPU does not have native support for FP8 computation but FP8 quantization is being used. Weight-only FP8 compression will be used leveraging the Marlin kernel. This may degrade performance for compute-heavy workloads.
(RayWorkerWrapper pid=80, ip=10.231.100.3) INFO 11-29 15:20:05 [oracle.py:389] Using 'marlin' Mxfp4 MoE backend out of potential backends: ['flashinfer_b12x', 'flashinfer_cutlass', 'marlin', 'triton'].
(EngineCore_DP0 pid=2) INFO 11-29 15:20:30 [kv_cache_utils.py:1733] GPU KV cache size: 1,930,112 tokens
(EngineCore_DP0 pid=2) INFO 11-29 15:20:30 [kv_cache_utils.py:1737] Maximum concurrency for 327,680 tokens per request: 5.89x
(EngineCore_DP0 pid=2) INFO 11-29 15:20:31 [backends.py:292] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 1.234 s
(APIServer pid=1) INFO 11-29 15:21:00 [api_server.py:1950] Starting vLLM server on http://0.0.0.0:8888
(APIServer pid=1) INFO 11-29 15:21:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 4.10, Accepted throughput: 10.0 tokens/s
(APIServer pid=1) INFO 11-29 15:21:20 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.80, Accepted throughput: 9.0 tokens/s
(EngineCore_DP0 pid=2) ERROR 11-29 15:22:00 [ray_executor.py:508] RayWorkerProc rank=1 died unexpectedly (node ip=10.231.100.3).
(EngineCore_DP0 pid=2) ERROR 11-29 15:22:00 [core.py:710] EngineCore encountered a fatal error.
"""
    + "(APIServer pid=1) INFO noise line\n" * 200
)


def test_log_scan_on_the_host_keeps_only_what_doctor_reads():
    # the same awk program doctor runs on the host, fed the log here
    out = subprocess.run(["awk", logs.awk_program()], input=VLLM_LOG, capture_output=True, text=True, check=True).stdout
    assert "noise" not in out and len(out.splitlines()) < 15
    facts = logs.parse_scan("@@ctr abc\n" + out)["abc"]
    assert facts.kv_pool_tokens == 1930112 and facts.moe_backend == "marlin" and facts.ready
    assert facts.marlin and "leveraging the Marlin kernel" in facts.marlin[0]
    assert facts.spec_mean_acceptance == 2.80  # the newest line
    assert facts.compile_start == "warm"
    assert facts.worker_died and facts.engine_fatal and not facts.device_assert
    assert facts.fatal[0].endswith("died unexpectedly (node ip=10.231.100.3).")  # the cause before the consequence


def test_log_scan_backend_line_is_not_a_marlin_fallback():
    line = (
        "INFO [oracle.py:389] Using 'flashinfer_b12x' Mxfp4 MoE backend out of potential backends: ['flashinfer_b12x', 'marlin']."
    )
    out = subprocess.run(["awk", logs.awk_program()], input=line + "\n", capture_output=True, text=True).stdout
    f = logs.parse_scan("@@ctr x\n" + out)["x"]
    assert f.moe_backend == "flashinfer_b12x" and f.marlin == []


def test_log_scan_caps_repeated_lines():
    many = "ERROR RuntimeError: CUDA error: device-side assert triggered\n" * 1000
    out = subprocess.run(["awk", logs.awk_program()], input=many, capture_output=True, text=True).stdout
    assert len(out.splitlines()) == logs.PER_KIND


def test_docker_inspect_keeps_no_environment():
    inspect = [{
        "Id": "c0ffee" * 10, "Name": "/sparkctl-head", "Image": "sha256:" + "1" * 64,
        "State": {"Status": "exited", "ExitCode": 1, "StartedAt": "2026-11-29T15:20:00.1Z", "Error": ""},
        "Config": {"Image": "reg/sim:0.1", "Env": ["HF_TOKEN=hf_secret"], "Labels": {"io.sparkctl.role": "head", "io.sparkctl.config-hash": "abc"}},
        "HostConfig": {"Ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}]},
    }]  # fmt: skip
    cs, err = docker.parse_containers(0, json.dumps(inspect))
    assert err is None and cs[0].name == "sparkctl-head" and cs[0].role == "head" and cs[0].config_hash == "abc"
    assert cs[0].memlock == -1 and not cs[0].running and cs[0].exit_code == 1
    assert "hf_secret" not in repr(cs)
    assert docker.parse_containers(1, "Cannot connect to the Docker daemon\n") == ([], "Cannot connect to the Docker daemon")


def test_image_inspect():
    assert docker.parse_image("r", 0, "sha256:" + "a" * 64 + "\n").id == "sha256:" + "a" * 64
    assert docker.parse_image("r", 1, "Error: No such image: r\n").error == "not present"
    assert "Cannot connect" in docker.parse_image("r", 1, "Cannot connect to the Docker daemon at x\n").error


def test_compile_cache_listing():
    text = "present\nd ./aa11\nd ./bb22\nd ./torch_aot_compile\ni ./aa11/rank_0_0/backbone/vllm_compile_cache.py\ni ./aa11/rank_1_0/backbone/vllm_compile_cache.py\n"
    c = caches.parse_cache(0, text)
    assert c.present and c.warm_hashes == ["aa11"] and c.partial_hashes == ["bb22"]
    assert c.complete["aa11"] == ("rank_0_0", "rank_1_0")
    assert caches.parse_cache(0, "missing\n").present is False


def test_compile_cache_probe_on_a_real_tree(tmp_path):
    (tmp_path / "torch_compile_cache" / "aa11" / "rank_0_0" / "backbone").mkdir(parents=True)
    (tmp_path / "torch_compile_cache" / "aa11" / "rank_0_0" / "backbone" / caches.INDEX).write_text("{}")
    (tmp_path / "torch_compile_cache" / "bb22" / "rank_0_0").mkdir(parents=True)
    r = subprocess.run(["sh", "-c", caches.cache_probe(str(tmp_path))], capture_output=True, text=True)
    c = caches.parse_cache(r.returncode, r.stdout)
    assert c.warm_hashes == ["aa11"] and c.partial_hashes == ["bb22"]


def test_engram_probe_on_a_real_tree(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    (src / "t0.bin").write_bytes(b"x" * 1000)
    (dst / "t0.bin").write_bytes(b"x" * 1000)
    sums = subprocess.run(["sha256sum", "t0.bin"], cwd=src, capture_output=True, text=True).stdout
    (src / "SHA256SUMS").write_text(sums)
    (dst / engram.MARKER).write_text(sums)
    r = subprocess.run(["sh", "-c", engram.engram_probe(str(src), str(dst))], capture_output=True, text=True)
    g = engram.parse_engram(r.stdout)
    assert g.mount_fs is None  # not a mount point here
    assert g.tables(g.source_files) == {"t0.bin": 1000} and g.target_files == {"t0.bin": 1000}
    assert g.placed_sums == g.source_sums == {"t0.bin": sums.split()[0]}
    r = subprocess.run(["sh", "-c", engram.checksum_command(str(dst))], capture_output=True, text=True)
    assert engram.parse_sums(r.stdout) == g.placed_sums


def test_metrics_parsed_with_prometheus_client():
    text = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 500.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 280.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
"""
    m = parse_page(text)
    assert m["vllm:num_requests_running"] == 3 and m["vllm:kv_cache_usage_perc"] == 0.42
    assert m["vllm:spec_decode_num_accepted_tokens_total"] == 280 and "vllm:spec_decode_num_drafts_created" not in m


def test_ping_retry_counts_the_last_run():
    from sparkctl.facts import network

    lost = "PING x\n\n--- x ping statistics ---\n1 packets transmitted, 0 received, 100% packet loss, time 0ms\n"
    good = "PING x\n8980 bytes from x: icmp_seq=1 ttl=64 time=0.05 ms\n\n--- x ping statistics ---\n1 packets transmitted, 1 received, 0% packet loss, time 0ms\n"
    assert network.parse_ping(0, lost + good).ok
    assert not network.parse_ping(1, good + lost).ok


def test_iperf_json_and_rails():
    ok = json.dumps({"end": {"sum_received": {"bits_per_second": 23.5e9, "seconds": 2.0}}})
    assert round(bandwidth.parse_iperf(0, ok).gbps, 1) == 23.5
    assert bandwidth.parse_iperf(1, json.dumps({"error": "unable to connect to server"})).error == "unable to connect to server"
    assert bandwidth.parse_iperf(127, "sh: iperf3: not found").error == "sh: iperf3: not found"
    rails = bandwidth.rails(LAB, list(LAB.hosts))
    # head-worker twice (both twins), head-offload, worker-offload: each cable once
    assert [(r.client, r.link.device, r.server) for r in rails] == [
        ("head", "enp1s0f0np0", "worker"), ("head", "enP2p1s0f0np0", "worker"),
        ("head", "enp1s0f1np1", "offload"), ("worker", "enp1s0f1np1", "offload"),
    ]  # fmt: skip
    assert "-B 10.231.100.2" in bandwidth.client_command(rails[0], 5201) and "-s -1" in bandwidth.server_command(rails[0], 5201)


def test_probe_set_follows_the_inventory_and_only():
    p = probes_for(LAB, "head")
    assert p["ping.0"].startswith("ping -M do -s 8972 -c 1 -W 1 -I enp1s0f0np0 10.231.100.3 || ")
    assert p["route.2"] == "ip -j route get 10.231.110.4"
    assert "rocep1s0f0" in p["rdma_state"] and "applied" in p and "engram" not in p
    assert "engram" in probes_for(LAB, "offload") and "drafter_health" in probes_for(LAB, "offload")
    assert "10.231.110.4:8100" in probes_for(LAB, "offload")["drafter_health"]
    from sparkctl.checks import kinds_for

    gpu_only = probes_for(LAB, "worker", kinds_for({"gpu", "ssh"}))
    assert {"gpus", "gpu_apps", "clock", "containers"} <= set(gpu_only) and not any(k.startswith("ping") for k in gpu_only)
    assert {k for k in background_keys(p)} >= {"ping.0", "gpus", "containers", "logs"}


def test_background_probes_run_concurrently_and_keep_their_sections(tmp_path):
    # each background probe waits for the other's file: only concurrent probes can both finish
    a, b = tmp_path / "a", tmp_path / "b"
    probes = {
        "first": "echo one",
        "left": f"touch {a}; while [ ! -e {b} ]; do sleep 0.01; done; echo left; exit 3",
        "right": f"touch {b}; while [ ! -e {a} ]; do sleep 0.01; done; printf right",
    }
    script = build_script(probes, "@@m", background={"left", "right"})
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=20).stdout
    sec = parse_output(out, "@@m")
    assert sec["first"].out == "one\n" and sec["left"].rc == 3 and sec["left"].out == "left\n"
    assert sec["right"].out == "right" and sec["right"].rc == 0
