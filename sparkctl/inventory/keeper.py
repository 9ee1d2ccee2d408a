"""The inventory's `keeper:` section: the supervisor on the head that brings the cluster back after
a crash or a reboot (docs/keeper.md). Kept apart from models.py so the keeper owns its knobs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Keeper(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = Field(
        True,
        description="Run `sparkctl keeper run` on the head under systemd (installed by `up`, removed by `down`); "
        "false: `up` removes it, and a crashed engine stays down until someone runs `sparkctl restart`.",
    )
    sparkctl: str = Field(
        "sparkctl",
        description="The sparkctl command on the head the unit runs (a name looked up on the head's PATH, or an "
        "absolute path): install the same sparkctl wheel there (docs/keeper.md).",
    )
    grace_s: float = Field(
        15, ge=0, le=3600, description="How long a container must stay gone before the keeper acts (it may restart by itself)."
    )
    max_recoveries: int = Field(
        3,
        ge=1,
        le=100,
        description="Recoveries within window_s after which the keeper gives up (a crash loop, systemd's "
        "StartLimitBurst): the front door then answers 503 naming the reason until a person acts.",
    )
    window_s: float = Field(1800, gt=0, le=86400, description="The window max_recoveries counts in, seconds.")
    interval_s: float = Field(3, gt=0, le=300, description="Seconds between two looks at the cluster.")
