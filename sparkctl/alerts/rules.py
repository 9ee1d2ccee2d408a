"""The alerting rules for an inventory's cluster: what pages, on which series, which runbook answers.

Series are vLLM's own (`vllm:*` on the head's /metrics), Prometheus's `up` for the head, the
drafter and the gateway (one job, targets labelled `role`), the gateway's own (`sparkctl_gateway_*`
on /gateway/metrics), and `up` of a node exporter per host for worker loss.
Thresholds come from the inventory's `alerts:` section (sparkctl/inventory/alerts.py).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from sparkctl import runbooks

Severity = Literal["page", "ticket"]


class Rule(BaseModel):
    """One Prometheus alerting rule, with the runbook that answers it."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    alert: str
    expr: str
    for_: str = Field("0s", alias="for")
    severity: Severity
    summary: str
    description: str
    runbook: str  # docs/runbooks/<runbook>.md

    def to_prometheus(self, runbook_base_url: Optional[str], cluster: str) -> dict:
        # `runbook`: the command that prints it wherever sparkctl is installed; `runbook_url` (what
        # Alertmanager and Grafana link) only where the inventory says the runbooks are published
        annotations = {"summary": self.summary, "description": self.description, "runbook": runbooks.command(self.runbook)}
        if runbook_base_url:
            annotations["runbook_url"] = runbooks.link(self.runbook, runbook_base_url)
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity, "cluster": cluster},
            "annotations": annotations,
        }


class RuleSet(BaseModel):
    cluster: str
    job: str
    nodes_job: str
    runbook_base_url: Optional[str]  # alerts.runbook_base_url; None: no runbook_url annotations
    rules: list[Rule]
    not_written: dict[str, str] = Field(default_factory=dict)  # alert -> why (and the key that enables it)

    def to_prometheus(self) -> dict:
        """The rule file's document (`promtool check rules` accepts it)."""
        return {
            "groups": [
                {
                    "name": f"sparkctl-{self.cluster}",
                    "rules": [r.to_prometheus(self.runbook_base_url, self.cluster) for r in self.rules],
                }
            ]
        }


