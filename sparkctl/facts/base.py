"""What a fact is: one object with a name, the shell probe that reads it, its parser, and whether
it only waits (background), defined in its topic's module (facts/network.py, facts/docker.py ...).

`@fact(name, probe, fields=...)` registers the decorated parser as fact `name`, the way
`checks/base.py` registers checks:
- `probe` is the snippet the host's one-round-trip script runs (facts/probe.py): a string, or a
  function of the `Target` (the inventory and one host) returning a snippet, None (nothing to read
  on this host), or {index: snippet} for a fact read once per rail or image (sections `name.0`, ...);
- the parser `fn(facts, reading)` fills `fields`, the HostFacts attributes this fact owns, each
  with its default (a value, or a factory such as `dict` for a mutable one) for a host where it
  was not read;
- `background` probes only wait (pings, docker CLI, nvidia-smi, hashing): the script runs them
  concurrently; `after` names facts whose fields this parser reads (parsed first).

Adding a fact kind touches one module: its topic's. The generic gatherer (facts/host.py) knows
none of them; the registry imports the topic modules (MODULES) the first time it is asked.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

if TYPE_CHECKING:
    from sparkctl.facts.probe import Section
    from sparkctl.inventory.models import Host, Inventory

ProbeSpec = Union[None, str, Mapping[int, str]]

# Where facts are defined, imported on first use. The order is the probe script's and the parse
# order (a fact's `after` may move it later): the clock is read first, right after the command is sent.
MODULES = (
    "sparkctl.facts.system",
    "sparkctl.facts.network",
    "sparkctl.facts.rdma",
    "sparkctl.facts.gpu",
    "sparkctl.facts.docker",
    "sparkctl.facts.logs",
    "sparkctl.facts.caches",
    "sparkctl.facts.engram",
    "sparkctl.facts.weights",
    "sparkctl.facts.runtime",
    "sparkctl.facts.state",
    "sparkctl.facts.fleet_door",
    "sparkctl.facts.keeper",
)


@dataclass
class Target:
    """What a probe is built from: the inventory and the host it is for."""

    inventory: Inventory
    name: str
    memo: dict[str, Any] = field(default_factory=dict)  # what topic modules derive once per host (facts/docker's images)

    @property
    def host(self) -> Host:
        return self.inventory.hosts[self.name]


@dataclass(frozen=True)
class Reading:
    """One section of a host's round trip, as a parser sees it."""

    key: str  # the section's key: the fact's name, or `name.i`
    index: int  # i of `name.i` (the rail, the image), 0 for a one-section fact
    section: Section
    target: Target
    sent: Optional[float] = None  # when the round trip that read it was sent (runner's clock)

    @property
    def out(self) -> str:
        return self.section.out

    @property
    def rc(self) -> int:
        return self.section.rc

    @property
    def ok(self) -> bool:
        return self.section.ok

    def last_line(self) -> str:
        """The last non-empty line of the output (what a failed command says), else its exit code."""
        lines = [ln for ln in self.out.strip().splitlines() if ln.strip()]
        return lines[-1].strip() if lines else f"exit {self.rc}"


@dataclass(frozen=True)
class Fact:
    name: str
    probe: Callable[[Target], ProbeSpec]
    parse: Callable[[Any, Reading], None]
    fields: Mapping[str, Any] = field(default_factory=dict)
    background: bool = False
    after: tuple[str, ...] = ()
    module: str = ""  # where it is defined: MODULES order is the script's order

    def probes(self, target: Target) -> dict[str, str]:
        """Section key -> snippet for this host (none when the fact has nothing to read there)."""
        spec = self.probe(target)
        if spec is None:
            return {}
        if isinstance(spec, str):
            return {self.name: spec}
        return {f"{self.name}.{i}": snippet for i, snippet in spec.items()}


REGISTRY: dict[str, Fact] = {}
_loaded = False
_load_lock = threading.Lock()


def fact(
    name: str,
    probe: Union[str, Callable[[Target], ProbeSpec]],
    *,
    fields: Optional[Mapping[str, Any]] = None,
    background: bool = False,
    after: tuple[str, ...] = (),
) -> Callable:
    """Registers `fn(facts, reading)` as the parser of fact `name`, read by `probe`."""

    def register(fn: Callable[[Any, Reading], None]) -> Callable:
        snippet = probe if callable(probe) else (lambda target, text=probe: text)
        add(Fact(name, snippet, fn, dict(fields or {}), background, tuple(after), fn.__module__))
        return fn

    return register


def add(f: Fact) -> Fact:
    if "." in f.name or f.name in REGISTRY:
        raise ValueError(f"fact {f.name!r} registered twice (or its name has a dot)")
    taken = {k: other.name for other in REGISTRY.values() for k in other.fields}
    clash = [k for k in f.fields if k in taken or k in RESERVED]
    if clash:
        raise ValueError(f"fact {f.name!r}: field(s) {clash} already belong to {[taken.get(k, 'HostFacts') for k in clash]}")
    REGISTRY[f.name] = f
    _derived.clear()
    return f


def remove(name: str) -> None:
    """Unregister a fact (tests that register one of their own)."""
    REGISTRY.pop(name, None)
    _derived.clear()


RESERVED = frozenset({"host", "sections", "errors", "kinds", "sent_at"})  # HostFacts' own attributes
_derived: dict[str, Any] = {}  # order and field defaults, recomputed after a registration


def registry() -> dict[str, Fact]:
    """Every fact, once each topic module is imported (thread-safe: hosts gather in parallel)."""
    global _loaded
    if not _loaded:
        with _load_lock:
            if not _loaded:
                for module in MODULES:
                    importlib.import_module(module)
                _loaded = True
    return REGISTRY


def order() -> dict[str, int]:
    """Fact name -> its place in the probe script and the parse order: MODULES order (whatever
    imported a topic module first), definition order within a module, each fact after the facts
    its `after` names. Facts of other modules (a test's) come last."""
    if "order" not in _derived:
        facts, done = registry(), dict[str, int]()
        rank = {m: i for i, m in enumerate(MODULES)}
        names = sorted(facts, key=lambda n: rank.get(facts[n].module, len(rank)))  # stable: definition order

        def visit(name: str) -> None:
            if name not in done:
                for dep in facts[name].after:
                    visit(dep)
                done[name] = len(done)

        for name in names:
            visit(name)
        _derived["order"] = done
    return _derived["order"]


def defaults() -> dict[str, Any]:
    """Every fact's fields -> default (a value, or a factory for a mutable one)."""
    if "defaults" not in _derived:
        _derived["defaults"] = {k: v for f in registry().values() for k, v in f.fields.items()}
    return _derived["defaults"]
