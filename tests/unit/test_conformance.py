"""docs/conformance.md as data: every simulator log line is one of vLLM 0.33's (or says it is the
simulator's), and sparkctl's readers are tested on lines and metric pages built from those format
strings, including two-engine (data parallel) pages and a log with several fatal signs.

`line(id, ...)` renders a table row's format string as vLLM prints it; `metrics_page(...)` writes
a /metrics page with prometheus_client (the library vLLM exports with) from the table's names.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from sparkctl.facts import logs
from sparkctl.facts.metrics import parse_page

DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"
_CELL = re.compile(r"(?<!\\)\|")


def _code(cell: str) -> str:
    cell = cell.strip()
    if cell.startswith("``") and cell.endswith("``"):
        return cell[2:-2].strip()
    if cell.startswith("`") and cell.endswith("`"):
        return cell[1:-1]
    return cell


def tables() -> dict[str, list[dict]]:
    """The doc's tables by section title, each row a dict keyed by the header."""
    out: dict[str, list[dict]] = {}
    section, header = "", None
    for raw in DOC.read_text(encoding="utf-8").splitlines():
        if raw.startswith("## "):
            section, header = raw[3:].strip(), None
            continue
        if not raw.startswith("|"):
            header = None if not raw.strip() else header
            continue
        cells = [c.strip().replace("\\|", "|") for c in _CELL.split(raw.strip())[1:-1]]
        if header is None:
            header = cells
        elif not set(raw.replace("|", "").strip()) <= {"-"}:
            out.setdefault(section, []).append(dict(zip(header, cells)))
    return out


TABLES = tables()
LOG = {r["id"]: r for r in TABLES["Log lines with vLLM's prefix"]}
PLAIN = {r["id"]: r for r in TABLES["Lines without vLLM's prefix"]}
METRICS = {r["id"]: r for r in TABLES["Metrics (`GET /metrics`)"]}

_SPEC = re.compile(r"%(?:\.\d+)?[sdfx]|%03d|%%|⟦|⟧")


def fmt_regex(fmt: str) -> str:
    """A printf-style format (one line of it) as a regex; ⟦...⟧ parts are optional."""
    out, pos = [], 0
    for m in _SPEC.finditer(fmt):
        out.append(re.escape(fmt[pos : m.start()]))
        tok = m.group(0)
        out.append(
            {"%%": "%", "⟦": "(?:", "⟧": ")?", "%d": r"-?\d+", "%03d": r"\d{3}"}.get(
                tok, r".*?" if tok == "%s" else r"-?[\d.]+|nan"
            )
        )
        if tok not in ("%%", "⟦", "⟧", "%s", "%d", "%03d"):
            out[-1] = f"(?:{out[-1]})"
        pos = m.end()
    out.append(re.escape(fmt[pos:]))
    return "".join(out)


def _formats(row: dict) -> list[str]:
    return _code(row["format string"]).split("\\n")


def _where(row: dict) -> str:
    path = row["source (vLLM 0.33.0)"].split()[0]
    return path.rsplit("/", 1)[-1]


def line(row_id: str, *args, process: str = "EngineCore pid=2", level: str = "INFO", ray: str = "") -> str:
    """A log line as vLLM 0.33 prints it, from the table's format string (first line of a multi-line one)."""
    row = LOG[row_id]
    fmt = re.sub(r"⟦.*?⟧", "", _formats(row)[0])
    outer = f"({ray}) " if ray else ""
    return f"{outer}({process}) {level} 12-01 01:00:00 [{_where(row)}] {fmt % args}"


# ---- every simulator line is in the table ----------------------------------------------------------

_PREFIXED = re.compile(
    r"^(?:\((?P<ray>RayWorkerProc pid=\d+(?:, ip=[\d.]+)?)\) )?\((?P<proc>\w+) pid=\d+\) (?P<level>INFO|WARNING|ERROR) "
    r"\d\d-\d\d \d\d:\d\d:\d\d \[(?P<where>[\w.]+:\d+)\] (?P<msg>.*)$"
)
_PROCESS = {"APIServer": "APIServer", "EngineCore": "EngineCore", "Worker": "Worker_TP", "MainProcess": "MainProcess"}


