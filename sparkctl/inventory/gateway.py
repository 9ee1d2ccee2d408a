"""The inventory's `gateway:` section: the front door on the head (docs/gateway.md).

Kept apart from sparkctl/inventory/models.py so the gateway owns its knobs; the inventory only
holds this section. Unknown keys are errors, like everywhere in the inventory.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LongContext(_Section):
    """Admission of long prompts: the seed 002 recipe crashes under concurrent long-context requests."""

    tokens: int = Field(..., ge=1, description="A request whose prompt has more than this many tokens is long.")
    max_concurrent: int = Field(1, ge=1, description="Long requests at the engine at once, at most.")
    queue: int = Field(16, ge=0, description="Long requests that may wait for a slot; past that 429 with Retry-After.")
    wait_s: float = Field(600, gt=0, description="How long a long request may wait for a slot before 429.")


class Gateway(_Section):
    """`sparkctl-gateway` on the head: clients keep `runtime.port`, the engine moves behind it to
    `engine_port`; sparkctl holds requests there while it restarts the engine."""

    enabled: bool = Field(
        True, description="false: no gateway, the engine serves runtime.port itself (every restart refuses clients)."
    )
    engine_port: int = Field(
        8001,
        ge=1,
        le=65535,
        description="The engine's port on the head behind the gateway (vLLM --port). The gateway, sparkctl and "
        "Prometheus use it; keep clients on runtime.port (close this port to them at your firewall).",
    )
    image: Optional[str] = Field(
        None,
        min_length=1,
        description="Image the gateway runs in (default runtime.image: vLLM's image ships aiohttp and "
        "prometheus_client, and every node already holds it). Its code comes from sparkctl itself.",
    )
    hold_s: float = Field(
        30,
        gt=0,
        le=3600,
        description="No request is held longer than this. A restart expected to take longer answers new requests "
        "with 503 and Retry-After at once.",
    )
    hold_max_s: float = Field(
        1800,
        gt=0,
        le=86400,
        description="A hold nobody releases (sparkctl died mid-reload) ends by itself after this.",
    )
    hold_queue: int = Field(1024, ge=1, description="Requests held at once, at most; past that 503 at once.")
    upstream_connections: int = Field(0, ge=0, description="Connections to the engine at once (0: no limit).")
    long_context: Optional[LongContext] = Field(None, description="Admit at most max_concurrent long prompts at once.")
