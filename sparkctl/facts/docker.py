"""Docker facts from the docker CLI on the host: image IDs and this cluster's runtime containers.

Doctor reads these inside its one round trip per host (the Docker SDK over SSH needs the same
CLI on the host anyway: it dials the engine with `docker system dial-stdio`). Images are compared
by image ID (config digest): a side-loaded image has no RepoDigest (spark-fabric.md).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Optional

from sparkctl.runtime.launch import LABEL_PREFIX


def image_probe(ref: str) -> str:
    return f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(ref)}"


@dataclass(frozen=True)
class ImageFact:
    ref: str
    id: Optional[str]  # sha256:..., None when absent or unreadable
    error: Optional[str] = None  # why there is no id ("No such image", docker not answering)


def parse_image(ref: str, rc: int, text: str) -> ImageFact:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if rc == 0 and lines and lines[0].startswith("sha256:"):
        return ImageFact(ref, lines[0])
    detail = lines[-1] if lines else f"docker exit {rc}"
    if "no such image" in text.lower() or (rc == 1 and not lines):
        detail = "not present"
    return ImageFact(ref, None, detail)


def cluster_ids(cluster: str) -> str:
    """Shell: `ids` = this cluster's containers, running or not (the probe exits when docker does not answer)."""
    label = shlex.quote(f"label={LABEL_PREFIX}.cluster={cluster}")
    return f"ids=$(docker ps -aq --no-trunc --filter {label}) || exit $?; "


def containers_probe(cluster: str) -> str:
    return cluster_ids(cluster) + 'if [ -n "$ids" ]; then docker inspect $ids; else echo "[]"; fi'


@dataclass(frozen=True)
class ContainerFact:
    id: str
    name: str
    status: str  # running, exited, restarting, created ...
    exit_code: int
    image_id: str
    image_ref: str
    labels: dict[str, str] = field(default_factory=dict)
    memlock: Optional[int] = None  # the container's memlock ulimit (soft), -1 = unlimited, None = not set
    started_at: str = ""
    error: str = ""  # State.Error, e.g. an OOM or exec failure

    @property
    def running(self) -> bool:
        return self.status == "running"

    def running_for(self) -> Optional[float]:
        """Seconds since it started (by this machine's clock), None if unreadable."""
        from datetime import datetime, timezone

        try:  # docker prints RFC 3339 in UTC with nanoseconds: fromisoformat keeps the microseconds
            return max((datetime.now(timezone.utc) - datetime.fromisoformat(self.started_at)).total_seconds(), 0.0)
        except (ValueError, TypeError):  # empty, or a time without its zone
            return None

    @property
    def role(self) -> str:
        return self.labels.get(f"{LABEL_PREFIX}.role", "")

    @property
    def config_hash(self) -> str:
        return self.labels.get(f"{LABEL_PREFIX}.config-hash", "")


def parse_containers(rc: int, text: str) -> tuple[list[ContainerFact], Optional[str]]:
    """`docker inspect` JSON -> containers (environment deliberately dropped: it may hold secrets)."""
    if rc != 0:
        return [], (text.strip().splitlines() or [f"docker exit {rc}"])[-1]
    try:
        items = json.loads(text or "[]")
    except json.JSONDecodeError:
        return [], f"unreadable docker inspect output: {text.strip()[:200]}"
    out = []
    for it in items:
        state = it.get("State") or {}
        cfg = it.get("Config") or {}
        ulimits = (it.get("HostConfig") or {}).get("Ulimits") or []
        memlock = next((int(u.get("Soft", 0)) for u in ulimits if u.get("Name") == "memlock"), None)
        out.append(
            ContainerFact(
                id=it.get("Id", ""),
                name=(it.get("Name") or "").lstrip("/"),
                status=state.get("Status", "unknown"),
                exit_code=int(state.get("ExitCode") or 0),
                image_id=it.get("Image", ""),
                image_ref=cfg.get("Image", ""),
                labels=dict(cfg.get("Labels") or {}),
                memlock=memlock,
                started_at=state.get("StartedAt", ""),
                error=state.get("Error", "") or "",
            )
        )
    return out, None