def assert_conforms(text: str) -> int:
    """Every vLLM-prefixed, uvicorn or Ray-logger line of `text` matches its table row; returns how many were checked."""
    by_where: dict[str, list[dict]] = {}
    for row in LOG.values():
        if row["id"] != "simulator":
            by_where.setdefault(_where(row), []).append(row)
    plain = [re.compile(fmt_regex(_formats(r)[0]) + "$") for r in PLAIN.values() if r["id"].startswith(("uvicorn", "ray_"))]
    checked = 0
    for raw in text.splitlines():
        m = _PREFIXED.match(raw)
        if m is None:
            assert "INFO:     " not in raw or raw.startswith("INFO:     "), f"uvicorn's lines carry no process prefix: {raw!r}"
            if raw.startswith("INFO:     ") or " -- " in raw and "\tINFO " in raw:
                assert any(p.match(raw) for p in plain), f"not in docs/conformance.md: {raw!r}"
                checked += 1
            continue
        checked += 1
        where, msg = m.group("where"), m.group("msg")
        if where == "simulator:0":
            assert msg.startswith("[simulator] "), raw
            continue
        rows = by_where.get(where)
        assert rows, f"[{where}] is no source line in docs/conformance.md: {raw!r}"
        ok = False
        for row in rows:
            want = _PROCESS[row["process"]]
            if not m.group("proc").startswith(want):
                continue
            # a multi-line message: any of its lines; after logger.exception (trailing %s) any traceback line
            alts = _formats(row)
            if any(re.fullmatch(fmt_regex(a), msg, re.S) for a in alts if a != "%s") or alts[-1] == "%s" and len(alts) > 1:
                ok = True
        assert ok, f"does not match the format of [{where}] in docs/conformance.md: {raw!r}"
    return checked


def test_every_row_names_its_source():
    for section, rows in TABLES.items():
        for r in rows:
            src = r.get("source (vLLM 0.33.0)") or r.get("source")
            assert src and src != "-", (section, r)
    assert {"kv_size", "moe_nvfp4", "moe_mxfp4", "ray_worker_died", "fatal", "compile_hit", "compile_miss", "spec"} <= set(LOG)


def test_a_served_crashed_simulator_logs_only_table_lines(tmp_path):
    from sparkctl_lab.sim import harness

    port = harness.free_port()
    faults = tmp_path / "faults"
    env = harness.sim_env(
        str(tmp_path),
        SIM_TIME_SCALE="0.001",
        SIM_STEP_TIME_SCALE="0.005",
        SIM_FAULTS_FILE=str(faults),
        VLLM_LOG_STATS_INTERVAL="0.3",
        VLLM_CACHE_ROOT=str(tmp_path / "cache"),
        SIM_DEATH_LINGER="0.5",
    )
    argv = harness.module_argv(
        "vllm_cli",
        "serve",
        "--model",
        "/models/DeepSeek-V4.1-Flash-1017",
        "--served-model-name",
        "m",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "65536",
        "--max-num-seqs",
        "2",
        "--block-size",
        "256",
        "--moe-backend",
        "flashinfer_b12x",
        "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 3}',
    )
    proc = harness.Proc("vllm", argv, env, str(tmp_path / "vllm.log")).start()
    try:
        assert harness.wait_http(f"http://127.0.0.1:{port}/health", timeout=60, proc=proc), proc.log()[-3000:]
        import httpx

        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            for _ in range(3):
                assert c.post("/v1/completions", json={"prompt": "Count to ten.", "max_tokens": 40}).status_code == 200
            assert c.get("/v1/completions").status_code == 405
        import time

        time.sleep(0.8)  # a stats interval with traffic: the Engine 000 and SpecDecoding lines
        faults.write_text("crash_now\n")
        assert proc.wait(30) == 1
    finally:
        proc.stop()
    log = proc.log()
    for needle in (
        "[entry.py:139] Starting vLLM server on http://127.0.0.1:",
        "[nvfp4.py:270] Using 'FLASHINFER_B12X' NvFp4 MoE",
        "GPU KV cache size: ",
        "[backbone] Compiling a graph for compile range (1, 8192) takes",
        "SpecDecoding metrics: Mean acceptance length:",
        "] Engine 000: Avg prompt throughput:",
        "(EngineCore pid=",
        "EngineCore encountered a fatal error.",
        "device-side assert triggered",
        "\nINFO:     Application startup complete.\n",
    ):
        assert needle in log, needle
    assert "vLLM API server version" not in log and "(APIServer pid=" not in log.split("Application startup complete.")[0][-80:]
    assert assert_conforms(log) > 50


