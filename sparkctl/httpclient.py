"""httpx clients for sparkctl's own HTTP calls (a cluster's engine, gateway and metrics ports,
the fleet's front door, the lab's Prometheus), all on one TLS context per process.

httpx builds a new SSLContext for every Client, loading certifi's CA bundle: ~30 ms of CPU, twenty
times the request itself on a local port. `httpx.get()` makes a Client per call, so a poll at 5 Hz
spent a sixth of a core on CA bundles, and every doctor, status or up run paid it per endpoint.
Verification is what httpx does by default (certifi's bundle), built once; the Docker registry
client (transport/registry.py) keeps its own, from the inventory's registry settings.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

if TYPE_CHECKING:
    import ssl

    import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verification (certifi's CA bundle), made once."""
    import ssl

    import certifi

    return ssl.create_default_context(cafile=certifi.where())


# URL prefix -> where the key for it comes from (transport/api_key.py): the cluster's front door and its
# engine route ask for a key; every call sparkctl makes there sends it, and no call elsewhere does
_KEYS: dict[str, Callable[[], Optional[str]]] = {}
_KEYS_LOCK = threading.Lock()


def authorize(prefixes: Iterable[str], key: Callable[[], Optional[str]]) -> None:
    """Send `Authorization: Bearer <key()>` on every request to a URL under one of `prefixes`
    (`key` is asked on the first such request: a command that never calls the cluster reads no key)."""
    with _KEYS_LOCK:
        for p in prefixes:
            _KEYS[p] = key


def key_for(url: str) -> Optional[str]:
    """The key sparkctl sends to `url` (None: it asks for none, or sparkctl was not told)."""
    with _KEYS_LOCK:
        source = next((k for p, k in _KEYS.items() if url.startswith(p)), None)
    return source() if source else None


def _send_key(request: httpx.Request) -> None:
    if "authorization" in request.headers:
        return
    key = key_for(str(request.url))
    if key:
        request.headers["Authorization"] = f"Bearer {key}"


def client(**kwargs: Any) -> httpx.Client:
    """`httpx.Client(**kwargs)` on the shared TLS context (unless `verify` is given), sending the
    cluster's key where it is asked (`authorize`)."""
    import httpx

    kwargs.setdefault("verify", tls_context())
    hooks = dict(kwargs.pop("event_hooks", None) or {})
    hooks["request"] = [_send_key, *hooks.get("request", [])]
    return httpx.Client(event_hooks=hooks, **kwargs)


def request(method: str, url: str, *, timeout: float = 5.0, trust_env: bool = True, **kwargs: Any) -> httpx.Response:
    """`httpx.request(...)`: one request on a client of its own (same defaults: 5 s timeout,
    trust_env), without a TLS context of its own. `kwargs` are the request's (params, headers, json...)."""
    with client(timeout=timeout, trust_env=trust_env) as c:
        return c.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.get(url, ...)`, as `request`."""
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.post(url, ...)`, as `request`."""
    return request("POST", url, **kwargs)
