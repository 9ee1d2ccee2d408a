"""The gateway's settings: command-line options, each defaulting to a SPARKCTL_GATEWAY_* variable."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sparkctl.launch.gateway import ENGINE_KEY_ENV

from .keys import read_keys_file

ENV = "SPARKCTL_GATEWAY_"
MAX_BODY_BYTES = 32 << 20
MAX_BUFFERED_BYTES = 512 << 20
# a cold 1M-token prefill before the first byte (the seed measured ~100 s for 262K tokens; attention
# grows faster than the prompt), or a whole non-streamed answer: 15 minutes
UPSTREAM_IDLE_S = 900.0


@dataclass(frozen=True)
class Settings:
    host: str
    port: int
    upstream: str  # http://HOST:PORT of the engine, no path
    admin_socket: str
    hold_s: float  # no request is held longer than this
    hold_max_s: float  # a hold nobody releases ends by itself after this (sparkctl died mid-reload)
    hold_queue: int  # requests held at once; more are answered 503 at once
    probe_interval_s: float  # while the upstream is down: how often /health is asked
    connect_timeout_s: float
    upstream_connections: int  # connections to the engine at once (0: no limit); more wait, in order
    long_context_tokens: int  # 0: no long-context admission
    long_context_max_concurrent: int
    long_context_queue: int  # long requests waiting for a slot; one more is answered 429
    long_context_wait_s: float  # a long request waits at most this for a slot, then 429
    max_body_bytes: int  # a larger body is answered 413
    max_buffered_bytes: int  # bodies held at once, every request together; past it 503
    body_timeout_s: float  # a body must arrive within this (408)
    header_timeout_s: float  # a connection's request must begin within this of its start or last answer
    upstream_idle_s: float  # the engine sends nothing this long (first byte, or within a stream): stalled
    shutdown_timeout_s: float  # on SIGTERM: how long in-flight requests may still run
    # the keys a client must send (empty: none asked); the engine's own key, sent on upstream
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    engine_api_key: str | None = field(default=None, repr=False)


def _env(name: str, default: str) -> str:
    return os.environ.get(ENV + name, "").strip() or default


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sparkctl.gateway", description="sparkctl's front door: holds requests while the engine restarts."
    )
    p.add_argument("--listen", default=_env("LISTEN", "0.0.0.0:8000"), help="public HOST:PORT [$SPARKCTL_GATEWAY_LISTEN]")
    p.add_argument("--upstream", default=_env("UPSTREAM", ""), help="the engine, http://HOST:PORT [$SPARKCTL_GATEWAY_UPSTREAM]")
    p.add_argument(
        "--admin-socket",
        default=_env("ADMIN_SOCKET", "/run/sparkctl-gateway/admin.sock"),
        help="the admin interface's unix socket [$SPARKCTL_GATEWAY_ADMIN_SOCKET]",
    )
    p.add_argument("--hold-s", type=float, default=float(_env("HOLD_S", "30")))
    p.add_argument("--hold-max-s", type=float, default=float(_env("HOLD_MAX_S", "1800")))
    p.add_argument("--hold-queue", type=int, default=int(_env("HOLD_QUEUE", "1024")))
    p.add_argument("--probe-interval-s", type=float, default=float(_env("PROBE_INTERVAL_S", "0.25")))
    p.add_argument("--connect-timeout-s", type=float, default=float(_env("CONNECT_TIMEOUT_S", "5")))
    p.add_argument(
        "--upstream-connections",
        type=int,
        default=int(_env("UPSTREAM_CONNECTIONS", "0")),
        help="at most this many connections to the engine at once; more requests wait for one, in the order "
        "they were sent on (0: no limit, the engine's own queue decides) [$SPARKCTL_GATEWAY_UPSTREAM_CONNECTIONS]",
    )
    p.add_argument("--long-context-tokens", type=int, default=int(_env("LONG_CONTEXT_TOKENS", "0")))
    p.add_argument("--long-context-max-concurrent", type=int, default=int(_env("LONG_CONTEXT_MAX_CONCURRENT", "1")))
    p.add_argument("--long-context-queue", type=int, default=int(_env("LONG_CONTEXT_QUEUE", "16")))
    p.add_argument("--long-context-wait-s", type=float, default=float(_env("LONG_CONTEXT_WAIT_S", "600")))
    # 32 MiB: a 1M-token prompt is ~4 MB of text, ~8 MB as token ids, ~12 MB as escaped non-Latin text
    p.add_argument("--max-body-bytes", type=int, default=int(_env("MAX_BODY_BYTES", str(MAX_BODY_BYTES))))
    p.add_argument("--max-buffered-bytes", type=int, default=int(_env("MAX_BUFFERED_BYTES", str(MAX_BUFFERED_BYTES))))
    p.add_argument("--body-timeout-s", type=float, default=float(_env("BODY_TIMEOUT_S", "60")))
    p.add_argument("--header-timeout-s", type=float, default=float(_env("HEADER_TIMEOUT_S", "30")))
    p.add_argument(
        "--upstream-idle-s",
        type=float,
        default=float(_env("UPSTREAM_IDLE_S", str(UPSTREAM_IDLE_S))),
        help="the engine's time to first byte and longest silence within an answer: past it the request is answered "
        "504 (or its stream cut) and new requests are held until the engine's /health answers [$SPARKCTL_GATEWAY_UPSTREAM_IDLE_S]",
    )
    p.add_argument("--shutdown-timeout-s", type=float, default=float(_env("SHUTDOWN_TIMEOUT_S", "30")))
    p.add_argument(
        "--api-keys-file",
        default=_env("API_KEYS_FILE", "") or None,
        help="clients must send one of the keys in this file (one a line) as `Authorization: Bearer KEY`; "
        f"without it, the engine's key (${ENGINE_KEY_ENV}) when there is one [$SPARKCTL_GATEWAY_API_KEYS_FILE]",
    )
    return p


def parse(argv: list[str] | None = None) -> Settings:
    p = parser()
    ns = p.parse_args(argv)
    host, sep, port = ns.listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        p.error(f"--listen {ns.listen!r}: expected HOST:PORT, e.g. 0.0.0.0:8000")
    up = urlsplit(ns.upstream)
    if up.scheme != "http" or not up.hostname or not up.port or up.path not in ("", "/"):
        p.error(f"--upstream {ns.upstream!r}: expected the engine as http://HOST:PORT (no path)")
    for name in (
        "hold_s",
        "hold_max_s",
        "probe_interval_s",
        "connect_timeout_s",
        "long_context_wait_s",
        "body_timeout_s",
        "header_timeout_s",
        "max_body_bytes",
        "max_buffered_bytes",
        "upstream_idle_s",
    ):
        value = getattr(ns, name)
        if not math.isfinite(value) or value <= 0:  # nan is not <= 0: it would pass as a bound that never ends
            p.error(f"--{name.replace('_', '-')} must be a number above 0")
    if ns.upstream_connections < 0:
        p.error("--upstream-connections must be 0 (no limit) or more")
    if ns.max_buffered_bytes < ns.max_body_bytes:
        p.error("--max-buffered-bytes must be at least --max-body-bytes (one largest body must fit)")
    if ns.hold_max_s < ns.hold_s:
        p.error("--hold-max-s must be at least --hold-s")
    if ns.long_context_tokens < 0 or ns.long_context_max_concurrent < 1 or ns.long_context_queue < 0:
        p.error("--long-context-tokens >= 0, --long-context-max-concurrent >= 1, --long-context-queue >= 0")
    # a secret never on a command line: the engine's key comes from the environment only
    engine_key = os.environ.get(ENGINE_KEY_ENV, "").strip() or None
    keys: tuple[str, ...] = (engine_key,) if engine_key else ()
    if ns.api_keys_file:
        try:
            keys = tuple(read_keys_file(ns.api_keys_file))
        except (OSError, ValueError) as e:
            p.error(f"--api-keys-file: {e}")
    return Settings(
        host=host.strip("[]"),
        port=int(port),
        upstream=f"http://{up.netloc}",
        admin_socket=ns.admin_socket,
        hold_s=ns.hold_s,
        hold_max_s=ns.hold_max_s,
        hold_queue=ns.hold_queue,
        probe_interval_s=ns.probe_interval_s,
        connect_timeout_s=ns.connect_timeout_s,
        upstream_connections=ns.upstream_connections,
        long_context_tokens=ns.long_context_tokens,
        long_context_max_concurrent=ns.long_context_max_concurrent,
        long_context_queue=ns.long_context_queue,
        long_context_wait_s=ns.long_context_wait_s,
        max_body_bytes=ns.max_body_bytes,
        max_buffered_bytes=ns.max_buffered_bytes,
        body_timeout_s=ns.body_timeout_s,
        header_timeout_s=ns.header_timeout_s,
        upstream_idle_s=ns.upstream_idle_s,
        shutdown_timeout_s=ns.shutdown_timeout_s,
        api_keys=keys,
        engine_api_key=engine_key,
    )
