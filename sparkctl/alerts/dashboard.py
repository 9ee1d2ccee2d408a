"""The Grafana dashboard on-call watches (`sparkctl alerts --dashboard FILE`), from the same series
and labels as the alert rules (rules.py): serving state, recoveries, holds, TTFT, tok/s,
speculative acceptance and KV use. Grafana's dashboard JSON model (schemaVersion 39), importable
as it is (Dashboards > New > Import); the Prometheus data source is a variable chosen at import.
"""

from __future__ import annotations

from sparkctl.alerts.rules import RuleSet

SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}


def _panel(
    pid: int,
    title: str,
    kind: str,
    targets: list[tuple[str, str]],
    x: int,
    y: int,
    w: int = 8,
    h: int = 7,
    unit: str = "short",
    description: str = "",
) -> dict:
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard(rs: RuleSet, inv) -> dict:
    job, served_model = rs.job, inv.runtime.served_model_name
    head = f'job="{job}",role="head"'
    served = f'{head},model_name="{served_model}"'
    gw = f'job="{job}",role="gateway"'
    w = inv.alerts.rate_window
    panels = [
        _panel(
            1,
            "Serving",
            "stat",
            [(f"up{{{head}}}", "engine"), (f"up{{{gw}}}", "front door")],
            0,
            0,
            unit="bool_on_off",
            description="1: Prometheus scrapes it. The engine down behind a passing front door: requests are held.",
        ),
        _panel(
            2,
            "Front door holding",
            "timeseries",
            [(f"sparkctl_gateway_holding{{{gw}}}", "{{cause}}"), (f"sparkctl_gateway_held_requests{{{gw}}}", "held")],
            8,
            0,
            description="A hold (sparkctl or the keeper restarting the engine) or the engine down.",
        ),
        _panel(
            3,
            "Hold reason (the keeper gave up: a crash loop)",
            "table",
            [(f"sparkctl_gateway_hold_info{{{gw}}} > 0", "{{reason}}")],
            16,
            0,
            description="The current admin hold's reason; 'keeper gave up: ...' pages (SparkctlKeeperGaveUp).",
        ),
        _panel(
            4,
            "Engine restarts (recoveries, reloads)",
            "timeseries",
            [(f"resets(vllm:request_success_total{{{served}}}[1h])", "restarts in the last hour")],
            0,
            7,
            description="Each engine start resets its counters; `sparkctl history` says which were the keeper's and why.",
        ),
        _panel(
            5,
            "Requests answered by the front door itself",
            "timeseries",
            [(f"sum by (reason) (rate(sparkctl_gateway_rejected_total{{{gw}}}[{w}]))", "{{reason}}")],
            8,
            7,
            unit="reqps",
        ),
        _panel(
            6,
            "Answers cut mid-way",
            "timeseries",
            [(f"sum by (kind) (rate(sparkctl_gateway_upstream_errors_total{{{gw}}}[{w}]))", "{{kind}}")],
            16,
            7,
            unit="reqps",
        ),
        _panel(
            7,
            "Time to first token",
            "timeseries",
            [
                (
                    f"histogram_quantile({q}, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{served}}}[{w}])))",
                    f"p{int(q * 100)}",
                )
                for q in (0.5, 0.99)
            ],
            0,
            14,
            unit="s",
        ),
        _panel(
            8,
            "Generated tokens per second",
            "timeseries",
            [(f"sum(rate(vllm:generation_tokens_total{{{served}}}[{w}]))", "tok/s")],
            8,
            14,
        ),
        _panel(
            9,
            "KV cache used",
            "timeseries",
            [(f"vllm:kv_cache_usage_perc{{{served}}}", "{{engine}}")],
            16,
            14,
            unit="percentunit",
        ),
        _panel(
            10,
            "Requests running and waiting",
            "timeseries",
            [
                (f"sum(vllm:num_requests_running{{{served}}})", "running"),
                (f"sum(vllm:num_requests_waiting{{{served}}})", "waiting"),
            ],
            0,
            21,
        ),
    ]
    if inv.runtime.speculative:
        drafts = f"rate(vllm:spec_decode_num_drafts_total{{{served}}}[{w}])"
        accepted = f"rate(vllm:spec_decode_num_accepted_tokens_total{{{served}}}[{w}])"
        panels.append(
            _panel(
                11,
                "Speculative acceptance length",
                "timeseries",
                [(f"1 + sum({accepted}) / sum({drafts})", "mean acceptance length")],
                8,
                21,
                description=f"Alert below {inv.alerts.acceptance_length_min:g} (SparkctlSpecAcceptanceLow).",
            )
        )
    return {
        "title": f"sparkctl {rs.cluster}",
        "uid": f"sparkctl-{rs.cluster}"[:40],
        "tags": ["sparkctl"],
        "timezone": "browser",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"}]},
        "annotations": {"list": []},
        "panels": panels,
    }
