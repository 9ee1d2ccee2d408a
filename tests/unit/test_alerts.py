"""`sparkctl alerts`: the rule file passes `promtool check rules`, and `promtool test rules` shows
each alert firing on synthetic series that break its threshold (and staying quiet on healthy ones).

promtool is Debian's `prometheus` package (dev.sh installs it). The expected annotations are the
rendered ones: summary with its value filled in, description and runbook_url from the rule.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import clirun
import pytest
import yaml

from sparkctl import runbooks
from sparkctl.alerts.render import rules_yaml
from sparkctl.alerts.rules import missing_runbooks, rules_for
from sparkctl.inventory.models import Inventory

REPO = Path(__file__).resolve().parents[2]
LAB = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
BASE = "https://runbooks.example/sparkctl/"
HEAD = {"job": "sparkctl-lab", "role": "head", "instance": "10.231.0.11:8888"}
VLLM = {**HEAD, "engine": "0", "model_name": "deepseek-v4.1-flash"}
GATEWAY = {"job": "sparkctl-lab", "role": "gateway", "instance": "10.231.0.11:8888"}


def inventory(**alerts) -> Inventory:
    doc = json.loads(json.dumps(LAB))
    doc["alerts"] = {"runbook_base_url": BASE, "decode_tokens_per_s_baseline": 100, **alerts}
    return Inventory.model_validate(doc)


def need_promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing: dev.sh installs Debian's prometheus package", pytrace=False)
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return path


def series(name: str, labels: dict, values: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def firing(rs, alert: str, labels: dict, summary: str) -> dict:
    rule = next(r for r in rs.rules if r.alert == alert)
    return {
        "exp_labels": {**labels, "severity": rule.severity, "cluster": "lab"},
        "exp_annotations": {
            "summary": summary,
            "description": rule.description,
            "runbook": f"sparkctl runbook {rule.runbook}",
            "runbook_url": f"{BASE}{rule.runbook}.md",
        },
    }


def cases(rs) -> list[dict]:
    """(input series, checks): each alert once breaking its threshold, once healthy."""
    ttft = lambda le, v: series("vllm:time_to_first_token_seconds_bucket", {**VLLM, "le": le}, v)  # noqa: E731
    return [
        {  # the head stops answering: pages after 30 s, not before
            "input_series": [series("up", HEAD, "1 1 0x8")],
            "alert_rule_test": [
                {"eval_time": "40s", "alertname": "SparkctlEngineDown", "exp_alerts": []},
                {
                    "eval_time": "90s",
                    "alertname": "SparkctlEngineDown",
                    "exp_alerts": [firing(rs, "SparkctlEngineDown", HEAD, "lab: the inference API on 10.231.0.11:8888 is down")],
                },
            ],
        },
        {
            "input_series": [
                series("up", {"job": "sparkctl-lab-nodes", "role": "worker", "instance": "10.231.0.12:9100"}, "0x8"),
                series("up", {"job": "sparkctl-lab-nodes", "role": "head", "instance": "10.231.0.11:9100"}, "1x8"),
                series("up", {"job": "sparkctl-lab", "role": "drafter", "instance": "10.231.0.13:8100"}, "0x8"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "60s",
                    "alertname": "SparkctlWorkerLost",
                    "exp_alerts": [
                        firing(
                            rs,
                            "SparkctlWorkerLost",
                            {"job": "sparkctl-lab-nodes", "role": "worker", "instance": "10.231.0.12:9100"},
                            "lab: worker 10.231.0.12:9100 is unreachable",
                        )
                    ],
                },
                {
                    "eval_time": "60s",
                    "alertname": "SparkctlDrafterUnreachable",
                    "exp_alerts": [
                        firing(
                            rs,
                            "SparkctlDrafterUnreachable",
                            {"job": "sparkctl-lab", "role": "drafter", "instance": "10.231.0.13:8100"},
                            "lab: the drafter on 10.231.0.13:8100 is unreachable",
                        )
                    ],
                },
            ],
        },
        {  # KV usage 97% for 3 minutes; preemptions 0 -> 3; 6 requests waiting throughout
            "input_series": [
                series("vllm:kv_cache_usage_perc", VLLM, "0.97x16"),
                series("vllm:num_preemptions_total", VLLM, "0 0 0 3 3 3 3 3 3 3 3 3 3"),
                series("vllm:num_requests_waiting", VLLM, "6x16"),
            ],
            "alert_rule_test": [
                {"eval_time": "60s", "alertname": "SparkctlKVCacheNearFull", "exp_alerts": []},
                {
                    "eval_time": "3m",
                    "alertname": "SparkctlKVCacheNearFull",
                    "exp_alerts": [firing(rs, "SparkctlKVCacheNearFull", VLLM, "lab: KV cache 97% used")],
                },
                {
                    "eval_time": "2m",
                    "alertname": "SparkctlPreemptionsRising",
                    "exp_alerts": [firing(rs, "SparkctlPreemptionsRising", VLLM, "lab: 3 preemptions in 5 minutes")],
                },
                {
                    "eval_time": "3m",
                    "alertname": "SparkctlWaitingQueueGrowing",
                    "exp_alerts": [
                        firing(rs, "SparkctlWaitingQueueGrowing", VLLM, "lab: 6 requests have waited for a slot for 2m")
                    ],
                },
            ],
        },
        {  # healthy: KV 50%, no preemption, the queue drains
            "input_series": [
                series("vllm:kv_cache_usage_perc", VLLM, "0.5x16"),
                series("vllm:num_preemptions_total", VLLM, "0x16"),
                series("vllm:num_requests_waiting", VLLM, "6x9 0 6 6"),
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": a, "exp_alerts": []}
                for a in ("SparkctlKVCacheNearFull", "SparkctlPreemptionsRising", "SparkctlWaitingQueueGrowing")
            ],
        },
        {  # every first token takes 40-60 s: p99 above 30 s
            "input_series": [ttft("1", "0x40"), ttft("60", "0+10x40"), ttft("+Inf", "0+10x40")],
            "alert_rule_test": [
                {
                    "eval_time": "5m",
                    "alertname": "SparkctlTTFTHigh",
                    "exp_alerts": [firing(rs, "SparkctlTTFTHigh", {}, "lab: p99 time to first token 59.41s")],
                },
            ],
        },
        {  # a hang: 2 requests run, no token, no prefill finished, the KV pool still; pages once it held 2m
            "input_series": [
                series("vllm:num_requests_running", VLLM, "2x16"),
                series("vllm:generation_tokens_total", VLLM, "0+40x4 160x12"),
                series("vllm:prompt_tokens_total", VLLM, "500x16"),
                series("vllm:kv_cache_usage_perc", VLLM, "0.1 0.11 0.12 0.13 0.14x12"),
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "SparkctlEngineStalled", "exp_alerts": []},
                {
                    "eval_time": "3m15s",
                    "alertname": "SparkctlEngineStalled",
                    "exp_alerts": [
                        firing(
                            rs,
                            "SparkctlEngineStalled",
                            VLLM,
                            "lab: the engine holds 2 running requests and produced nothing for 2m",
                        )
                    ],
                },
            ],
        },
        {  # no hang: one long prefill alone (its chunks move the KV pool), a decode, an idle engine
            "input_series": [
                series("vllm:num_requests_running", {**VLLM, "engine": "1"}, "1x16"),
                series("vllm:generation_tokens_total", {**VLLM, "engine": "1"}, "0x16"),
                series("vllm:prompt_tokens_total", {**VLLM, "engine": "1"}, "0x16"),
                series("vllm:kv_cache_usage_perc", {**VLLM, "engine": "1"}, "0+0.01x16"),
                series("vllm:num_requests_running", {**VLLM, "engine": "2"}, "1x16"),
                series("vllm:generation_tokens_total", {**VLLM, "engine": "2"}, "0+30x16"),
                series("vllm:prompt_tokens_total", {**VLLM, "engine": "2"}, "100x16"),
                series("vllm:kv_cache_usage_perc", {**VLLM, "engine": "2"}, "0.2x16"),
                series("vllm:num_requests_running", {**VLLM, "engine": "3"}, "0x16"),
                series("vllm:generation_tokens_total", {**VLLM, "engine": "3"}, "9x16"),
                series("vllm:prompt_tokens_total", {**VLLM, "engine": "3"}, "9x16"),
                series("vllm:kv_cache_usage_perc", {**VLLM, "engine": "3"}, "0x16"),
            ],
            "alert_rule_test": [{"eval_time": "3m30s", "alertname": "SparkctlEngineStalled", "exp_alerts": []}],
        },
        {  # 100 drafts / 15 s with 50 accepted tokens: mean acceptance length 1.5 < 2
            "input_series": [
                series("vllm:spec_decode_num_drafts_total", VLLM, "0+100x60"),
                series("vllm:spec_decode_num_accepted_tokens_total", VLLM, "0+50x60"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "SparkctlSpecAcceptanceLow",
                    "exp_alerts": [
                        firing(rs, "SparkctlSpecAcceptanceLow", VLLM, "lab: mean acceptance length 1.50, expected >= 2")
                    ],
                },
            ],
        },
        {  # acceptance length 4: quiet
            "input_series": [
                series("vllm:spec_decode_num_drafts_total", VLLM, "0+100x60"),
                series("vllm:spec_decode_num_accepted_tokens_total", VLLM, "0+300x60"),
            ],
            "alert_rule_test": [{"eval_time": "10m", "alertname": "SparkctlSpecAcceptanceLow", "exp_alerts": []}],
        },
        {  # Marlin: 50 tok/s per stream against a 100 tok/s baseline (floor 65), held 5 minutes
            "input_series": [
                series("vllm:generation_tokens_total", VLLM, "0+750x60"),
                series("vllm:request_decode_time_seconds_sum", VLLM, "0+15x60"),
                series("vllm:request_decode_time_seconds_count", VLLM, "0+1x60"),
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "SparkctlDecodeThroughputLow", "exp_alerts": []},
                {
                    "eval_time": "11m",
                    "alertname": "SparkctlDecodeThroughputLow",
                    "exp_alerts": [
                        firing(rs, "SparkctlDecodeThroughputLow", {}, "lab: decode 50 tok/s per stream, baseline 100")
                    ],
                },
            ],
        },
        {  # the front door stops answering: pages after 30 s
            "input_series": [series("up", GATEWAY, "1 1 0x8")],
            "alert_rule_test": [
                {"eval_time": "40s", "alertname": "SparkctlGatewayDown", "exp_alerts": []},
                {
                    "eval_time": "90s",
                    "alertname": "SparkctlGatewayDown",
                    "exp_alerts": [firing(rs, "SparkctlGatewayDown", GATEWAY, "lab: the front door on 10.231.0.11:8888 is down")],
                },
            ],
        },
        {  # a hold left behind: its age grows 15 s a sample, past 1200 s after 81 samples
            "input_series": [
                series("sparkctl_gateway_hold_age_seconds", GATEWAY, "0+15x100"),
                series("sparkctl_gateway_upstream_errors_total", {**GATEWAY, "kind": "cut"}, "0 0 0 2 2 2 2 2 2 2"),
                series("sparkctl_gateway_upstream_errors_total", {**GATEWAY, "kind": "connect"}, "0+5x40"),
                series("sparkctl_gateway_zero_token_streams_total", {**GATEWAY, "finish_reason": "abort"}, "0 0 3 3 3 3 3 3"),
            ],
            "alert_rule_test": [
                {"eval_time": "19m", "alertname": "SparkctlGatewayHolding", "exp_alerts": []},
                {
                    "eval_time": "21m",
                    "alertname": "SparkctlGatewayHolding",
                    "exp_alerts": [
                        firing(rs, "SparkctlGatewayHolding", GATEWAY, "lab: the front door has held requests for 21m 0s")
                    ],
                },
                {  # a cut answer tickets; connect errors (held and sent again) do not
                    "eval_time": "90s",
                    "alertname": "SparkctlGatewayUpstreamErrors",
                    "exp_alerts": [
                        firing(
                            rs,
                            "SparkctlGatewayUpstreamErrors",
                            {"instance": "10.231.0.11:8888"},
                            "lab: 2 answers broke off mid-way in 5m",
                        )
                    ],
                },
                {
                    "eval_time": "60s",
                    "alertname": "SparkctlZeroTokenStreams",
                    "exp_alerts": [
                        firing(
                            rs,
                            "SparkctlZeroTokenStreams",
                            {"instance": "10.231.0.11:8888"},
                            "lab: 3 streams ended without a token in 5m",
                        )
                    ],
                },
            ],
        },
        {  # passing: a held reload under 20 min, connect errors during it, streams with tokens
            "input_series": [
                series("up", GATEWAY, "1x20"),
                series("sparkctl_gateway_hold_age_seconds", GATEWAY, "0 0 15 30 45 0x16"),
                series("sparkctl_gateway_upstream_errors_total", {**GATEWAY, "kind": "connect"}, "0+5x20"),
                series("sparkctl_gateway_upstream_errors_total", {**GATEWAY, "kind": "cut"}, "0x20"),
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": a, "exp_alerts": []}
                for a in (
                    "SparkctlGatewayDown",
                    "SparkctlGatewayHolding",
                    "SparkctlGatewayUpstreamErrors",
                    "SparkctlZeroTokenStreams",
                )
            ],
        },
        {  # at the baseline: quiet
            "input_series": [
                series("vllm:generation_tokens_total", VLLM, "0+1500x60"),
                series("vllm:request_decode_time_seconds_sum", VLLM, "0+15x60"),
                series("vllm:request_decode_time_seconds_count", VLLM, "0+1x60"),
            ],
            "alert_rule_test": [{"eval_time": "11m", "alertname": "SparkctlDecodeThroughputLow", "exp_alerts": []}],
        },
    ]


def test_rule_file_passes_promtool_check(tmp_path):
    promtool = need_promtool()
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_yaml(rules_for(inventory())))
    r = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS: 14 rules found" in r.stdout, r.stdout + r.stderr


def test_every_alert_fires_on_its_series_and_stays_quiet_otherwise(tmp_path):
    promtool = need_promtool()
    rs = rules_for(inventory())
    (tmp_path / "rules.yml").write_text(rules_yaml(rs))
    doc = {"rule_files": ["rules.yml"], "evaluation_interval": "15s",
           "tests": [{"interval": "15s", **c} for c in cases(rs)]}  # fmt: skip
    (tmp_path / "test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    tested = {t["alertname"] for c in doc["tests"] for t in c["alert_rule_test"] if t["exp_alerts"]}
    assert tested == {r.alert for r in rs.rules}, "every rule is shown firing"
    r = subprocess.run([promtool, "test", "rules", "test.yml"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_thresholds_come_from_the_inventory():
    rs = rules_for(inventory(kv_usage=0.8, waiting_requests=10, ttft_p99_seconds=5, job="vllm"))
    exprs = {r.alert: r.expr for r in rs.rules}
    assert exprs["SparkctlKVCacheNearFull"].endswith("> 0.8") and 'job="vllm"' in exprs["SparkctlKVCacheNearFull"]
    assert exprs["SparkctlWaitingQueueGrowing"].endswith("> 10") and exprs["SparkctlTTFTHigh"].endswith("> 5")
    assert 'job="vllm-nodes"' in exprs["SparkctlWorkerLost"]
    no_baseline = rules_for(Inventory.model_validate(LAB))  # the lab inventory: defaults, no baseline
    assert "SparkctlDecodeThroughputLow" in no_baseline.not_written
    assert no_baseline.runbook_base_url is None


def test_without_a_published_base_alerts_name_the_command_not_a_local_path():
    # a file:// URL into this machine's site-packages opens nothing on the phone that gets the page
    rules = rules_for(Inventory.model_validate(LAB)).to_prometheus()["groups"][0]["rules"]
    for rule in rules:
        assert "runbook_url" not in rule["annotations"]
        name = rule["annotations"]["runbook"].removeprefix("sparkctl runbook ")
        assert rule["annotations"]["runbook"].startswith("sparkctl runbook ") and runbooks.exists(name)


@pytest.mark.parametrize(
    "base",
    [
        "docs/runbooks/",
        "file:///usr/lib/python3/site-packages/sparkctl/data/runbooks/",
        "https://",
        "https://git.example.com/runbooks/?ref=main",
    ],
)
def test_runbook_base_url_must_be_a_web_address(base):
    from pydantic import ValidationError

    doc = json.loads(json.dumps(LAB))
    doc["alerts"] = {"runbook_base_url": base}
    with pytest.raises(ValidationError) as exc:
        Inventory.model_validate(doc)
    assert "https:// URL of your copy of docs/runbooks/" in str(exc.value)


def test_runbook_base_url_gets_its_trailing_slash():
    doc = json.loads(json.dumps(LAB))
    doc["alerts"] = {"runbook_base_url": "https://git.example.com/ops/sparkctl/-/blob/main/docs/runbooks"}
    rules = rules_for(Inventory.model_validate(doc)).to_prometheus()["groups"][0]["rules"]
    assert (
        rules[0]["annotations"]["runbook_url"] == "https://git.example.com/ops/sparkctl/-/blob/main/docs/runbooks/runtime-down.md"
    )


def test_how_long_kv_usage_and_the_queue_must_hold_comes_from_the_inventory():
    default = {r.alert: r for r in rules_for(inventory()).rules}
    assert default["SparkctlKVCacheNearFull"].for_ == "2m"  # an operator's default: two minutes
    assert "[2m]" in default["SparkctlWaitingQueueGrowing"].expr
    short = {r.alert: r for r in rules_for(inventory(hold_for="5s")).rules}  # the lab runs 100x faster
    assert short["SparkctlKVCacheNearFull"].for_ == "5s"
    assert "[5s]" in short["SparkctlWaitingQueueGrowing"].expr and "for 5s" in short["SparkctlWaitingQueueGrowing"].summary


def test_every_alert_links_an_existing_runbook():
    rs = rules_for(inventory())
    assert missing_runbooks(rs) == []
    for rule in rs.to_prometheus()["groups"][0]["rules"]:
        assert rule["labels"]["severity"] in ("page", "ticket")
        assert rule["annotations"]["runbook_url"].startswith(BASE) and rule["annotations"]["summary"]


def test_every_alert_is_in_the_alert_reference_with_its_severity_and_runbook():
    """docs/alerts.md's table is where paging is set up from: an alert missing there is never routed."""
    inv = inventory()
    rs = rules_for(inv.model_copy(update={"keeper": inv.keeper.model_copy(update={"enabled": True})}))
    table = {}
    for line in (REPO / "docs" / "alerts.md").read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.startswith("| `Sparkctl"):
            table[cells[0]] = (cells[1], cells[-1])
    written = {r.alert: (r.severity, r.runbook) for r in rs.rules}
    assert "SparkctlKeeperGaveUp" in written  # the lab inventory has the gateway and the keeper on
    assert {a: table.get(a) for a in written} == written


