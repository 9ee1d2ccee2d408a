"""Runtime facts read from the hosts themselves: the head's /health, the drafter's, and (mp) whether a
worker reaches the head's rendezvous port over the fabric. The HTTP API seen from the runner is
facts/endpoint.py."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, Target, fact, host_fields

if TYPE_CHECKING:
    from sparkctl.facts.gateway import AdminHold
    from sparkctl.facts.host import HostFacts


def health_probe(port: int) -> str:
    """/health from the head itself: bash's /dev/tcp needs no curl on the host."""
    return (
        'bash -c \'exec 3<>/dev/tcp/127.0.0.1/%d && printf "GET /health HTTP/1.0\\r\\n\\r\\n" >&3 '
        "&& timeout 2 head -1 <&3' 2>/dev/null || echo refused" % port
    )


def _engine_health_probe(t: Target) -> Optional[str]:
    from sparkctl.launch.endpoints import engine_port

    return health_probe(engine_port(t.inventory)) if t.host.role == "head" else None


@host_fields
class RuntimeFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    health: Optional[str] = None  # the head's /health status line from the head itself, or "refused"
    drafter_health: Optional[int] = None  # the drafter's /health HTTP code
    master_port: Optional[str] = None  # "open" / "closed"
    gateway_code: Optional[bool] = None  # True / False, None: not read
    gateway_keys: Optional[str] = None  # "readable" / "missing", None: none named
    gateway_hold: Optional[AdminHold] = None  # the gateway's admin hold on the head, None: no hold


@fact("health", _engine_health_probe)  # the head's /health status line from the head itself, or "refused"
def _health(f: HostFacts, r: Reading) -> None:
    f.health = r.out.strip() or "no answer"


def _drafter_probe(t: Target) -> Optional[str]:
    spec = t.inventory.runtime.speculative
    if not (spec and spec.drafter_host == t.name):
        return None
    from sparkctl.launch.endpoints import fabric_link_to

    heads = t.inventory.hosts_with_role("head")
    link = fabric_link_to(t.inventory, t.name, heads[0]) if heads else None
    ip = str(link.address.ip) if link else t.host.ssh.address  # where render() binds the drafter
    url = shlex.quote(f"http://{ip}:{spec.drafter_port}/health")
    return (
        f"if command -v curl >/dev/null; then curl -s -o /dev/null -w '%{{http_code}}' --max-time 3 {url}; "
        f"else wget -q -T 3 -O /dev/null {url} && echo 200; fi"
    )


@fact("drafter_health", _drafter_probe, background=True)  # its /health HTTP code
def _drafter_health(f: HostFacts, r: Reading) -> None:
    code = r.out.strip()
    f.drafter_health = int(code) if code.isdigit() and int(code) > 0 else None


def _master_port_probe(t: Target) -> Optional[str]:
    # mp: this worker's headless ranks reach the head's rendezvous over the fabric (never the management net)
    if t.inventory.runtime.distributed_executor_backend != "mp" or t.host.role != "worker":
        return None
    from sparkctl.launch.endpoints import mp_master

    ip, port = mp_master(t.inventory)
    return f"if timeout 3 bash -c 'exec 3<>/dev/tcp/{ip}/{port}' 2>/dev/null; then echo open; else echo closed; fi"


@fact("master_port", _master_port_probe, background=True)  # "open" / "closed"
def _master_port(f: HostFacts, r: Reading) -> None:
    f.master_port = r.out.strip() if r.out.strip() in ("open", "closed") else None


def _gateway_code_probe(t: Target) -> Optional[str]:
    # the gateway's code this sparkctl ships (launch/gateway_code.py): present and complete on the head?
    if t.host.role != "head" or not t.inventory.gateway.enabled:
        return None
    from sparkctl.launch import gateway_code
    from sparkctl.launch.names import SHIPPED_COMPLETE

    return f"test -f {shlex.quote(gateway_code.directory())}/{SHIPPED_COMPLETE} && echo present || echo absent"


@fact("gateway_code", _gateway_code_probe)  # True / False, None: not read
def _gateway_code(f: HostFacts, r: Reading) -> None:
    out = r.out.strip()
    f.gateway_code = True if out == "present" else False if out == "absent" else None


def _gateway_keys_probe(t: Target) -> Optional[str]:
    # gateway.api_keys_file on the head: docker would bind a missing file as an empty directory
    g = t.inventory.gateway
    if t.host.role != "head" or not g.enabled or not g.api_keys_file:
        return None
    path = shlex.quote(g.api_keys_file)
    return f"test -f {path} -a -r {path} && echo readable || echo missing"


@fact("gateway_keys", _gateway_keys_probe)  # "readable" / "missing", None: none named
def _gateway_keys(f: HostFacts, r: Reading) -> None:
    out = r.out.strip()
    f.gateway_keys = out if out in ("readable", "missing") else None


# of the gateway's metrics page, the lines that say whether it holds, for whom and since when
HOLD_LINES = "grep -E '^sparkctl_gateway_(holding|hold_info|hold_age_seconds)[{ ]' || true"


def _gateway_hold_probe(t: Target) -> Optional[str]:
    # the gateway's admin hold, from its own metrics on the head (it answers them while it holds)
    if t.host.role != "head" or not t.inventory.gateway.enabled:
        return None
    from sparkctl.launch.gateway import METRICS_PATH

    get = f'printf "GET {METRICS_PATH} HTTP/1.0\\r\\n\\r\\n" >&3 && timeout 2 cat <&3'
    return f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{t.inventory.runtime.port} && {get}' 2>/dev/null | {HOLD_LINES}"


@fact("gateway_hold", _gateway_hold_probe, background=True)
def _gateway_hold(f: HostFacts, r: Reading) -> None:
    from sparkctl.facts.gateway import admin_hold

    f.gateway_hold = admin_hold(r.out)
