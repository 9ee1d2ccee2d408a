"""`sparkctl status --endpoint URL`: the runtime part of status for any vLLM endpoint, with no
inventory and no SSH, against the simulator serving on loopback (a real HTTP server), and against
a recorded vLLM 0.33 /metrics page served as it was recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import clirun
import pytest
from loopback_http import LoopbackServer, Quiet
from test_sim_serving import NAME, Server

RECORDED = Path(__file__).resolve().parent / "recorded" / "status"


def status(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    env["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8"  # loopback only
    return clirun.sparkctl(["status", *args], timeout=60, env=env)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("status")), env={"SIM_CRASH_CONTEXT_TOKENS": "0"})
    yield s
    s.stop()


def test_endpoint_json_health_model_and_live_figures(server):
    server.complete("Count from 1 to 50.", max_tokens=200)  # acceptance counters since start
    stop = threading.Event()

    def traffic():
        while not stop.is_set():
            server.complete("Write a python function that sorts a list.", max_tokens=300, ignore_eos=True)

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    try:
        r = status("--endpoint", server.base, "--json", "--sample", "1")
    finally:
        stop.set()
        t.join(timeout=30)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rt = doc["runtime"]
    assert doc["healthy"] and rt["health"] == 200 and rt["model"] == NAME and rt["max_model_len"] == 65536
    assert rt["output_tokens_per_s"] > 0 and rt["running"] >= 0
    # over the sample only: the code prompt's acceptance, not the counting prompt's from before
    assert rt["spec_decode_acceptance_length"] is not None and rt["spec_decode_acceptance_length"] < 5.5
    assert rt["spec_decode_acceptance_over"] == "interval"


def test_endpoint_human_line(server):
    r = status("--endpoint", server.base.removeprefix("http://"), "--sample", "0.2")
    assert r.returncode == 0 and r.stderr == ""  # the line is the answer: stdout
    assert r.stdout.startswith(f"runtime {server.base}: /health 200, model {NAME}")


def test_endpoint_not_answering_exits_1_and_says_so():
    from sparkctl_lab.sim.harness import free_port

    r = status("--endpoint", f"http://127.0.0.1:{free_port()}", "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["healthy"] is False and doc["runtime"]["health"] is None and "refused" in doc["runtime"]["error"]


@pytest.mark.parametrize(
    "url, words",
    [("https://127.0.0.1:8000", "is not http://HOST:PORT"), ("http://127.0.0.1:8000/v1", "without /v1"),
     ("http://192.168.1.5:8000", "192.168.1.5")],
)  # fmt: skip
def test_bad_or_fenced_endpoint_exits_2_before_connecting(url, words):
    r = status("--endpoint", url, "--json")
    assert r.returncode == 2, r.stderr
    assert words in json.loads(r.stdout)["error"] + json.loads(r.stdout).get("fix", "")


def test_watch_refuses_json():
    r = status("--endpoint", "http://127.0.0.1:1", "--watch", "--json")
    assert r.returncode == 2 and "--watch" in json.loads(r.stdout)["error"]


def test_watch_over_a_pipe_prints_a_line_per_interval_as_it_goes(server):
    # no terminal: a line per interval on stdout, each readable while the watch still runs (not
    # only when it is killed); SIGINT (as Ctrl-C) exits 0
    import queue
    import signal

    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    env["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8"
    p = subprocess.Popen([sys.executable, "-m", "sparkctl", "status", "--endpoint", server.base, "--watch", "--interval", "0.3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in p.stdout], daemon=True).start()
    try:
        seen = [lines.get(timeout=30) for _ in range(3)]  # while it runs
        assert p.poll() is None
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:  # never leave a watch running behind a failed test
            p.kill()
    assert p.returncode == 0, err
    assert "Traceback" not in err
    for line in seen:
        assert f"runtime {server.base}: /health 200, model {NAME}" in line and "tok/s" in line, line


class RecordedEndpoint(LoopbackServer):
    """A vLLM endpoint on loopback that answers every /metrics scrape with one recorded page;
    `requests` lists (path, time.monotonic()) of what it was asked."""

    def __init__(self, page: str, host: str = "127.0.0.1", port: int = 0):
        import time

        requests = self.requests = []
        models = {"object": "list", "data": [{"id": NAME, "object": "model", "max_model_len": 65536}]}

        class Handler(Quiet):
            def do_GET(self):
                requests.append((self.path, time.monotonic()))
                body, kind = {"/health": (b"", "text/plain"), "/v1/models": (json.dumps(models).encode(), "application/json"),
                              "/metrics": (page.encode(), "text/plain; version=0.0.4")}.get(self.path, (None, None))  # fmt: skip
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", kind or "text/plain")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

        super().__init__(Handler, host, port)


@pytest.fixture(scope="module")
def idle_two_engines():
    # recorded/status/record.py: two engines, 72 % of draft tokens accepted, mean length 4.6 since
    # start, nothing running: the one-second window between two scrapes has no drafts
    e = RecordedEndpoint((RECORDED / "vllm033-2engines-idle.prom").read_text())
    yield e
    e.stop()


def test_idle_cluster_shows_acceptance_since_start_and_says_so(idle_two_engines):
    r = status("--endpoint", idle_two_engines.base, "--json", "--sample", "0.2")
    assert r.returncode == 0, r.stderr
    rt = json.loads(r.stdout)["runtime"]
    assert rt["output_tokens_per_s"] == 0 and rt["running"] == 0
    assert rt["spec_decode_acceptance_rate"] == 72.0 and rt["spec_decode_acceptance_length"] == 4.6
    assert rt["spec_decode_acceptance_over"] == "since_start"
    human = status("--endpoint", idle_two_engines.base, "--sample", "0.2")
    assert human.returncode == 0, human.stderr
    assert "acceptance rate 72.0%, mean acceptance length 4.6 (since start: no drafts in the last 0.2 s)" in human.stdout


def test_acceptance_over_the_window_when_it_had_drafts(server):
    # the simulator under traffic: drafts in the window, so the figure is the window's and says so
    stop = threading.Event()

    def traffic():
        while not stop.is_set():
            server.complete("Write a python function that sorts a list.", max_tokens=300, ignore_eos=True)

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    try:
        r = status("--endpoint", server.base, "--sample", "1")
    finally:
        stop.set()
        t.join(timeout=30)
    assert r.returncode == 0, r.stderr
    assert "mean acceptance length" in r.stdout and "(over the last 1 s)" in r.stdout
