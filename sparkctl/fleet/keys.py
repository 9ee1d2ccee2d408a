"""Keys in a fleet (docs/fleets.md "Keys"): the members' front doors check the clients' keys, and
vllm-router carries each client's key to the member it routes to.

vllm-router 0.1.17 checks no key of its clients: its `--api-key` is only what it sends a worker on
its own tokenizing calls when the client sent none (measured on loopback: a request without a key,
with a wrong one and with the right one all reach the worker, each with the client's own
`Authorization`, on the completion and on the `/render` and `/tokenize` calls of cache_aware). So a
fleet asks a key where its members do, each member's gateway answers a missing or wrong key 401
(which the router passes back and counts as no failure of that member), and the router is given
no key at all: none is in its argv, its container or its config hash. Its health checks ask
/health, which a gateway leaves open.

Which is why the members must agree: with one member open and one keyed, a client without a key
would be answered by one and refused by the other, request by request. And sparkctl's own calls to
each member (the drain's read of its engine, the health gate, the smoke) send that member's key,
read from its head when the first call needs it (`authorize`; a member's own runs read it as
transport/api_key.py says).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, Optional

from sparkctl.inventory.problems import Problem

if TYPE_CHECKING:
    from sparkctl.fleet.model import Fleet, Member
    from sparkctl.inventory.models import Inventory
    from sparkctl.transport.ssh import HostSession


def problems(members: list["Member"]) -> Iterator[Problem]:
    """Keyed and open members together: named, each open one with the field that would key it."""
    from sparkctl.transport.api_key import asks_key

    keyed = [m.name for m in members if asks_key(m.inventory)]
    if not keyed or len(keyed) == len(members):
        return
    for i, m in enumerate(members):
        if m.name not in keyed:
            yield Problem(
                ("members", i, "inventory"),
                f"member {m.name} asks no key while {', '.join(keyed)} ask one: behind one router a client without "
                "a key would be answered by some members and refused by others; set gateway.api_keys_file in its "
                "inventory (a file holding the same clients' keys), or take it out of the others",
            )


def authorize(fleet: "Fleet") -> None:
    """Every call sparkctl makes to a member's front door or engine route from now on sends that
    member's key, masked in all output. Read over SSH from its head on the first such call: from
    the keys file its running config names (its applied.json), which is not its fleet-file
    inventory's while a rollout turns keys on or off; else that inventory's own."""
    for m in fleet.members:
        authorize_member(m.inventory)


def authorize_member(inv: "Inventory") -> None:
    """`authorize` for one member, again: a rollout calls it before each drain, since the member's
    own sessions (the rollout's plan) register its fleet-file inventory's key, which is not its
    running config's while a rollout turns keys on or off."""
    from sparkctl import httpclient
    from sparkctl.launch.endpoints import front_url

    httpclient.authorize([front_url(inv) + "/"], running_key(inv))


def running_key(inv: "Inventory") -> Callable[[], Optional[str]]:
    """The source of a member's key, asked at most once (see authorize): the keys file of the config
    its head runs, else this inventory's, else the engine's own key; over a session of its own."""
    from sparkctl.launch.endpoints import engine_api_key
    from sparkctl.transport.api_key import once, read_from_head

    head = inv.hosts_with_role("head")[0]
    path = inv.gateway.api_keys_file if inv.gateway.enabled else None
    target, engine_key = inv.ssh_target(head), engine_api_key(inv)

    def read() -> Optional[str]:
        from sparkctl.transport.ssh import HostSession

        session = HostSession(target)
        try:
            keys_file = recorded_keys_file(session, inv) or path
            return read_from_head(keys_file, session) if keys_file else engine_key
        finally:
            session.close()

    return once(read)


def recorded_keys_file(session: "HostSession", inv: "Inventory") -> Optional[str]:
    """gateway.api_keys_file of the config the head runs (the `applied` fact: a path, never a key)."""
    from sparkctl.facts.host import gather_host
    from sparkctl.transport.api_key import READ_TIMEOUT_S

    applied = gather_host(session, inv, {"applied"}, timeout=READ_TIMEOUT_S).applied
    if applied is None or applied.recorded("gateway", "enabled") is False:
        return None
    path = applied.recorded("gateway", "api_keys_file")
    return path if isinstance(path, str) else None
