"""Build a host's facts for unit tests the way a run does: recorded command output per fact key,
parsed by the one fact layer (sparkctl/facts/host.py parse_host, each fact as registered in its topic
module). No host, no mocks."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sparkctl.facts.host import parse_host
from sparkctl.facts.probe import Section
from sparkctl.inventory.models import Inventory

ROOT = Path(__file__).resolve().parents[2]
REC = Path(__file__).parent / "recorded"
LAB_SNAPSHOT = REC / "doctor" / "healthy.json"  # real sections recorded on the lab (record.py)


def inventory(name: str = "lab") -> Inventory:
    return Inventory.model_validate(yaml.safe_load((ROOT / "inventories" / f"{name}.yaml").read_text()))


def sec(out: str, rc: int = 0) -> Section:
    return Section(rc, out)


def host_facts(inv: Inventory, host: str, **sections: Section):
    """Sections keyed by fact key (`ip_addr`, `image.0`, `ping.1`, ...) -> HostFacts."""
    return parse_host(inv, host, {k.replace("__", "."): v for k, v in sections.items()})


def recorded_sections(host: str) -> dict[str, Section]:
    """The healthy lab's real sections for one host, as gathered by doctor."""
    doc = json.loads(LAB_SNAPSHOT.read_text())
    return {k: Section(v["rc"], v["out"]) for k, v in doc["hosts"][host]["sections"].items()}
