"""The front door's settings: command-line options, each defaulting to a SPARKCTL_FLEETDOOR_* variable."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from .placement import ADMIN_SOCKET

ENV = "SPARKCTL_FLEETDOOR_"


@dataclass(frozen=True)
class MemberSpec:
    name: str
    public_url: str  # the member's own front door (its gateway on runtime.port): requests go here
    health_url: str  # its engine (gateway.engine_port): /health there says whether the engine is up


@dataclass(frozen=True)
class Settings:
    host: str
    port: int
    members: tuple[MemberSpec, ...]
    admin_socket: str
    probe_interval_s: float  # how often each member's /health and /gateway/metrics are read
    hold_s: float  # no member eligible: a request waits at most this for one, then 503
    connect_timeout_s: float
    affinity_chars: int  # the prompt's first characters the affinity key covers (0: no affinity)
    affinity_slack: int  # the affine member may have this many more outstanding than the least loaded
    max_body_bytes: int
    shutdown_timeout_s: float


def _env(name: str, default: str) -> str:
    return os.environ.get(ENV + name, "").strip() or default


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sparkctl.fleetdoor",
        description="the fleet's front door: routes requests across the member clusters (docs/fleets.md)",
    )
    p.add_argument("--listen", default=_env("LISTEN", "0.0.0.0:8890"), help="public HOST:PORT [$SPARKCTL_FLEETDOOR_LISTEN]")
    env_members = [m for m in _env("MEMBERS", "").split() if m]
    p.add_argument(
        "--member",
        action="append",
        default=None,
        metavar="NAME=PUBLIC_URL[,HEALTH_URL]",
        help="one member cluster: its public URL (its gateway) and, optionally, its engine's URL whose /health "
        "says whether the engine is up (default: PUBLIC_URL) [$SPARKCTL_FLEETDOOR_MEMBERS, space-separated]",
    )
    p.add_argument("--admin-socket", default=_env("ADMIN_SOCKET", ADMIN_SOCKET), help="[$SPARKCTL_FLEETDOOR_ADMIN_SOCKET]")
    p.add_argument("--probe-interval-s", type=float, default=_env("PROBE_INTERVAL_S", "0.5"))
    p.add_argument(
        "--hold-s",
        type=float,
        default=_env("HOLD_S", "5"),
        help="with no member eligible, a request waits at most this for one, then 503 with Retry-After",
    )
    p.add_argument("--connect-timeout-s", type=float, default=_env("CONNECT_TIMEOUT_S", "3"))
    p.add_argument(
        "--affinity-chars",
        type=int,
        default=_env("AFFINITY_CHARS", "2048"),
        help="how many characters of the prompt's start (chat: up to the first user message) the affinity key "
        "covers; 0: route by load alone",
    )
    p.add_argument(
        "--affinity-slack",
        type=int,
        default=_env("AFFINITY_SLACK", "2"),
        help="a request stays on its affine member unless that member has more than max(this, half the least "
        "loaded member's) outstanding requests beyond the least loaded member's",
    )
    p.add_argument("--max-body-bytes", type=int, default=_env("MAX_BODY_BYTES", str(256 << 20)))
    p.add_argument("--shutdown-timeout-s", type=float, default=_env("SHUTDOWN_TIMEOUT_S", "30"))
    # argparse converts a string default with `type` too: a bad variable is named like a bad option (exit 2)
    p.set_defaults(env_members=env_members)
    return p


def _url(p: argparse.ArgumentParser, what: str, text: str) -> str:
    u = urlsplit(text.strip())
    if u.scheme != "http" or not u.hostname or not u.port or u.path not in ("", "/"):
        p.error(f"--member {what}: {text!r} is not http://HOST:PORT (no path)")
    return f"http://{u.netloc}"


def member(p: argparse.ArgumentParser, text: str) -> MemberSpec:
    name, sep, urls = text.partition("=")
    if not sep or not name.strip():
        p.error(
            f"--member {text!r}: expected NAME=PUBLIC_URL[,HEALTH_URL], e.g. lab=http://10.231.0.11:8000,http://10.231.0.11:8001"
        )
    public, _, health = urls.partition(",")
    pub = _url(p, name, public)
    return MemberSpec(name.strip(), pub, _url(p, name, health) if health.strip() else pub)


def parse(argv: list[str] | None = None) -> Settings:
    p = parser()
    ns = p.parse_args(argv)
    host, sep, port = ns.listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        p.error(f"--listen {ns.listen!r}: expected HOST:PORT, e.g. 0.0.0.0:8890")
    members = tuple(member(p, m) for m in (ns.member or ns.env_members))
    if not members:
        p.error("name at least one --member NAME=PUBLIC_URL[,HEALTH_URL]")
    names = [m.name for m in members]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        p.error(f"--member {', '.join(twice)} given twice: each member needs its own name")
    for name in ("probe_interval_s", "hold_s", "connect_timeout_s", "shutdown_timeout_s"):
        if getattr(ns, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be above 0")
    if ns.affinity_chars < 0 or ns.affinity_slack < 0:
        p.error("--affinity-chars and --affinity-slack must be 0 or more")
    return Settings(
        host=host.strip("[]"),
        port=int(port),
        members=members,
        admin_socket=ns.admin_socket,
        probe_interval_s=ns.probe_interval_s,
        hold_s=ns.hold_s,
        connect_timeout_s=ns.connect_timeout_s,
        affinity_chars=ns.affinity_chars,
        affinity_slack=ns.affinity_slack,
        max_body_bytes=ns.max_body_bytes,
        shutdown_timeout_s=ns.shutdown_timeout_s,
    )
