"""Step names as playbooks/*.yaml spell them -> the class that implements each."""

from __future__ import annotations

from sparkctl.steps.base import Step


def step_classes() -> dict[str, type[Step]]:
    from sparkctl.steps.caches import CachesStep
    from sparkctl.steps.engram import EngramStep
    from sparkctl.steps.fabric import FabricStep
    from sparkctl.steps.gateway import GatewayStep
    from sparkctl.steps.images import ImagesStep
    from sparkctl.steps.keeper import KeeperStep
    from sparkctl.steps.preflight import PreflightStep
    from sparkctl.steps.record import RecordStep
    from sparkctl.steps.runtime import RuntimeStep, StopStep
    from sparkctl.steps.throughput import ThroughputStep
    from sparkctl.steps.weights import WeightsStep

    classes = (
        PreflightStep,
        FabricStep,
        ImagesStep,
        WeightsStep,
        CachesStep,
        EngramStep,
        StopStep,
        GatewayStep,
        RuntimeStep,
        ThroughputStep,
        RecordStep,
        KeeperStep,
    )
    return {c.name: c for c in classes}
