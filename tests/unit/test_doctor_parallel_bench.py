"""benchmarks/doctor_parallel.py compares doctor's parallel run with the same work done one host
after another; its ratio means something only if both paths do the same work. Here both run
against an inventory whose hosts refuse SSH at once and whose head answers HTTP with a recorded
vLLM 0.33 /metrics page: each path must read /metrics twice, doctor's TTFT window apart, and
reach the same check results. (The figures themselves are the script's to print, never asserted.)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from test_status_endpoint import RECORDED, RecordedEndpoint

from sparkctl.checks.doctor import TTFT_WINDOW
from sparkctl.inventory.loader import load_inventory

REPO = Path(__file__).resolve().parents[2]


def bench_module():
    spec = importlib.util.spec_from_file_location("doctor_parallel", REPO / "benchmarks" / "doctor_parallel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def head_serving(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8")
    endpoint = RecordedEndpoint((RECORDED / "vllm033-2engines-idle.prom").read_text(), host="127.0.0.2")
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text().replace("10.231.0.1:5000/", "127.0.0.1:9/"))
    for i, host in enumerate(data["hosts"].values()):
        host["ssh"] = {"address": f"127.0.0.{i + 2}"}  # the head is 127.0.0.2, where the endpoint listens
    data["ssh_defaults"]["port"] = 9  # nothing listens: refused at once
    data["gateway"] = {"enabled": False}  # doctor reads the engine itself: no gateway in front
    data["runtime"]["port"] = endpoint.port
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    yield load_inventory(path), endpoint
    endpoint.stop()


def metrics_reads(endpoint, since: int) -> list[float]:
    return [t for path, t in endpoint.requests[since:] if path == "/metrics"]


def test_both_paths_do_the_same_work(head_serving):
    inv, endpoint = head_serving
    bench = bench_module()
    outcome = {}
    for name, path in (("parallel", bench.parallel), ("sequential", bench.sequential)):
        before = len(endpoint.requests)
        seconds, results = path(inv)
        reads = metrics_reads(endpoint, before)
        assert len(reads) == 2, (name, endpoint.requests[before:])  # doctor's two pages
        assert reads[1] - reads[0] >= TTFT_WINDOW * 0.99, name  # its TTFT window, in both
        outcome[name] = sorted((r.name, r.host, r.status, r.message) for r in results)
    assert outcome["parallel"] == outcome["sequential"]
    assert ("ssh.reachable", "head", "failed") in {r[:3] for r in outcome["parallel"]}