def test_cli_writes_rules_and_a_matching_prometheus_config(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({**LAB, "alerts": {"decode_tokens_per_s_baseline": 100}}))
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8"}

    def run(*a):
        return clirun.sparkctl(["alerts", "-i", str(inv), *a], timeout=60, env=env)

    r = run("--out", str(tmp_path / "rules.yml"), "--prometheus-config", str(tmp_path / "prometheus.yml"))
    assert r.returncode == 0, r.stderr
    assert "14 rules written" in r.stdout  # the answer; warnings (none here) go to stderr
    prom = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert prom["rule_files"] == ["rules.yml"]  # beside it: Prometheus reads it from the config's folder
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    # the engine through the gateway's engine route (it listens on loopback); the gateway's own page
    assert jobs["sparkctl-lab"]["static_configs"][0] == {
        "targets": ["10.231.0.11:8888"], "labels": {"role": "head", "__metrics_path__": "/gateway/engine/metrics"}
    }  # fmt: skip
    assert jobs["sparkctl-lab"]["static_configs"][1] == {
        "targets": ["10.231.0.11:8888"], "labels": {"role": "gateway", "__metrics_path__": "/gateway/metrics"}
    }  # fmt: skip
    # the drafter where the head reaches it: the offload host's address on its link to the head
    assert jobs["sparkctl-lab"]["static_configs"][2] == {"targets": ["10.231.110.4:8100"], "labels": {"role": "drafter"}}
    # without the gateway the engine serves runtime.port itself, and nothing scrapes a gateway
    inv.write_text(yaml.safe_dump({**LAB, "alerts": {"decode_tokens_per_s_baseline": 100}, "gateway": {"enabled": False}}))
    r = run("--out", str(tmp_path / "rules.yml"), "--prometheus-config", str(tmp_path / "prometheus.yml"))
    assert r.returncode == 0 and "10 rules written" in r.stdout, r.stderr
    static = yaml.safe_load((tmp_path / "prometheus.yml").read_text())["scrape_configs"][0]["static_configs"]
    assert [t["labels"]["role"] for t in static] == ["head", "drafter"] and static[0]["targets"] == ["10.231.0.11:8888"]
    inv.write_text(yaml.safe_dump({**LAB, "alerts": {"decode_tokens_per_s_baseline": 100}}))
    r = run("--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["groups"][0]["rules"]) == 14
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**LAB, "alerts": {"kv_usage": 2}}))
    r = clirun.sparkctl(["alerts", "-i", str(bad)], env=env)
    assert r.returncode == 2 and "alerts.kv_usage" in r.stderr and "Traceback" not in r.stderr


