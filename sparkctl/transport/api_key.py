"""The key sparkctl's own calls to the cluster send (its smoke completion, first token, decode
measurement, doctor's and status's reads): docs/gateway.md "Security".

With a gateway and `gateway.api_keys_file`: the file's first key, read over SSH from the head when
the first call needs it (never written anywhere, masked in every output from then on). Else the
engine's own key (runtime.env VLLM_API_KEY), which a keyless gateway asks for too. Else none.
A fleet's members: fleet/keys.py.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Callable, Optional

from sparkctl.errors import HostError

if TYPE_CHECKING:
    from sparkctl.inventory.models import Inventory
    from sparkctl.transport.ssh import Fleet, HostSession

READ_TIMEOUT_S = 10.0


def asks_key(inv: Inventory) -> bool:
    """Whether the cluster's runtime.port asks a key (gateway.api_keys_file, or the engine's own)."""
    from sparkctl.launch.endpoints import engine_api_key

    return bool((inv.gateway.enabled and inv.gateway.api_keys_file) or engine_api_key(inv))


def first_key(text: str) -> Optional[str]:
    """The first key of a keys file's text (the gateway's own rule: launch/gateway.py)."""
    from sparkctl.launch.gateway import parse_keys

    keys = parse_keys(text)
    return keys[0] if keys else None


def read_from_head(path: str, head: HostSession) -> str:
    """The first key in `path` (gateway.api_keys_file) on the head; a HostError naming the file and the fix."""
    from sparkctl.transport.redact import remember_secret

    r = head.run(["cat", "--", path], timeout=READ_TIMEOUT_S)
    key = first_key(r.stdout) if r.ok else None
    if not key:
        why = r.stderr.strip() if not r.ok else "it holds no key"
        raise HostError(
            f"{head.name}: cannot read a key from gateway.api_keys_file {path} ({why})",
            fix=f"put the clients' keys in {path} on the head, one a line (root-readable only: chmod 0600)",
        )
    remember_secret(key)
    return key


def once(read: Callable[[], Optional[str]]) -> Callable[[], Optional[str]]:
    """`read` asked at most once, by the first of any threads that want the key; its answer kept."""
    lock = threading.Lock()
    got: list[Optional[str]] = []

    def key() -> Optional[str]:
        with lock:
            if not got:
                got.append(read())
            return got[0]

    return key


def source(inv: Inventory, head: Callable[[], Optional[HostSession]]) -> Callable[[], Optional[str]]:
    """Where sparkctl's key for this cluster comes from, asked at most once (`head()`: a session
    to the head, None when this command has none). It keeps no reference to the inventory (the
    registry it goes in lives as long as the process)."""
    from sparkctl.launch.endpoints import engine_api_key

    path = inv.gateway.api_keys_file if inv.gateway.enabled else None
    engine_key = engine_api_key(inv)

    def read() -> Optional[str]:
        session = head() if path else None
        return read_from_head(path, session) if path and session is not None else engine_key

    return once(read)


def authorize(inv: Inventory, fleet: Optional[Fleet]) -> None:
    """Every later call sparkctl makes to this cluster's front door or engine sends its key (read
    through `fleet`'s session to the head, held weakly: the registry outlives any one command)."""
    from sparkctl import httpclient
    from sparkctl.launch.endpoints import front_url

    heads = inv.hosts_with_role("head")
    from sparkctl.transport.ssh import Fleet

    ref = weakref.ref(fleet) if isinstance(fleet, Fleet) else None  # (a plan from recorded facts has none)

    def head() -> Optional[HostSession]:
        f = ref() if ref is not None else None
        return f.sessions.get(heads[0]) if f is not None and heads else None

    # runtime.port on the head: the gateway, its engine route, or (without one) the engine itself
    httpclient.authorize([front_url(inv) + "/"], source(inv, head))
