"""The inventory's `alerts:` section: thresholds of the alerting rules (every key has a default).

Kept apart from sparkctl/inventory/models.py so the rules' knobs stay together; the inventory
only holds this section, and the rules (sparkctl/alerts/) read it from here. Unknown keys are
errors, like everywhere in the inventory.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Alerts(BaseModel):
    """Thresholds of `sparkctl alerts` (Prometheus alerting rules for this cluster)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    job: Optional[str] = Field(
        None,
        min_length=1,
        description="Prometheus job that scrapes the head's and the drafter's /metrics "
        "(default sparkctl-<cluster name>); targets carry a `role` label: head, drafter.",
    )
    nodes_job: Optional[str] = Field(
        None,
        min_length=1,
        description="Job that scrapes a node exporter on every host (default "
        "<job>-nodes), targets labelled `role` (head, worker, offload): worker loss is seen there.",
    )
    runbook_base_url: Optional[str] = Field(
        None,
        min_length=1,
        description="Where your team publishes docs/runbooks/ (an https:// URL, e.g. your "
        "git host's view of that folder): each alert's runbook_url and doctor's runbook lines are this + "
        "<runbook>.md. Unset: no runbook_url; alerts and doctor name the command that prints the runbook "
        "(`sparkctl runbook NAME`).",
    )
    down_for: str = Field(
        "30s", pattern=r"^\d+[smh]$", description="How long the head or drafter may be unscrapable before paging."
    )
    kv_usage: float = Field(0.95, gt=0, le=1, description="KV cache usage (0-1) that warns when held for hold_for.")
    preemptions_per_5m: float = Field(0, ge=0, description="Preemptions in 5 minutes above which to warn (0: any).")
    waiting_requests: int = Field(4, ge=0, description="Requests waiting for a slot, held for hold_for, that warns.")
    hold_for: str = Field(
        "2m",
        pattern=r"^\d+[smh]$",
        description="How long KV usage and the waiting queue must stay above their thresholds before they warn.",
    )
    ttft_p99_seconds: float = Field(30.0, gt=0, description="p99 time to first token over 5 minutes that warns.")
    acceptance_length_min: float = Field(
        2.0,
        gt=1,
        description="Mean acceptance length (1 + accepted/drafts over 10 minutes) below which "
        "speculative decoding is not paying; set it from `sparkctl bench` for your workload.",
    )
    decode_tokens_per_s_baseline: Optional[float] = Field(
        None,
        gt=0,
        description="Recorded decode speed of one stream (tok/s, from `sparkctl bench`); "
        "without it the throughput rule (the Marlin case) is not written.",
    )
    rate_window: str = Field(
        "5m",
        pattern=r"^\d+[smh]$",
        description="Window of the rate-based rules (preemptions, TTFT, decode speed); acceptance uses twice this.",
    )
    decode_for: str = Field("5m", pattern=r"^\d+[smh]$", description="How long decode must stay below the floor before it warns.")
    gateway_hold_s: float = Field(
        1200,
        gt=0,
        description="A gateway hold older than this pages (SparkctlGatewayHolding): longer than a cold start on "
        "the seeds' hardware (10-15 min), shorter than gateway.hold_max_s (when a hold ends by itself).",
    )
    empty_streams: float = Field(
        0,
        ge=0,
        description="Streams that ended without one content token within rate_window above which to warn "
        "(SparkctlZeroTokenStreams; 0: any).",
    )
    decode_drop: float = Field(0.35, gt=0, lt=1, description="Fraction below the baseline that warns (0.35: below 65%).")

    @field_validator("runbook_base_url")
    @classmethod
    def _a_web_base(cls, value: Optional[str]) -> Optional[str]:
        # an alert is read on a phone or in a chat, far from the control machine: a repo path or a
        # file:// URL opens nothing there
        from urllib.parse import urlsplit

        if value is None:
            return value
        u = urlsplit(value)
        if u.scheme not in ("https", "http") or not u.netloc or u.query or u.fragment or " " in value:
            raise ValueError(
                f"{value!r} is not a web address to publish runbooks at: write the https:// URL of your copy of "
                "docs/runbooks/, e.g. https://git.example.com/ops/sparkctl/-/blob/main/docs/runbooks/"
            )
        return value if value.endswith("/") else value + "/"  # <base><name>.md