# ---- sparkctl's log readers on lines built from the format strings --------------------------------

RAY_W = "RayWorkerProc pid=80, ip=10.231.100.3"
HEALTHY = [
    line("moe_nvfp4", "FLASHINFER_B12X", ["FLASHINFER_TRTLLM", "MARLIN"], process="Worker_TP1 pid=80", ray=RAY_W),
    line("compile_miss", "[backbone] ", "(1, 8192)", 41.5, process="Worker_TP1 pid=80", ray=RAY_W),
    line("kv_size", "GPU", "1,930,112", "327,680", 5.89),
    line("init_engine", 93.21, 41.0),
    line("serving", "http://0.0.0.0:8888", process="APIServer pid=1"),
    line("spec", 4.1, 10.0, 12.0, 41, 50, "0.900, 0.800, 0.700", 82.0, process="APIServer pid=1"),
    line("spec", 2.8, 9.0, 15.0, 36, 60, "0.700, 0.500, 0.300", 60.0, process="APIServer pid=1"),
]


def scan(lines: list[str], noise: int = 300) -> logs.LogFacts:
    """The host-side awk doctor runs, then the parser."""
    text = "\n".join(lines + ["(APIServer pid=1) INFO 12-01 01:00:00 [loggers.py:335] noise"] * noise) + "\n"
    out = subprocess.run(["awk", logs.awk_program()], input=text, capture_output=True, text=True, check=True).stdout
    assert "noise" not in out
    return logs.parse_scan("@@ctr c1\n" + out)["c1"]


def test_log_readers_on_vllm_033_lines():
    f = scan(HEALTHY)
    assert (f.moe_backend, f.moe_path) == ("FLASHINFER_B12X", "NvFp4") and f.marlin == []
    assert f.kv_pool_tokens == 1930112 and f.ready and f.spec_mean_acceptance == 2.8
    assert (f.compile_start, f.compile_seconds) == ("cold", 41.5) and f.signs == []
    assert logs.phase_of("\n".join(HEALTHY)) == "serving"
    assert logs.phase_of("\n".join(HEALTHY[:3])) == "allocating KV cache"
    assert logs.fatal_line("\n".join(HEALTHY)) is None


def test_a_log_with_several_fatal_signs_reports_each_most_causal_first():
    dead = HEALTHY + [
        line("fatal", process="EngineCore pid=2", level="ERROR"),
        f"({RAY_W}) torch.AcceleratorError: CUDA error: device-side assert triggered",
        line("ray_worker_died", [1], level="ERROR"),
        line("fatal", level="ERROR"),
    ]
    f = scan(dead)
    assert [k for k, _ in f.signs] == ["device_assert", "worker_died", "engine_fatal"]
    assert f.signs[1][1].endswith("RayWorkerProc rank=[1] died unexpectedly, shutting down executor.")
    assert logs.fatal_line("\n".join(dead)) == dead[-4]  # the first in the log
    assert logs.fatal_line(line("ray_worker_died", [1], level="ERROR"))  # the list form vLLM 0.33 prints
    assert logs.fatal_line(line("mp_worker_died", "VllmWorker-1", -9, level="ERROR"))