def test_the_prometheus_config_names_the_rules_relative_to_itself(tmp_path):
    """Prometheus reads a relative `rule_files` entry from the config file's folder (its config.go:
    LoadFile -> SetDirectory): the written pair works on the Prometheus host, where this machine's
    absolute path does not exist."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(LAB))
    (tmp_path / "rules").mkdir()
    (tmp_path / "prom").mkdir()
    r = clirun.sparkctl(
        ["alerts", "-i", str(inv), "--out", "rules/sparkctl.yml", "--prometheus-config", str(tmp_path / "prom" / "prometheus.yml")],
        timeout=60, cwd=tmp_path, env={**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "prom" / "prometheus.yml").read_text()
    assert yaml.safe_load(text)["rule_files"] == ["../rules/sparkctl.yml"] and str(tmp_path) not in text
    copy = tmp_path / "elsewhere"  # both copied to the Prometheus host, side by side as written
    shutil.copytree(tmp_path / "rules", copy / "rules")
    shutil.copytree(tmp_path / "prom", copy / "prom")
    entry = yaml.safe_load((copy / "prom" / "prometheus.yml").read_text())["rule_files"][0]
    assert ((copy / "prom") / entry).resolve() == (copy / "rules" / "sparkctl.yml").resolve()
    assert ((copy / "prom") / entry).read_text() == (tmp_path / "rules" / "sparkctl.yml").read_text()
