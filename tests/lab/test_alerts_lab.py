"""The lab's real Prometheus (on the head, as an operator would run it) with the rules
`sparkctl alerts` writes: every target is scraped, every rule is loaded with its runbook,
and a healthy serving lab fires nothing. The drills (test_drills.py) show the alerts firing. The
engine is scraped through the gateway's engine route (runtime.port/gateway/engine/metrics: it
listens on the head's loopback), the front door on runtime.port at /gateway/metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

FENCE = "127.0.0.0/8,10.231.0.0/16"


@pytest.fixture(scope="module")
def prom(lab):
    inventory = Path(lab.INVENTORY_PATH)
    r = subprocess.run([sys.executable, "-m", "sparkctl", "up", "-i", str(inventory), "--json"], capture_output=True,
                       text=True, timeout=600, env={**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    lab.prometheus.up()
    yield lab.prometheus
    lab.prometheus.down()


def test_every_target_is_scraped(prom):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        targets = {(t["labels"]["job"], t["labels"]["role"]): t["health"] for t in prom.targets()}
        if set(targets.values()) == {"up"}:
            break
        time.sleep(1)
    assert targets == {("sparkctl-lab", "head"): "up", ("sparkctl-lab", "drafter"): "up", ("sparkctl-lab", "gateway"): "up",
                       ("sparkctl-lab-nodes", "head"): "up", ("sparkctl-lab-nodes", "worker"): "up",
                       ("sparkctl-lab-nodes", "offload"): "up"}  # fmt: skip


def test_rules_loaded_with_runbooks_and_nothing_fires_when_healthy(prom):
    time.sleep(8)  # evaluated a few times (a reloaded rule is `unknown` until then), longer than the paging `for`
    rules = {r["name"]: r for r in prom.rules()}
    assert {"SparkctlEngineDown", "SparkctlWorkerLost", "SparkctlDrafterUnreachable", "SparkctlKVCacheNearFull",
            "SparkctlTTFTHigh", "SparkctlSpecAcceptanceLow", "SparkctlGatewayDown", "SparkctlGatewayHolding",
            "SparkctlGatewayUpstreamErrors", "SparkctlZeroTokenStreams"} <= set(rules)  # fmt: skip
    for r in rules.values():
        assert r["health"] == "ok", (r["name"], r.get("lastError"))
        # the lab publishes no runbook_base_url: the rule names the command that prints its runbook
        assert r["annotations"]["runbook"].startswith("sparkctl runbook ") and r["labels"]["severity"] in ("page", "ticket")
    assert [a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"] == []
