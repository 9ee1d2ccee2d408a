"""What on-call watches: the Grafana dashboard `sparkctl alerts --dashboard` writes, and the keeper's
alert. Grafana itself cannot be installed here (no registry this project reaches ships its server),
so the dashboard is checked for the structure Grafana's import needs, every expression passes
promtool, and every metric it names is one that vLLM (the simulator's exposition, whose names
docs/conformance.md ties to vLLM 0.33) or sparkctl's gateway exports."""

from __future__ import annotations

import json
import re
import subprocess

import yaml
from prometheus_client.parser import text_string_to_metric_families
from test_alerts import GATEWAY, firing, inventory, need_promtool, series

from sparkctl.alerts.dashboard import dashboard
from sparkctl.alerts.rules import rules_for

PROMQL_WORDS = {"sum", "by", "rate", "resets", "histogram_quantile", "le", "up"}


def kept_inventory():
    inv = inventory()
    return inv.model_copy(update={"keeper": inv.keeper.model_copy(update={"enabled": True})})


def exported_names() -> set[str]:
    from sparkctl.gateway.metrics import Metrics
    from sparkctl_lab.sim.metrics import VllmMetrics

    inv = inventory()
    gateway = Metrics()
    gateway.hold_info.labels("reload").set(1)  # its series exists while a hold does (gate.py start_hold)
    pages = [VllmMetrics(inv.runtime.served_model_name, inv.runtime.max_model_len, 5, {}).render(),
             gateway.render()[0].decode()]  # fmt: skip
    return {s.name for page in pages for fam in text_string_to_metric_families(page) for s in fam.samples}


def exprs(doc: dict) -> list[str]:
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


def test_the_dashboard_has_the_shape_grafana_imports():
    doc = json.loads(json.dumps(dashboard(rules_for(kept_inventory()), kept_inventory())))
    assert doc["schemaVersion"] >= 36 and doc["uid"] and doc["title"] == "sparkctl lab"
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in doc["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
    titles = " ".join(p["title"] for p in doc["panels"]).lower()
    for what in ("serving", "holding", "restarts", "first token", "tokens per second", "acceptance", "kv cache"):
        assert what in titles, what


def test_every_metric_the_dashboard_names_is_exported():
    names = exported_names()
    used = set()
    for e in exprs(dashboard(rules_for(kept_inventory()), kept_inventory())):
        used |= {m for m in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", e) if m not in PROMQL_WORDS}
    assert used and used <= names, sorted(used - names)


def test_every_dashboard_expression_passes_promtool(tmp_path):
    promtool = need_promtool()
    doc = dashboard(rules_for(kept_inventory()), kept_inventory())
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:expr{i}", "expr": e}
                                                        for i, e in enumerate(exprs(doc))]}]}  # fmt: skip
    (tmp_path / "r.yml").write_text(yaml.safe_dump(rules))
    r = subprocess.run([promtool, "check", "rules", str(tmp_path / "r.yml")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_keeper_giving_up_pages_with_its_reason(tmp_path):
    promtool = need_promtool()
    rs = rules_for(kept_inventory())
    from sparkctl.alerts.render import rules_yaml

    (tmp_path / "rules.yml").write_text(rules_yaml(rs))
    reason = "keeper gave up: 3 recoveries within 1800 s (keeper.max_recoveries); last: sparkctl-head on head: OOM"
    labels = {**GATEWAY, "reason": reason}
    summary = f"lab: the keeper gave up bringing the cluster back ({reason})"
    case = {"interval": "15s", "input_series": [series("sparkctl_gateway_hold_info", labels, "1x4"),
                                                 series("sparkctl_gateway_hold_info", {**GATEWAY, "reason": "reload"}, "1x4")],
            "alert_rule_test": [{"eval_time": "30s", "alertname": "SparkctlKeeperGaveUp",
                                 "exp_alerts": [firing(rs, "SparkctlKeeperGaveUp", labels, summary)]}]}  # fmt: skip
    case["alert_rule_test"][0]["exp_alerts"][0]["exp_labels"].pop("job")  # `max by (instance, reason)` keeps these two
    case["alert_rule_test"][0]["exp_alerts"][0]["exp_labels"].pop("role")
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "tests": [case]}, sort_keys=False))
    r = subprocess.run([promtool, "test", "rules", "test.yml"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    assert "SparkctlKeeperGaveUp" not in {r.alert for r in rules_for(inventory()).rules}  # keeper off: no rule
