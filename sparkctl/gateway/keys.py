"""The front door's keys: who may use the cluster (docs/gateway.md "Security").

A client sends `Authorization: Bearer <key>` (what OpenAI's clients send). The keys come from a
file on the head (one key per line; blank lines and `#` comments are skipped), mounted read-only
into the container, or, when the gateway has no file, from the engine's own key (VLLM_API_KEY):
a gateway in front of a keyed engine asks for the same key the engine did.

Only /health is open (what a load balancer asks; it says up or down, nothing more), as vLLM's
own AuthenticationMiddleware leaves it open. Keys are compared as SHA-256 digests in constant time
(vLLM's way), so no timing says how much of a key was right. Standard library only.
"""

from __future__ import annotations

import hashlib
import secrets

from sparkctl.launch.gateway import parse_keys

from .rejection import error_body

OPEN_PATHS = frozenset({"/health"})


def read_keys_file(path: str) -> list[str]:
    """The keys in `path`; OSError when it cannot be read, ValueError when it holds none."""
    with open(path, encoding="utf-8") as f:
        keys = parse_keys(f.read())
    if not keys:
        raise ValueError(f"{path} holds no key (one key per line; # starts a comment)")
    return keys


class Keys:
    def __init__(self, keys: list[str]):
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys]

    @property
    def required(self) -> bool:
        return bool(self._digests)

    def allows(self, authorization: str | None) -> bool:
        """Whether an `Authorization` header value carries one of the keys (always, with none set)."""
        if not self._digests:
            return True
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        digest = hashlib.sha256(token.strip().encode()).digest()
        ok = False
        for d in self._digests:  # every digest compared: the time says nothing about which matched
            ok |= secrets.compare_digest(digest, d)
        return ok


def unauthorized_body(path: str) -> bytes:
    """401 in the route's error shape (OpenAI's clients raise AuthenticationError from it,
    Anthropic's from `authentication_error`)."""
    message = "Missing or invalid API key: send `Authorization: Bearer <key>`."
    return error_body(path, 401, message, "AuthenticationError")
