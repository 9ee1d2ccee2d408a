"""Step names as playbooks/*.yaml spell them -> the class that implements each."""

from __future__ import annotations

from sparkctl.errors import InputError
from sparkctl.steps.base import Step


def step_classes() -> dict[str, type[Step]]:
    from sparkctl.steps.caches import CachesStep
    from sparkctl.steps.engram import EngramStep
    from sparkctl.steps.fabric import FabricStep
    from sparkctl.steps.images import ImagesStep
    from sparkctl.steps.preflight import PreflightStep
    from sparkctl.steps.record import RecordStep
    from sparkctl.steps.runtime import RuntimeStep

    return {c.name: c for c in (PreflightStep, FabricStep, ImagesStep, CachesStep, EngramStep, RuntimeStep, RecordStep)}


def build(names: list[str], playbook: str) -> list[Step]:
    classes = step_classes()
    unknown = [n for n in names if n not in classes]
    if unknown:
        raise InputError(
            f"playbook {playbook!r} names unknown step(s): {', '.join(unknown)}",
            fix=f"known steps: {', '.join(classes)}",
        )
    return [classes[n]() for n in names]
