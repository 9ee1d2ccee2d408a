"""The cluster session: what one command holds while it talks to the cluster.

- the SSH fleet (one connection per host, opened on first use, closed at the end);
- the cluster lock's handle, for a command that changes the cluster (lock.cluster_lock yields it
  untaken; the runner takes it before the first change);
- every host's facts, read once: `need(kinds)` gathers only the kinds a host has not answered
  yet, all hosts in parallel, one round trip each (facts/host.py), and `refresh(kinds)` reads them
  again after a change or for a new frame;
- a host that could not be read as ONE typed value, `Unreachable` (why as a `Reason`, the
  message, the fix), never words a caller has to parse.

doctor, the runner (`up`, `down`, reload's playbooks), `status` and `history` use it; a host whose
latest read failed keeps its earlier facts (a run that planned from them still has them) and is
named in `unreachable` until a read succeeds again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Literal, Mapping, Optional, Union, cast, get_args

from sparkctl.errors import HostError, SparkctlError, UnreachableError, UnreachableReason

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts
    from sparkctl.inventory.models import Inventory
    from sparkctl.lock import ClusterLock
    from sparkctl.transport.ssh import Fleet, HostSession, Outcome

# Why a host gave no facts: the transport's reasons for SSH (errors.UnreachableReason), and three more
Reason = Union[
    UnreachableReason,
    Literal[
        "fenced",  # SPARKCTL_ONLY_NETWORKS refused its address: no connection was tried
        "command",  # SSH worked, the facts script did not (it hung past its deadline, or failed)
        "error",  # anything else (a sparkctl bug): the message says what
    ],
]
REASONS: tuple[str, ...] = get_args(UnreachableReason) + ("fenced", "command", "error")

Kinds = Union[Iterable[str], Mapping[str, Iterable[str]]]  # the same kinds for every host, or per host


@dataclass(frozen=True)
class Unreachable:
    """A host whose facts could not be read, and why."""

    host: str
    reason: Reason
    message: str  # redacted: it is shown as it is
    fix: Optional[str] = None
    error: Optional[SparkctlError] = field(default=None, repr=False, compare=False)  # to fail a command with it

    @classmethod
    def of(cls, host: str, outcome: Outcome) -> "Unreachable":
        """A failed Outcome of Fleet.map (its message already redacted)."""
        failure = getattr(outcome, "failure", None)
        return cls(host, reason_of(failure), outcome.error or "no answer", outcome.fix, failure)

    @classmethod
    def from_error(cls, host: str, error: SparkctlError) -> "Unreachable":
        from sparkctl.transport.redact import redact

        return cls(host, reason_of(error), redact(error.message), error.fix, error)


def reason_of(error: Optional[BaseException]) -> Reason:
    from sparkctl.transport.guard import FencedAddress

    if isinstance(error, UnreachableError):
        return error.reason
    if isinstance(error, FencedAddress):
        return "fenced"
    if isinstance(error, HostError):
        return "command"
    return "error"


class ClusterSession:
    """One command's SSH sessions, cluster lock and fact cache (see the module's docstring).

    `hosts` limits the session to some hosts (InputError for a name the inventory lacks). Built
    over an existing `fleet` (and `facts`, `lock`) it shares them: closing is then their owner's."""

    def __init__(
        self,
        inventory: Inventory,
        hosts: Optional[Iterable[str]] = None,
        *,
        fleet: Optional[Fleet] = None,
        facts: Optional[dict[str, HostFacts]] = None,
        lock: Optional[ClusterLock] = None,
    ) -> None:
        if fleet is None:
            from sparkctl.transport.ssh import Fleet

            fleet, self._owns_fleet = Fleet(inventory, hosts), True
        else:
            self._owns_fleet = False
        self.inventory = inventory
        self.fleet = fleet
        self.facts: dict[str, HostFacts] = facts if facts is not None else {}
        self.lock = lock  # None for a read-only command
        self.unreachable: dict[str, Unreachable] = {}
        self.seconds: dict[str, float] = {}  # host -> how long its latest round trip took
        self._guard = threading.Lock()  # steps re-read hosts from parallel threads
        # this command's calls to the cluster send its key (read from the head on the first call)
        from sparkctl.transport import api_key

        api_key.authorize(inventory, fleet)

    # -- the fleet ----------------------------------------------------------------------------

    @property
    def hosts(self) -> list[str]:
        """The hosts of this session, inventory order."""
        return list(self.fleet.sessions)

    def __getitem__(self, host: str) -> HostSession:
        return self.fleet[host]

    def connect_early(self) -> "ClusterSession":
        """Start every SSH handshake in the background (transport/ssh.py HostSession.connect_early)."""
        self.fleet.connect_early()
        return self

    def close(self) -> None:
        if self._owns_fleet:
            self.fleet.close()

    def __enter__(self) -> "ClusterSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- facts --------------------------------------------------------------------------------

    def reached(self, hosts: Optional[Iterable[str]] = None) -> dict[str, HostFacts]:
        """Facts of the hosts (all of the session's when None) whose latest read succeeded."""
        names = self.hosts if hosts is None else list(hosts)
        return {h: self.facts[h] for h in names if h in self.facts and h not in self.unreachable}

    def need(
        self, kinds: Kinds, hosts: Optional[Iterable[str]] = None, timeout: float = 60, wait: Optional[float] = None
    ) -> dict[str, HostFacts]:
        """Facts with at least these kinds on every host asked (all when None; or the per-host
        mapping's): only what a host has not answered yet is gathered, all hosts at once, one round
        trip each. A host already unreachable is not tried again (`refresh` does). `timeout` is the
        probe script's deadline, `wait` the whole gather's (a host past it is unresponsive)."""
        wanted = self._wanted(kinds, hosts)
        todo = {h: k - self._have(h) for h, k in wanted.items() if h not in self.unreachable}
        self._gather({h: k for h, k in todo.items() if k}, timeout, wait)
        return self.reached(wanted)

    def refresh(
        self, kinds: Kinds, hosts: Optional[Iterable[str]] = None, timeout: float = 60, wait: Optional[float] = None
    ) -> dict[str, HostFacts]:
        """Read these kinds again on the hosts (an unreachable one is tried again), keeping their other facts."""
        wanted = self._wanted(kinds, hosts)
        self._gather({h: k for h, k in wanted.items() if k}, timeout, wait)
        return self.reached(wanted)

    def read(self, host: str, kinds: Iterable[str], timeout: float = 60, fresh: bool = True) -> HostFacts:
        """One host's facts in the calling thread (a step re-reading what it changed, a command
        about the head alone); the host's error is raised as it came (class, message, fix)."""
        from sparkctl.facts.host import gather_host

        want = set(kinds)
        if not fresh and want <= self._have(host) and host not in self.unreachable:
            return self.facts[host]
        f = gather_host(self.fleet[host], self.inventory, want, timeout=timeout, into=self.facts.get(host))
        with self._guard:
            self.facts[host] = f
            self.unreachable.pop(host, None)
        return f

    def forget(self) -> None:
        """Drop every fact and failure: the next `need` reads everything again (a run that just took the lock)."""
        with self._guard:
            self.facts.clear()
            self.unreachable.clear()

    def _wanted(self, kinds: Kinds, hosts: Optional[Iterable[str]]) -> dict[str, set[str]]:
        if isinstance(kinds, Mapping):
            per_host = {h: set(k) for h, k in kinds.items()}
            names = list(per_host) if hosts is None else list(hosts)
            return {h: per_host.get(h, set()) for h in names}
        names, same = (self.hosts if hosts is None else list(hosts)), set(kinds)
        return {h: set(same) for h in names}

    def _have(self, host: str) -> set[str]:
        f = self.facts.get(host)
        return set(getattr(f, "kinds", ())) if f is not None else set()

    def _gather(self, todo: dict[str, set[str]], timeout: float, wait: Optional[float]) -> None:
        if not todo:
            return
        from sparkctl.facts.host import gather_host

        def one(session: HostSession) -> HostFacts:
            return gather_host(session, self.inventory, todo[session.name], timeout=timeout, into=self.facts.get(session.name))

        out = self.fleet.map(one, hosts=list(todo), timeout=wait)
        with self._guard:
            for host, o in out.items():
                self.seconds[host] = o.seconds
                if o.ok:
                    self.facts[host] = cast("HostFacts", o.value)  # an answer: `one` returned its facts
                    self.unreachable.pop(host, None)
                else:
                    self.unreachable[host] = Unreachable.of(host, o)
