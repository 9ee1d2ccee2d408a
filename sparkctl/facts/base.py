"""What a fact is: one object with a name, the shell probe that reads it, its parser, and whether
it only waits (background), defined in its topic's module (facts/network.py, facts/docker.py ...).

`@fact(name, probe)` registers the decorated parser as fact `name`, the way `checks/base.py`
registers checks:
- `probe` is the snippet the host's one-round-trip script runs (facts/probe.py): a string, or a
  function of the `Target` (the inventory and one host) returning a snippet, None (nothing to read
  on this host), or {index: snippet} for a fact read once per rail or image (sections `name.0`, ...);
- the parser `fn(facts: HostFacts, reading)` fills the HostFacts attributes its fact owns;
- `@host_fields` declares those attributes, typed, once per topic module: a dataclass whose fields
  are the attributes with their defaults (a host where the fact was not read keeps the default).
  HostFacts (facts/host.py) is declared from these classes, so what a parser stores is the type a
  check or step reads, and mypy checks both ends;
- `background` probes only wait (pings, docker CLI, nvidia-smi, hashing): the script runs them
  concurrently; `after` names facts whose fields this parser reads (parsed first).

Adding a fact kind touches its topic's module (a new topic also adds its field class to HostFacts'
bases in facts/host.py). The generic gatherer (facts/host.py) knows no fact; the registry imports
the topic modules (MODULES) the first time it is asked.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, TypeVar, Union, dataclass_transform

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts
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
    memo: dict[str, list[str]] = field(default_factory=dict)  # what topic modules derive once per host (facts/docker's images)

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
    parse: Callable[[HostFacts, Reading], None]
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
FIELDS: list[type] = []  # the @host_fields classes, in import order
_loaded = False
_load_lock = threading.Lock()


Parser = TypeVar("Parser", bound=Callable[..., None])  # fn(facts: HostFacts, reading: Reading)
FieldsClass = TypeVar("FieldsClass", bound=type)


def fact(
    name: str,
    probe: Union[str, Callable[[Target], ProbeSpec]],
    *,
    background: bool = False,
    after: tuple[str, ...] = (),
) -> Callable[[Parser], Parser]:
    """Registers `fn(facts, reading)` as the parser of fact `name`, read by `probe`."""

    def register(fn: Parser) -> Parser:
        snippet = probe if callable(probe) else (lambda target, text=probe: text)
        add(Fact(name, snippet, fn, background, tuple(after), fn.__module__))
        return fn

    return register


def add(f: Fact) -> Fact:
    if "." in f.name or f.name in REGISTRY:
        raise ValueError(f"fact {f.name!r} registered twice (or its name has a dot)")
    REGISTRY[f.name] = f
    _derived.clear()
    return f


@dataclass_transform(field_specifiers=(field,))
def host_fields(cls: FieldsClass) -> FieldsClass:
    """Declares HostFacts attributes (a topic module's facts fill them): a dataclass, each field
    with its type and its default (`field(default_factory=dict)` for a mutable one). Each name is
    owned once across sparkctl."""
    dataclass(cls)  # in place: the class itself is what HostFacts is declared from
    taken = {f.name: owner.__name__ for owner in FIELDS for f in fields(owner)}
    clash = [f.name for f in fields(cls) if f.name in taken or f.name in RESERVED]
    if clash:
        raise ValueError(f"{cls.__name__}: field(s) {clash} already belong to {[taken.get(k, 'HostFacts') for k in clash]}")
    FIELDS.append(cls)
    _derived.clear()
    return cls


def forget_fields(cls: type) -> None:
    """Unregister a field class (tests that declare one of their own)."""
    if cls in FIELDS:
        FIELDS.remove(cls)
    _derived.clear()


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


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def defaults() -> dict[str, Callable[[], Any]]:
    """Every HostFacts field -> a function making its default (a fresh one for a mutable default)."""
    if "defaults" not in _derived:
        registry()  # the topic modules declare their fields as they are imported
        made: dict[str, Callable[[], Any]] = {}
        for cls in FIELDS:
            for f in fields(cls):
                made[f.name] = f.default_factory if f.default_factory is not MISSING else _constant(f.default)
        _derived["defaults"] = made
    return _derived["defaults"]