def test_last_start_warm_or_cold_is_the_newest_compile_line():
    warm_after_cold = HEALTHY + [line("compile_hit", "[backbone] ", "(1, 8192)", 1.234, process="Worker_TP0 pid=79")]
    f = scan(warm_after_cold)
    assert (f.compile_start, f.compile_seconds) == ("warm", 1.234)
    assert scan(HEALTHY[:2] + HEALTHY[2:]).compile_start == "cold"


@pytest.mark.parametrize(
    "quant,value,logged,ok",
    [
        ("nvfp4", "flashinfer_b12x", line("moe_nvfp4", "FLASHINFER_B12X", ["FLASHINFER_TRTLLM"]), True),
        ("mxfp4", "b12x", line("moe_mxfp4", "B12X_MXFP4_MXFP8"), True),
        ("mxfp4", "marlin", line("moe_mxfp4", "BATCHED_MARLIN"), True),
        ("nvfp4", "b12x", line("moe_nvfp4", "FLASHINFER_B12X", []), False),
        ("mxfp4", "flashinfer_b12x", line("moe_mxfp4", "B12X_MXFP4_MXFP8"), None),  # vLLM 0.33 has no such MXFP4 backend
    ],
)
def test_moe_backend_names_per_quantization_path(quant, value, logged, ok):
    f = scan([logged])
    names = logs.expected_moe_names(quant, value)
    assert (None if names is None else f.moe_backend in names) is ok
    assert f.moe_path == logs.QUANT_WORD[quant]


# ---- metric pages built with prometheus_client from the table's names ----------------------------


