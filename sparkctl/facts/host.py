"""The fact gatherer: a host's facts of the kinds asked for, read in ONE round trip, parsed once.

It knows no fact itself: each is one object in its topic's module (facts/base.py registers them).
Checks declare the kinds they read (READS in each checks module) and steps theirs (`Step.facts`);
a command gathers the union per host through the cluster session (sparkctl/session.py), which
calls `gather_host`. `probes_for` builds a host's probes from the inventory, `parse_host` is the
pure half (tests feed it recorded sections). Probes that only wait run concurrently inside the
script (facts/probe.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Optional

from sparkctl.facts import base
from sparkctl.facts.probe import Section, gather
from sparkctl.inventory.models import Inventory

if TYPE_CHECKING:  # the typed attributes, declared in each topic module (its @host_fields class)
    from sparkctl.facts.caches import CacheFields
    from sparkctl.facts.docker import DockerFields
    from sparkctl.facts.engram import EngramFields
    from sparkctl.facts.fleet_door import FleetDoorFields
    from sparkctl.facts.gpu import GpuFields
    from sparkctl.facts.keeper import KeeperFields
    from sparkctl.facts.logs import LogsFields
    from sparkctl.facts.network import NetworkFields
    from sparkctl.facts.rdma import RdmaFields
    from sparkctl.facts.runtime import RuntimeFields
    from sparkctl.facts.state import StateFields
    from sparkctl.facts.system import SystemFields
    from sparkctl.facts.weights import WeightsFields

    class _Fields(
        SystemFields,
        NetworkFields,
        RdmaFields,
        GpuFields,
        DockerFields,
        LogsFields,
        CacheFields,
        EngramFields,
        WeightsFields,
        RuntimeFields,
        StateFields,
        FleetDoorFields,
        KeeperFields,
    ):
        pass

else:  # at run time the fields are set from the registered classes (base.defaults): the topic
    _Fields = object  # modules are imported on a host's first gather, not with this module


def kinds() -> tuple[str, ...]:
    """Every fact kind a host can be asked for, in probe order."""
    return tuple(base.order())


class HostFacts(_Fields):
    """Parsed facts of one host. Each fact's fields (its topic module's @host_fields class) are
    typed attributes: read here, or the field's default when it was not read; a fact that could
    not be read leaves its default (None for most) with the reason in `errors`."""

    def __init__(self, host: str, sections: Optional[dict[str, Section]] = None) -> None:
        self.host = host
        self.sections: dict[str, Section] = dict(sections or {})
        self.errors: dict[str, str] = {}  # section key -> why its fact is missing
        self.kinds: set[str] = set()  # the fact kinds read (some have nothing to read on a host)
        self.sent_at: dict[str, float] = {}  # section key -> when its round trip was sent (runner's clock)
        for name, make in base.defaults().items():  # a mutable default is filled in place by its parser
            setattr(self, name, make())

    def __repr__(self) -> str:
        return f"HostFacts({self.host!r}, kinds={sorted(self.kinds)})"


def probes_for(inv: Inventory, host: str, kinds: Optional[Iterable[str]] = None) -> dict[str, str]:
    """Shell probes for one host, limited to the fact kinds asked for (all when None), in probe order."""
    facts = base.registry()
    want = set(kinds) if kinds is not None else set(facts)
    unknown = want - set(facts)
    if unknown:
        raise ValueError(f"unknown fact kind(s): {sorted(unknown)}")
    target = base.Target(inv, host)
    probes: dict[str, str] = {}
    for name in base.order():
        if name in want:
            probes.update(facts[name].probes(target))
    return probes


def background_keys(probes: Iterable[str]) -> set[str]:
    """The probes that only wait: run concurrently inside the script."""
    facts = base.registry()
    return {k for k in probes if facts[k.split(".", 1)[0]].background}


def parse_host(inv: Inventory, host: str, sections: dict[str, Section], sent: Optional[float] = None) -> HostFacts:
    """Pure: sections gathered by `probes_for`'s script -> HostFacts (never raises on odd output).
    `sent`: when the round trip was sent (the clock fact's reference)."""
    f = HostFacts(host, sections)
    f.kinds = {k.partition(".")[0] for k in sections}
    if sent is not None:
        f.sent_at = dict.fromkeys(sections, sent)
    _parse(f, base.Target(inv, host))
    return f


def _parse(f: HostFacts, target: base.Target) -> None:
    facts, rank = base.registry(), base.order()
    for key in sorted(f.sections, key=lambda k: rank[k.partition(".")[0]]):
        name, _, i = key.partition(".")
        reading = base.Reading(key, int(i or 0), f.sections[key], target, f.sent_at.get(key))
        try:
            facts[name].parse(f, reading)
        except Exception as exc:  # an answer we did not expect: a fact we cannot judge, not a crash
            f.errors[key] = f"unreadable output ({type(exc).__name__}: {exc}): {f.sections[key].out.strip()[:200]}"


def gather_host(
    session, inv: Inventory, kinds: Optional[Iterable[str]] = None, timeout: float = 60, into: Optional[HostFacts] = None
) -> HostFacts:
    """Connect (if needed), run the host's probes for `kinds` in one round trip, parse them.
    With `into`, the new sections replace that HostFacts' sections of the same keys (a re-read
    after a change, or a second round trip for a gate), and everything is parsed again."""
    session.connect()
    asked = set(kinds) if kinds is not None else set(base.registry())
    probes = probes_for(inv, session.name, asked)
    sent = time.time()
    sections = gather(session, probes, timeout=timeout, background=background_keys(probes)) if probes else {}
    f = HostFacts(session.name, {**(into.sections if into else {}), **sections})
    f.kinds = (into.kinds if into else set()) | asked
    f.sent_at = {**(into.sent_at if into else {}), **dict.fromkeys(sections, sent)}
    _parse(f, base.Target(inv, session.name))
    return f
