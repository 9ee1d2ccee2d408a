"""A real Prometheus in the lab (Debian's `prometheus` package), scraping the runtime the way an
operator's would, with the rules `sparkctl alerts` writes; and a node exporter in every lab host
(Debian's `prometheus-node-exporter`), where a lost worker shows.

    up(alerts=None) -> dict      start (or reload) it: rules and prometheus.yml from `sparkctl alerts`
                                 on a copy of the lab inventory with the lab's `alerts:` thresholds
    down() -> list[str]          stop it (`sparkctl lab down` does; exporters die with their hosts)
    alerts() -> list[dict]       /api/v1/alerts
    wait_firing(name, timeout)   until that alert is `firing`
    query(expr) -> list[dict]    an instant query

It runs on the head host, as an operator's would: the drafter serves only on the offload link to the
head, which the runner cannot reach. It listens on the head's management address (the runner and
the tests reach it there). Scrapes and rule evaluation run every second: the lab's windows are short.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import httpx
import yaml

from sparkctl import httpclient
from sparkctl.errors import SparkctlError
from sparkctl_lab import paths, procs
from sparkctl_lab.hostexec import host_exec
from sparkctl_lab.topology import HOSTS

PORT = 19090
HOST = "head"
URL = f"http://{HOSTS[HOST].mgmt_ip}:{PORT}"
DIR = paths.LAB_DIR / "prometheus"
CONFIG = DIR / "prometheus.yml"
RULES = DIR / "rules.yml"
EXPORTER_PORT = 9100
FENCE = "127.0.0.0/8,10.231.0.0/16"
# The lab serves 100x faster and its drills last seconds: page after 3 s (three failed scrapes of
# one a second, the scrape's own timeout 0.9 s), judge rates over 15 s.
# The simulator's Marlin fallback costs ~36% per stream (it doubles the target's share of a step,
# not the drafting), so the lab warns below 75% of the baseline.
# A hold older than 10 s pages (the lab's cold start is ~3.5 s).
LAB_ALERTS = {"down_for": "3s", "rate_window": "15s", "decode_for": "3s", "decode_drop": 0.25, "hold_for": "3s",
              "gateway_hold_s": 10}  # fmt: skip


def _pid() -> int | None:
    for pid in procs.all_pids():
        args = procs.cmdline(pid)
        if args and os.path.basename(args[0]) == "prometheus" and f"--config.file={CONFIG}" in args and procs.alive(pid):
            return pid
    return None


def _get(path: str, params: dict | None = None) -> dict:
    r = httpclient.get(f"{URL}{path}", params=params, timeout=3.0, trust_env=False)
    r.raise_for_status()
    return r.json()


def _answers(url: str) -> bool:
    try:
        return httpclient.get(url, timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _exporters() -> list[str]:
    """A node exporter in each lab host (started once; it lives and dies with the host)."""
    started = []
    for name, h in HOSTS.items():
        if _answers(f"http://{h.mgmt_ip}:{EXPORTER_PORT}/metrics"):
            continue  # one answering on the host's own address is its own (a host sees every pid, not every port)
        r = host_exec(name, ["sh", "-c", f"setsid prometheus-node-exporter --web.listen-address=:{EXPORTER_PORT} "
                                         "--collector.disable-defaults --collector.loadavg --collector.meminfo "
                                         ">/dev/null 2>&1 </dev/null &"])  # fmt: skip
        if r.returncode != 0:
            raise SparkctlError(f"node exporter on {name}: {r.stderr.strip()}", fix="apt-get install prometheus-node-exporter")
        started.append(f"node exporter on {name}")
    return started


def up(alerts: dict | None = None) -> dict:
    """Rules and config from `sparkctl alerts` on the lab inventory + `alerts`; start or reload."""
    exe = shutil.which("prometheus")
    if exe is None:
        raise SparkctlError(
            "prometheus is not installed", fix="apt-get install prometheus prometheus-node-exporter (dev.sh does)"
        )
    DIR.mkdir(parents=True, exist_ok=True)
    changes = _exporters()
    inv = yaml.safe_load(paths.INVENTORY_PATH.read_text())
    inv["alerts"] = {**LAB_ALERTS, **(alerts or {})}
    (DIR / "inventory.yaml").write_text(yaml.safe_dump(inv, sort_keys=False))
    r = subprocess.run([sys.executable, "-m", "sparkctl", "alerts", "-i", str(DIR / "inventory.yaml"), "--out", str(RULES),
                        "--prometheus-config", str(CONFIG)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE})  # fmt: skip
    if r.returncode != 0:
        raise SparkctlError(f"sparkctl alerts failed: {r.stderr.strip()}")
    doc = yaml.safe_load(CONFIG.read_text())
    doc["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"}
    CONFIG.write_text(yaml.safe_dump(doc, sort_keys=False))
    pid = _pid()
    if pid and _answers(f"{URL}/-/ready"):
        httpclient.post(f"{URL}/-/reload", timeout=10, trust_env=False).raise_for_status()
        changes.append("prometheus reloaded")
    else:
        if pid:
            procs.kill([pid])
        argv = [
            exe,
            f"--config.file={CONFIG}",
            f"--storage.tsdb.path={DIR / 'data'}",
            f"--web.listen-address={HOSTS[HOST].mgmt_ip}:{PORT}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
        ]
        r = host_exec(HOST, ["sh", "-c", f"setsid {' '.join(argv)} >>{DIR / 'prometheus.log'} 2>&1 </dev/null &"])
        if r.returncode != 0:
            raise SparkctlError(f"prometheus on {HOST}: {r.stderr.strip()}")
        deadline = time.monotonic() + 30
        while not _answers(f"{URL}/-/ready"):
            if time.monotonic() > deadline:
                raise SparkctlError(f"prometheus did not get ready in 30 s (log: {DIR / 'prometheus.log'})")
            time.sleep(0.2)
        changes.append(f"prometheus started on {URL}")
    return {"url": URL, "rules": str(RULES), "config": str(CONFIG), "changes": changes}


def down() -> list[str]:
    pid = _pid()
    if not pid:
        return []
    procs.stop([pid], 10)
    return ["prometheus stopped"]


def alerts() -> list[dict]:
    return _get("/api/v1/alerts")["data"]["alerts"]


def rules() -> list[dict]:
    return [r for g in _get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]


def targets() -> list[dict]:
    return _get("/api/v1/targets")["data"]["activeTargets"]


def query(expr: str) -> list[dict]:
    return _get("/api/v1/query", {"query": expr})["data"]["result"]


def wait_firing(name: str, timeout: float = 60) -> dict:
    """The alert once Prometheus says it is firing; SparkctlError with what it saw otherwise."""
    deadline = time.monotonic() + timeout
    seen: list[dict] = []
    while time.monotonic() < deadline:
        seen = alerts()
        for a in seen:
            if a["labels"].get("alertname") == name and a["state"] == "firing":
                return a
        time.sleep(0.5)
    states = sorted({(a["labels"].get("alertname"), a["state"]) for a in seen})
    raise SparkctlError(f"{name} did not fire in {timeout:g} s; alerts seen: {states or 'none'}")