def metrics_page(engines: dict[str, dict[str, float]], model: str = "m", info: dict | None = None) -> str:
    """A /metrics page as vLLM's PrometheusStatLogger writes it: one labelled child per engine."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    reg = CollectorRegistry()
    made: dict = {}
    for engine, values in engines.items():
        for row_id, value in values.items():
            row = METRICS[row_id]
            name, kind, doc = _code(row["name"]), row["type"], _code(row["help text"])
            if row_id not in made:
                cls = Counter if kind == "counter" else Gauge
                extra = ["position"] if row_id == "m_spec_per_pos" else []
                made[row_id] = cls(name, doc, ["model_name", "engine", *extra], registry=reg)
            if row_id == "m_spec_per_pos":
                for pos, v in enumerate(value):
                    made[row_id].labels(model, engine, str(pos)).inc(v)
            elif kind == "counter":
                made[row_id].labels(model, engine).inc(value)
            else:
                made[row_id].labels(model, engine).set(value)
    if info:
        row = METRICS["m_cache_info"]
        g = Gauge(_code(row["name"]), _code(row["help text"]), [*info[next(iter(info))].keys(), "engine"], registry=reg)
        for engine, labels in info.items():
            g.labels(**labels, engine=engine).set(1)
    return generate_latest(reg).decode()


TWO_ENGINES = {
    "0": {
        "m_running": 2,
        "m_waiting": 1,
        "m_kv_usage": 0.5,
        "m_generation": 1000,
        "m_spec_drafts": 100,
        "m_spec_draft_tokens": 300,
        "m_spec_accepted": 150,
        "m_spec_per_pos": [80, 50, 20],
    },
    "1": {
        "m_running": 1,
        "m_waiting": 0,
        "m_kv_usage": 0.5,
        "m_generation": 500,
        "m_spec_drafts": 100,
        "m_spec_draft_tokens": 300,
        "m_spec_accepted": 90,
        "m_spec_per_pos": [60, 25, 5],
    },
}


def test_two_engine_page_sums_counters_never_the_kv_gauge():
    p = parse_page(metrics_page(TWO_ENGINES), "m")
    assert p.engines == ["0", "1"]
    assert p.total("vllm:num_requests_running") == 3 and p.total("vllm:num_requests_waiting") == 1
    assert p.total("vllm:generation_tokens_total") == 1500
    kv = p.gauge("vllm:kv_cache_usage_perc")
    assert (kv.max, kv.mean, kv.per_engine) == (0.5, 0.5, {"0": 0.5, "1": 0.5})  # two half-full pools, not one full
    assert p["vllm:kv_cache_usage_perc"] == 0.5
    s = p.spec
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (200, 600, 240)
    assert s.acceptance_rate == pytest.approx(40.0) and s.acceptance_length == pytest.approx(2.2)  # percent; tokens/step
    assert s.per_position_acceptance_rates == pytest.approx([70.0, 37.5, 12.5])
    assert s.fields() == {"spec_decode_acceptance_rate": 40.0, "spec_decode_acceptance_length": 2.2}


def test_cache_config_info_gives_the_kv_pool_per_engine():
    info = {
        e: {"block_size": "256", "cache_dtype": "fp8_ds_mla", "kv_cache_size_tokens": tok, "kv_cache_max_concurrency": "5.89"}
        for e, tok in (("0", "1930112"), ("1", "1900000"))
    }
    p = parse_page(metrics_page({"0": {"m_running": 0}}, info=info), "m")
    assert p.kv_cache_size_tokens() == {"0": 1930112, "1": 1900000}
    assert p.cache_config()["1"]["cache_dtype"] == "fp8_ds_mla"


def test_a_page_for_another_model_is_filtered():
    text = metrics_page({"0": {"m_running": 4}}, model="other") + metrics_page({"0": {"m_running": 1}}, model="m")
    assert parse_page(text, "m").total("vllm:num_requests_running") == 1
    assert parse_page(text).total("vllm:num_requests_running") == 5


if os.environ.get("SPARKCTL_PRINT_CONFORMANCE"):  # a reviewer's aid: the rows as regexes
    for r in LOG.values():
        print(r["id"], [fmt_regex(a) for a in _formats(r)])


def _sample(fmt: str) -> str:
    """A format string with every placeholder filled (digits fit %s too), optional parts kept."""
    fmt = fmt.replace("⟦", "").replace("⟧", "")
    return re.sub(r"%(?:\.\d+)?[sdfx]|%03d", "1", fmt).replace("%%", "%")


def test_sparkctl_reads_no_line_the_table_lacks():
    examples = [_sample(a) for rows in (LOG, PLAIN) for r in rows.values() for a in _formats(r)]
    for needles, phase in logs.PHASES:
        for needle in needles:
            assert any(needle in e for e in examples), f"health phase {phase!r} ({needle!r}): no row in docs/conformance.md"
    for pattern in logs.FATAL:
        assert any(pattern.search(e) for e in examples), f"logs FATAL {pattern.pattern!r}: no row"
    for kind, needle in {**logs.KINDS, **logs.NEWEST}.items():
        assert any(needle.lower() in e.lower() for e in examples), f"facts/logs.py {kind} ({needle!r}): no row"
    names = {_code(r["name"]) for r in METRICS.values()}
    from sparkctl.facts import metrics as m

    for name in (m.RUNNING, m.WAITING, m.KV_USAGE, m.CACHE_INFO, m.GENERATION_TOKENS, m.PROMPT_TOKENS, m.PREEMPTIONS):
        assert name.removesuffix("_total") in names, name


def test_an_mp_head_waiting_for_its_headless_ranks_shows_the_join_phase():
    waiting = [
        line("dp_leader", 0, 0, "10.231.100.2", "10.231.100.2", 2, 1),
        line("dist_init", 2, 0, 0, "tcp://10.231.100.2:29501", "nccl", process="Worker_TP0 pid=79"),
    ]
    assert logs.phase_of("\n".join(waiting)) == "joining the ranks (torch.distributed)"
    assert logs.phase_of("\n".join(waiting + HEALTHY)) == "serving"
