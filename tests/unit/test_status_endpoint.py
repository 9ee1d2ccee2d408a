"""`sparkctl status --endpoint URL`: the runtime part of status for any vLLM endpoint, with no
inventory and no SSH, against the simulator serving on loopback (a real HTTP server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from test_sim_serving import NAME, Server


def status(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    env["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8"  # loopback only
    return subprocess.run([sys.executable, "-m", "sparkctl", "status", *args], capture_output=True, text=True,
                          timeout=60, env=env)  # fmt: skip


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


def test_endpoint_human_line(server):
    r = status("--endpoint", server.base.removeprefix("http://"), "--sample", "0.2")
    assert r.returncode == 0 and r.stdout == ""
    assert f"runtime {server.base}: /health 200, model {NAME}" in r.stderr


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


def test_watch_live_view_over_a_pipe_exits_on_interrupt(server):
    # no terminal: the view refreshes until interrupted (SIGINT, as Ctrl-C) and exits 0
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    env["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8"
    p = subprocess.Popen([sys.executable, "-m", "sparkctl", "status", "--endpoint", server.base, "--watch", "--interval", "0.3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        time.sleep(3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:  # never leave a live view running behind a failed test
            p.kill()
    assert p.returncode == 0, err
    assert "tok/s" in err and "/health 200" in err and "Traceback" not in err
