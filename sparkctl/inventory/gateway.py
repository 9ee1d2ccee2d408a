"""The inventory's `gateway:` section: the front door on the head (docs/gateway.md).

Kept apart from sparkctl/inventory/models.py so the gateway owns its knobs; the inventory only
holds this section. Unknown keys are errors, like everywhere in the inventory.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


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
    # bounds (docs/gateway.md "Security"): what a client, or all of them, may make the gateway hold
    max_body_bytes: int = Field(
        32 << 20,
        ge=1024,
        description="A request body larger than this is answered 413 (default 32 MiB: a 1M-token prompt as text is "
        "~4 MB, as token ids ~8 MB).",
    )
    max_buffered_bytes: int = Field(
        512 << 20,
        ge=1024,
        description="Bytes of request bodies the gateway holds at once, every request together (held, queued, at the "
        "engine); past it new requests are answered 503 with Retry-After.",
    )
    memory_limit_bytes: int = Field(
        1 << 30,
        ge=64 << 20,
        description="The gateway container's memory limit (docker --memory): the Spark's memory is the GPU's too.",
    )
    open_files: Optional[int] = Field(
        None,
        ge=1024,
        description="The gateway container's open-file limit (--ulimit nofile): one per client and per engine "
        "connection, so hold_queue held requests need twice as many. Unset: the Docker daemon's limit (the gateway "
        "raises its own soft limit to it at start, and logs it).",
    )
    upstream_idle_s: float = Field(
        900,
        gt=0,
        le=86400,
        description="The engine's time to first byte, and its longest silence within an answer: past it the request is "
        "answered 504 (a stream is cut) and new requests are held until the engine's /health answers. Long enough for "
        "a cold 1M-token prefill, or a whole answer when the client does not stream.",
    )
    # a path, never a key: the keys stay on the head (docs/gateway.md "Security")
    api_keys_file: Optional[str] = Field(
        None,
        description="A file on the head holding the keys clients must send (`Authorization: Bearer KEY`), one a "
        "line (# comments): the gateway reads it at its start, sparkctl reads the first key over SSH for its own "
        "checks. Unset: the engine's key (runtime.env VLLM_API_KEY) when it has one, else no key is asked.",
    )

    @field_validator("api_keys_file")
    @classmethod
    def _absolute_on_the_head(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and (not value.startswith("/") or "~" in value or "$" in value or "," in value or ":" in value):
            raise ValueError(f"{value!r} must be an absolute path on the head (no ~, $VARIABLES, ':' or ',')")
        return value