def rules_for(inv) -> RuleSet:
    a = inv.alerts
    cluster = inv.cluster.name
    job = a.job or f"sparkctl-{cluster}"
    nodes_job = a.nodes_job or f"{job}-nodes"
    w = a.rate_window
    w2 = _twice(w)
    head = f'job="{job}",role="head"'
    served = f'{head},model_name="{inv.runtime.served_model_name}"'
    rules = [
        Rule(
            alert="SparkctlEngineDown",
            expr=f"up{{{head}}} == 0",
            for_=a.down_for,
            severity="page",
            summary=f"{cluster}: the inference API on {{{{ $labels.instance }}}} is down",
            description="Prometheus cannot scrape the engine's /metrics on the head: it died (crash, lost worker, "
            "unreachable drafter) or its container stopped. Behind the gateway, clients' requests are held up to "
            "gateway.hold_s, then answered 503 with Retry-After (doctor: gateway.engine). "
            "`sparkctl doctor --only runtime` names the cause.",
            runbook="runtime-down",
        ),
        Rule(
            alert="SparkctlWorkerLost",
            expr=f'up{{job="{nodes_job}",role="worker"}} == 0',
            for_=a.down_for,
            severity="page",
            summary=f"{cluster}: worker {{{{ $labels.instance }}}} is unreachable",
            description="The worker Spark does not answer; the head's engine dies with it (tensor parallel needs every rank).",
            runbook="worker-lost",
        ),
    ]
    if inv.runtime.speculative and inv.runtime.speculative.drafter_host:
        rules.append(
            Rule(
                alert="SparkctlDrafterUnreachable",
                expr=f'up{{job="{job}",role="drafter"}} == 0',
                for_=a.down_for,
                severity="page",
                summary=f"{cluster}: the drafter on {{{{ $labels.instance }}}} is unreachable",
                description="The head's engine stops after a few failed drafter health checks in a row (5 in the lab, 1 s apart).",
                runbook="runtime.drafter",
            )
        )
    rules += [
        Rule(
            alert="SparkctlKVCacheNearFull",
            expr=f"vllm:kv_cache_usage_perc{{{served}}} > {a.kv_usage:g}",
            for_=a.hold_for,
            severity="ticket",
            summary=f"{cluster}: KV cache {{{{ $value | humanizePercentage }}}} used",
            description="The KV pool is shared by every live request; when it is full the newest request is preempted.",
            runbook="kv-cache-full",
        ),
        Rule(
            alert="SparkctlPreemptionsRising",
            expr=f"increase(vllm:num_preemptions_total{{{served}}}[5m]) > {a.preemptions_per_5m:g}",
            severity="ticket",
            summary=f"{cluster}: {{{{ $value | humanize }}}} preemptions in 5 minutes",
            description="Requests are preempted because the KV pool cannot hold every live sequence.",
            runbook="kv-cache-full",
        ),
        Rule(
            alert="SparkctlWaitingQueueGrowing",
            expr=f"min_over_time(vllm:num_requests_waiting{{{served}}}[{a.hold_for}]) > {a.waiting_requests}",
            severity="ticket",
            summary=f"{cluster}: {{{{ $value }}}} requests have waited for a slot for {a.hold_for}",
            description="Every slot (max_num_seqs) is busy or a long prefill holds the token budget.",
            runbook="long-ttft",
        ),
        Rule(
            alert="SparkctlTTFTHigh",
            expr=f"histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{served}}}[{w}]))) "
            f"> {a.ttft_p99_seconds:g}",
            severity="ticket",
            summary=f"{cluster}: p99 time to first token {{{{ $value | humanizeDuration }}}}",
            description="Short requests wait behind a long cold prompt's prefill (head-of-line) or a full queue.",
            runbook="long-ttft",
        ),
        Rule(
            # progress is a token, a finished prefill (vLLM counts a prompt with its first token) or a KV
            # block (a long prefill allocates chunk by chunk): none of them while requests run is a hang
            alert="SparkctlEngineStalled",
            expr=f"min_over_time(vllm:num_requests_running{{{served}}}[{a.hold_for}]) > 0"
            f" and increase(vllm:generation_tokens_total{{{served}}}[{a.hold_for}]) == 0"
            f" and increase(vllm:prompt_tokens_total{{{served}}}[{a.hold_for}]) == 0"
            f" and changes(vllm:kv_cache_usage_perc{{{served}}}[{a.hold_for}]) == 0",
            severity="page",
            summary=f"{cluster}: the engine holds {{{{ $value }}}} running requests and produced nothing for {a.hold_for}",
            description="No token generated, no prefill finished and no KV block moved while requests run and "
            "/health answers 200: a hang in the collective (NCCL over the fabric). Only a full restart of head "
            "and worker recovers: `sparkctl restart`.",
            runbook="engine-stalled",
        ),
    ]
    if inv.runtime.speculative:
        drafts = f"rate(vllm:spec_decode_num_drafts_total{{{served}}}[{w2}])"
        accepted = f"rate(vllm:spec_decode_num_accepted_tokens_total{{{served}}}[{w2}])"
        rules.append(
            Rule(
                alert="SparkctlSpecAcceptanceLow",
                expr=f"(1 + {accepted} / {drafts}) < {a.acceptance_length_min:g} and {drafts} > 0",
                severity="ticket",
                summary=f'{cluster}: mean acceptance length {{{{ $value | printf "%.2f" }}}}, '
                f"expected >= {a.acceptance_length_min:g}",
                description="Speculative decoding accepts fewer drafted tokens than this workload should "
                "(long contexts lower acceptance; a wrong or remote drafter too).",
                runbook="spec-acceptance-low",
            )
        )
    not_written = {}
    if inv.gateway.enabled:
        rules += gateway_rules(a, cluster, f'job="{job}",role="gateway"', w)
    if inv.gateway.enabled and inv.keeper.enabled:
        rules.append(keeper_rule(cluster, f'job="{job}",role="gateway"'))
    elif inv.keeper.enabled:
        not_written["SparkctlKeeperGaveUp"] = "the keeper says it gave up through the gateway's hold: gateway.enabled is false"
    if a.decode_tokens_per_s_baseline:
        floor = a.decode_tokens_per_s_baseline * (1 - a.decode_drop)
        # per stream: tokens generated per second of decoding (no decode at all: NaN, never below the floor)
        speed = (
            f"sum(rate(vllm:generation_tokens_total{{{served}}}[{w}])) / "
            f"sum(rate(vllm:request_decode_time_seconds_sum{{{served}}}[{w}]))"
        )
        rules.append(
            Rule(
                alert="SparkctlDecodeThroughputLow",
                expr=f"({speed}) < {floor:g}",
                for_=a.decode_for,
                severity="ticket",
                summary=f"{cluster}: decode {{{{ $value | humanize }}}} tok/s per stream, baseline "
                f"{a.decode_tokens_per_s_baseline:g}",
                description="Decode runs well below the recorded baseline: the silent Marlin fallback halves it.",
                runbook="runtime.moe_backend",
            )
        )
    else:
        not_written["SparkctlDecodeThroughputLow"] = (
            "no recorded baseline: set alerts.decode_tokens_per_s_baseline (one stream's tok/s from `sparkctl bench`)"
        )
    return RuleSet(
        cluster=cluster,
        job=job,
        nodes_job=nodes_job,
        runbook_base_url=a.runbook_base_url,
        rules=rules,
        not_written=not_written,
    )


