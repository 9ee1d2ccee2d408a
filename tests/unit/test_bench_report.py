"""The result file's schema, the seed-shaped table, `bench compare` and the CLI's operator errors."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import clirun
import jsonschema
import pytest

from sparkctl.bench.compare import compare
from sparkctl.bench.protocol import BenchOptions
from sparkctl.bench.result import BenchResult, CellResult, MixedResult, PrefillResult, json_schema

ROOT = Path(__file__).resolve().parents[2]


def _result(scale: float, accept: float = 4.5) -> BenchResult:
    cells = []
    for w, one, four in (("counting", 138.3, 322.1), ("code", 110.5, 192.0), ("prose", 66.0, 130.1)):
        for s, tps in ((1, one), (4, four)):
            cells.append(
                CellResult(
                    workload=w,
                    streams=s,
                    max_concurrency=s,
                    repeats_done=3,
                    output_throughput=tps * scale,
                    median_ttft_ms=80.0,
                    spec_decode_acceptance_length=accept,
                )
            )
    return BenchResult(
        sparkctl_version="0.1.0",
        started_at=datetime(2026, 10, 31, tzinfo=timezone.utc),
        endpoint="http://127.0.0.1:8888/v1",
        model="deepseek-v4.1-flash",
        options=BenchOptions(),
        throughput=cells,
        prefill=PrefillResult(
            target_prompt_tokens=262144, prompt_tokens=262000, ttft_ms=100_400.0, overhead_ms=400.0, ttft_adjusted_ms=100_000.0
        ),
        mixed=MixedResult(
            long_target_prompt_tokens=262144,
            short_ttft_ms=40_000.0 / scale,
            short_ttft_alone_ms=400.0,
            short_wait_ms=39_600.0 / scale,
        ),
    )


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    return clirun.sparkctl(list(args), env=env, cwd=ROOT, timeout=60)


def test_published_schema_is_current():
    published = json.loads((ROOT / "docs" / "bench-result.schema.json").read_text())
    assert published == json_schema(), "regenerate: sparkctl bench schema > docs/bench-result.schema.json"


def test_cli_schema_is_the_published_one():
    r = _run("bench", "schema")
    assert r.returncode == 0
    assert json.loads(r.stdout) == json_schema()


def test_a_result_validates_and_a_wrong_one_does_not():
    doc = json.loads(_result(1.0).model_dump_json())
    jsonschema.validate(doc, json_schema())
    doc["throughput"][0]["output_throughput"] = "fast"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json_schema())


def test_result_uses_vllm_bench_serve_names():
    cell = json.loads(_result(1.0).model_dump_json())["throughput"][0]
    for name in (
        "output_throughput",
        "median_ttft_ms",
        "mean_itl_ms",
        "p99_tpot_ms",
        "max_concurrency",
        "total_output_tokens",
        "spec_decode_acceptance_rate",
        "spec_decode_acceptance_length",
    ):
        assert name in cell


def test_seed_shaped_table():
    from rich.console import Console

    from sparkctl.bench.report import render

    console = Console(record=True, width=160)
    render(_result(1.0), console)
    text = console.export_text()
    lines = text.splitlines()
    header = next(l for l in lines if "One stream" in l)
    assert "4 streams, combined" in header
    counting = next(l for l in lines if "Counting numbers, structured test" in l)
    assert "138.3 tokens/s" in counting and "322.1 tokens/s" in counting
    assert "100,000.0 ms less 400.0 ms fixed overhead" in text


def test_compare_ratios(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(_result(1.0).model_dump_json())
    b.write_text(_result(2.0, accept=2.25).model_dump_json())
    cmp = compare(BenchResult.model_validate_json(a.read_text()), BenchResult.model_validate_json(b.read_text()))
    row = next(r for r in cmp.rows if r.metric == "counting x4 output_throughput")
    assert (row.a, row.b) == pytest.approx((322.1, 644.2)) and row.ratio == pytest.approx(2.0)
    acc = next(r for r in cmp.rows if r.metric == "prose x1 spec_decode_acceptance_length")
    assert acc.ratio == pytest.approx(0.5)
    wait = next(r for r in cmp.rows if r.metric == "short_wait_ms")
    assert wait.ratio == pytest.approx(0.5) and not wait.higher_is_better

    r = _run("bench", "compare", str(a), str(b))
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if "counting x4 output_throughput" in l)
    assert "322.1" in line and "644.2" in line and "2.00x" in line
    j = _run("bench", "compare", str(a), str(b), "--json")
    assert j.returncode == 0
    assert any(
        x["metric"] == "code x1 output_throughput" and x["ratio"] == pytest.approx(2.0) for x in json.loads(j.stdout)["rows"]
    )


def test_compare_rejects_a_file_that_is_not_a_result(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"duration": 1.0, "output_throughput": 5.0}))  # a vllm bench serve file
    good = tmp_path / "good.json"
    good.write_text(_result(1.0).model_dump_json())
    r = _run("bench", "compare", str(good), str(bad))
    assert r.returncode == 2
    assert "is not a sparkctl bench result" in r.stderr and "Traceback" not in r.stderr


def test_no_endpoint_is_an_input_error():
    r = _run("bench")
    assert r.returncode == 2
    assert "no endpoint to measure" in r.stderr and "--endpoint" in r.stderr


def test_bad_options_are_input_errors():
    r = _run("bench", "--endpoint", "http://127.0.0.1:9/v1", "--streams", "1,four")
    assert r.returncode == 2 and "--streams" in r.stderr
    r = _run("bench", "--endpoint", "http://127.0.0.1:9/v1", "--workloads", "counting,poetry")
    assert r.returncode == 2 and "unknown workload 'poetry'" in r.stderr


def test_unreachable_endpoint_is_reported_not_a_traceback():
    # Port 9 (discard) on loopback: nothing listens there.
    r = _run("bench", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert "cannot reach http://127.0.0.1:9/v1/models" in doc["error"]


def test_fenced_runs_never_contact_real_world_addresses():
    # The seed's endpoint (192.168.x): with the dev/CI fence set it is refused before any request.
    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    env["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8,10.231.0.0/16"
    r = clirun.sparkctl(["bench", "--endpoint", "http://192.168.1.177:8888/v1"], env=env, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "refusing to contact 192.168.1.177" in r.stderr


def test_default_endpoint_comes_from_the_inventory():
    from sparkctl.cli.bench import _endpoint_from_inventory

    url, model = _endpoint_from_inventory(ROOT / "inventories" / "lab.yaml")
    assert (url, model) == ("http://10.231.0.11:8888/v1", "deepseek-v4.1-flash")