def gateway_rules(a, cluster: str, gw: str, w: str) -> list[Rule]:
    """The front door's alerts, on its own metrics (/gateway/metrics, role=gateway: docs/gateway.md)."""
    return [
        Rule(
            alert="SparkctlGatewayDown",
            expr=f"up{{{gw}}} == 0",
            for_=a.down_for,
            severity="page",
            summary=f"{cluster}: the front door on {{{{ $labels.instance }}}} is down",
            description="Prometheus cannot scrape sparkctl-gateway's /gateway/metrics on runtime.port: clients get "
            "connection refused, whatever the engine behind it does. `sparkctl doctor --only gateway` says why.",
            runbook="gateway-down",
        ),
        Rule(
            alert="SparkctlGatewayHolding",
            expr=f"sparkctl_gateway_hold_age_seconds{{{gw}}} > {a.gateway_hold_s:g}",
            severity="page",
            summary=f"{cluster}: the front door has held requests for {{{{ $value | humanizeDuration }}}}",
            description="A hold longer than any restart: every request waits hold_s, then gets 503. A sparkctl run "
            "that died mid-change leaves its hold behind (it ends by itself at gateway.hold_max_s).",
            runbook="gateway-holding",
        ),
        Rule(
            alert="SparkctlGatewayUpstreamErrors",
            expr=f'sum by (instance) (increase(sparkctl_gateway_upstream_errors_total{{{gw},kind=~"cut|died"}}[{w}])) > 0',
            severity="ticket",
            summary=f"{cluster}: {{{{ $value | humanize }}}} answers broke off mid-way in {w}",
            description="The engine broke off answers the gateway was relaying, or died with requests it was running "
            "(outside a sparkctl change): those clients got an error; a request an engine died with is never sent "
            "again (the gateway's log has its shape: the likeliest cause of the crash).",
            runbook="gateway-upstream-errors",
        ),
        Rule(
            alert="SparkctlZeroTokenStreams",
            expr=f"sum by (instance) (increase(sparkctl_gateway_zero_token_streams_total{{{gw}}}[{w}])) > {a.empty_streams:g}",
            severity="ticket",
            summary=f"{cluster}: {{{{ $value | humanize }}}} streams ended without a token in {w}",
            description='"HTTP up, zero tokens": the engine answers 200 and streams nothing (finish_reason abort: '
            "a drain nobody held requests for).",
            runbook="gateway-zero-tokens",
        ),
    ]


def keeper_rule(cluster: str, gw: str) -> Rule:
    """The keeper gave up (docs/keeper.md): it holds the front door with a reason that says so."""
    return Rule(
        alert="SparkctlKeeperGaveUp",
        expr=f'max by (instance, reason) (sparkctl_gateway_hold_info{{{gw},reason=~"keeper gave up.*"}}) > 0',
        severity="page",
        summary=f"{cluster}: the keeper gave up bringing the cluster back ({{{{ $labels.reason }}}})",
        description="The engine (or the worker, or the drafter) kept going away after keeper.max_recoveries recoveries "
        "within keeper.window_s: the keeper stopped restarting it, and the front door answers 503 naming why. "
        "`sparkctl history` shows each recovery's cause; fix it, then `sparkctl restart`.",
        runbook="keeper.state",
    )


def _twice(duration: str) -> str:
    return f"{2 * int(duration[:-1])}{duration[-1]}"


def missing_runbooks(rs: RuleSet) -> list[str]:
    """Runbooks the rules link to that do not exist (a defect: every alert needs its runbook)."""
    return sorted({r.runbook for r in rs.rules if not runbooks.exists(r.runbook)})
